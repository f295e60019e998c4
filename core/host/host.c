/*
 * host.c -- `skipq run`: the host's lifecycle.
 *
 * Order matters: signals blocked → config → plugins (init registers kinds) →
 * thread groups resolved against the registry → database check → cron
 * schedules and kind limits registered (scheduler.c) → metrics server →
 * heartbeat and worker threads → signal loop → shutdown.
 *
 * Under systemd (Type=notify) the signal loop also sends READY=1 once every
 * thread has connected, STATUS= lines, STOPPING=1, and WATCHDOG=1 -- the last
 * only while the worker and heartbeat threads keep going round their loops,
 * so a thread stuck in a database call stops the feed and systemd restarts
 * the host. SIGHUP re-reads the INI file (reload.c).
 *
 * Signals are blocked in every thread and taken synchronously here with
 * sigtimedwait, so no code runs in a signal handler. The first SIGTERM or
 * SIGINT stops claims and gives running handlers shutdown_grace to finish;
 * then should-stop turns true for the handlers still running, and they have
 * SKIPQ_STOP_WINDOW_MS more to return (plugin.h, "THE STOP CONTRACT"): what
 * one returns in that window is recorded as it returned. Jobs still running
 * after it are released at once (back to pending, their attempt recorded as
 * interrupted) and the process exits 0 without calling the plugins'
 * shutdown() or unloading them, since their code still runs; shutdown()
 * runs only on the way out when every handler has returned. A second
 * signal exits at once with status 1: leases then bring the jobs back.
 */
#include "host/host.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/heartbeat.h"
#include "host/kinds.h"
#include "host/listen.h"
#include "host/metrics.h"
#include "host/notify.h"
#include "host/pause.h"
#include "host/plugin.h"
#include "host/pool.h"
#include "host/procs.h"
#include "host/queue.h"
#include "host/reload.h"
#include "host/scheduler.h"
#include "host/session.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"
#include "host/worker.h"
#include "skipq/skipq.h"

/*
 * Behind a pooler in transaction mode skipq cannot set its sessions to READ
 * COMMITTED (the setting would stay on a server session others borrow), so
 * it relies on the database's default and refuses to start without it:
 * SKIP LOCKED claims fail under REPEATABLE READ and SERIALIZABLE.
 */
static bool check_isolation(PGconn *conn, const char *where)
{
    char err[512];
    PGresult *res = sq_db_query(conn, "SELECT pg_catalog.current_setting('default_transaction_isolation')", 0, NULL,
                                err, sizeof err);
    bool ok = res != NULL; /* one row: current_setting() of a known name */
    if (!ok) {
        log_error("cannot read default_transaction_isolation (%s): %s", where, err);
    } else if (strcmp(PQgetvalue(res, 0, 0), "read committed") != 0) {
        log_error("pooler = transaction: default_transaction_isolation is '%s' in %s; skipq needs 'read committed' "
                  "(ALTER ROLE ... SET default_transaction_isolation = 'read committed')",
                  PQgetvalue(res, 0, 0), where);
        ok = false;
    }
    PQclear(res);
    return ok;
}

/* What start-up found in a host's database. */
enum start_check {
    START_OK,
    START_UNREACHABLE, /* could not connect, or a statement failed: may pass later */
    START_FAILED,      /* the schema is missing or at another version, or the isolation is wrong */
    START_BAD_CONFIG,  /* the file says what the database refuses (cron time zone, payload): exit 2 */
};

static enum start_check check_schema(struct sq_host *h, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(&h->params, err, errlen);
    if (!conn) {
        char why[512];
        sq_strlcpy(why, err, sizeof why);
        snprintf(err, errlen, "cannot connect to the database: %s", why);
        return START_UNREACHABLE;
    }
    char where[256], why[512];
    sq_db_describe(conn, where, sizeof where);
    int version = 0;
    enum start_check r = START_OK;
    if (skipq_schema_version(conn, &version, why, sizeof why) != SKIPQ_OK) {
        snprintf(err, errlen, "cannot read the skipq schema version (%s): %s", where, why);
        r = START_UNREACHABLE;
    } else if (version == 0) {
        snprintf(err, errlen, "the database %s has no skipq schema: run `skipq migrate` (with this file: skipq migrate "
                 "-c %s)", where, h->cfg->path);
        r = START_FAILED;
    } else if (version != skipq_schema_version_required()) {
        snprintf(err, errlen, "the skipq schema in %s is at version %d; this host needs %d: run `skipq migrate`", where,
                 version, skipq_schema_version_required());
        r = START_FAILED;
    } else {
        log_info("database %s, schema version %d, libpq %d", where, version, PQlibVersion());
    }
    if (r == START_OK && h->cfg->database.pooled && !check_isolation(conn, where)) {
        snprintf(err, errlen, "pooler = transaction needs default_transaction_isolation 'read committed' in %s", where);
        r = START_FAILED;
    }
    PQfinish(conn);
    return r;
}

bool sq_host_build_groups(struct sq_host *h, char *err, size_t errlen)
{
    const struct sq_config *cfg = h->cfg;
    const char *const *all;
    size_t nall = sq_plugins_kinds(h->plugins, &all);
    h->groups = calloc(cfg->ngroups, sizeof *h->groups);
    if (!h->groups)
        return false;
    h->ngroups = cfg->ngroups;
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct sq_group_conf *gc = &cfg->groups[i];
        struct sq_group *g = &h->groups[i];
        g->queue = gc->queue;
        g->threads = gc->threads;
        g->connections = sq_config_connections(gc);
        g->batch = gc->batch;
        g->process = gc->isolation == SQ_ISOLATION_PROCESS;
        g->max_jobs = gc->max_jobs;
        g->max_memory = gc->max_memory;
        pthread_cond_init(&g->wake, NULL);
        size_t n = gc->kinds ? gc->nkinds : nall;
        g->kinds = calloc(n ? n : 1, sizeof *g->kinds);
        int64_t *leases = calloc(n ? n : 1, sizeof *leases);
        if (!g->kinds || !leases) {
            free(leases);
            return false;
        }
        for (size_t k = 0; k < n; k++) {
            const char *kind = gc->kinds ? gc->kinds[k] : all[k];
            const struct sq_kind *kr = sq_kinds_find(h->kinds, kind);
            if (!kr) {
                snprintf(err, errlen, "%s:%d: [queue %s] kinds: no plugin registered a handler for kind \"%s\"",
                         cfg->path, gc->line, gc->queue, kind);
                free(leases);
                return false;
            }
            g->kinds[k] = kind;
            leases[k] = kr->lease_ms;
        }
        g->nkinds = n;
        if (n == 0) {
            snprintf(err, errlen, "%s:%d: [queue %s]: the plugins registered no kinds, so there is nothing to run",
                     cfg->path, gc->line, gc->queue);
            free(leases);
            return false;
        }
        g->kinds_array = sq_text_array(g->kinds, n);
        g->leases_array = sq_int8_array(leases, n);
        free(leases);
        if (!g->kinds_array || !g->leases_array)
            return false;
    }
    return true;
}

/* A [kind] section for a kind no plugin handles is most likely a typo. */
static void warn_unhandled_kinds(const struct sq_host *h)
{
    for (size_t i = 0; i < h->cfg->nkinds; i++)
        if (!sq_plugins_find(h->plugins, h->cfg->kinds[i].name))
            log_warn("%s:%d: [kind %s]: no plugin registered this kind; its settings apply to nothing here",
                     h->cfg->path, h->cfg->kinds[i].line, h->cfg->kinds[i].name);
}

/* One sq_worker per thread of each group; a process group's workers get
 * their slots, lock and progress in shared memory (procs.c). */
static bool build_workers(struct sq_host *h, const char *db_flag, char *err, size_t errlen)
{
    int total = 0;
    for (size_t i = 0; i < h->ngroups; i++)
        total += h->groups[i].connections;
    h->workers = calloc((size_t)total, sizeof *h->workers);
    h->lives = calloc((size_t)total, sizeof *h->lives);
    if (!h->workers || !h->lives)
        return false;
    h->nworkers = total;
    int idx = 0;
    for (size_t i = 0; i < h->ngroups; i++) {
        const struct sq_group *g = &h->groups[i];
        for (int t = 0; t < g->connections; t++, idx++) {
            struct sq_worker *w = &h->workers[idx];
            w->host = h;
            w->index = idx;
            w->group = &h->groups[i];
            snprintf(w->name, sizeof w->name, "w%d", idx);
            snprintf(w->ident, sizeof w->ident, "%s:%d:%s", h->name, (int)getpid(), w->name);
            /* The group's threads shared out among its sessions. */
            w->handlers = g->threads / g->connections + (t < g->threads % g->connections ? 1 : 0);
            /* A claim takes at most `batch` jobs; a shared session keeps
             * SQ_POOL_PARTS claims in flight (worker.c, part_limit). */
            w->nslots = w->handlers > 1 ? SQ_POOL_PARTS * g->batch : g->batch;
            w->slots_lock = &h->slots_lock;
            w->live = &h->lives[idx];
            pthread_mutex_init(&w->conn_lock, NULL);
            w->sock = -1;
            w->ctl = -1;
            if (!w->group->process && !(w->slots = calloc((size_t)w->nslots, sizeof *w->slots)))
                return false;
        }
    }
    return sq_procs_setup(h, db_flag, err, errlen);
}

static bool start_threads(struct sq_host *h)
{
    int total = h->nworkers;
    atomic_store(&h->workers_built, true);
    atomic_store(&h->running, total);
    if (pthread_create(&h->heartbeat, NULL, sq_heartbeat_main, h) != 0) {
        atomic_store(&h->running, 0);
        return false;
    }
    h->heartbeat_started = true;
    if (h->cfg->database.pooled && !h->cfg->database.listen_conninfo)
        log_info("pooler = transaction without listen_conninfo: no LISTEN (it needs a session of its own); idle "
                 "threads poll every %" PRId64 "ms",
                 h->cfg->poll_ms);
    else if (pthread_create(&h->listener, NULL, sq_listener_main, h) == 0)
        h->listener_started = true;
    else
        log_warn("cannot start the listener thread; idle threads will only poll");
    for (int i = 0; i < total; i++) {
        if (h->workers[i].group->process)
            continue; /* procs.c starts it */
        if (pthread_create(&h->workers[i].thread, NULL, sq_worker_main, &h->workers[i]) != 0) {
            log_error("cannot start worker thread %d: %s", i, strerror(errno));
            atomic_fetch_sub(&h->running, total - i);
            return false;
        }
        h->workers[i].started = true;
    }
    if (!sq_procs_start(h)) {
        log_error("cannot start the thread that supervises worker processes: %s", strerror(errno));
        return false;
    }
    return true;
}

/*
 * Grace ran out. Handlers still running are asked to stop and their jobs go
 * back to pending now; jobs whose handlers already returned (a thread busy
 * with the rest of its batch had not recorded them yet) get their outcomes
 * recorded, so finished work is not run again.
 */
void sq_host_release_running(struct sq_host *h)
{
    size_t cap = sq_slots_capacity(h);
    int64_t *ids = calloc(cap, sizeof *ids), *execs = calloc(cap, sizeof *execs);
    struct sq_outcomes done = {.ids = calloc(cap, sizeof(int64_t)),
                               .execs = calloc(cap, sizeof(int64_t)),
                               .outcomes = calloc(cap, sizeof(short)),
                               .delays = calloc(cap, sizeof(int64_t)),
                               .errors = calloc(cap, sizeof(char *))};
    char *applied = calloc(cap, 1);
    size_t n = 0;
    bool ok = ids && execs && done.ids && done.execs && done.outcomes && done.delays && done.errors && applied;
    ok = ok && sq_slots_stop_all(h, ids, execs, &n, &done);
    char err[512] = "out of memory";
    PGconn *conn = ok && (n || done.n) ? sq_db_connect(&h->params, err, sizeof err) : NULL;
    if (conn && !sq_queue_prepare(conn, err, sizeof err)) {
        PQfinish(conn);
        conn = NULL;
    }
    if (conn && done.n) {
        if (sq_queue_record(conn, &done, applied, err, sizeof err) < 0)
            log_error("shutdown grace over: could not record %zu finished job(s); their leases will expire: %s",
                      done.n, err);
    }
    if (conn && n) {
        int r = sq_queue_release(conn, ids, execs, n, err, sizeof err);
        if (r >= 0)
            log_warn("shutdown grace over: released %d running job(s) back to pending", r);
        else
            log_error("shutdown grace over: could not release running jobs (their leases will expire): %s", err);
    }
    if (!conn && (n || done.n))
        log_error("shutdown grace over: cannot reach the database for %zu job(s); their leases will expire: %s",
                  n + done.n, err);
    PQfinish(conn);
    for (size_t d = 0; done.errors && d < done.n; d++)
        free(done.errors[d]);
    free(done.ids);
    free(done.execs);
    free(done.outcomes);
    free(done.delays);
    free(done.errors);
    free(applied);
    free(ids);
    free(execs);
}

/* The hosts of this process: one, or one per database the file's queues are in. */
struct fleet {
    struct sq_host **h;
    size_t n;
    bool ready_sent; /* READY=1 went to systemd */
};

/* A host the main thread may look into: not waiting for its database to
 * start (its workers are being built by another thread until then). */
static bool live_host(const struct sq_host *h)
{
    return !atomic_load(&h->deferred);
}

/* Every thread of every host has connected once: tell systemd we are up.
 * A host still waiting for its database since start-up does not hold the
 * others back. */
static void check_ready(struct fleet *f)
{
    bool all = true;
    for (size_t k = 0; k < f->n; k++) {
        struct sq_host *h = f->h[k];
        if (!live_host(h) || atomic_load(&h->ready))
            continue;
        bool up = atomic_load(&h->hb_connected);
        for (int i = 0; up && i < h->nworkers; i++)
            up = atomic_load(&h->workers[i].live->connected);
        if (!up) {
            all = false;
            continue;
        }
        atomic_store(&h->ready, true);
        sq_log_set_database(h->database);
        log_info("ready: every thread is connected");
        sq_log_set_database(NULL);
    }
    if (!all || f->ready_sent)
        return;
    int threads = 0;
    for (size_t k = 0; k < f->n; k++)
        threads += live_host(f->h[k]) ? sq_host_nthreads(f->h[k]) : 0;
    f->ready_sent = true;
    sq_notify("READY=1");
    sq_notify_status("running: %d worker thread(s)", threads);
}

/* Feed systemd's watchdog while the threads make progress. */
struct watchdog {
    int64_t interval_ms; /* 0: systemd did not ask for one */
    int64_t next;
    bool starving;       /* we stopped feeding it (logged once) */
};

static void feed_watchdog(const struct fleet *f, struct watchdog *wd)
{
    int64_t now = sq_now_ms();
    if (!wd->interval_ms || now < wd->next)
        return;
    char why[256] = "";
    bool ok = true;
    for (size_t k = 0; ok && k < f->n; k++) {
        struct sq_host *h = f->h[k];
        /* While stopping, the shutdown grace bounds the wait instead. */
        ok = !live_host(h) || atomic_load(&h->stopping) || sq_host_progress(h, wd->interval_ms, false, why, sizeof why);
        if (!ok && h->database) {
            char what[256];
            snprintf(what, sizeof what, "database %s: %s", h->database, why);
            sq_strlcpy(why, what, sizeof why);
        }
    }
    if (ok) {
        if (wd->starving)
            log_info("watchdog: the threads make progress again; feeding it again");
        wd->starving = false;
        sq_notify("WATCHDOG=1");
        wd->next = now + wd->interval_ms / 3;
        return;
    }
    if (!wd->starving) {
        log_error("watchdog: not feeding systemd's watchdog: %s", why);
        sq_notify_status("stuck: %s", why);
    }
    wd->starving = true;
}

/* The first SIGTERM or SIGINT: no new claims anywhere; returns the deadline. */
static int64_t begin_stop(const struct fleet *f, int sig, int64_t grace_ms)
{
    int64_t deadline = sq_now_ms() + grace_ms;
    int busy = 0;
    for (size_t k = 0; k < f->n; k++)
        busy += live_host(f->h[k]) ? sq_slots_stopping(f->h[k], deadline) : 0;
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (busy)
        log_info("%s received: no new claims; waiting up to %" PRId64 "ms for %d running handler(s)", name, grace_ms,
                 busy);
    else
        log_info("%s received: no new claims; no handler is running", name);
    sq_notify("STOPPING=1");
    sq_notify_status("stopping: waiting up to %" PRId64 "ms for running handlers", grace_ms);
    for (size_t k = 0; k < f->n; k++)
        sq_host_stop(f->h[k]);
    return deadline;
}

/* Worker threads still running, in all hosts; *ended: a host whose workers
 * all stopped although it was not told to stop. */
static int running_workers(const struct fleet *f, const struct sq_host **ended)
{
    int total = 0;
    for (size_t k = 0; k < f->n; k++) {
        if (!live_host(f->h[k]))
            continue;
        int r = atomic_load(&f->h[k]->running);
        if ((r == 0 && !atomic_load(&f->h[k]->stopping)) || atomic_load(&f->h[k]->start_failed))
            *ended = f->h[k];
        total += r;
    }
    return total;
}

/* The main thread: wait for signals; returns the exit code. */
static int signal_loop(struct fleet *f, const sigset_t *set)
{
    int64_t deadline = 0;
    bool told = false, stopping = false;
    const struct sq_config *cfg = f->h[0]->cfg;
    struct watchdog wd = {.interval_ms = sq_notify_watchdog_ms()};
    if (wd.interval_ms)
        log_info("watchdog: systemd expects a sign of life every %" PRId64 "ms", wd.interval_ms);
    for (;;) {
        bool all_ready = true;
        for (size_t k = 0; k < f->n; k++)
            all_ready = all_ready && (!live_host(f->h[k]) || atomic_load(&f->h[k]->ready));
        long tick_ms = stopping || !all_ready ? 50 : 500;
        if (wd.interval_ms && tick_ms > wd.interval_ms / 6)
            tick_ms = wd.interval_ms / 6 > 10 ? (long)(wd.interval_ms / 6) : 10;
        struct timespec tick = {0, tick_ms * 1000000L};
        siginfo_t info;
        int sig = sigtimedwait(set, &info, &tick);
        check_ready(f);
        feed_watchdog(f, &wd);
        for (size_t k = 0; k < f->n; k++)
            if (live_host(f->h[k]))
                sq_session_cut_stuck(f->h[k]);
        if (sig == SIGHUP) {
            for (size_t k = 0; k < f->n; k++) {
                if (!live_host(f->h[k]))
                    continue; /* not started: it starts with the file as it was at start-up */
                sq_log_set_database(f->h[k]->database);
                sq_host_reload(f->h[k]);
                sq_procs_signal(f->h[k], SIGHUP);
            }
            sq_log_set_database(NULL);
            continue;
        }
        if (sig == SIGTERM || sig == SIGINT) {
            if (stopping) {
                log_warn("second %s: exiting now; running jobs come back when their leases expire",
                         sig == SIGTERM ? "SIGTERM" : "SIGINT");
                for (size_t k = 0; k < f->n; k++)
                    if (live_host(f->h[k]))
                        sq_procs_kill(f->h[k], false);
                _exit(1);
            }
            stopping = true;
            deadline = begin_stop(f, sig, cfg->grace_ms);
        }
        const struct sq_host *ended = NULL;
        int left = running_workers(f, &ended);
        if (ended && !stopping) {
            if (ended->database)
                log_error("every worker thread of database %s has stopped", ended->database);
            else
                log_error("every worker thread has stopped");
            return 1;
        }
        if (left == 0 && stopping)
            return 0;
        if (stopping && sq_now_ms() >= deadline && !told) {
            told = true; /* the stop contract: should-stop now, and a window to return in */
            int busy = 0;
            for (size_t k = 0; k < f->n; k++)
                busy += live_host(f->h[k]) ? sq_slots_tell_stop(f->h[k]) : 0;
            if (busy) {
                log_info("shutdown grace over: %d handler(s) told to stop; waiting up to %dms for them to return",
                         busy, SKIPQ_STOP_WINDOW_MS);
                deadline = sq_now_ms() + SKIPQ_STOP_WINDOW_MS;
            }
        }
        if (stopping && sq_now_ms() >= deadline) {
            for (size_t k = 0; k < f->n; k++) {
                if (!live_host(f->h[k]))
                    continue;
                sq_log_set_database(f->h[k]->database);
                sq_procs_kill(f->h[k], true); /* what they held is released with the rest */
                sq_host_release_running(f->h[k]);
            }
            sq_log_set_database(NULL);
            log_info("stopped without calling the plugins' shutdown(): handlers were still running");
            _exit(0); /* handlers still run plugin code: do not unload it under them */
        }
    }
}

static void host_free(struct sq_host *h)
{
    sq_pause_free(h);
    for (int i = 0; i < h->nworkers; i++)
        if (!h->workers[i].group->process)
            free(h->workers[i].slots);
    for (size_t i = 0; i < h->ngroups; i++) {
        pthread_cond_destroy(&h->groups[i].wake);
        free(h->groups[i].kinds);
        free(h->groups[i].kinds_array);
        free(h->groups[i].leases_array);
    }
    free(h->groups);
    free(h->workers);
    free(h->lives);
    sq_kinds_free(h->kinds);
    sq_dbparams_free(&h->params); /* the plugins are the process's: sq_host_run unloads them */
    sq_dbparams_free(&h->listen_params);
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->slots_lock);
    pthread_cond_destroy(&h->wake);
}

void sq_host_block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigset_t with_chld = *set;
    sigaddset(&with_chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &with_chld, NULL);
}

void sq_host_name_init(struct sq_host *h)
{
    if (h->cfg->host_name)
        sq_strlcpy(h->name, h->cfg->host_name, sizeof h->name);
    else if (gethostname(h->name, sizeof h->name - 1) != 0)
        sq_strlcpy(h->name, "skipq", sizeof h->name);
}

/* max_jobs_per_worker and max_memory act on worker processes only. */
static void warn_thread_limits(const struct sq_host *h)
{
    for (size_t i = 0; i < h->ngroups; i++) {
        const struct sq_group *g = &h->groups[i];
        if (!g->process && (g->max_jobs || g->max_memory))
            log_warn("%s:%d: [queue %s]: max_jobs_per_worker and max_memory apply with isolation = process only; "
                     "ignored for threads",
                     h->cfg->path, h->cfg->groups[i].line, g->queue);
    }
}

static void host_init(struct sq_host *h, const struct sq_config *cfg)
{
    h->cfg = cfg;
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->slots_lock, NULL);
    pthread_mutex_init(&h->hb.conn_lock, NULL);
    pthread_mutex_init(&h->ctl_lock, NULL);
    h->hb.sock = -1;
    pthread_mutex_init(&h->sup.conn_lock, NULL);
    h->sup.sock = -1;
    pthread_cond_init(&h->wake, NULL);
    atomic_store(&h->poll_ms, cfg->poll_ms);
    sq_host_name_init(h);
}

/*
 * One host, from its configuration to its groups: where it connects, its
 * kinds and groups; nothing asks the database yet. Returns 0, or the exit
 * code (2: the configuration is wrong).
 */
static int host_build(struct sq_host *h, const char *db_flag, char *err, size_t errlen)
{
    const struct sq_config *cfg = h->cfg;
    /* The listener connects directly when listen_conninfo says where. */
    if (!sq_dbparams_build(&h->params, cfg, db_flag, "skipq") ||
        !sq_dbparams_build(&h->listen_params, cfg->database.listen_conninfo ? NULL : cfg,
                           cfg->database.listen_conninfo ? cfg->database.listen_conninfo : db_flag, "skipq")) {
        log_error("out of memory");
        return 1;
    }
    if (!(h->kinds = sq_kinds_build(h->plugins, cfg))) {
        log_error("out of memory");
        return 1;
    }
    err[0] = '\0';
    if (!sq_host_build_groups(h, err, errlen)) {
        log_error("%s", err[0] ? err : "out of memory");
        return err[0] ? 2 : 1;
    }
    warn_thread_limits(h);
    return 0;
}

/* What only the database can say before the threads start: its schema,
 * then the schedules and limits registered (scheduler.c). */
static enum start_check host_check(struct sq_host *h, char *err, size_t errlen)
{
    enum start_check r = check_schema(h, err, errlen);
    if (r != START_OK)
        return r;
    bool bad_config = false;
    if (!sq_sched_start(h, err, errlen, &bad_config))
        return bad_config ? START_BAD_CONFIG : START_UNREACHABLE;
    return START_OK;
}

/* Log what one host runs, once its threads are started. */
static void log_started(const struct sq_host *h)
{
    for (size_t i = 0; i < h->ngroups; i++)
        log_info("queue \"%s\": %d %s on %d session(s), batch %d, kinds %s, lease %" PRId64 "ms", h->groups[i].queue,
                 h->groups[i].threads, h->groups[i].process ? "worker process(es)" : "thread(s)",
                 h->groups[i].connections, h->groups[i].batch, h->groups[i].kinds_array, h->cfg->lease_ms);
}

/* Between two tries of a database unreachable since start-up. */
#define START_RETRY_MAX_MS 5000

static bool build_and_start(struct sq_host *h, const char *db_flag)
{
    char err[1024] = "";
    if (!build_workers(h, db_flag, err, sizeof err)) {
        log_error("%s", err[0] ? err : "out of memory");
        return false;
    }
    if (!start_threads(h)) {
        log_error("cannot start threads");
        return false;
    }
    log_started(h);
    return true;
}

struct starter_arg {
    struct sq_host *h;
    const char *db_flag;
};

/*
 * A database of several that could not be reached at start-up: try again,
 * from 100 ms up to every 5 s, until it answers or the host stops; then
 * start its threads and hand the host to the main thread. What stops it is
 * logged once per kind of failure, and once when it gets through.
 */
static void *start_later(void *arg)
{
    struct starter_arg *a = arg;
    struct sq_host *h = a->h;
    sq_host_log_thread(h, "start");
    int64_t step = SQ_RECONNECT_MIN_MS;
    enum start_check last = START_UNREACHABLE;
    for (;;) {
        sq_host_wait_reconnect(h, sq_host_reconnect_gen(h), step, true);
        if (atomic_load(&h->stopping))
            break;
        char err[1024];
        enum start_check r = host_check(h, err, sizeof err);
        if (r == START_OK) {
            log_info("the database answers: starting its queues");
            if (!build_and_start(h, a->db_flag))
                atomic_store(&h->start_failed, true); /* the main thread stops the process */
            atomic_store(&h->deferred, false);   /* and takes the host from here */
            break;
        }
        if (r != last)
            log_error("%s; trying again every %ds", err, START_RETRY_MAX_MS / 1000);
        last = r;
        step = step * 2 > START_RETRY_MAX_MS ? START_RETRY_MAX_MS : step * 2;
    }
    free(a);
    return NULL;
}

/* Start h's threads, or with several databases, when h's cannot be reached
 * now, a thread that starts them once it can. False: stop the process. */
static bool start_host(struct sq_host *h, const char *db_flag, bool several, int *rc)
{
    char err[1024];
    enum start_check r = host_check(h, err, sizeof err);
    if (r == START_OK)
        return build_and_start(h, db_flag);
    log_error("%s", err);
    *rc = r == START_BAD_CONFIG ? 2 : 1;
    if (r != START_UNREACHABLE || !several)
        return false;
    struct starter_arg *a = malloc(sizeof *a);
    if (!a)
        return false;
    *a = (struct starter_arg){h, db_flag};
    atomic_store(&h->deferred, true);
    if (pthread_create(&h->starter, NULL, start_later, a) != 0) {
        free(a);
        atomic_store(&h->deferred, false);
        return false;
    }
    h->starter_started = true;
    log_warn("its queues start once it answers; the other databases' start now");
    return true;
}

/*
 * The file's databases this process serves, each as a view (config.h): the
 * default one and each [database NAME] that a [queue] group is in. A
 * [cron] in a database without a group here is refused: nothing would
 * run its schedule. A file with one database: cfg itself.
 */
static bool split_databases(const struct sq_config *cfg, struct fleet *f, char *err, size_t errlen)
{
    f->n = 0;
    if (!(f->h = calloc(cfg->ndatabases + 1, sizeof *f->h)))
        goto oom;
    if (!cfg->ndatabases || cfg->view_of) {
        if (!(f->h[0] = calloc(1, sizeof **f->h)))
            goto oom;
        host_init(f->h[0], cfg);
        f->n = 1;
        return true;
    }
    for (size_t d = 0; d <= cfg->ndatabases; d++) {
        const char *name = d ? cfg->databases[d - 1].name : SQ_DEFAULT_DATABASE;
        struct sq_config *v = sq_config_view(cfg, name, err, errlen);
        if (!v)
            return false;
        if (v->ngroups == 0 && v->ncrons) {
            snprintf(err, errlen, "%s:%d: [cron %s] database = %s: no [queue] section of this file serves that "
                     "database, so no host would run the schedule", cfg->path, v->crons[0].line, v->crons[0].name,
                     name);
            sq_config_free(v);
            return false;
        }
        if (v->ngroups == 0) {
            sq_config_free(v);
            continue;
        }
        if (!(f->h[f->n] = calloc(1, sizeof **f->h))) {
            sq_config_free(v);
            goto oom;
        }
        host_init(f->h[f->n], v);
        f->h[f->n++]->database = name;
    }
    return true;
oom:
    snprintf(err, errlen, "out of memory");
    return false;
}

/* Stop, join and free every host (those never started too). */
static void fleet_end(struct fleet *f, const struct sq_config *cfg, struct sq_metrics *metrics)
{
    for (size_t k = 0; k < f->n; k++)
        sq_host_stop(f->h[k]); /* also when every worker ended on its own */
    for (size_t k = 0; k < f->n; k++) {
        struct sq_host *h = f->h[k];
        if (h->starter_started) /* first: it may be starting h's threads */
            pthread_join(h->starter, NULL);
        for (int i = 0; i < h->nworkers; i++)
            if (h->workers[i].started)
                pthread_join(h->workers[i].thread, NULL);
        atomic_store(&h->running, 0);
        if (h->heartbeat_started)
            pthread_join(h->heartbeat, NULL);
        if (h->listener_started)
            pthread_join(h->listener, NULL);
        sq_procs_free(h);
    }
    sq_metrics_stop(metrics);
    for (size_t k = 0; k < f->n; k++) {
        struct sq_host *h = f->h[k];
        host_free(h);
        if (h->cfg != cfg)
            sq_config_free((struct sq_config *)h->cfg);
        free(h);
    }
    free(f->h);
}

int sq_host_run(struct sq_config *cfg, const char *db_flag)
{
    char err[1024];
    int rc = 1;
    struct fleet fleet = {0};
    struct sq_plugins *plugins = NULL;
    struct sq_metrics *metrics = NULL;
    /* Block the signals before anything can start a thread (plugins may in
     * init): every thread inherits the mask, and only signal_loop takes
     * them. A SIGTERM during start-up waits for the loop. */
    sigset_t set;
    sq_host_block_signals(&set);
    signal(SIGPIPE, SIG_IGN);
    sq_log_set_level(cfg->log_level);

    if (!sq_config_check_runnable(cfg, err, sizeof err) || !split_databases(cfg, &fleet, err, sizeof err)) {
        log_error("%s", err);
        rc = 2;
        goto out;
    }
    bool pooled = false;
    for (size_t k = 0; k < fleet.n; k++)
        pooled = pooled || fleet.h[k]->cfg->database.pooled;
    sq_notify_status("loading plugins");
    sq_queue_use_unnamed(pooled); /* statements are the process's: unnamed if any session goes through a pooler */
    sq_queue_set_claim_bytes(cfg->claim_bytes);
    if (!(plugins = sq_plugins_load(cfg, err, sizeof err))) {
        log_error("%s", err);
        rc = 2;
        goto out;
    }
    for (size_t k = 0; k < fleet.n; k++) {
        struct sq_host *h = fleet.h[k];
        h->plugins = plugins;
        sq_log_set_database(h->database);
        rc = host_build(h, db_flag, err, sizeof err);
        sq_log_set_database(NULL);
        if (rc != 0)
            goto out;
        if (k == 0)
            warn_unhandled_kinds(h);
    }
    rc = 1;
    /* Before any thread: a port in use stops the host before it claims. */
    if (cfg->metrics_listen && !(metrics = sq_metrics_start(fleet.h, fleet.n, err, sizeof err))) {
        log_error("%s", err);
        goto out;
    }
    sq_notify_status("starting threads");
    for (size_t k = 0; k < fleet.n; k++) {
        sq_log_set_database(fleet.h[k]->database);
        bool started = start_host(fleet.h[k], db_flag, fleet.n > 1, &rc);
        sq_log_set_database(NULL);
        if (!started)
            goto out;
    }
    int threads = 0;
    for (size_t k = 0; k < fleet.n; k++)
        threads += live_host(fleet.h[k]) ? fleet.h[k]->nworkers : 0;
    char databases[48] = "";
    if (fleet.n > 1)
        snprintf(databases, sizeof databases, "%zu databases, ", fleet.n);
    log_info("skipq %s started as %s (pid %d): %s%d worker(s), heartbeat every %" PRId64 "ms", SKIPQ_VERSION,
             fleet.h[0]->name, (int)getpid(), databases, threads, cfg->heartbeat_ms);
    rc = signal_loop(&fleet, &set);
    fleet_end(&fleet, cfg, metrics);
    if (rc == 0)
        log_info("stopped");
    sq_plugins_unload(plugins);
    return rc;
out:
    fleet_end(&fleet, cfg, metrics);
    sq_plugins_unload(plugins);
    return rc;
}
