/*
 * config.c -- parse a skipq INI file.
 *
 * inih is the tokenizer; the rules live here. Before inih sees the file we
 * read it ourselves once, because the distribution's inih silently splits
 * lines longer than 200 bytes, truncates section and key names past 50, and
 * treats indented lines as continuations of the previous value. Each of those
 * would turn a typo into a different, valid-looking setting, so the pre-scan
 * rejects them with FILE:LINE instead. It also drops a UTF-8 BOM and CR
 * line ends, and catches duplicate sections. Every key is in the tables of
 * handle_*() below; anything else is an error naming the file and line.
 */
#include "common/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/conninfo.h"
#include "common/log.h"
#include "common/util.h"

#define MAX_INI_NAME 48 /* inih truncates section and key names at 50 */

struct parse_ctx {
    struct sq_config *cfg;
    const char *path;
    char err[512];
    int err_line; /* line of the first error, if the pre-scan found it */
    int cur_line; /* line of the current section's header */
    /* section headers seen by the pre-scan, for duplicates and line numbers */
    char **sections;
    int *section_lines;
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

/* ---- per-section handlers -------------------------------------------------- */

static const char *const db_keys[] = {
    "url", "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode",
    "sslrootcert", "sslcert", "sslkey", "sslcrl", "application_name", "connect_timeout",
    "target_session_attrs", "options", "service", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "gssencmode", NULL};

/* listen_conninfo must parse as libpq would, so a typo stops the host at
 * start-up instead of leaving it without wake-ups. The message says what is
 * wrong without quoting the value, which may hold a password (conninfo.c). */
static bool set_listen_conninfo(struct parse_ctx *c, const char *value)
{
    if (!*value)
        return fail(c, "[database] listen_conninfo must not be empty (leave the key out to poll only)");
    char why[256];
    if (!sq_conninfo_is_string(value))
        return fail(c, "[database] listen_conninfo: not a URI (postgresql://...) or keyword=value pairs");
    if (!sq_conninfo_check(value, why, sizeof why))
        return fail(c, "[database] listen_conninfo: %s", why);
    PQconninfoOption *opts = PQconninfoParse(value, NULL);
    if (!opts)
        return fail(c, "out of memory");
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
            c->cfg->db_has_password = true;
    PQconninfoFree(opts);
    free(c->cfg->listen_conninfo);
    c->cfg->listen_conninfo = strdup(value);
    return c->cfg->listen_conninfo ? true : fail(c, "out of memory");
}

static bool handle_database(struct parse_ctx *c, const char *key, const char *value)
{
    if (strcmp(key, "pooler") == 0) {
        if (strcmp(value, "none") == 0 || strcmp(value, "transaction") == 0) {
            c->cfg->pooled = strcmp(value, "transaction") == 0;
            return true;
        }
        return fail(c, "[database] pooler: \"%s\" is not none or transaction (a pooler in session mode needs none)",
                    value);
    }
    if (strcmp(key, "listen_conninfo") == 0)
        return set_listen_conninfo(c, value);
    char why[256];
    if (strcmp(key, "url") == 0 && !sq_conninfo_check(value, why, sizeof why))
        return fail(c, "[database] url: %s", why);
    for (int i = 0; db_keys[i]; i++) {
        if (strcmp(key, db_keys[i]) != 0)
            continue;
        struct sq_config *cfg = c->cfg;
        struct sq_kv *kv = xrealloc_array(cfg->db, cfg->ndb + 1, sizeof *kv);
        if (!kv)
            return fail(c, "out of memory");
        cfg->db = kv;
        /* libpq calls a URI or conninfo string in dbname "expansion"; we
         * spell it `url` in the file. */
        kv[cfg->ndb].key = strdup(strcmp(key, "url") == 0 ? "dbname" : key);
        kv[cfg->ndb].value = strdup(value);
        cfg->ndb++;
        if (strcmp(key, "password") == 0 ||
            (strcmp(key, "url") == 0 && (strstr(value, "password") || strchr(value, '@'))))
            cfg->db_has_password = true;
        return true;
    }
    return fail(c, "unknown key \"%s\" in [database]", key);
}

static bool set_duration(struct parse_ctx *c, const char *sect, const char *key, const char *value,
                         int64_t min_ms, int64_t *out)
{
    int64_t ms;
    const char *why = sq_parse_duration_why(value, &ms);
    if (why)
        return fail(c, "[%s] %s: \"%s\" %s", sect, key, value, why);
    if (ms < min_ms)
        return fail(c, "[%s] %s: %s is too short (minimum %lldms)", sect, key, value, (long long)min_ms);
    *out = ms;
    return true;
}

/* A whole-number key within [min, max]. */
static bool set_int(struct parse_ctx *c, const char *sect, const char *key, const char *value, int64_t min,
                    int64_t max, int *out)
{
    int64_t v;
    const char *why = sq_parse_int_why(value, min, max, &v);
    if (why)
        return fail(c, "[%s] %s: \"%s\" %s; it must be a whole number from %lld to %lld", sect, key, value, why,
                    (long long)min, (long long)max);
    *out = (int)v;
    return true;
}

static bool handle_host(struct parse_ctx *c, const char *key, const char *value)
{
    struct sq_config *cfg = c->cfg;
    if (strcmp(key, "name") == 0) {
        if (!*value || strlen(value) > 64)
            return fail(c, "[host] name must be 1 to 64 characters");
        free(cfg->host_name);
        cfg->host_name = strdup(value);
        return true;
    }
    if (strcmp(key, "poll_interval") == 0)
        return set_duration(c, "host", key, value, 1, &cfg->poll_ms);
    if (strcmp(key, "lease") == 0)
        return set_duration(c, "host", key, value, 1000, &cfg->lease_ms);
    if (strcmp(key, "heartbeat") == 0)
        return set_duration(c, "host", key, value, 100, &cfg->heartbeat_ms);
    if (strcmp(key, "shutdown_grace") == 0)
        return set_duration(c, "host", key, value, 0, &cfg->grace_ms);
    if (strcmp(key, "claim_bytes") == 0) {
        int64_t v;
        if (!sq_parse_bytes(value, &v) || v < 1 || v > (1LL << 30))
            return fail(c, "[host] claim_bytes: \"%s\" must be a size from 1 byte to 1GiB (e.g. 16MiB, 65536)",
                        value);
        cfg->claim_bytes = v;
        return true;
    }
    if (strcmp(key, "synchronous_commit") == 0) {
        if (!sq_parse_bool(value, &cfg->synchronous_commit))
            return fail(c, "[host] synchronous_commit: \"%s\" is not on or off", value);
        return true;
    }
    if (strcmp(key, "log_level") == 0) {
        int l = sq_log_level_parse(value);
        if (l < 0)
            return fail(c, "[host] log_level: \"%s\" is not one of error, warn, info, debug", value);
        cfg->log_level = l;
        return true;
    }
    return fail(c, "unknown key \"%s\" in [host]", key);
}

static bool handle_retention(struct parse_ctx *c, const char *key, const char *value)
{
    struct sq_config *cfg = c->cfg;
    if (strcmp(key, "done") == 0)
        return set_duration(c, "retention", key, value, 0, &cfg->keep_done_ms);
    if (strcmp(key, "dead") == 0)
        return set_duration(c, "retention", key, value, 0, &cfg->keep_dead_ms);
    if (strcmp(key, "cancelled") == 0)
        return set_duration(c, "retention", key, value, 0, &cfg->keep_cancelled_ms);
    if (strcmp(key, "interval") == 0)
        return set_duration(c, "retention", key, value, 100, &cfg->retention_interval_ms);
    if (strcmp(key, "batch") == 0)
        return set_int(c, "retention", key, value, 1, 100000, &cfg->retention_batch);
    return fail(c, "unknown key \"%s\" in [retention]", key);
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

static bool handle_metrics(struct parse_ctx *c, const char *key, const char *value)
{
    struct sq_config *cfg = c->cfg;
    if (strcmp(key, "listen") == 0) {
        char why[256];
        if (!sq_parse_listen(value, &cfg->metrics_addr, &cfg->metrics_addrlen, why, sizeof why))
            return fail(c, "[metrics] listen: %s", why);
        free(cfg->metrics_listen);
        cfg->metrics_listen = strdup(value);
        return cfg->metrics_listen ? true : fail(c, "out of memory");
    }
    if (strcmp(key, "unhealthy_after") == 0)
        return set_duration(c, "metrics", key, value, 1000, &cfg->metrics_unhealthy_ms);
    return fail(c, "unknown key \"%s\" in [metrics]", key);
}

static struct sq_plugin_conf *plugin_section(struct parse_ctx *c, const char *name)
{
    struct sq_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->nplugins; i++)
        if (strcmp(cfg->plugins[i].name, name) == 0)
            return &cfg->plugins[i];
    struct sq_plugin_conf *p = xrealloc_array(cfg->plugins, cfg->nplugins + 1, sizeof *p);
    if (!p)
        return NULL;
    cfg->plugins = p;
    p = &cfg->plugins[cfg->nplugins++];
    memset(p, 0, sizeof *p);
    p->name = strdup(name);
    p->line = c->cur_line;
    return p;
}

static bool handle_plugin(struct parse_ctx *c, const char *name, const char *key, const char *value)
{
    if (!sq_valid_name(name))
        return fail(c, "[plugin %s]: plugin names use only letters, digits and _.:-", name);
    struct sq_plugin_conf *p = plugin_section(c, name);
    if (!p)
        return fail(c, "out of memory");
    if (!key)
        return true;
    struct sq_kv *kv = xrealloc_array(p->kv, p->nkv + 1, sizeof *kv);
    if (!kv)
        return fail(c, "out of memory");
    p->kv = kv;
    kv[p->nkv].key = strdup(key);
    kv[p->nkv].value = strdup(value);
    p->nkv++;
    if (strcmp(key, "path") == 0) {
        if (!*value)
            return fail(c, "[plugin %s] path must not be empty", name);
        p->path = strdup(value);
    }
    return true;
}

static bool parse_kind_list(struct parse_ctx *c, const char *sect, const char *value, char ***out, size_t *n)
{
    char *copy = strdup(value);
    if (!copy)
        return fail(c, "out of memory");
    bool ok = true;
    char *next = copy;
    if (strspn(copy, ", \t") == strlen(copy)) {
        free(copy);
        return fail(c, "[%s] kinds: empty list (leave the key out to serve every kind)", sect);
    }
    while (next) {
        char *tok = next;
        next = strchr(next, ',');
        if (next)
            *next++ = '\0';
        tok = sq_trim(tok);
        if (!sq_valid_name(tok)) {
            ok = fail(c, "[%s] kinds: \"%s\" is not a valid kind name", sect, tok);
            break;
        }
        bool dup = false;
        for (size_t i = 0; i < *n && !dup; i++)
            dup = strcmp((*out)[i], tok) == 0;
        if (dup) {
            ok = fail(c, "[%s] kinds: \"%s\" is listed twice", sect, tok);
            break;
        }
        char **k = xrealloc_array(*out, *n + 1, sizeof *k);
        if (!k) {
            ok = fail(c, "out of memory");
            break;
        }
        *out = k;
        k[(*n)++] = strdup(tok);
    }
    if (ok && *n == 0)
        ok = fail(c, "[%s] kinds: empty list (leave the key out to serve every kind)", sect);
    free(copy);
    return ok;
}

static struct sq_group_conf *group_section(struct parse_ctx *c, const char *name)
{
    struct sq_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->ngroups; i++)
        if (strcmp(cfg->groups[i].queue, name) == 0)
            return &cfg->groups[i];
    struct sq_group_conf *g = xrealloc_array(cfg->groups, cfg->ngroups + 1, sizeof *g);
    if (!g)
        return NULL;
    cfg->groups = g;
    g = &cfg->groups[cfg->ngroups++];
    memset(g, 0, sizeof *g);
    g->queue = strdup(name);
    g->threads = 1;
    g->batch = 1;
    g->aging_cap = 1000000;
    g->line = c->cur_line;
    return g;
}

static struct sq_kind_conf *kind_section(struct parse_ctx *c, const char *name)
{
    struct sq_config *cfg = c->cfg;
    struct sq_kind_conf *k = (struct sq_kind_conf *)sq_config_kind(cfg, name);
    if (k)
        return k;
    k = xrealloc_array(cfg->kinds, cfg->nkinds + 1, sizeof *k);
    if (!k)
        return NULL;
    cfg->kinds = k;
    k = &cfg->kinds[cfg->nkinds++];
    memset(k, 0, sizeof *k);
    k->name = strdup(name);
    k->backoff_base_ms = SQ_DEFAULT_BACKOFF_BASE_MS;
    k->backoff_cap_ms = SQ_DEFAULT_BACKOFF_CAP_MS;
    k->line = c->cur_line;
    return k;
}

static bool handle_queue(struct parse_ctx *c, const char *name, const char *key, const char *value)
{
    char sect[160];
    snprintf(sect, sizeof sect, "queue %s", name);
    if (!sq_valid_name(name))
        return fail(c, "[%s]: queue names are 1-128 characters of letters, digits and _.:-", sect);
    struct sq_group_conf *g = group_section(c, name);
    if (!g)
        return fail(c, "out of memory");
    if (!key)
        return true;
    if (strcmp(key, "threads") == 0)
        return set_int(c, sect, key, value, 1, SQ_MAX_THREADS, &g->threads);
    if (strcmp(key, "batch") == 0)
        return set_int(c, sect, key, value, 1, SQ_MAX_BATCH, &g->batch);
    if (strcmp(key, "kinds") == 0)
        return parse_kind_list(c, sect, value, &g->kinds, &g->nkinds);
    if (strcmp(key, "priority_aging") == 0)
        return set_duration(c, sect, key, value, 100, &g->aging_ms);
    if (strcmp(key, "priority_aging_cap") == 0)
        return set_int(c, sect, key, value, -1000000, 1000000, &g->aging_cap);
    return fail(c, "unknown key \"%s\" in [%s]", key, sect);
}

/* rate = N/s (N/second) or N/min (N/minute). */
static bool set_rate(struct parse_ctx *c, const char *sect, const char *value, struct sq_kind_conf *k)
{
    char num[32];
    const char *slash = strchr(value, '/');
    size_t n = slash ? (size_t)(slash - value) : 0;
    int64_t v;
    if (slash && n < sizeof num) {
        memcpy(num, value, n);
        num[n] = '\0';
        const char *unit = slash + 1;
        while (*unit == ' ')
            unit++;
        const char *why = sq_parse_int_why(sq_trim(num), 1, 1000000, &v);
        if (why)
            return fail(c, "[%s] rate: \"%s\": N %s; write N/s or N/min with N from 1 to 1000000 (e.g. 10/s, "
                           "100/min)", sect, value, why);
        if (strcmp(unit, "s") == 0 || strcmp(unit, "second") == 0 || strcmp(unit, "sec") == 0) {
            k->rate = (int)v;
            k->rate_unit = "second";
            return true;
        }
        if (strcmp(unit, "min") == 0 || strcmp(unit, "minute") == 0) {
            k->rate = (int)v;
            k->rate_unit = "minute";
            return true;
        }
    }
    return fail(c, "[%s] rate: \"%s\" is not N/s or N/min with N from 1 to 1000000 (e.g. 10/s, 100/min)", sect,
                value);
}

static bool handle_kind(struct parse_ctx *c, const char *name, const char *key, const char *value)
{
    char sect[160];
    snprintf(sect, sizeof sect, "kind %s", name);
    if (!sq_valid_name(name))
        return fail(c, "[%s]: kind names are 1-128 characters of letters, digits and _.:-", sect);
    struct sq_kind_conf *k = kind_section(c, name);
    if (!k)
        return fail(c, "out of memory");
    if (!key)
        return true;
    if (strcmp(key, "max_attempts") == 0)
        return set_int(c, sect, key, value, 1, 100000, &k->max_attempts);
    if (strcmp(key, "backoff_base") == 0)
        return set_duration(c, sect, key, value, 0, &k->backoff_base_ms);
    if (strcmp(key, "backoff_cap") == 0)
        return set_duration(c, sect, key, value, 0, &k->backoff_cap_ms);
    if (strcmp(key, "lease") == 0)
        return set_duration(c, sect, key, value, 1000, &k->lease_ms);
    if (strcmp(key, "timeout") == 0)
        return set_duration(c, sect, key, value, 1, &k->timeout_ms);
    if (strcmp(key, "max_running") == 0)
        return set_int(c, sect, key, value, 1, 1000000, &k->max_running);
    if (strcmp(key, "rate") == 0)
        return set_rate(c, sect, value, k);
    return fail(c, "unknown key \"%s\" in [%s]", key, sect);
}

static struct sq_cron_conf *cron_section(struct parse_ctx *c, const char *name)
{
    struct sq_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->ncrons; i++)
        if (strcmp(cfg->crons[i].name, name) == 0)
            return &cfg->crons[i];
    struct sq_cron_conf *k = xrealloc_array(cfg->crons, cfg->ncrons + 1, sizeof *k);
    if (!k)
        return NULL;
    cfg->crons = k;
    k = &cfg->crons[cfg->ncrons++];
    memset(k, 0, sizeof *k);
    k->name = strdup(name);
    k->line = c->cur_line;
    return k;
}

static bool set_string(struct parse_ctx *c, char **field, const char *value)
{
    free(*field);
    *field = strdup(value);
    return *field ? true : fail(c, "out of memory");
}

static bool handle_cron(struct parse_ctx *c, const char *name, const char *key, const char *value)
{
    char sect[160];
    snprintf(sect, sizeof sect, "cron %s", name);
    if (!sq_valid_name(name))
        return fail(c, "[%s]: cron names are 1-128 characters of letters, digits and _.:-", sect);
    struct sq_cron_conf *k = cron_section(c, name);
    if (!k)
        return fail(c, "out of memory");
    if (!key)
        return true;
    if (strcmp(key, "schedule") == 0) {
        char why[256];
        if (!sq_cron_parse(value, &k->cron, why, sizeof why))
            return fail(c, "[%s] schedule: %s", sect, why);
        return set_string(c, &k->schedule, value);
    }
    if (strcmp(key, "timezone") == 0) {
        if (!*value || strlen(value) > 64 || strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                           "0123456789/_+-") != strlen(value))
            return fail(c, "[%s] timezone: \"%s\" is not a time zone name (e.g. UTC, Europe/Paris)", sect, value);
        return set_string(c, &k->timezone, value);
    }
    if (strcmp(key, "kind") == 0) {
        if (!sq_valid_name(value))
            return fail(c, "[%s] kind: \"%s\" is not a valid kind name", sect, value);
        return set_string(c, &k->kind, value);
    }
    if (strcmp(key, "queue") == 0) {
        if (!sq_valid_name(value))
            return fail(c, "[%s] queue: \"%s\" is not a valid queue name", sect, value);
        return set_string(c, &k->queue, value);
    }
    if (strcmp(key, "payload") == 0) {
        if (value[0] != '{')
            return fail(c, "[%s] payload: must be a JSON object ({...})", sect);
        return set_string(c, &k->payload, value);
    }
    if (strcmp(key, "priority") == 0)
        return set_int(c, sect, key, value, -1000000, 1000000, &k->priority);
    if (strcmp(key, "max_attempts") == 0)
        return set_int(c, sect, key, value, 1, 100000, &k->max_attempts);
    if (strcmp(key, "catch_up") == 0) {
        if (strcmp(value, "latest") == 0)
            k->catch_up = SQ_CATCH_UP_LATEST;
        else if (strcmp(value, "all") == 0)
            k->catch_up = SQ_CATCH_UP_ALL;
        else if (strcmp(value, "none") == 0)
            k->catch_up = SQ_CATCH_UP_NONE;
        else
            return fail(c, "[%s] catch_up: \"%s\" is not latest, all or none", sect, value);
        return true;
    }
    return fail(c, "unknown key \"%s\" in [%s]", key, sect);
}

/* ---- dispatch ------------------------------------------------------------- */

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
    c->cur_line = 0;
    for (size_t i = 0; i < c->nsections; i++)
        if (strcmp(c->sections[i], section) == 0)
            c->cur_line = c->section_lines[i];
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
    bool ok;
    if (strcmp(section, "database") == 0)
        ok = !key || handle_database(c, key, value);
    else if (strcmp(section, "host") == 0)
        ok = !key || handle_host(c, key, value);
    else if (strcmp(section, "retention") == 0)
        ok = !key || handle_retention(c, key, value);
    else if (strcmp(section, "metrics") == 0) {
        c->cfg->metrics_line = c->cur_line;
        ok = !key || handle_metrics(c, key, value);
    }
    else if (arg && *arg && strcmp(word, "plugin") == 0)
        ok = handle_plugin(c, arg, key, value);
    else if (arg && *arg && strcmp(word, "queue") == 0)
        ok = handle_queue(c, arg, key, value);
    else if (arg && *arg && strcmp(word, "kind") == 0)
        ok = handle_kind(c, arg, key, value);
    else if (arg && *arg && strcmp(word, "cron") == 0)
        ok = handle_cron(c, arg, key, value);
    else
        ok = fail(c, "unknown section [%s] (expected [database], [host], [retention], [metrics], [plugin NAME], "
                     "[queue NAME], [kind NAME] or [cron NAME])",
                  section);
    return ok;
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
                c->err_line = line;
                fail(c, "stray %s character", text[k] ? "carriage-return" : "NUL");
                goto bad;
            }
        }
        while (start < end && (text[start] == ' ' || text[start] == '\t'))
            start++;
        if (end - start > SQ_CONFIG_MAX_LINE) {
            c->err_line = line;
            fail(c, "line is %zu characters long; the limit is %d (split a long [database] url into host, port, "
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
                c->err_line = line;
                fail(c, "section header without a closing ']'");
                goto bad;
            }
            if (nl > MAX_INI_NAME) {
                c->err_line = line;
                fail(c, "section name is longer than %d characters", MAX_INI_NAME);
                goto bad;
            }
            const char *rest = close + 1;
            while (rest < l + n && (*rest == ' ' || *rest == '\t'))
                rest++;
            if (rest < l + n && *rest != ';' && *rest != '#') {
                c->err_line = line;
                fail(c, "text after the section header [%.*s] (put each key on its own line)", (int)nl, l + 1);
                goto bad;
            }
            const char *sp = memchr(l + 1, ' ', nl);
            if (nl == 0 || l[1] == ' ' || l[nl] == ' ' || (sp && memchr(sp + 1, ' ', nl - (size_t)(sp - l)))) {
                c->err_line = line;
                fail(c, "section [%.*s]: write [word] or [word NAME] with exactly one space", (int)nl, l + 1);
                goto bad;
            }
            for (size_t s = 0; s < c->nsections; s++) {
                if (strlen(c->sections[s]) == nl && memcmp(c->sections[s], l + 1, nl) == 0) {
                    c->err_line = line;
                    fail(c, "duplicate section [%.*s] (first at line %d)", (int)nl, l + 1, c->section_lines[s]);
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
                c->err_line = line;
                fail(c, "expected \"key = value\" or \"[section]\"");
                goto bad;
            }
            size_t kl = (size_t)(eq - l);
            while (kl > 0 && (l[kl - 1] == ' ' || l[kl - 1] == '\t'))
                kl--;
            if (kl == 0) {
                c->err_line = line;
                fail(c, "missing key before '='");
                goto bad;
            }
            if (kl > MAX_INI_NAME) {
                c->err_line = line;
                fail(c, "key name is longer than %d characters", MAX_INI_NAME);
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

static bool validate(struct sq_config *cfg, int host_line, char *err, size_t errlen)
{
    /* A session setting would stay on whichever server session the pooler
     * lent us; a role setting is the pooler-safe way. */
    if (cfg->pooled && !cfg->synchronous_commit) {
        snprintf(err, errlen,
                 "%s:%d: [host] synchronous_commit = off cannot be used with [database] pooler = transaction "
                 "(set it on the role instead: ALTER ROLE ... SET synchronous_commit = off)",
                 cfg->path, host_line);
        return false;
    }
    if (cfg->heartbeat_ms >= cfg->lease_ms) {
        snprintf(err, errlen, "%s:%d: [host] heartbeat (%lldms) must be shorter than lease (%lldms)", cfg->path,
                 host_line, (long long)cfg->heartbeat_ms, (long long)cfg->lease_ms);
        return false;
    }
    for (size_t i = 0; i < cfg->nplugins; i++) {
        if (!cfg->plugins[i].path) {
            snprintf(err, errlen, "%s:%d: [plugin %s] has no path", cfg->path, cfg->plugins[i].line,
                     cfg->plugins[i].name);
            return false;
        }
    }
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
    for (size_t i = 0; i < cfg->ncrons; i++) {
        struct sq_cron_conf *k = &cfg->crons[i];
        const char *missing = !k->schedule ? "schedule" : !k->kind ? "kind" : NULL;
        if (missing) {
            snprintf(err, errlen, "%s:%d: [cron %s] has no %s", cfg->path, k->line, k->name, missing);
            return false;
        }
        if ((!k->timezone && !(k->timezone = strdup("UTC"))) || (!k->queue && !(k->queue = strdup("default"))) ||
            (!k->payload && !(k->payload = strdup("{}")))) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        if (!k->max_attempts) {
            const struct sq_kind_conf *kc = sq_config_kind(cfg, k->kind);
            k->max_attempts = kc && kc->max_attempts ? kc->max_attempts : 5;
        }
    }
    return true;
}

static void warn_if_readable_secret(const struct sq_config *cfg)
{
    struct stat st;
    if (cfg->db_has_password && stat(cfg->path, &st) == 0 && (st.st_mode & 077))
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
}

struct sq_config *sq_config_load(const char *path, char *err, size_t errlen)
{
    struct parse_ctx c = {0};
    size_t len = 0;
    char *text = NULL, *norm = NULL;
    struct sq_config *cfg = calloc(1, sizeof *cfg);
    err[0] = '\0';
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cfg->path = strdup(path);
    cfg->poll_ms = 1000;
    cfg->lease_ms = 30000;
    cfg->heartbeat_ms = 10000;
    cfg->grace_ms = 30000;
    cfg->log_level = SQ_LOG_INFO;
    cfg->synchronous_commit = true;
    cfg->claim_bytes = SQ_CLAIM_BYTES_DEFAULT;
    cfg->retention_interval_ms = 60000;
    cfg->retention_batch = 1000;
    cfg->metrics_unhealthy_ms = 30000;
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

const struct sq_kind_conf *sq_config_kind(const struct sq_config *cfg, const char *kind)
{
    for (size_t i = 0; i < cfg->nkinds; i++)
        if (strcmp(cfg->kinds[i].name, kind) == 0)
            return &cfg->kinds[i];
    return NULL;
}

static void free_kv(struct sq_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

void sq_config_free(struct sq_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    free_kv(cfg->db, cfg->ndb);
    free(cfg->listen_conninfo);
    free(cfg->host_name);
    free(cfg->metrics_listen);
    for (size_t i = 0; i < cfg->nplugins; i++) {
        free(cfg->plugins[i].name);
        free(cfg->plugins[i].path);
        free_kv(cfg->plugins[i].kv, cfg->plugins[i].nkv);
    }
    free(cfg->plugins);
    for (size_t i = 0; i < cfg->ngroups; i++) {
        free(cfg->groups[i].queue);
        for (size_t k = 0; k < cfg->groups[i].nkinds; k++)
            free(cfg->groups[i].kinds[k]);
        free(cfg->groups[i].kinds);
    }
    free(cfg->groups);
    for (size_t i = 0; i < cfg->nkinds; i++)
        free(cfg->kinds[i].name);
    free(cfg->kinds);
    for (size_t i = 0; i < cfg->ncrons; i++) {
        struct sq_cron_conf *k = &cfg->crons[i];
        free(k->name);
        free(k->schedule);
        free(k->timezone);
        free(k->kind);
        free(k->queue);
        free(k->payload);
    }
    free(cfg->crons);
    free(cfg);
}
