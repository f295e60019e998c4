/*
 * reload.c -- SIGHUP: re-read the INI file of a running host.
 *
 * What can change live is what threads read per job or per wait:
 * [host] log_level, poll_interval and claim_bytes, and each [kind]'s max_attempts,
 * backoff_base, backoff_cap and timeout. Those live in atomics (the log
 * threshold, host->poll_ms, the per-kind table), so worker threads see the
 * new values on their next read with no lock and no race. Everything else
 * is baked into connections, threads, loaded plugins or the claim's lease
 * array; a difference there is logged as needing a restart, naming the key,
 * and left alone. The comparison is always against what the host started
 * with, so a pending restart is mentioned again on every reload.
 *
 * A file that does not load (syntax, unknown key, bad value) changes
 * nothing: the FILE:LINE error is logged and the running settings stay.
 * Values of [database] and [plugin] keys are never logged (secrets).
 */
#include "host/reload.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "host/kinds.h"
#include "host/notify.h"
#include "host/queue.h"
#include "host/state.h"

struct tally {
    int applied, restart;
};

static void needs_restart(struct tally *t, const char *what)
{
    log_warn("SIGHUP: %s changed: needs a restart to take effect", what);
    t->restart++;
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_kv(const struct sq_kv *a, size_t na, const struct sq_kv *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].key, b[i].key) != 0 || strcmp(a[i].value, b[i].value) != 0)
            return false;
    return true;
}

static void cmp_num(struct tally *t, const char *what, int64_t old, int64_t now)
{
    if (old != now)
        needs_restart(t, what);
}

static void diff_host(struct tally *t, const struct sq_config *o, const struct sq_config *n)
{
    if (!same_kv(o->db, o->ndb, n->db, n->ndb))
        needs_restart(t, "[database]");
    if (!same_str(o->host_name, n->host_name))
        needs_restart(t, "[host] name");
    cmp_num(t, "[host] lease", o->lease_ms, n->lease_ms);
    cmp_num(t, "[host] heartbeat", o->heartbeat_ms, n->heartbeat_ms);
    cmp_num(t, "[host] shutdown_grace", o->grace_ms, n->grace_ms);
    if (o->synchronous_commit != n->synchronous_commit)
        needs_restart(t, "[host] synchronous_commit");
    cmp_num(t, "[retention] done", o->keep_done_ms, n->keep_done_ms);
    cmp_num(t, "[retention] dead", o->keep_dead_ms, n->keep_dead_ms);
    cmp_num(t, "[retention] cancelled", o->keep_cancelled_ms, n->keep_cancelled_ms);
    cmp_num(t, "[retention] interval", o->retention_interval_ms, n->retention_interval_ms);
    cmp_num(t, "[retention] batch", o->retention_batch, n->retention_batch);
    if (!same_str(o->metrics_listen, n->metrics_listen))
        needs_restart(t, "[metrics] listen");
    cmp_num(t, "[metrics] unhealthy_after", o->metrics_unhealthy_ms, n->metrics_unhealthy_ms);
}

static void diff_plugins(struct tally *t, const struct sq_config *o, const struct sq_config *n)
{
    char what[200];
    for (size_t i = 0; i < o->nplugins; i++) {
        const struct sq_plugin_conf *a = &o->plugins[i], *b = NULL;
        for (size_t j = 0; j < n->nplugins && !b; j++)
            if (strcmp(n->plugins[j].name, a->name) == 0)
                b = &n->plugins[j];
        snprintf(what, sizeof what, "[plugin %s]%s", a->name, b ? "" : " (removed)");
        if (!b || !same_kv(a->kv, a->nkv, b->kv, b->nkv))
            needs_restart(t, what);
    }
    for (size_t j = 0; j < n->nplugins; j++) {
        bool found = false;
        for (size_t i = 0; i < o->nplugins && !found; i++)
            found = strcmp(o->plugins[i].name, n->plugins[j].name) == 0;
        snprintf(what, sizeof what, "[plugin %s] (added)", n->plugins[j].name);
        if (!found)
            needs_restart(t, what);
    }
}

static bool same_kinds(const struct sq_group_conf *a, const struct sq_group_conf *b)
{
    if (a->nkinds != b->nkinds || !a->kinds != !b->kinds)
        return false;
    for (size_t i = 0; i < a->nkinds; i++)
        if (strcmp(a->kinds[i], b->kinds[i]) != 0)
            return false;
    return true;
}

static void diff_groups(struct tally *t, const struct sq_config *o, const struct sq_config *n)
{
    char what[200];
    for (size_t i = 0; i < o->ngroups; i++) {
        const struct sq_group_conf *a = &o->groups[i], *b = NULL;
        for (size_t j = 0; j < n->ngroups && !b; j++)
            if (strcmp(n->groups[j].queue, a->queue) == 0)
                b = &n->groups[j];
        if (!b) {
            snprintf(what, sizeof what, "[queue %s] (removed)", a->queue);
            needs_restart(t, what);
            continue;
        }
        snprintf(what, sizeof what, "[queue %s] threads", a->queue);
        if (a->threads != b->threads)
            needs_restart(t, what);
        snprintf(what, sizeof what, "[queue %s] batch", a->queue);
        if (a->batch != b->batch)
            needs_restart(t, what);
        snprintf(what, sizeof what, "[queue %s] kinds", a->queue);
        if (!same_kinds(a, b))
            needs_restart(t, what);
    }
    for (size_t j = 0; j < n->ngroups; j++) {
        bool found = false;
        for (size_t i = 0; i < o->ngroups && !found; i++)
            found = strcmp(o->groups[i].queue, n->groups[j].queue) == 0;
        snprintf(what, sizeof what, "[queue %s] (added)", n->groups[j].queue);
        if (!found)
            needs_restart(t, what);
    }
}

/* A kind's lease is part of each group's claim statement: restart only. */
static void diff_kind_leases(struct tally *t, const struct sq_config *o, const struct sq_config *n)
{
    char what[200];
    for (int pass = 0; pass < 2; pass++) {
        const struct sq_config *from = pass ? n : o, *other = pass ? o : n;
        for (size_t i = 0; i < from->nkinds; i++) {
            const struct sq_kind_conf *a = &from->kinds[i], *b = sq_config_kind(other, a->name);
            if (pass && b)
                continue; /* compared in the first pass */
            snprintf(what, sizeof what, "[kind %s] lease", a->name);
            if ((a->lease_ms ? a->lease_ms : 0) != (b ? b->lease_ms : 0))
                needs_restart(t, what);
        }
    }
}

static void live_ms(struct tally *t, const char *what, _Atomic int64_t *cur, int64_t now)
{
    int64_t old = atomic_load(cur);
    if (old == now)
        return;
    log_info("SIGHUP: %s: %" PRId64 "ms -> %" PRId64 "ms", what, old, now);
    atomic_store(cur, now);
    t->applied++;
}

/* The live per-kind policy: every kind this host runs. */
static void apply_kinds(struct tally *t, struct sq_host *h, const struct sq_config *n)
{
    char what[200];
    struct sq_kinds *ks = sq_host_kinds(h);
    for (size_t i = 0; i < sq_kinds_count(ks); i++) {
        struct sq_kind *k = sq_kinds_at(ks, i);
        const struct sq_kind_conf *kc = sq_config_kind(n, k->name);
        int max = kc ? kc->max_attempts : 0;
        int old = atomic_load(&k->max_attempts);
        if (old != max) {
            log_info("SIGHUP: [kind %s] max_attempts: %d -> %d (for jobs enqueued with `skipq enqueue -c`; "
                     "0 = the schema's default)",
                     k->name, old, max);
            atomic_store(&k->max_attempts, max);
            t->applied++;
        }
        snprintf(what, sizeof what, "[kind %s] backoff_base", k->name);
        live_ms(t, what, &k->backoff_base_ms, kc ? kc->backoff_base_ms : SQ_DEFAULT_BACKOFF_BASE_MS);
        snprintf(what, sizeof what, "[kind %s] backoff_cap", k->name);
        live_ms(t, what, &k->backoff_cap_ms, kc ? kc->backoff_cap_ms : SQ_DEFAULT_BACKOFF_CAP_MS);
        snprintf(what, sizeof what, "[kind %s] timeout", k->name);
        live_ms(t, what, &k->timeout_ms, kc ? kc->timeout_ms : 0);
    }
}

void sq_host_reload(struct sq_host *h)
{
    char err[1024];
    const struct sq_config *o = sq_host_config(h);
    log_info("SIGHUP received: reloading %s", o->path);
    struct sq_config *n = sq_config_load(o->path, err, sizeof err);
    if (!n) {
        log_error("SIGHUP: %s; keeping the running configuration", err);
        sq_notify_status("running; the last reload failed: %s", err);
        return;
    }
    struct tally t = {0, 0};
    diff_host(&t, o, n);
    diff_plugins(&t, o, n);
    diff_groups(&t, o, n);
    diff_kind_leases(&t, o, n);
    live_ms(&t, "[host] poll_interval", sq_host_poll_ms(h), n->poll_ms);
    int64_t budget = sq_queue_claim_bytes();
    if (budget != n->claim_bytes) {
        log_info("SIGHUP: [host] claim_bytes: %" PRId64 " -> %" PRId64 " bytes", budget, n->claim_bytes);
        sq_queue_set_claim_bytes(n->claim_bytes);
        t.applied++;
    }
    apply_kinds(&t, h, n);
    int level = atomic_load(&sq_log_threshold);
    if (level != n->log_level) {
        log_info("SIGHUP: [host] log_level: %s -> %s", sq_log_level_name(level), sq_log_level_name(n->log_level));
        t.applied++;
    }
    log_info("SIGHUP: configuration reloaded: %d change(s) applied, %d need a restart", t.applied, t.restart);
    sq_log_set_level(n->log_level); /* last, so the lines above are not lost to a quieter level */
    sq_notify_status("running: %d worker thread(s); reloaded, %d change(s) applied, %d need a restart",
                     sq_host_nworkers(h), t.applied, t.restart);
    sq_config_free(n);
}
