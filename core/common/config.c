/*
 * config.c -- parse a skipq INI file.
 *
 * inih is the tokenizer; the keys are rows of the option table
 * (options.c), which parse, default, free and compare them; here is what
 * is about the file as a whole. Before inih sees the file we read it
 * ourselves once, because the distribution's inih silently splits lines
 * longer than 200 bytes, truncates section and key names past 50, and
 * treats indented lines as continuations of the previous value. Each of
 * those would turn a typo into a different, valid-looking setting, so the
 * pre-scan rejects them with FILE:LINE instead. It also drops a UTF-8 BOM
 * and CR line ends, and catches duplicate sections. A key that is no row
 * of its section is an error naming the file and line; so are the
 * relations between keys that validate() checks (heartbeat < lease, ...).
 */
#include "common/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define MAX_INI_NAME 48 /* inih truncates section and key names at 50 */

struct parse_ctx {
    struct sq_config *cfg;
    const char *path;
    char err[512];
    int err_line; /* line of the first error, if the pre-scan found it */
    int cur_line; /* line of the current section's header */
    const char *text; /* the normalised file inih parses, for the lines of keys */
    /* section headers seen by the pre-scan, for duplicates and line numbers */
    char **sections;
    int *section_lines;
    size_t *slots; /* per header of a named section: 1 + index of its struct, once made */
    size_t nsections;
    /* keys seen in the current section, to reject duplicates */
    char seen_section[128];
    char **seen;
    size_t nseen;
};

static void *xrealloc_array(void *p, size_t n, size_t size)
{
    return realloc(p, n * size);
}

static bool fail(struct parse_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(struct parse_ctx *c, const char *fmt, ...)
{
    if (c->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* A pre-scan refusal: the line is the file's, not inih's. */
static bool fail_at(struct parse_ctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(struct parse_ctx *c, int line, const char *fmt, ...)
{
    if (c->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
        c->err_line = line;
    }
    return false;
}

/* ---- the sections' structs ---------------------------------------------------- */

size_t sq_config_count(const struct sq_config *cfg, enum sq_opt_section s)
{
    switch (s) {
    case SQ_SECT_PLUGIN:
        return cfg->nplugins;
    case SQ_SECT_QUEUE:
        return cfg->ngroups;
    case SQ_SECT_KIND:
        return cfg->nkinds;
    case SQ_SECT_CRON:
        return cfg->ncrons;
    default:
        return 1;
    }
}

static void *section_at(struct sq_config *cfg, enum sq_opt_section s, size_t i)
{
    switch (s) {
    case SQ_SECT_PLUGIN:
        return &cfg->plugins[i];
    case SQ_SECT_QUEUE:
        return &cfg->groups[i];
    case SQ_SECT_KIND:
        return &cfg->kinds[i];
    case SQ_SECT_CRON:
        return &cfg->crons[i];
    default:
        return cfg;
    }
}

const void *sq_config_section(const struct sq_config *cfg, enum sq_opt_section s, size_t i)
{
    return section_at((struct sq_config *)cfg, s, i);
}

const void *sq_config_find(const struct sq_config *cfg, enum sq_opt_section s, const char *name)
{
    for (size_t i = 0; sq_opt_sections[s].named && i < sq_config_count(cfg, s); i++) {
        const void *obj = sq_config_section(cfg, s, i);
        if (strcmp(*(char *const *)obj, name) == 0)
            return obj;
    }
    return NULL;
}

/* One more (zeroed) struct at the end of a named section's array. */
#define GROW(arr, n) \
    ((grown = xrealloc_array((arr), (n) + 1, sizeof *(arr))) ? ((arr) = grown, &(arr)[(n)++]) : NULL)
static void *section_add(struct sq_config *cfg, enum sq_opt_section s)
{
    void *grown, *obj = NULL;
    if (s == SQ_SECT_PLUGIN)
        obj = GROW(cfg->plugins, cfg->nplugins);
    else if (s == SQ_SECT_QUEUE)
        obj = GROW(cfg->groups, cfg->ngroups);
    else if (s == SQ_SECT_KIND)
        obj = GROW(cfg->kinds, cfg->nkinds);
    else if (s == SQ_SECT_CRON)
        obj = GROW(cfg->crons, cfg->ncrons);
    if (obj)
        memset(obj, 0, sq_opt_sections[s].size);
    return obj;
}
#undef GROW

/* ---- dispatch ------------------------------------------------------------- */

/*
 * The struct a key of section s goes into: cfg itself, or the struct of
 * [word NAME], made with the defaults at its first key (or, for a section
 * without keys, by visit_sections). si is the header's pre-scan index.
 */
static void *section_struct(struct parse_ctx *c, enum sq_opt_section s, size_t si, const char *sect,
                            const char *name)
{
    const struct sq_opt_section_def *d = &sq_opt_sections[s];
    void *obj = c->cfg;
    if (d->named && c->slots[si])
        return section_at(c->cfg, s, c->slots[si] - 1);
    if (d->named) {
        if (!sq_valid_name(name)) {
            fail(c, "[%s]: %s", sect, d->bad_name);
            return NULL;
        }
        char *copy = strdup(name);
        obj = copy ? section_add(c->cfg, s) : NULL;
        if (!obj || !sq_options_defaults(s, obj)) {
            free(copy);
            fail(c, "out of memory");
            return NULL;
        }
        *(char **)obj = copy;
        c->slots[si] = sq_config_count(c->cfg, s);
    }
    if (d->line_offset != SIZE_MAX)
        memcpy((char *)obj + d->line_offset, &c->cur_line, sizeof c->cur_line);
    return obj;
}

/*
 * [database NAME]: a struct sq_db_conf of cfg->databases, filled through
 * the [database] rows (their offsets hold in it: config.h). The unnamed
 * section is called "default", so that name is taken.
 */
static void *named_database(struct parse_ctx *c, size_t si, const char *sect, const char *name)
{
    struct sq_config *cfg = c->cfg;
    if (c->slots[si])
        return &cfg->databases[c->slots[si] - 1];
    if (!sq_valid_name(name)) {
        fail(c, "[%s]: database names are 1-128 characters of letters, digits and _.:-", sect);
        return NULL;
    }
    if (strcmp(name, SQ_DEFAULT_DATABASE) == 0) {
        fail(c, "[%s]: \"%s\" is the name of the unnamed [database] section; write [database] or choose another "
                "name", sect, SQ_DEFAULT_DATABASE);
        return NULL;
    }
    struct sq_db_conf *grown = xrealloc_array(cfg->databases, cfg->ndatabases + 1, sizeof *grown);
    if (!grown) {
        fail(c, "out of memory");
        return NULL;
    }
    cfg->databases = grown;
    struct sq_db_conf *d = &grown[cfg->ndatabases];
    memset(d, 0, sizeof *d);
    if (!sq_options_defaults(SQ_SECT_DATABASE, d) || !(d->name = strdup(name))) {
        sq_options_free(SQ_SECT_DATABASE, d);
        fail(c, "out of memory");
        return NULL;
    }
    d->line = c->cur_line;
    c->slots[si] = ++cfg->ndatabases;
    return d;
}

/* The line of `key` in the current section (inih does not say): the first
 * line after the section's header, before the next header, that sets it;
 * the header's line if none is found. Keys are unique in a section. */
static int key_line(const struct parse_ctx *c, const char *key)
{
    const char *p = c->text;
    size_t klen = strlen(key);
    for (int line = 1; p && *p; line++) {
        const char *eol = strchr(p, '\n');
        if (line > c->cur_line) {
            const char *k = p;
            while (*k == ' ' || *k == '\t')
                k++;
            if (*k == '[')
                break;
            if (strncmp(k, key, klen) == 0) {
                const char *after = k + klen;
                while (*after == ' ' || *after == '\t')
                    after++;
                if (*after == '=' || *after == ':')
                    return line;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    return c->cur_line;
}

/* One key of a section: its pass-through list (a plugin's), then its row. */
static bool set_key(struct parse_ctx *c, enum sq_opt_section s, void *obj, const char *sect, const char *key,
                    const char *value)
{
    char why[sizeof c->err];
    const struct sq_option *pass = sq_option_pass(s), *o = sq_option_find(s, key);
    if (!o && !pass)
        return fail(c, "unknown key \"%s\" in [%s]", key, sect);
    if ((pass && !sq_option_set(pass, obj, sect, key, value, why, sizeof why)) ||
        (o && !sq_option_set(o, obj, sect, key, value, why, sizeof why)))
        return fail(c, "%s", why);
    if (s == SQ_SECT_PLUGIN) { /* a plugin's declared keys are checked later, with their lines */
        struct sq_plugin_conf *pc = obj;
        pc->kv[pc->nkv - 1].line = key_line(c, key);
    }
    return true;
}

bool sq_parse_listen(const char *value, struct sockaddr_storage *addr, socklen_t *len, char *err, size_t errlen)
{
    char host[64];
    const char *colon;
    memset(addr, 0, sizeof *addr);
    if (value[0] == '[') {
        const char *close = strchr(value, ']');
        if (!close || close[1] != ':' || (size_t)(close - value - 1) >= sizeof host) {
            snprintf(err, errlen, "\"%s\" is not [IPV6]:PORT", value);
            return false;
        }
        memcpy(host, value + 1, (size_t)(close - value - 1));
        host[close - value - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(value, ':');
        if (!colon || colon == value || (size_t)(colon - value) >= sizeof host || memchr(value, ':', (size_t)(colon - value))) {
            snprintf(err, errlen, "\"%s\" is not HOST:PORT (a numeric IPv4 address, or [IPv6] in brackets)", value);
            return false;
        }
        memcpy(host, value, (size_t)(colon - value));
        host[colon - value] = '\0';
    }
    int64_t port;
    if (!sq_parse_int(colon + 1, 1, 65535, &port)) {
        snprintf(err, errlen, "\"%s\": the port must be a whole number from 1 to 65535", value);
        return false;
    }
    if (value[0] == '[') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) {
            snprintf(err, errlen, "\"%s\" is not an IPv6 address", host);
            return false;
        }
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof *a6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
            snprintf(err, errlen, "\"%s\" is not a numeric IPv4 address (write IPv6 as [ADDRESS]:PORT)", host);
            return false;
        }
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof *a4;
    }
    return true;
}

static bool seen_before(struct parse_ctx *c, const char *section, const char *key)
{
    if (strcmp(c->seen_section, section) != 0) {
        for (size_t i = 0; i < c->nseen; i++)
            free(c->seen[i]);
        c->nseen = 0;
        sq_strlcpy(c->seen_section, section, sizeof c->seen_section);
    }
    for (size_t i = 0; i < c->nseen; i++)
        if (strcmp(c->seen[i], key) == 0)
            return true;
    char **s = xrealloc_array(c->seen, c->nseen + 1, sizeof *s);
    if (s) {
        c->seen = s;
        s[c->nseen++] = strdup(key);
    }
    return false;
}

/* Route one key (or, with key NULL, a section's mere presence). */
static bool dispatch(struct parse_ctx *c, const char *section, const char *key, const char *value)
{
    size_t si = 0;
    while (si < c->nsections && strcmp(c->sections[si], section) != 0)
        si++;
    if (si == c->nsections)
        return fail(c, "section [%s] was not seen by the pre-scan", section);
    c->cur_line = c->section_lines[si];
    const char *sp = strchr(section, ' ');
    char word[32] = "";
    const char *arg = NULL;
    if (sp) {
        size_t n = (size_t)(sp - section);
        if (n < sizeof word) {
            memcpy(word, section, n);
            word[n] = '\0';
        }
        arg = sp + 1;
        while (*arg == ' ')
            arg++;
    }
    if (sp && *arg && strcmp(word, sq_opt_sections[SQ_SECT_DATABASE].word) == 0) {
        void *db = named_database(c, si, section, arg);
        return db && (!key || set_key(c, SQ_SECT_DATABASE, db, section, key, value));
    }
    int s = sp ? (*arg ? sq_opt_section_find(word, true) : -1) : sq_opt_section_find(section, false);
    if (s < 0) {
        char list[256];
        sq_opt_section_list(list, sizeof list);
        return fail(c, "unknown section [%s] (expected %s)", section, list);
    }
    void *obj = section_struct(c, (enum sq_opt_section)s, si, section, arg);
    if (!obj)
        return false;
    return !key || set_key(c, (enum sq_opt_section)s, obj, section, key, value);
}

static int on_entry(void *user, const char *section, const char *key, const char *value)
{
    struct parse_ctx *c = user;
    if (c->err[0])
        return 0;
    if (!*section) {
        fail(c, "key \"%s\" is outside any [section]", key);
        return 0;
    }
    if (seen_before(c, section, key)) {
        fail(c, "duplicate key \"%s\" in [%s]", key, section);
        return 0;
    }
    return dispatch(c, section, key, value) ? 1 : 0;
}

/* inih reports only keys: give every section header its say too, so an
 * empty [queue q] still serves q and an empty [plugin p] is refused. */
static bool visit_sections(struct parse_ctx *c, int *bad_line)
{
    for (size_t i = 0; i < c->nsections; i++) {
        if (!dispatch(c, c->sections[i], NULL, NULL)) {
            *bad_line = c->section_lines[i];
            return false;
        }
    }
    return true;
}

static int section_line(const struct parse_ctx *c, const char *section)
{
    for (size_t i = 0; i < c->nsections; i++)
        if (strcmp(c->sections[i], section) == 0)
            return c->section_lines[i];
    return 0;
}

/* ---- pre-scan --------------------------------------------------------------- */

/*
 * Copy `text` into a normalised buffer for inih: no BOM, no CR, no leading
 * white space, and reject what inih would silently mangle. Line numbers
 * stay those of the input, so inih's error lines are the user's.
 */
static char *prescan(struct parse_ctx *c, const char *text, size_t len)
{
    char *out = malloc(len + 2);
    if (!out) {
        fail(c, "out of memory");
        return NULL;
    }
    size_t o = 0, i = 0;
    int line = 0;
    if (len >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB &&
        (unsigned char)text[2] == 0xBF)
        i = 3;
    while (i < len) {
        line++;
        size_t start = i;
        while (i < len && text[i] != '\n')
            i++;
        size_t end = i;
        if (i < len)
            i++; /* skip \n */
        if (end > start && text[end - 1] == '\r')
            end--;
        for (size_t k = start; k < end; k++) {
            if (text[k] == '\0' || text[k] == '\r') {
                fail_at(c, line, "stray %s character", text[k] ? "carriage-return" : "NUL");
                goto bad;
            }
        }
        while (start < end && (text[start] == ' ' || text[start] == '\t'))
            start++;
        if (end - start > SQ_CONFIG_MAX_LINE) {
            fail_at(c, line,
                    "line is %zu characters long; the limit is %d (split a long [database] url into host, port, "
                    "dbname, user... keys)",
                    end - start, SQ_CONFIG_MAX_LINE);
            goto bad;
        }
        const char *l = text + start;
        size_t n = end - start;
        if (n > 0 && l[0] == '[') {
            const char *close = memchr(l, ']', n);
            size_t nl = close ? (size_t)(close - l - 1) : 0;
            if (!close) {
                fail_at(c, line, "section header without a closing ']'");
                goto bad;
            }
            if (nl > MAX_INI_NAME) {
                fail_at(c, line, "section name is longer than %d characters", MAX_INI_NAME);
                goto bad;
            }
            const char *rest = close + 1;
            while (rest < l + n && (*rest == ' ' || *rest == '\t'))
                rest++;
            if (rest < l + n && *rest != ';' && *rest != '#') {
                fail_at(c, line, "text after the section header [%.*s] (put each key on its own line)", (int)nl,
                        l + 1);
                goto bad;
            }
            const char *sp = memchr(l + 1, ' ', nl);
            if (nl == 0 || l[1] == ' ' || l[nl] == ' ' || (sp && memchr(sp + 1, ' ', nl - (size_t)(sp - l)))) {
                fail_at(c, line, "section [%.*s]: write [word] or [word NAME] with exactly one space", (int)nl,
                        l + 1);
                goto bad;
            }
            for (size_t s = 0; s < c->nsections; s++) {
                if (strlen(c->sections[s]) == nl && memcmp(c->sections[s], l + 1, nl) == 0) {
                    fail_at(c, line, "duplicate section [%.*s] (first at line %d)", (int)nl, l + 1,
                            c->section_lines[s]);
                    goto bad;
                }
            }
            char **ns = xrealloc_array(c->sections, c->nsections + 1, sizeof *ns);
            if (ns)
                c->sections = ns;
            int *nlines = xrealloc_array(c->section_lines, c->nsections + 1, sizeof *nlines);
            if (nlines)
                c->section_lines = nlines;
            if (!ns || !nlines) {
                fail(c, "out of memory");
                goto bad;
            }
            c->sections[c->nsections] = strndup(l + 1, nl);
            c->section_lines[c->nsections++] = line;
        } else if (n > 0 && l[0] != ';' && l[0] != '#') {
            const char *eq = memchr(l, '=', n);
            if (!eq) {
                fail_at(c, line, "expected \"key = value\" or \"[section]\"");
                goto bad;
            }
            size_t kl = (size_t)(eq - l);
            while (kl > 0 && (l[kl - 1] == ' ' || l[kl - 1] == '\t'))
                kl--;
            if (kl == 0) {
                fail_at(c, line, "missing key before '='");
                goto bad;
            }
            if (kl > MAX_INI_NAME) {
                fail_at(c, line, "key name is longer than %d characters", MAX_INI_NAME);
                goto bad;
            }
        }
        memcpy(out + o, l, n);
        o += n;
        out[o++] = '\n';
    }
    out[o] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open config file: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
        if (n == cap) {
            if (cap >= (1u << 24)) {
                snprintf(err, errlen, "%s: config file is larger than 16 MiB", path);
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    if (buf && ferror(f)) {
        snprintf(err, errlen, "%s: cannot read config file: %s", path, strerror(errno));
        free(buf);
        buf = NULL;
    } else if (!buf && !err[0]) {
        snprintf(err, errlen, "%s: out of memory", path);
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ---- validation ------------------------------------------------------------- */

/* Every REQUIRED (string) row of section s is set in each of its structs. */
static bool check_required(const struct sq_config *cfg, enum sq_opt_section s, char *err, size_t errlen)
{
    for (size_t i = 0; i < sq_config_count(cfg, s); i++) {
        const void *obj = sq_config_section(cfg, s, i);
        for (size_t r = 0; r < sq_noptions; r++) {
            const struct sq_option *o = &sq_options[r];
            if (o->section != s || !(o->flags & SQ_OPT_REQUIRED) || *(char *const *)((const char *)obj + o->offset))
                continue;
            int line;
            memcpy(&line, (const char *)obj + sq_opt_sections[s].line_offset, sizeof line);
            snprintf(err, errlen, "%s:%d: [%s %s] has no %s", cfg->path, line, sq_opt_sections[s].word,
                     *(char *const *)obj, o->key);
            return false;
        }
    }
    return true;
}

/* The [database] a `database = ` value or --database names (NULL or
 * "default": the unnamed one), or NULL when the file has no such section. */
static const struct sq_db_conf *find_database(const struct sq_config *cfg, const char *name)
{
    if (!name || strcmp(name, SQ_DEFAULT_DATABASE) == 0)
        return &cfg->database;
    for (size_t i = 0; i < cfg->ndatabases; i++)
        if (strcmp(cfg->databases[i].name, name) == 0)
            return &cfg->databases[i];
    return NULL;
}

/* "default, eu, us" (the unnamed one only when the file has it). */
static void database_names(const struct sq_config *cfg, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    if (cfg->database.line || !cfg->ndatabases)
        used = (size_t)snprintf(buf, n, "%s", SQ_DEFAULT_DATABASE);
    for (size_t i = 0; i < cfg->ndatabases && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", cfg->databases[i].name);
}

/* Section [word name] at `line` says database = db: is there one? */
static bool database_known(const struct sq_config *cfg, const char *word, const char *name, int line, const char *db,
                           char *err, size_t errlen)
{
    if (find_database(cfg, db))
        return true;
    char names[256];
    database_names(cfg, names, sizeof names);
    snprintf(err, errlen, "%s:%d: [%s %s] database = %s: the file has no [database %s] section (its databases: %s)",
             cfg->path, line, word, name, db, db, names);
    return false;
}

/* Every `database = NAME` names a section of the file. */
static bool check_databases(const struct sq_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct sq_group_conf *g = &cfg->groups[i];
        if (!database_known(cfg, "queue", g->queue, g->line, g->database, err, errlen))
            return false;
    }
    for (size_t i = 0; i < cfg->ncrons; i++) {
        const struct sq_cron_conf *k = &cfg->crons[i];
        if (!database_known(cfg, "cron", k->name, k->line, k->database, err, errlen))
            return false;
    }
    return true;
}

/* What no single key can say: the relations between keys. */
static bool validate(struct sq_config *cfg, int host_line, char *err, size_t errlen)
{
    /* A session setting would stay on whichever server session the pooler
     * lent us; a role setting is the pooler-safe way. */
    for (size_t i = 0; i <= cfg->ndatabases; i++) {
        const struct sq_db_conf *d = i ? &cfg->databases[i - 1] : &cfg->database;
        if (d->pooled && !cfg->synchronous_commit) {
            snprintf(err, errlen,
                     "%s:%d: [host] synchronous_commit = off cannot be used with [database%s%s] pooler = transaction "
                     "(set it on the role instead: ALTER ROLE ... SET synchronous_commit = off)",
                     cfg->path, host_line, d->name ? " " : "", d->name ? d->name : "");
            return false;
        }
    }
    if (!check_databases(cfg, err, errlen))
        return false;
    if (cfg->heartbeat_ms >= cfg->lease_ms) {
        snprintf(err, errlen, "%s:%d: [host] heartbeat (%lldms) must be shorter than lease (%lldms)", cfg->path,
                 host_line, (long long)cfg->heartbeat_ms, (long long)cfg->lease_ms);
        return false;
    }
    if (!check_required(cfg, SQ_SECT_PLUGIN, err, errlen))
        return false;
    for (size_t i = 0; i < cfg->nkinds; i++) {
        const struct sq_kind_conf *k = &cfg->kinds[i];
        if (k->backoff_base_ms > k->backoff_cap_ms) {
            snprintf(err, errlen, "%s:%d: [kind %s] backoff_base is larger than backoff_cap", cfg->path, k->line,
                     k->name);
            return false;
        }
        if (k->lease_ms && k->lease_ms <= cfg->heartbeat_ms) {
            snprintf(err, errlen, "%s:%d: [kind %s] lease must be longer than [host] heartbeat (%lldms)", cfg->path,
                     k->line, k->name, (long long)cfg->heartbeat_ms);
            return false;
        }
    }
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct sq_group_conf *g = &cfg->groups[i];
        if (g->connections > g->threads) {
            snprintf(err, errlen, "%s:%d: [queue %s] connections (%d) is more than threads (%d): a session serves "
                     "at least one thread", cfg->path, g->line, g->queue, g->connections, g->threads);
            return false;
        }
        if (g->connections && g->connections != g->threads && g->isolation == SQ_ISOLATION_PROCESS) {
            snprintf(err, errlen, "%s:%d: [queue %s] connections applies to isolation = thread: each worker "
                     "process has one session and runs one handler", cfg->path, g->line, g->queue);
            return false;
        }
    }
    if (!check_required(cfg, SQ_SECT_CRON, err, errlen))
        return false;
    for (size_t i = 0; i < cfg->ncrons; i++) {
        struct sq_cron_conf *k = &cfg->crons[i];
        if (!k->max_attempts) {
            const struct sq_kind_conf *kc = sq_config_kind(cfg, k->kind);
            k->max_attempts = kc ? kc->max_attempts : 0; /* 0: the kind's registered default, else 5 */
        }
    }
    return true;
}

static void warn_if_readable_secret(const struct sq_config *cfg)
{
    struct stat st;
    bool secret = cfg->database.db_has_password;
    for (size_t i = 0; i < cfg->ndatabases; i++)
        secret = secret || cfg->databases[i].db_has_password;
    if (secret && stat(cfg->path, &st) == 0 && (st.st_mode & 077))
        log_warn("%s holds a database password and is readable by group or others (mode %03o); "
                 "chmod 600 it, or use passfile = ~/.pgpass instead",
                 cfg->path, (unsigned)(st.st_mode & 0777));
}

static void free_ctx(struct parse_ctx *c, char *text, char *norm)
{
    free(text);
    free(norm);
    for (size_t i = 0; i < c->nseen; i++)
        free(c->seen[i]);
    free(c->seen);
    for (size_t i = 0; i < c->nsections; i++)
        free(c->sections[i]);
    free(c->sections);
    free(c->section_lines);
    free(c->slots);
}

/* A configuration with every default of the fixed sections and of kinds. */
static struct sq_config *config_new(const char *path)
{
    struct sq_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->path = strdup(path))) {
        free(cfg);
        return NULL;
    }
    bool ok = sq_options_defaults(SQ_SECT_KIND, &cfg->kind_defaults);
    for (int s = 0; ok && s < SQ_SECT_COUNT; s++)
        ok = sq_opt_sections[s].named || sq_options_defaults((enum sq_opt_section)s, cfg);
    if (!ok) {
        sq_config_free(cfg);
        return NULL;
    }
    return cfg;
}

struct sq_config *sq_config_load(const char *path, char *err, size_t errlen)
{
    struct parse_ctx c = {0};
    size_t len = 0;
    char *text = NULL, *norm = NULL;
    struct sq_config *cfg = config_new(path);
    err[0] = '\0';
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c.cfg = cfg;
    c.path = path;

    text = read_file(path, &len, err, errlen);
    if (!text)
        goto fail;
    norm = prescan(&c, text, len);
    if (!norm) {
        snprintf(err, errlen, "%s:%d: %s", path, c.err_line, c.err);
        goto fail;
    }
    if (!(c.slots = calloc(c.nsections ? c.nsections : 1, sizeof *c.slots))) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    c.text = norm;
    int rc = ini_parse_string(norm, on_entry, &c);
    if (rc != 0) {
        if (rc > 0)
            snprintf(err, errlen, "%s:%d: %s", path, rc,
                     c.err[0] ? c.err : "syntax error (expected \"key = value\" or \"[section]\")");
        else
            snprintf(err, errlen, "%s: %s", path, rc == -2 ? "out of memory" : "cannot parse");
        goto fail;
    }
    int bad_line = 0;
    if (!visit_sections(&c, &bad_line)) {
        snprintf(err, errlen, "%s:%d: %s", path, bad_line, c.err);
        goto fail;
    }
    if (!validate(cfg, section_line(&c, "host"), err, errlen))
        goto fail;
    warn_if_readable_secret(cfg);
    free_ctx(&c, text, norm);
    return cfg;
fail:
    free_ctx(&c, text, norm);
    sq_config_free(cfg);
    return NULL;
}

bool sq_config_check_runnable(const struct sq_config *cfg, char *err, size_t errlen)
{
    if (cfg->nplugins == 0) {
        snprintf(err, errlen, "%s: no [plugin NAME] section: the host would have no handlers", cfg->path);
        return false;
    }
    if (cfg->ngroups == 0) {
        snprintf(err, errlen, "%s: no [queue NAME] section: the host would serve no queue", cfg->path);
        return false;
    }
    int total = 0;
    for (size_t i = 0; i < cfg->ngroups; i++)
        total += cfg->groups[i].threads;
    if (total > SQ_MAX_THREADS) {
        snprintf(err, errlen, "%s: %d threads in all; the limit is %d", cfg->path, total, SQ_MAX_THREADS);
        return false;
    }
    return true;
}

int sq_config_connections(const struct sq_group_conf *g)
{
    if (g->isolation == SQ_ISOLATION_PROCESS)
        return g->threads;
    if (g->connections)
        return g->connections;
    if (g->threads <= SQ_AUTO_CONNECTIONS)
        return g->threads;
    /* Past that, a session per `batch` threads: each claim then fills its
     * threads, and the server does a few large cycles rather than many
     * small ones (measured: 128 threads of 5 ms handlers, 2 sessions 84 %
     * of the ideal rate, 8 sessions 44 %, 128 sessions 15 %). At least two,
     * so one slow round trip never holds every thread. */
    int n = (g->threads + g->batch - 1) / g->batch;
    return n < 2 ? 2 : n;
}

const struct sq_kind_conf *sq_config_kind(const struct sq_config *cfg, const char *kind)
{
    return sq_config_find(cfg, SQ_SECT_KIND, kind);
}

const struct sq_kind_conf *sq_config_kind_policy(const struct sq_config *cfg, const char *kind)
{
    const struct sq_kind_conf *k = sq_config_kind(cfg, kind);
    return k ? k : &cfg->kind_defaults;
}

const char *sq_config_database_name(const struct sq_db_conf *d)
{
    return d->name ? d->name : SQ_DEFAULT_DATABASE;
}

const char *sq_config_view_database(const struct sq_config *cfg)
{
    return cfg->view_of ? sq_config_database_name(&cfg->database) : NULL;
}

bool sq_config_database_is(const struct sq_db_conf *d, const char *database)
{
    return strcmp(sq_config_database_name(d), database ? database : SQ_DEFAULT_DATABASE) == 0;
}

struct sq_config *sq_config_view(const struct sq_config *cfg, const char *name, char *err, size_t errlen)
{
    const struct sq_db_conf *d = find_database(cfg, name);
    if (!d) {
        char names[256];
        database_names(cfg, names, sizeof names);
        snprintf(err, errlen, "%s: no [database %s] section (its databases: %s)", cfg->path, name, names);
        return NULL;
    }
    struct sq_config *v = malloc(sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *v = *cfg;
    v->database = *d;
    v->view_of = cfg;
    v->groups = calloc(cfg->ngroups ? cfg->ngroups : 1, sizeof *v->groups);
    v->crons = calloc(cfg->ncrons ? cfg->ncrons : 1, sizeof *v->crons);
    v->ngroups = v->ncrons = 0;
    if (!v->groups || !v->crons) {
        sq_config_free(v);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < cfg->ngroups; i++)
        if (sq_config_database_is(d, cfg->groups[i].database))
            v->groups[v->ngroups++] = cfg->groups[i];
    for (size_t i = 0; i < cfg->ncrons; i++)
        if (sq_config_database_is(d, cfg->crons[i].database))
            v->crons[v->ncrons++] = cfg->crons[i];
    return v;
}

struct sq_config *sq_config_load_one(const char *path, const char *name, bool db_given, char *err, size_t errlen)
{
    struct sq_config *file = sq_config_load(path, err, errlen);
    if (!file)
        return NULL;
    if (!name && (file->database.line || !file->ndatabases || db_given))
        return file;
    if (!name) {
        size_t used = (size_t)snprintf(err, errlen, "%s declares [database %s]", path, file->databases[0].name);
        for (size_t i = 1; i < file->ndatabases && used < errlen; i++)
            used += (size_t)snprintf(err + used, errlen - used, ", [database %s]", file->databases[i].name);
        if (used < errlen)
            snprintf(err + used, errlen - used, " and no [database]: say which with --database NAME");
        sq_config_free(file);
        return NULL;
    }
    struct sq_config *view = sq_config_view(file, name, err, errlen);
    if (!view) {
        sq_config_free(file);
        return NULL;
    }
    view->view_owns = true;
    return view;
}

void sq_config_free(struct sq_config *cfg)
{
    if (!cfg)
        return;
    if (cfg->view_of) { /* its strings are the whole file's */
        if (cfg->view_owns)
            sq_config_free((struct sq_config *)cfg->view_of);
        free(cfg->groups);
        free(cfg->crons);
        free(cfg);
        return;
    }
    for (size_t i = 0; i < cfg->ndatabases; i++) {
        sq_options_free(SQ_SECT_DATABASE, &cfg->databases[i]);
        free(cfg->databases[i].name);
    }
    free(cfg->databases);
    for (int s = 0; s < SQ_SECT_COUNT; s++) {
        for (size_t i = 0; i < sq_config_count(cfg, (enum sq_opt_section)s); i++) {
            void *obj = section_at(cfg, (enum sq_opt_section)s, i);
            sq_options_free((enum sq_opt_section)s, obj);
            if (sq_opt_sections[s].named)
                free(*(char **)obj);
        }
    }
    free(cfg->plugins);
    free(cfg->groups);
    free(cfg->kinds);
    free(cfg->crons);
    free(cfg->path);
    free(cfg);
}
