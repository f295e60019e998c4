/*
 * db.c -- how skipq reaches PostgreSQL.
 *
 * Parameters go to PQconnectdbParams as keyword arrays, never as a string we
 * build, so no value can inject another keyword. Dead peers must be noticed
 * in bounded time: without tcp_user_timeout a query on a black-holed network
 * blocks for the kernel's retransmission timeout (~15 min), so skipq sets
 * keepalives and a user timeout unless the user chose their own.
 *
 * Every direct session starts with search_path = pg_catalog, pg_temp, set
 * in the startup packet (libpq's `options`), so it holds from the first
 * statement and neither the role's nor the database's settings can change
 * it. With the default path ("$user", public) PostgreSQL prefers pg_catalog
 * only among equally good matches: an exact-match function or operator that
 * another role planted in public (say *(interval, bigint)) would run instead
 * of the built-in, as whoever runs skipq. The user's own `options` are kept,
 * with skipq's search_path after them, so it wins. Behind a pooler in
 * transaction mode the pooler would refuse the parameter, and nothing would
 * stay on a borrowed session anyway: there skipq's statements are safe on
 * their own, because they name every built-in by schema (see queue.c).
 */
#include "common/db.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/conninfo.h"
#include "common/log.h"
#include "common/util.h"

#define PIN_OPTIONS "-c search_path=pg_catalog,pg_temp"

/* SQLSTATE of the last error sq_db_error() saw on this thread, so callers
 * that only kept the message can still tell a dead session from a bad
 * statement. */
static _Thread_local char last_sqlstate[6];
static _Thread_local char last_detail[512]; /* DETAIL, then CONTEXT, of the last error; "" if none */


static bool add(struct sq_dbparams *p, const char *k, const char *v)
{
    const char **nk = realloc(p->keys, (p->n + 2) * sizeof *nk);
    if (!nk)
        return false;
    p->keys = nk;
    const char **nv = realloc(p->values, (p->n + 2) * sizeof *nv);
    if (!nv)
        return false;
    p->values = nv;
    p->keys[p->n] = k;
    p->values[p->n] = v;
    p->n++;
    p->keys[p->n] = NULL;
    p->values[p->n] = NULL;
    return true;
}

/* The `options` a connection string holds (NULL: none, or it does not
 * parse, which the connection will then report). */
static char *conninfo_options(const char *conninfo)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    char *out = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "options") == 0 && o->val && *o->val)
            out = strdup(o->val);
    PQconninfoFree(opts);
    return out;
}

/*
 * The `options` the user's parameters give, by libpq's rules: keywords in
 * order, the last one set wins (an empty value is unset); the first dbname,
 * when it is a connection string, sets what it holds at its place; if none
 * is set, $PGOPTIONS (or the $PGSERVICE entry's) applies. NULL: none, or out
 * of memory (*failed).
 */
static char *user_options(const struct sq_dbparams *p, bool *failed)
{
    char *found = NULL;
    bool seen_dbname = false;
    for (size_t i = 0; i < p->n && !*failed; i++) {
        const char *k = p->keys[i], *v = p->values[i];
        char *val = NULL;
        if (strcmp(k, "dbname") == 0 && v && !seen_dbname) {
            seen_dbname = true;
            val = sq_conninfo_is_string(v) ? conninfo_options(v) : NULL;
        } else if (strcmp(k, "options") == 0 && v && *v) {
            *failed = !(val = strdup(v));
        }
        if (val) {
            free(found);
            found = val;
        }
    }
    if (found || *failed)
        return found;
    PQconninfoOption *defs = PQconndefaults();
    *failed = !defs;
    for (PQconninfoOption *o = defs; o && o->keyword; o++)
        if (strcmp(o->keyword, "options") == 0 && o->val && *o->val)
            *failed = !(found = strdup(o->val));
    PQconninfoFree(defs);
    return found;
}

/* Append `options`: the user's, then skipq's search_path, which wins. */
static bool add_pin(struct sq_dbparams *p)
{
    bool failed = false;
    char *mine = user_options(p, &failed);
    size_t len = (mine ? strlen(mine) + 1 : 0) + sizeof PIN_OPTIONS;
    p->options = malloc(len);
    if (failed || !p->options) {
        free(mine);
        return false;
    }
    snprintf(p->options, len, "%s%s%s", mine ? mine : "", mine ? " " : "", PIN_OPTIONS);
    free(mine);
    p->pin_at = (int)p->n;
    return add(p, "options", p->options);
}

const struct sq_db_default sq_db_defaults[] = {
    {"connect_timeout", "10"},    {"keepalives", "1"},        {"keepalives_idle", "10"},
    {"keepalives_interval", "5"}, {"keepalives_count", "3"}, {"tcp_user_timeout", "30000"},
    {NULL, NULL},
};

bool sq_dbparams_build(struct sq_dbparams *p, const struct sq_config *cfg, const char *flag,
                       const char *application_name)
{
    memset(p, 0, sizeof *p);
    p->pin_at = -1;
    atomic_init(&p->pin_refused, false);
    bool ok = add(p, "application_name", application_name ? application_name : "skipq");
    for (const struct sq_db_default *d = sq_db_defaults; ok && d->keyword; d++)
        ok = add(p, d->keyword, d->value);
    const char *url = getenv("DATABASE_URL");
    if (flag && *flag)
        ok = ok && add(p, "dbname", flag);
    else if (cfg && cfg->database.ndb > 0)
        for (size_t i = 0; ok && i < cfg->database.ndb; i++)
            ok = add(p, cfg->database.db[i].key, cfg->database.db[i].value);
    else if (url && *url)
        ok = ok && add(p, "dbname", url);
    /* Last, so nothing the user set (an expanded dbname included) can
     * replace it. */
    if (ok && !(cfg && cfg->database.pooled))
        ok = add_pin(p);
    if (!ok)
        sq_dbparams_free(p);
    return ok;
}

void sq_dbparams_free(struct sq_dbparams *p)
{
    free(p->keys);
    free(p->values);
    free(p->options);
    memset(p, 0, sizeof *p);
    p->pin_at = -1;
}

/* Take out of a failed connection's message every connection string in p
 * and every password libpq holds: a server repeats a database name, and a
 * malformed URI can put part of a password in a host name. */
static void redact_secrets(PGconn *conn, const struct sq_dbparams *p, char *err)
{
    for (size_t i = 0; i < p->n; i++) {
        if (!sq_conninfo_is_string(p->values[i]))
            continue;
        struct sq_span pw[4];
        size_t n = sq_conninfo_passwords(p->values[i], pw, 4);
        for (size_t k = 0; k < n && k < 4; k++) {
            char *secret = strndup(p->values[i] + pw[k].start, pw[k].len);
            sq_redact(err, secret);
            free(secret);
        }
        sq_redact(err, p->values[i]);
    }
    PQconninfoOption *opts = PQconninfo(conn);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0)
            sq_redact(err, o->val);
    PQconninfoFree(opts);
}

bool sq_dbparams_pinned(const struct sq_dbparams *p)
{
    return p->pin_at >= 0;
}

/* The parameters without skipq's `options` entry (the last one). */
static PGconn *connect_unpinned(const struct sq_dbparams *p)
{
    size_t n = (size_t)p->pin_at;
    const char **k = malloc((n + 1) * sizeof *k), **v = malloc((n + 1) * sizeof *v);
    PGconn *conn = NULL;
    if (k && v) {
        memcpy(k, p->keys, n * sizeof *k);
        memcpy(v, p->values, n * sizeof *v);
        k[n] = v[n] = NULL;
        conn = PQconnectdbParams(k, v, 1);
    }
    free(k);
    free(v);
    return conn;
}

/* A pooler in session mode (pgbouncer) refuses startup options it does not
 * know: "unsupported startup parameter: options=...". */
static bool options_refused(PGconn *conn)
{
    return strstr(PQerrorMessage(conn), "unsupported startup parameter: options") != NULL;
}

/* ---- the rest of a host list --------------------------------------------------------------- */

/* A comma-separated libpq list (host, hostaddr, port): its entries. */
static size_t list_len(const char *s)
{
    if (!s || !*s)
        return 0;
    size_t n = 1;
    for (; *s; s++)
        n += *s == ',';
    return n;
}

/* The list from its entry i on (i below its length). */
static const char *list_skip(const char *s, size_t i)
{
    for (size_t k = 0; k < i; k++)
        s = strchr(s, ',') + 1;
    return s;
}

/* Entries [from, n) of a list of n (owned); a list of one entry applies
 * to every host and is kept whole. */
static char *list_tail(const char *s, size_t n, size_t from)
{
    return strdup(list_len(s) == n ? list_skip(s, from) : s);
}

/* Entry i of a list (owned); a list of one entry: that one. */
static char *list_at(const char *s, size_t i)
{
    if (list_len(s) <= 1)
        return strdup(s ? s : "");
    s = list_skip(s, i);
    return strndup(s, strcspn(s, ","));
}

struct hostlist {
    char *host, *hostaddr, *port; /* as the failed attempt had them (owned) */
    size_t n;                     /* hosts listed */
};

static void hostlist_free(struct hostlist *l)
{
    free(l->host);
    free(l->hostaddr);
    free(l->port);
}

static bool hostlist_of(PGconn *conn, struct hostlist *l)
{
    memset(l, 0, sizeof *l);
    PQconninfoOption *opts = PQconninfo(conn);
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        char **to = strcmp(o->keyword, "host") == 0       ? &l->host
                    : strcmp(o->keyword, "hostaddr") == 0 ? &l->hostaddr
                    : strcmp(o->keyword, "port") == 0     ? &l->port
                                                          : NULL;
        if (to && o->val && *o->val)
            *to = strdup(o->val);
    }
    PQconninfoFree(opts);
    size_t h = list_len(l->host), a = list_len(l->hostaddr);
    l->n = h > a ? h : a;
    return l->n > 1;
}

/* Which host of the list the failed attempt ended on; n: not known. */
static size_t ended_on(PGconn *conn, const struct hostlist *l)
{
    const char *host = PQhost(conn), *port = PQport(conn);
    for (size_t i = 0; host && i < l->n; i++) {
        char *h = list_at(l->host && *l->host ? l->host : l->hostaddr, i), *pt = list_at(l->port, i);
        bool same = strcmp(h, host) == 0 && (!port || !*pt || strcmp(pt, port) == 0);
        free(h);
        free(pt);
        if (same)
            return i;
    }
    return l->n;
}

/*
 * libpq moves to the next host of a list when a host cannot be reached, has
 * the wrong role (target_session_attrs) or is starting up. One that answers
 * its start-up with another error -- "too many clients already" (a standby
 * out of connection slots), "database ... does not exist", a pg_hba.conf
 * line that rejects us -- ends the whole attempt, and a healthy primary
 * listed after it is never tried. So skipq goes on itself, with the hosts
 * after the one that answered, as libpq does for the others. The
 * parameters come after everything the user set, so they replace the list
 * a URL or a conninfo string gave.
 */
static PGconn *connect_rest(const struct sq_dbparams *p, bool unpinned, PGconn *failed)
{
    struct hostlist l;
    if (!hostlist_of(failed, &l)) {
        hostlist_free(&l);
        return NULL;
    }
    size_t at = ended_on(failed, &l);
    PGconn *conn = NULL;
    size_t n = unpinned ? (size_t)p->pin_at : p->n;
    const char **k = malloc((n + 4) * sizeof *k), **v = malloc((n + 4) * sizeof *v);
    char *host = NULL, *addr = NULL, *port = NULL;
    if (at + 1 >= l.n || !k || !v)
        goto out;
    host = l.host ? list_tail(l.host, l.n, at + 1) : NULL;
    addr = l.hostaddr ? list_tail(l.hostaddr, l.n, at + 1) : NULL;
    port = l.port ? list_tail(l.port, l.n, at + 1) : NULL;
    memcpy(k, p->keys, n * sizeof *k);
    memcpy(v, p->values, n * sizeof *v);
    if (host)
        k[n] = "host", v[n++] = host;
    if (addr)
        k[n] = "hostaddr", v[n++] = addr;
    if (port)
        k[n] = "port", v[n++] = port;
    k[n] = v[n] = NULL;
    log_debug("the database host %s answered with an error; trying the hosts listed after it", PQhost(failed));
    conn = PQconnectdbParams(k, v, 1);
out:
    free(k);
    free(v);
    free(host);
    free(addr);
    free(port);
    hostlist_free(&l);
    return conn;
}

PGconn *sq_db_connect(struct sq_dbparams *p, char *err, size_t errlen)
{
    /* libpq expands the first dbname; its parse errors quote the text. */
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->keys[i], "dbname") != 0)
            continue;
        if (sq_conninfo_is_string(p->values[i]) && !sq_conninfo_check(p->values[i], err, errlen))
            return NULL;
        break;
    }
    bool unpinned = p->pin_at >= 0 && atomic_load(&p->pin_refused);
    PGconn *conn = unpinned ? connect_unpinned(p) : PQconnectdbParams(p->keys, p->values, 1);
    if (conn && PQstatus(conn) != CONNECTION_OK && p->pin_at >= 0 && !unpinned && options_refused(conn)) {
        /* skipq's own statements stay safe (they name every built-in by
         * schema); a handler's, on the job's connection, are not pinned. */
        static atomic_bool said;
        atomic_store(&p->pin_refused, true);
        if (!atomic_exchange(&said, true))
            log_info("the server refused the startup parameter options (a pooler?): skipq's sessions run "
                     "with the server's search_path there; with pgbouncer in transaction mode set [database] "
                     "pooler = transaction");
        PQfinish(conn);
        conn = connect_unpinned(p);
    }
    /* Each round tries the hosts after the one that ended the last; what
     * each said is kept for the message. */
    char said[1024] = "";
    unpinned = p->pin_at >= 0 && atomic_load(&p->pin_refused);
    for (PGconn *next; conn && PQstatus(conn) != CONNECTION_OK && (next = connect_rest(p, unpinned, conn));) {
        size_t used = strlen(said);
        snprintf(said + used, sizeof said - used, "%s", PQerrorMessage(conn));
        PQfinish(conn);
        conn = next;
    }
    if (!conn) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "%s%s", said, PQerrorMessage(conn));
        redact_secrets(conn, p, err);
        size_t n = strlen(err);
        while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
            err[--n] = '\0';
        /* One line, for logs: libpq puts hints and each host tried on lines of their own. */
        for (char *nl = strchr(err, '\n'); nl; nl = strchr(nl, '\n')) {
            *nl = ';';
            if (nl[1] == '\t')
                nl[1] = ' ';
        }
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

void sq_db_describe(PGconn *conn, char *buf, size_t len)
{
    const char *host = PQhost(conn);
    snprintf(buf, len, "host=%s port=%s dbname=%s user=%s", host ? host : "?", PQport(conn), PQdb(conn),
             PQuser(conn));
}

const char *sq_db_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

const char *sq_db_last_sqlstate(void)
{
    return last_sqlstate;
}

bool sq_db_conn_lost(PGconn *conn, const PGresult *res)
{
    if (PQstatus(conn) != CONNECTION_OK)
        return true;
    /* No result: judge by the last error this thread recorded. */
    const char *st = res ? sq_db_sqlstate(res) : last_sqlstate;
    /* 08: connection exception; 57P0x: admin/crash shutdown, cannot connect
     * now; 25006: we reached a read-only standby; 53300: too many
     * connections. All mean "this session is no good, make another". */
    return strncmp(st, "08", 2) == 0 || strncmp(st, "57P0", 4) == 0 || strcmp(st, "25006") == 0 ||
           strcmp(st, "53300") == 0;
}

void sq_db_note_lost(void)
{
    snprintf(last_sqlstate, sizeof last_sqlstate, "08006");
}

const char *sq_db_last_detail(void)
{
    return last_detail;
}

void sq_db_error(PGconn *conn, const PGresult *res, char *err, size_t errlen)
{
    snprintf(last_sqlstate, sizeof last_sqlstate, "%s", sq_db_sqlstate(res));
    const char *d = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
    const char *c = res ? PQresultErrorField(res, PG_DIAG_CONTEXT) : NULL;
    int cl = c ? (int)strcspn(c, "\n") : 0; /* its first line: the rest names portals and parameters */
    snprintf(last_detail, sizeof last_detail, "%s%s%.*s", d ? d : "", d && c ? " " : "", cl, c ? c : "");
    const char *m = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!m || !*m)
        m = PQerrorMessage(conn);
    if (!m || !*m)
        m = "unknown error";
    snprintf(err, errlen, "%s", m);
    size_t n = strlen(err);
    while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
        err[--n] = '\0';
}

PGresult *sq_db_check(PGconn *conn, PGresult *res, char *err, size_t errlen)
{
    ExecStatusType st = PQresultStatus(res);
    if (res && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
        return res;
    if (err)
        sq_db_error(conn, res, err, errlen);
    PQclear(res);
    return NULL;
}

PGresult *sq_db_query(PGconn *conn, const char *sql, int nparams, const char *const *params, char *err,
                      size_t errlen)
{
    return sq_db_check(conn, PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0), err, errlen);
}

bool sq_db_exec(PGconn *conn, const char *sql, char *err, size_t errlen)
{
    PGresult *res = sq_db_check(conn, PQexec(conn, sql), err, errlen);
    PQclear(res);
    return res != NULL;
}
