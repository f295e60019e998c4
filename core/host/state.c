/*
 * state.c -- the accessors of the host's shared state (state.h).
 *
 * The services that run beside the worker loop -- /metrics and /healthz,
 * the host registry, the scheduler, the listener, SIGHUP -- read and
 * change the host through these, so the layout of struct sq_host and its
 * locking rules stay the runtime's business. Each is a load or a store of
 * one field; the walks over the workers take no lock (their fields are
 * atomics, and workers[] is complete before anyone reads it).
 */
#include "host/state.h"

#include <inttypes.h>
#include <stdio.h>

#include "common/log.h"
#include "common/util.h"

const struct sq_config *sq_host_config(const struct sq_host *h)
{
    return h->cfg;
}

void sq_host_log_thread(const struct sq_host *h, const char *name)
{
    sq_log_set_database(h->database);
    sq_log_set_thread(name);
}

const char *sq_host_database(const struct sq_host *h)
{
    return h->database;
}

bool sq_host_deferred(const struct sq_host *h)
{
    return atomic_load(&h->deferred);
}

void sq_host_set_metrics(struct sq_host *h, struct sq_metrics *m)
{
    h->metrics = m;
}

const char *sq_host_name(const struct sq_host *h)
{
    return h->name;
}

struct sq_dbparams *sq_host_dbparams(struct sq_host *h)
{
    return &h->params;
}

struct sq_dbparams *sq_host_listen_params(struct sq_host *h)
{
    return &h->listen_params;
}

struct sq_plugins *sq_host_plugins(const struct sq_host *h)
{
    return h->plugins;
}

struct sq_kinds *sq_host_kinds(const struct sq_host *h)
{
    return h->kinds;
}

int sq_host_nthreads(const struct sq_host *h)
{
    int n = 0;
    for (size_t i = 0; i < h->ngroups; i++)
        n += h->groups[i].threads;
    return n;
}

size_t sq_host_ngroups(const struct sq_host *h)
{
    return h->ngroups;
}

const char *sq_host_group_queue(const struct sq_host *h, size_t g)
{
    return h->groups[g].queue;
}

size_t sq_host_group_kinds(const struct sq_host *h, size_t g, const char *const **kinds)
{
    *kinds = h->groups[g].kinds;
    return h->groups[g].nkinds;
}

bool sq_host_group_set_limited(struct sq_host *h, size_t g, bool limited)
{
    return atomic_exchange(&h->groups[g].limited, limited);
}

_Atomic int64_t *sq_host_poll_ms(struct sq_host *h)
{
    return &h->poll_ms;
}

bool sq_host_stopping(const struct sq_host *h)
{
    return atomic_load(&h->stopping);
}

bool sq_host_ready(const struct sq_host *h)
{
    return atomic_load(&h->ready);
}

void sq_host_threads(const struct sq_host *h, int *workers, int *busy, int *sessions)
{
    int n = atomic_load(&h->workers_built) ? h->nworkers : 0, b = 0, up = 0;
    for (int i = 0; i < n; i++) {
        b += atomic_load(&h->workers[i].live->running);
        up += atomic_load(&h->workers[i].live->connected) ? 1 : 0;
    }
    up += atomic_load(&h->hb_connected) ? 1 : 0;
    up += atomic_load(&h->listener_connected) ? 1 : 0;
    *workers = n ? sq_host_nthreads(h) : 0;
    *busy = b;
    *sessions = up;
}

void sq_host_set_listener_connected(struct sq_host *h, bool up)
{
    atomic_store(&h->listener_connected, up);
}

void sq_host_want_deps(struct sq_host *h)
{
    atomic_store(&h->deps_wake, true);
}

bool sq_host_take_deps(struct sq_host *h)
{
    return atomic_exchange(&h->deps_wake, false);
}

void sq_host_want_paused(struct sq_host *h)
{
    atomic_store(&h->paused_wake, true);
}

bool sq_host_take_paused(struct sq_host *h)
{
    return atomic_exchange(&h->paused_wake, false);
}

bool sq_host_group_paused(const struct sq_host *h, size_t g)
{
    return atomic_load(&h->groups[g].queue_paused);
}

bool sq_host_progress(struct sq_host *h, int64_t stale_ms, bool check_db, char *why, size_t whylen)
{
    int64_t now = sq_now_ms(), poll = atomic_load(&h->poll_ms) * 11 / 10;
    int64_t hb = atomic_load(&h->hb_beat), down = atomic_load(&h->hb_down_since);
    if (hb && now - hb > stale_ms) {
        snprintf(why, whylen, "the heartbeat thread has made no progress for %" PRId64 "s (stuck in a database call?)",
                 (now - hb) / 1000);
        return false;
    }
    if (check_db && down && now - down > stale_ms) {
        snprintf(why, whylen, "database unreachable for %" PRId64 "s", (now - down) / 1000);
        return false;
    }
    for (int i = 0; i < h->nworkers; i++) {
        struct sq_worker *w = &h->workers[i];
        int64_t beat = atomic_load(&w->live->beat), wdown = atomic_load(&w->live->down_since);
        /* A thread running a handler is the handler's business (timeouts
         * cover it); one reconnecting goes round its loop once per attempt:
         * a wait of up to SQ_RECONNECT_MAX_MS and the attempt itself, which
         * libpq bounds by connect_timeout per listed host (skipq's default
         * 10 s: a black-holed node costs all of it). */
        int64_t allowance = stale_ms + (wdown ? SQ_RECONNECT_MAX_MS + SQ_CONNECT_ATTEMPT_MS : poll);
        if (!atomic_load(&w->live->busy) && beat && now - beat > allowance) {
            snprintf(why, whylen, "thread %s has made no progress for %" PRId64 "s (stuck in a database call?)",
                     w->name, (now - beat) / 1000);
            return false;
        }
        if (check_db && wdown && now - wdown > stale_ms) {
            snprintf(why, whylen, "database unreachable for %" PRId64 "s (thread %s)", (now - wdown) / 1000, w->name);
            return false;
        }
    }
    return true;
}
