/*
 * reload.c -- SIGHUP: re-read the INI file of a running host.
 *
 * Which keys change live is a column of the option table (SQ_OPT_LIVE in
 * common/options.c), the same column the configuration reference lists.
 * Those are what threads read per job or per wait, kept in atomics (the
 * log threshold, the host's poll interval, the claim budget, the per-kind table), so
 * worker threads see the new values on their next read with no lock and no
 * race; live[] below says where each one goes. Every other key is baked into
 * connections, threads, loaded plugins, the claim's lease array or the
 * start-up registration of limits and schedules: the diff walks the table,
 * and a difference there is logged as needing a restart, naming the key, and
 * left alone. The comparison is always against what the host started with,
 * so a pending restart is mentioned again on every reload. A kind without
 * a [kind NAME] section compares as the defaults; a queue, plugin or
 * schedule that comes or goes is named as added or removed.
 *
 * A file that does not load (syntax, unknown key, bad value) changes
 * nothing: the FILE:LINE error is logged and the running settings stay.
 * Values of restart-only keys are never logged; [database] and [plugin]
 * keys are compared as one list each and named by their section only
 * (their values may be secrets).
 */
#include "host/reload.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/db.h"
#include "common/log.h"
#include "common/options.h"
#include "host/kinds.h"
#include "host/notify.h"
#include "host/plugin.h"
#include "host/queue.h"
#include "host/scheduler.h"
#include "host/state.h"

struct tally {
    int applied, restart;
};

static void needs_restart(struct tally *t, const char *what)
{
    log_warn("SIGHUP: %s changed: needs a restart to take effect", what);
    t->restart++;
}

/* ---- what needs a restart ------------------------------------------------------ */

/* Every restart-only row of section s, between a and b (either may be a
 * section's defaults). */
static void diff_struct(struct tally *t, enum sq_opt_section s, const char *sect, const void *a, const void *b)
{
    const struct sq_option *pass = sq_option_pass(s);
    char what[200];
    for (size_t i = 0; i < sq_noptions; i++) {
        const struct sq_option *o = &sq_options[i];
        if (o->section != s || (o->flags & SQ_OPT_LIVE) || !sq_option_owns(o) || (pass && o != pass))
            continue;
        if (sq_option_same(o, a, b))
            continue;
        if (o->type == SQ_OPT_LIBPQ || o->type == SQ_OPT_PASS)
            snprintf(what, sizeof what, "[%s]", sect);
        else
            snprintf(what, sizeof what, "[%s] %s", sect, o->key);
        needs_restart(t, what);
    }
}

/* A named section of the old file (a) or of the new one (b); the other is
 * NULL when the section is gone or new, unless defaults stand in for it. */
static void diff_named_one(struct tally *t, enum sq_opt_section s, const char *name, const void *a, const void *b,
                           const char *gone)
{
    char sect[160];
    snprintf(sect, sizeof sect, "%s %s", sq_opt_sections[s].word, name);
    if (a && b) {
        diff_struct(t, s, sect, a, b);
        return;
    }
    char what[200];
    snprintf(what, sizeof what, "[%s] %s", sect, gone);
    needs_restart(t, what);
}

static void diff_named(struct tally *t, enum sq_opt_section s, const struct sq_config *o, const struct sq_config *n)
{
    void *defaults = NULL;
    if (sq_opt_sections[s].absent == SQ_ABSENT_DEFAULTS) {
        defaults = calloc(1, sq_opt_sections[s].size);
        if (!defaults || !sq_options_defaults(s, defaults)) {
            log_error("SIGHUP: out of memory comparing [%s] sections", sq_opt_sections[s].word);
            goto done;
        }
    }
    for (size_t i = 0; i < sq_config_count(o, s); i++) {
        const void *a = sq_config_section(o, s, i), *b = sq_config_find(n, s, *(char *const *)a);
        diff_named_one(t, s, *(char *const *)a, a, b ? b : defaults, "(removed)");
    }
    for (size_t j = 0; j < sq_config_count(n, s); j++) {
        const void *b = sq_config_section(n, s, j);
        if (!sq_config_find(o, s, *(char *const *)b))
            diff_named_one(t, s, *(char *const *)b, defaults, b, "(added)");
    }
done:
    if (defaults)
        sq_options_free(s, defaults);
    free(defaults);
}

static void diff_restart(struct tally *t, const struct sq_config *o, const struct sq_config *n)
{
    for (int s = 0; s < SQ_SECT_COUNT; s++) {
        if (sq_opt_sections[s].named)
            diff_named(t, (enum sq_opt_section)s, o, n);
        else
            diff_struct(t, (enum sq_opt_section)s, sq_opt_sections[s].word, o, n);
    }
}

/* ---- what applies live ---------------------------------------------------------- */

/*
 * Each live value is reached through one function: it returns the value
 * the host runs with and, given one, stores the new value.
 */
typedef int64_t cell_fn(struct sq_host *h, struct sq_kind *k, const int64_t *store);

static int64_t poll_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)k;
    return store ? atomic_exchange(sq_host_poll_ms(h), *store) : atomic_load(sq_host_poll_ms(h));
}

static int64_t claim_bytes_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h, (void)k;
    int64_t old = sq_queue_claim_bytes();
    if (store)
        sq_queue_set_claim_bytes(*store);
    return old;
}

/* Stored by sq_host_reload, last, so its lines are not lost to a quieter level. */
static int64_t log_level_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h, (void)k, (void)store;
    return atomic_load(&sq_log_threshold);
}

static int64_t max_attempts_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h;
    return store ? atomic_exchange(&k->max_attempts, (int)*store) : atomic_load(&k->max_attempts);
}

static int64_t keep_done_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h;
    return store ? atomic_exchange(&k->keep_done, (int)*store) : atomic_load(&k->keep_done);
}

static const char *show_keep_done(int64_t v)
{
    return v < 0 ? "not set" : v ? "on" : "off";
}

static int64_t backoff_base_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h;
    return store ? atomic_exchange(&k->backoff_base_ms, *store) : atomic_load(&k->backoff_base_ms);
}

static int64_t backoff_cap_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h;
    return store ? atomic_exchange(&k->backoff_cap_ms, *store) : atomic_load(&k->backoff_cap_ms);
}

static int64_t timeout_cell(struct sq_host *h, struct sq_kind *k, const int64_t *store)
{
    (void)h;
    return store ? atomic_exchange(&k->timeout_ms, *store) : atomic_load(&k->timeout_ms);
}

static const char *show_log_level(int64_t v)
{
    return sq_log_level_name((int)v);
}

/* Where each live row of the option table goes, in the order the log
 * reports them; [kind] rows apply to every kind this host runs. */
static const struct live {
    enum sq_opt_section section;
    const char *key;
    cell_fn *cell;
    const char *(*show)(int64_t v); /* NULL: the number (and "ms" for a duration) */
    const char *note;
} live[] = {
    {SQ_SECT_HOST, "poll_interval", poll_cell, NULL, NULL},
    {SQ_SECT_HOST, "claim_bytes", claim_bytes_cell, NULL, NULL},
    {SQ_SECT_KIND, "max_attempts", max_attempts_cell, NULL,
     "(registered in skipq.kind_defaults for jobs enqueued without their own)"},
    {SQ_SECT_KIND, "keep_done", keep_done_cell, show_keep_done, "(registered in skipq.kind_options)"},
    {SQ_SECT_KIND, "backoff_base", backoff_base_cell, NULL, NULL},
    {SQ_SECT_KIND, "backoff_cap", backoff_cap_cell, NULL, NULL},
    {SQ_SECT_KIND, "timeout", timeout_cell, NULL, NULL},
    {SQ_SECT_HOST, "log_level", log_level_cell, show_log_level, NULL},
};
#define NLIVE (sizeof live / sizeof live[0])

static void show(const struct live *l, const struct sq_option *o, int64_t v, char *buf, size_t n)
{
    if (l->show)
        snprintf(buf, n, "%s", l->show(v));
    else
        snprintf(buf, n, "%" PRId64 "%s", v, o->type == SQ_OPT_DURATION ? "ms" : "");
}

/* One live value: log and store it if it changed. */
static void apply(struct tally *t, struct sq_host *h, struct sq_kind *k, const struct live *l, const void *obj)
{
    char what[200], was[64], now[64];
    const struct sq_option *o = sq_option_find(l->section, l->key);
    int64_t old = l->cell(h, k, NULL), v = sq_option_int(o, obj);
    if (old == v)
        return;
    snprintf(what, sizeof what, "[%s%s%s] %s", sq_opt_sections[l->section].word, k ? " " : "", k ? k->name : "",
             l->key);
    show(l, o, old, was, sizeof was);
    show(l, o, v, now, sizeof now);
    log_info("SIGHUP: %s: %s -> %s%s%s%s", what, was, now, o->type == SQ_OPT_SIZE ? " bytes" : "", l->note ? " " : "",
             l->note ? l->note : "");
    l->cell(h, k, &v);
    t->applied++;
}

static void apply_live(struct tally *t, struct sq_host *h, const struct sq_config *n)
{
    for (size_t i = 0; i < NLIVE; i++) {
        if (live[i].section != SQ_SECT_KIND) {
            apply(t, h, NULL, &live[i], n);
            continue;
        }
        if (i > 0 && live[i - 1].section == SQ_SECT_KIND)
            continue; /* the kinds' rows went together, kind by kind */
        struct sq_kinds *ks = sq_host_kinds(h);
        for (size_t k = 0; k < sq_kinds_count(ks); k++) {
            struct sq_kind *kind = sq_kinds_at(ks, k);
            for (size_t j = i; j < NLIVE && live[j].section == SQ_SECT_KIND; j++)
                apply(t, h, kind, &live[j], sq_config_kind_policy(n, kind->name));
        }
    }
}

const char *sq_reload_check(void)
{
    for (size_t i = 0; i < NLIVE; i++) {
        const struct sq_option *o = sq_option_find(live[i].section, live[i].key);
        if (!o || !(o->flags & SQ_OPT_LIVE))
            return live[i].key;
    }
    for (size_t i = 0; i < sq_noptions; i++) {
        bool found = false;
        for (size_t j = 0; j < NLIVE && !found; j++)
            found = live[j].section == sq_options[i].section && strcmp(live[j].key, sq_options[i].key) == 0;
        if ((sq_options[i].flags & SQ_OPT_LIVE) && !found)
            return sq_options[i].key;
    }
    return NULL;
}

/* The kinds' max_attempts and keep_done again, changed or not (another host may have
 * replaced them since): on a connection of its own, as at start. */
static void register_defaults(struct sq_host *h)
{
    char err[512];
    PGconn *conn = sq_db_connect(sq_host_dbparams(h), err, sizeof err);
    if (!conn || !sq_sched_register_defaults(h, conn, err, sizeof err))
        log_warn("SIGHUP: %s; the kinds keep the defaults and keep_done they had", err);
    PQfinish(conn);
}

void sq_host_reload(struct sq_host *h)
{
    char err[1024];
    const struct sq_config *o = sq_host_config(h);
    log_info("SIGHUP received: reloading %s", o->path);
    /* A host of one of several databases compares like with like: its
     * database's cut of the new file. */
    struct sq_config *n = sq_config_load_one(o->path, sq_config_view_database(o), false, err, sizeof err);
    if (!n) {
        log_error("SIGHUP: %s; keeping the running configuration", err);
        sq_notify_status("running; the last reload failed: %s", err);
        return;
    }
    if (!sq_plugins_check_config(sq_host_plugins(h), n, err, sizeof err)) {
        log_error("SIGHUP: %s; keeping the running configuration", err);
        sq_notify_status("running; the last reload failed: %s", err);
        sq_config_free(n);
        return;
    }
    struct tally t = {0, 0};
    diff_restart(&t, o, n);
    apply_live(&t, h, n);
    register_defaults(h);
    log_info("SIGHUP: configuration reloaded: %d change(s) applied, %d need a restart", t.applied, t.restart);
    sq_log_set_level(n->log_level); /* last, so the lines above are not lost to a quieter level */
    sq_notify_status("running: %d worker thread(s); reloaded, %d change(s) applied, %d need a restart",
                     sq_host_nthreads(h), t.applied, t.restart);
    sq_config_free(n);
}
