/*
 * exec.c -- one plugin and one handler call in this process, with no host
 * around it: `skipq exec PLUGIN.so KIND PAYLOAD` (cli/exec.c) and the C test
 * kit for plugin authors (skipq/plugin_test.h, kit/plugin_test.c).
 *
 * A plugin that runs here must be a plugin that a host would run, so
 * nothing is imitated: the plugin is loaded by the host's loader
 * (plugin.c: path and permission checks, ELF checks, ABI, declared keys,
 * init) from a [plugin NAME] section read from INI text, and its handler
 * gets the host's own service table (sq_host_api, jobapi.c) over a job
 * context and a slot of its own -- should-stop, the deadline, the output,
 * the error and retry_in behave as on a host. What differs is said where it
 * does: the payload is rendered by jsonb only when a connection is given,
 * the connection's transaction is rolled back unless asked otherwise, and
 * the handler's log lines are captured (sq_log_set_tap) as well as logged.
 */
#include "host/exec.h"

#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/db.h"
#include "common/log.h"
#include "common/util.h"
#include "host/jobapi.h"
#include "host/plugin.h"
#include "host/state.h"

struct section {
    char *name; /* "" for keys outside any section */
    struct sq_kv *kv;
    size_t nkv;
    int line;
};

struct sq_exec {
    char *file;
    struct section *sections;
    size_t nsections;
    const struct section *chosen; /* NULL: no keys */
    struct sq_plugin_conf pc;
    struct sq_plugins *ps;
    struct sq_slot slot;
    /* parsing: where the last key was found, for the next one's line */
    const char *cursor;
    int cursor_line;
    int header_line; /* of the last [section] passed */
    bool oom;
};

/* ---- the section ------------------------------------------------------------------------ */

/* The line of `key` at or after the cursor (inih reports none). */
static int next_key_line(struct sq_exec *x, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = x->cursor; p && *p;) {
        const char *eol = strchr(p, '\n'), *k = p;
        int line = x->cursor_line;
        x->cursor = eol ? eol + 1 : NULL;
        x->cursor_line++;
        while (*k == ' ' || *k == '\t')
            k++;
        if (*k == '[')
            x->header_line = line;
        if (strncmp(k, key, klen) == 0) {
            k += klen;
            while (*k == ' ' || *k == '\t')
                k++;
            if (*k == '=' || *k == ':')
                return line;
        }
        p = x->cursor;
    }
    return 0;
}

static struct section *section_for(struct sq_exec *x, const char *name, int line)
{
    if (x->nsections && strcmp(x->sections[x->nsections - 1].name, name) == 0)
        return &x->sections[x->nsections - 1];
    struct section *s = realloc(x->sections, (x->nsections + 1) * sizeof *s);
    if (!s)
        return NULL;
    x->sections = s;
    s = &s[x->nsections];
    memset(s, 0, sizeof *s);
    if (!(s->name = strdup(name)))
        return NULL;
    s->line = line;
    x->nsections++;
    return s;
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
    struct sq_exec *x = user;
    int line = next_key_line(x, key);
    struct section *s = section_for(x, section, x->header_line);
    struct sq_kv *kv = s ? realloc(s->kv, (s->nkv + 1) * sizeof *kv) : NULL;
    if (!kv) {
        x->oom = true;
        return 0;
    }
    s->kv = kv;
    kv[s->nkv] = (struct sq_kv){strdup(key), strdup(value), line};
    if (!kv[s->nkv].key || !kv[s->nkv].value) {
        free(kv[s->nkv].key);
        free(kv[s->nkv].value);
        x->oom = true;
        return 0;
    }
    s->nkv++;
    return 1;
}

/* "plugin NAME" -> NAME (trimmed), else NULL. */
static const char *plugin_name(const char *section)
{
    if (strncmp(section, "plugin", 6) != 0 || (section[6] != ' ' && section[6] != '\t'))
        return NULL;
    section += 6;
    while (*section == ' ' || *section == '\t')
        section++;
    return *section ? section : NULL;
}

static bool choose(struct sq_exec *x, const char *name, char *err, size_t errlen)
{
    const struct section *one = NULL;
    size_t plugins = 0;
    for (size_t i = 0; i < x->nsections; i++) {
        const char *n = plugin_name(x->sections[i].name);
        if (!x->sections[i].name[0] && !name)
            one = &x->sections[i]; /* bare keys */
        if (n && (!name || strcmp(n, name) == 0)) {
            plugins++;
            one = &x->sections[i];
        }
    }
    if (plugins > 1) {
        snprintf(err, errlen, "%s has %zu [plugin NAME] sections: say which one (--section NAME)", x->file, plugins);
        return false;
    }
    if (!one && name) {
        snprintf(err, errlen, "%s has no [plugin %s] section", x->file, name);
        return false;
    }
    if (!one && x->nsections) {
        snprintf(err, errlen, "%s has no [plugin NAME] section (and no keys outside a section)", x->file);
        return false;
    }
    x->chosen = one;
    return true;
}

struct sq_exec *sq_exec_new(const char *text, const char *file, const char *name, char *err, size_t errlen)
{
    struct sq_exec *x = calloc(1, sizeof *x);
    if (!x || !(x->file = strdup(file ? file : "(no file)"))) {
        free(x);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    x->cursor = text;
    x->cursor_line = 1;
    int rc = text ? ini_parse_string(text, on_key, x) : 0;
    if (rc != 0 || x->oom) {
        if (x->oom || rc < 0)
            snprintf(err, errlen, "%s: %s", x->file, x->oom || rc == -2 ? "out of memory" : "cannot parse");
        else
            snprintf(err, errlen, "%s:%d: syntax error (expected \"key = value\" or \"[section]\")", x->file, rc);
        sq_exec_free(x);
        return NULL;
    }
    if (!choose(x, name, err, errlen)) {
        sq_exec_free(x);
        return NULL;
    }
    return x;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* The stem of a path: /a/b/webhook.so -> webhook. */
static void stem(const char *path, char *out, size_t n)
{
    const char *base = strrchr(path, '/');
    sq_strlcpy(out, base ? base + 1 : path, n);
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = '\0';
}

bool sq_exec_load(struct sq_exec *x, const char *path, const skipq_plugin_info *info, char *err, size_t errlen)
{
    char name[256], abs[PATH_MAX + 1], cwd[PATH_MAX];
    const char *n = x->chosen ? plugin_name(x->chosen->name) : NULL;
    if (n)
        sq_strlcpy(name, n, sizeof name);
    else if (path)
        stem(path, name, sizeof name);
    else
        sq_strlcpy(name, info && info->name ? info->name : "plugin", sizeof name);
    if (path && path[0] != '/') { /* as given on the command line: from the working directory */
        if (!getcwd(cwd, sizeof cwd) || (size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, path) >= sizeof abs) {
            snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s", name, path, strerror(errno ? errno : ENAMETOOLONG));
            return false;
        }
        path = abs;
    }
    x->pc.name = strdup(name);
    x->pc.path = strdup(path ? path : "(linked into the program)");
    x->pc.kv = x->chosen ? x->chosen->kv : NULL;
    x->pc.nkv = x->chosen ? x->chosen->nkv : 0;
    x->pc.line = x->chosen ? x->chosen->line : 0;
    if (!x->pc.name || !x->pc.path) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    if (info) {
        x->ps = sq_plugins_load_described(&x->pc, x->file, info, err, errlen);
    } else {
        struct sq_config cfg = {.path = x->file, .plugins = &x->pc, .nplugins = 1};
        x->ps = sq_plugins_load(&cfg, err, errlen);
    }
    return x->ps != NULL;
}

const skipq_plugin_info *sq_exec_info(const struct sq_exec *x)
{
    return x->ps ? sq_plugins_info(x->ps, 0) : NULL;
}

/* ---- one call ----------------------------------------------------------------------------- */

struct capture {
    char *buf;
    size_t len, cap;
    bool oom;
};

static bool keep_line(void *arg, int level, const char *line)
{
    (void)level;
    struct capture *c = arg;
    size_t n = strlen(line);
    if (c->len + n + 2 > c->cap) {
        size_t cap = (c->cap ? c->cap * 2 : 1024) + n;
        char *b = realloc(c->buf, cap);
        if (!b) {
            c->oom = true;
            return false;
        }
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, line, n);
    c->len += n;
    c->buf[c->len++] = '\n';
    c->buf[c->len] = '\0';
    return false; /* and to stderr as usual */
}

struct timer {
    struct sq_slot *slot;
    int64_t at_ms;
    atomic_bool done;
};

static void *stop_later(void *arg)
{
    struct timer *t = arg;
    while (!atomic_load(&t->done) && sq_now_ms() < t->at_ms) {
        struct timespec ts = {0, 2 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!atomic_load(&t->done))
        atomic_store(&t->slot->stop, 1);
    return NULL;
}

/* The registered kinds, for "no such kind" messages. */
static void kinds_list(const struct sq_plugins *ps, char *buf, size_t n)
{
    const char *const *all;
    size_t k = sq_plugins_kinds(ps, &all), o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < k && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", all[i]);
}

/* The payload as the handler will see it: jsonb's rendering when there is a
 * connection to render it, else the text itself (checked as JSON). */
static char *rendered(const char *payload, PGconn *conn, char *err, size_t errlen)
{
    if (!sq_job_json_valid(payload, strlen(payload))) {
        snprintf(err, errlen, "the payload is not valid JSON: %s", payload);
        return NULL;
    }
    if (!conn)
        return strdup(payload);
    const char *p[1] = {payload};
    PGresult *res = sq_db_query(conn, "SELECT $1::pg_catalog.jsonb::pg_catalog.text", 1, p, err, errlen);
    char *out = res ? strdup(PQgetvalue(res, 0, 0)) : NULL;
    PQclear(res);
    return out;
}

/* After the handler: its transaction ends as asked (a host would commit it
 * with the done marker, here there is none). */
static void end_txn(struct sq_job_ctx *ctx, const struct sq_exec_opts *o, struct sq_exec_result *r)
{
    r->used_conn = ctx->in_txn;
    if (!ctx->in_txn)
        return;
    bool commit = o->commit && r->outcome == SKIPQ_DONE && PQtransactionStatus(ctx->conn) == PQTRANS_INTRANS;
    PGresult *res = PQexec(ctx->conn, commit ? "COMMIT" : "ROLLBACK");
    r->committed = commit && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
}

bool sq_exec_run(struct sq_exec *x, const char *kind, const char *payload, const struct sq_exec_opts *o,
                 struct sq_exec_result *r, bool *usage, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    *usage = true;
    const struct sq_handler *h = sq_plugins_find(x->ps, kind);
    if (!h) {
        char kinds[512];
        kinds_list(x->ps, kinds, sizeof kinds);
        snprintf(err, errlen, "plugin \"%s\" registers no kind \"%s\" (it registers: %s)", x->pc.name, kind,
                 kinds[0] ? kinds : "none");
        return false;
    }
    char *text = rendered(payload, o->conn, err, errlen);
    if (!text)
        return false;
    *usage = false;
    memset(&x->slot, 0, sizeof x->slot);
    x->slot.job_id = 1;
    x->slot.started_at = sq_now_ms();
    x->slot.timeout_at = o->timeout_ms > 0 ? x->slot.started_at + o->timeout_ms : 0;
    atomic_store(&x->slot.stop, o->stop_now ? 1 : 0);
    struct sq_job_ctx ctx = {
        .pub = {.api = &sq_host_api, .id = 1, .execution_id = 1, .queue = o->queue ? o->queue : "default",
                .kind = h->kind, .payload = text, .payload_len = strlen(text),
                .attempt = o->attempt > 0 ? o->attempt : 1, .max_attempts = o->max_attempts > 0 ? o->max_attempts : 5},
        .slot = &x->slot,
        .conn = o->conn,
        .retry_ms = -1,
    };
    struct timer t = {.slot = &x->slot, .at_ms = x->slot.started_at + o->stop_after_ms};
    pthread_t th;
    bool timed = o->stop_after_ms > 0 && pthread_create(&th, NULL, stop_later, &t) == 0;
    struct capture cap = {0};
    sq_log_set_tap(keep_line, &cap);
    int64_t t0 = sq_now_us();
    skipq_outcome out = h->fn(&ctx.pub, h->userdata);
    r->duration_us = sq_now_us() - t0;
    sq_log_set_tap(NULL, NULL);
    atomic_store(&t.done, true);
    if (timed)
        pthread_join(th, NULL);
    if (out != SKIPQ_DONE && out != SKIPQ_RETRY && out != SKIPQ_FAIL) {
        snprintf(ctx.error, sizeof ctx.error, "handler returned %d, which is not a skipq_outcome", (int)out);
        out = SKIPQ_RETRY;
    }
    r->outcome = out;
    memcpy(r->error, ctx.error, sizeof r->error);
    r->retry_in_ms = ctx.retry_ms;
    r->output = ctx.output;
    r->logs = cap.buf ? cap.buf : strdup("");
    end_txn(&ctx, o, r);
    free(text);
    return true;
}

void sq_exec_result_free(struct sq_exec_result *r)
{
    free(r->output);
    free(r->logs);
    r->output = r->logs = NULL;
}

void sq_exec_stop(struct sq_exec *x)
{
    atomic_store(&x->slot.stop, 1);
}

void sq_exec_free(struct sq_exec *x)
{
    if (!x)
        return;
    sq_plugins_unload(x->ps);
    for (size_t i = 0; i < x->nsections; i++) {
        for (size_t k = 0; k < x->sections[i].nkv; k++) {
            free(x->sections[i].kv[k].key);
            free(x->sections[i].kv[k].value);
        }
        free(x->sections[i].kv);
        free(x->sections[i].name);
    }
    free(x->sections);
    free(x->pc.name);
    free(x->pc.path);
    free(x->file);
    free(x);
}
