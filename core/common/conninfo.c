/*
 * conninfo.c -- connection strings, which skipq passes to libpq but never
 * repeats.
 *
 * A connection string often holds a password, and libpq's parse errors
 * quote their input: a '%' typo in a URI's password printed the password
 * on stderr, in the host's log and in a FILE:LINE config error. So every
 * connection string skipq takes (--db, [database] url, $DATABASE_URL,
 * listen_conninfo) is checked here first, and a failure is described by
 * what is wrong, never by the text. The same scanner finds the passwords
 * a string holds, for the warning and the argv scrub of --db (main.c).
 */
#include "common/conninfo.h"

#include <ctype.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libpq's URI prefixes (fe-connect.c: uri_prefix_length). */
static size_t uri_prefix(const char *s)
{
    if (strncmp(s, "postgresql://", 13) == 0)
        return 13;
    if (strncmp(s, "postgres://", 11) == 0)
        return 11;
    return 0;
}

bool sq_conninfo_is_string(const char *s)
{
    return uri_prefix(s) > 0 || strchr(s, '=') != NULL;
}

/* Where a URI's host part starts: after "user:password@" if there is one.
 * libpq takes user information up to the first '@' met before any '/'. */
static const char *uri_after_userinfo(const char *s, const char **at)
{
    const char *a = s + uri_prefix(s), *p = a;
    while (*p && *p != '@' && *p != '/')
        p++;
    *at = *p == '@' ? p : NULL;
    return *p == '@' ? p + 1 : a;
}

/* Edit distance between a[0..n) and b, capped: 3 means "3 or more". */
static size_t edits(const char *a, size_t n, const char *b)
{
    size_t m = strlen(b), row[48];
    if (n > 40 || m > 40)
        return 3;
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[m] < 3 ? row[m] : 3;
}

/* The libpq keyword that `word` (n bytes) is a typo of -- at most two
 * edits away -- or NULL. Only such a word is named in a message: any other
 * word in keyword position may be a piece of a value ("password=a b=c"). */
static const char *typo_of(const char *word, size_t n, char *buf, size_t buflen)
{
    PQconninfoOption *opts = PQconndefaults();
    const char *found = NULL;
    size_t best = 3;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        size_t d = edits(word, n, o->keyword);
        if (d < best) {
            best = d;
            snprintf(buf, buflen, "%s", o->keyword);
            found = buf;
        }
    }
    PQconninfoFree(opts);
    return found;
}

/* libpq's parse error `m` as our message: what is wrong, never the text. */
static void describe(const char *m, char *err, size_t errlen)
{
    static const struct {
        const char *libpq, *ours;
    } known[] = {
        {"invalid percent-encoded token", "the connection URI has an invalid percent-encoding (a '%' must be "
                                          "followed by two hex digits; write '%' itself as %25)"},
        {"forbidden value %00", "the connection URI has a percent-encoded NUL byte (%00)"},
        {"missing key/value separator", "a query parameter of the connection URI has no '='"},
        {"extra key/value separator", "a query parameter of the connection URI has more than one '='"},
        {"end of string reached when looking for matching \"]\"",
         "the connection URI has an IPv6 address without its closing ']'"},
        {"IPv6 host address may not be empty", "the connection URI has an empty IPv6 address ([])"},
        {"unexpected character", "the connection URI has an unexpected character after the host (expected ':' "
                                 "or '/')"},
        {"invalid URI propagated", "the connection URI is not valid"},
        {"missing \"=\" after", "the connection string has a word without '=' (keyword=value pairs are separated "
                                "by blanks; quote a value that holds blanks: password='a b')"},
        {"unterminated quoted string", "the connection string has a quoted value without its closing quote"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strncmp(m, known[i].libpq, strlen(known[i].libpq)) == 0) {
            snprintf(err, errlen, "%s", known[i].ours);
            return;
        }
    }
    /* These two quote a word in keyword position: named only when it is a
     * typo of a keyword, with the keyword meant. */
    bool uri = strncmp(m, "invalid URI query parameter", 27) == 0;
    if (uri || strncmp(m, "invalid connection option", 25) == 0) {
        const char *q = strchr(m, '"'), *e = q ? strchr(q + 1, '"') : NULL;
        const char *what = uri ? "the connection URI has an unknown query parameter"
                               : "the connection string has an unknown keyword";
        char kw[48];
        const char *meant = e ? typo_of(q + 1, (size_t)(e - q - 1), kw, sizeof kw) : NULL;
        if (meant)
            snprintf(err, errlen, "%s \"%.*s\" (did you mean \"%s\"?)", what, (int)(e - q - 1), q + 1, meant);
        else
            snprintf(err, errlen, "%s", what);
        return;
    }
    snprintf(err, errlen, "the connection string is not valid (libpq cannot parse it)");
}

bool sq_conninfo_check(const char *s, char *err, size_t errlen)
{
    if (!sq_conninfo_is_string(s)) {
        /* libpq would send it to the server as a database name, and the
         * server's "database ... does not exist" repeats it. */
        if (strstr(s, "://") || strchr(s, '@') || strncmp(s, "postgres:", 9) == 0 ||
            strncmp(s, "postgresql:", 11) == 0) {
            snprintf(err, errlen, "the connection string is neither a URI (postgresql://... or postgres://...) nor "
                                  "keyword=value pairs (to name a database like that, write dbname=NAME)");
            return false;
        }
        return true;
    }
    if (uri_prefix(s)) {
        const char *at, *rest = uri_after_userinfo(s, &at);
        size_t before_query = strcspn(rest, "?");
        if (memchr(rest, '@', before_query)) {
            snprintf(err, errlen, "the connection URI has an '@' after its user information: percent-encode "
                                  "'@' and '/' in a user name or password (%%40, %%2F)");
            return false;
        }
    }
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(s, &msg);
    if (opts) {
        PQconninfoFree(opts);
        return true;
    }
    if (msg)
        describe(msg, err, errlen);
    else
        snprintf(err, errlen, "out of memory");
    PQfreemem(msg);
    return false;
}

static size_t add_span(struct sq_span *spans, size_t n, size_t max, size_t start, size_t len)
{
    if (len > 0 && n < max)
        spans[n] = (struct sq_span){start, len};
    return len > 0 ? n + 1 : n;
}

/* ?password=... in a URI's query. */
static size_t query_passwords(const char *s, const char *q, struct sq_span *spans, size_t n, size_t max)
{
    while (q && *q) {
        size_t len = strcspn(q, "&");
        if (len > 9 && strncmp(q, "password=", 9) == 0)
            n = add_span(spans, n, max, (size_t)(q + 9 - s), len - 9);
        q = q[len] ? q + len + 1 : NULL;
    }
    return n;
}

/* keyword=value pairs, tokenised as libpq's conninfo_parse() does. */
static size_t keyword_passwords(const char *s, struct sq_span *spans, size_t max)
{
    size_t n = 0;
    const char *p = s;
    while (*p) {
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *kw = p;
        while (*p && *p != '=' && !isspace((unsigned char)*p))
            p++;
        size_t kwlen = (size_t)(p - kw);
        while (isspace((unsigned char)*p))
            p++;
        if (*p != '=')
            break; /* malformed: libpq refuses it */
        p++;
        while (isspace((unsigned char)*p))
            p++;
        bool quoted = *p == '\'';
        const char *v = p + quoted;
        for (p = v; *p && (quoted ? *p != '\'' : !isspace((unsigned char)*p)); p++)
            if (*p == '\\' && p[1])
                p++;
        if (kwlen == 8 && strncmp(kw, "password", 8) == 0)
            n = add_span(spans, n, max, (size_t)(v - s), (size_t)(p - v));
        if (quoted && *p)
            p++;
    }
    return n;
}

size_t sq_conninfo_passwords(const char *s, struct sq_span *spans, size_t max)
{
    if (!uri_prefix(s))
        return strchr(s, '=') ? keyword_passwords(s, spans, max) : 0;
    const char *at, *rest = uri_after_userinfo(s, &at);
    size_t n = 0;
    if (at) {
        const char *user = s + uri_prefix(s);
        const char *colon = memchr(user, ':', (size_t)(at - user));
        if (colon)
            n = add_span(spans, n, max, (size_t)(colon + 1 - s), (size_t)(at - colon - 1));
    }
    return query_passwords(s, strchr(rest, '?') ? strchr(rest, '?') + 1 : NULL, spans, n, max);
}

void sq_redact(char *msg, const char *secret)
{
    size_t n = secret ? strlen(secret) : 0;
    if (n < 4)
        return;
    for (char *p = strstr(msg, secret); p; p = strstr(p + 3, secret)) {
        memcpy(p, "***", 3);
        memmove(p + 3, p + n, strlen(p + n) + 1);
    }
}
