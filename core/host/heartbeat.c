/*
 * heartbeat.c -- the heartbeat thread and the rounds it carries.
 *
 * DESIGN
 * - One heartbeat thread per host, with its own connection, extends the
 *   leases of every running job in one statement, raises should-stop for
 *   jobs whose lease it could not extend (slots.c), and sweeps expired
 *   leases of dead hosts. Its rounds also carry the host registry
 *   (hosts.c), the paused queues and kinds (pause.c), the scheduler
 *   (scheduler.c: cron ticks, the limited-kinds refresh, priority aging,
 *   dependencies), retention and the /metrics sample, each bounded so the next lease renewal is not held up for long.
 * - It keeps beating while a stopping host drains its handlers (their
 *   leases must hold until the end), and leaves the registry as soon as
 *   the host stops claiming.
 */
#include "host/heartbeat.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/hosts.h"
#include "host/kinds.h"
#include "host/metrics.h"
#include "host/pause.h"
#include "host/queue.h"
#include "host/scheduler.h"
#include "host/session.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"

#define REAP_BATCH 500

/*
 * One retention round: for each status with an age set, delete batches
 * until one comes back short or budget_ms has passed, so the heartbeat is
 * never held up for long. Only one host at a time deletes. Returns whether
 * it stopped on the budget with more to delete: the heartbeat thread then
 * gives the next rounds half of each heartbeat interval instead of one
 * second per retention interval, so deletion keeps pace with a high churn
 * (one second every minute deletes only a few hundred jobs a second).
 */
static bool retention_round(struct sq_host *h, PGconn *conn, int64_t budget_ms)
{
    const struct sq_config *cfg = h->cfg;
    /* left: done jobs that left skipq.jobs as they finished ([kind]
     * keep_done = off): their executions, which no job's deletion takes. */
    const struct {
        const char *status;
        int64_t age;
        bool left;
    } rules[] = {{"done", cfg->keep_done_ms, false},
                 {"dead", cfg->keep_dead_ms, false},
                 {"cancelled", cfg->keep_cancelled_ms, false},
                 {"done", cfg->keep_done_ms, true}};
    int64_t end = sq_now_ms() + budget_ms;
    char err[512];
    bool behind = false;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (rules[i].age <= 0)
            continue;
        long total = 0;
        int n;
        do {
            n = rules[i].left ? sq_queue_retain_left(conn, rules[i].age, cfg->retention_batch, err, sizeof err)
                              : sq_queue_retain(conn, rules[i].status, rules[i].age, cfg->retention_batch, err,
                                                sizeof err);
            if (n > 0)
                total += n;
        } while (n == cfg->retention_batch && sq_now_ms() < end);
        behind = behind || n == cfg->retention_batch;
        if (n == -2 && rules[i].left)
            log_warn("retention: could not delete the executions of done jobs that left skipq.jobs: %s", err);
        else if (n == -2)
            log_warn("retention: could not delete %s jobs: %s", rules[i].status, err);
        if (total > 0 && rules[i].left)
            log_info("retention: deleted the executions of %ld done job(s) that left skipq.jobs more than %" PRId64
                     "ms ago", total, rules[i].age);
        else if (total > 0)
            log_info("retention: deleted %ld %s job(s) finished more than %" PRId64 "ms ago", total,
                     rules[i].status, rules[i].age);
        if (n == -1)
            return false; /* another host is at it */
    }
    return behind;
}

/* The totals may lag now() by no more than the shortest retention age, so
 * retention never deletes a job before it is counted. */
static int64_t totals_lag(const struct sq_config *cfg)
{
    int64_t lag = SQ_TOTALS_LAG_MS;
    const int64_t keep[] = {cfg->keep_done_ms, cfg->keep_dead_ms, cfg->keep_cancelled_ms};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (keep[i] > 0 && keep[i] < lag)
            lag = keep[i];
    return lag;
}

/* The registry's part of a heartbeat round: this host's row, then (one host
 * at a time) the finished-job totals. Failures are logged once per outage. */
static void registry_round(struct sq_host *h, PGconn *conn, bool *registered, bool *warned)
{
    char err[512];
    bool ok = sq_hosts_beat(conn, h, !*registered, err, sizeof err);
    if (ok)
        *registered = true;
    if (ok && sq_hosts_advance_totals(conn, totals_lag(h->cfg), err, sizeof err) == -2)
        ok = false;
    if (!ok && !*warned)
        log_warn("host registry: %s", err);
    *warned = !ok;
}

static void count_reaped(void *arg, const char *kind)
{
    struct sq_kind *k = sq_kinds_find(((struct sq_host *)arg)->kinds, kind);
    if (k)
        atomic_fetch_add_explicit(&k->n->lost, 1, memory_order_relaxed);
}

/* Read skipq.paused; a failure is logged once per outage. */
static void pause_round(struct sq_host *h, PGconn *conn, bool *warned)
{
    char err[512];
    sq_host_take_paused(h);
    bool ok = sq_pause_refresh(h, conn, err, sizeof err);
    if (!ok && !*warned)
        log_warn("cannot read the paused queues and kinds (what was paused stays paused here): %s", err);
    *warned = !ok;
}

static void mark_hb_conn(struct sq_host *h, bool up)
{
    atomic_store(&h->hb_connected, up);
    if (up)
        atomic_store(&h->hb_down_since, 0);
    else if (atomic_load(&h->hb_down_since) == 0)
        atomic_store(&h->hb_down_since, sq_now_ms());
}

void *sq_heartbeat_main(void *arg)
{
    struct sq_host *h = arg;
    sq_host_log_thread(h, "hb");
    size_t cap = sq_slots_capacity(h);
    struct sq_leases s = {.ids = calloc(cap, sizeof(int64_t)),
                          .execs = calloc(cap, sizeof(int64_t)),
                          .leases = calloc(cap, sizeof(int64_t)),
                          .slot = calloc(cap, sizeof(struct sq_slot *)),
                          .worker = calloc(cap, sizeof(int)),
                          .state = calloc(cap, 1)};
    PGconn *conn = NULL;
    bool reported = false, registered = false, registry_warned = false, gone = false, pause_warned = false;
    char err[512];
    int64_t next = 0, next_retention = sq_now_ms() + h->cfg->retention_interval_ms;
    bool retention_behind = false;
    unsigned long seen = 0; /* reconnections of the host's sessions at our last attempt */
    bool ro_warned = false; /* said that the session could not write; not yet that it can */
    bool retention = h->cfg->keep_done_ms > 0 || h->cfg->keep_dead_ms > 0 || h->cfg->keep_cancelled_ms > 0;
    while (atomic_load(&h->running) > 0) {
        int64_t now = sq_now_ms();
        atomic_store(&h->hb_beat, now);
        if (atomic_load(&h->stopping) && registered && !gone && conn) {
            /* A stopping host claims nothing: leave the registry now. */
            gone = true;
            if (!sq_hosts_gone(conn, h, err, sizeof err))
                log_warn("host registry: could not remove this host's row (it will age out): %s", err);
        }
        /* Without a session, another session of the host made again
         * (wake.c) means the database is back: try now, not at the next
         * second. */
        bool back = !conn && sq_host_reconnect_gen(h) != seen;
        if (now < next && !back) {
            /* An enqueue left children to settle: do it now, not at the
             * next round, so a child is not late by up to a heartbeat. */
            if (conn && !atomic_load(&h->stopping) && sq_host_take_deps(h))
                sq_deps_round(h, conn);
            /* Paused or resumed ('!paused'): follow it now, not within a
             * heartbeat. */
            if (conn && !atomic_load(&h->stopping) && atomic_load(&h->paused_wake))
                pause_round(h, conn, &pause_warned);
            /* Not sq_host_wait: this thread must keep beating while a
             * stopping host drains its handlers. */
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        next = now + h->cfg->heartbeat_ms;
        if (!conn) {
            seen = sq_host_reconnect_gen(h);
            conn = sq_session_open_for(h, &h->hb, err, sizeof err);
            mark_hb_conn(h, conn != NULL);
            if (!conn) {
                if (!reported)
                    log_warn("heartbeat: cannot reach the database (leases are not being renewed): %s", err);
                reported = true;
                next = now + (h->cfg->heartbeat_ms < 1000 ? h->cfg->heartbeat_ms : 1000);
                sq_slots_renewed(h, &s, false, now);
                continue;
            }
            if (reported)
                log_info("heartbeat: connected to the database again");
            reported = false;
            sq_host_reconnected(h);
        }
        sq_slots_snapshot(h, &s);
        /* A session that answers but can never write (a standby, or a
         * server turned read-only: 25006) is as lost as a closed one. */
        bool no_good = false;
        if (s.n > 0) {
            int64_t sent = sq_now_ms();
            int r = sq_queue_heartbeat(conn, s.ids, s.execs, s.leases, s.n, s.state, err, sizeof err);
            no_good = r < 0 && sq_db_conn_lost(conn, NULL);
            if (r < 0 && !(no_good && ro_warned))
                log_warn("heartbeat failed: %s", err);
            sq_slots_renewed(h, &s, r >= 0, sent);
        }
        if (!atomic_load(&h->stopping) && !no_good) {
            int reaped = sq_queue_reap_kinds(conn, REAP_BATCH, count_reaped, h, err, sizeof err);
            if (reaped > 0) {
                log_info("recovered %d job(s) whose lease had expired", reaped);
                sq_host_wake(h, NULL);
            } else if (reaped < 0) {
                no_good = sq_db_conn_lost(conn, NULL);
                if (!(no_good && ro_warned))
                    log_warn("lease sweep failed: %s", err);
            }
        }
        if (!atomic_load(&h->stopping) && !no_good) {
            registry_round(h, conn, &registered, &registry_warned);
            pause_round(h, conn, &pause_warned);
            sq_sched_round(h, conn);
            if (retention && sq_now_ms() >= next_retention) {
                /* Behind (the last round ran out of time with more to
                 * delete): go on at every round, with half of it. */
                retention_behind = retention_round(h, conn, retention_behind ? h->cfg->heartbeat_ms / 2 : 1000);
                next_retention = retention_behind ? 0 : sq_now_ms() + h->cfg->retention_interval_ms;
            }
            sq_metrics_sample(h->metrics, conn);
        }
        if (no_good && PQstatus(conn) == CONNECTION_OK) {
            /* Once per streak: a read-only server would say it every round. */
            if (!ro_warned)
                log_warn("heartbeat: the database session cannot write (%s); making another at every round", err);
            ro_warned = true;
        } else if (ro_warned && PQstatus(conn) == CONNECTION_OK && !atomic_load(&h->stopping)) {
            log_info("heartbeat: the database session can write again");
            ro_warned = false;
        }
        if (no_good || PQstatus(conn) != CONNECTION_OK) {
            sq_session_close(&h->hb, &conn);
            mark_hb_conn(h, false);
        }
    }
    if (registered && !gone && conn && !sq_hosts_gone(conn, h, err, sizeof err))
        log_warn("host registry: could not remove this host's row (it will age out): %s", err);
    if (conn)
        sq_session_close(&h->hb, &conn);
    atomic_store(&h->hb_connected, false);
    free(s.ids);
    free(s.execs);
    free(s.leases);
    free(s.slot);
    free(s.worker);
    free(s.state);
    return NULL;
}
