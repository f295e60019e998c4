/*
 * worker.c -- what each host thread does.
 *
 * DESIGN
 * - A worker thread owns one PGconn for its whole life (re-made after a
 *   loss). Each cycle is one round trip (sq_queue_cycle): record the
 *   outcomes of the jobs it just ran and claim the next ones -- one at a
 *   time, or, when the backlog is deep, up to the group's `batch` (the claim
 *   size doubles while claims come back full and falls back when they do
 *   not, so a thread never hoards jobs it cannot start soon). When nothing
 *   is runnable it waits poll_interval on the host's condition variable,
 *   which shutdown broadcasts, a notification of new jobs wakes, and the
 *   group's list of due times (its own retries, announced delayed jobs)
 *   cuts short for one thread when the first of them comes.
 * - A finished job keeps its slot, and so its lease, until the cycle that
 *   records its outcome has committed.
 * - A handler that never asks for the connection runs with no transaction
 *   open: the claim has committed, the completion is a second short
 *   statement. A handler that asks gets BEGIN on the worker's connection and
 *   its writes commit with the done marker, or roll back with a failure or a
 *   fenced completion.
 * - One heartbeat thread per host, with its own connection, extends the
 *   leases of every running job in one statement, raises should-stop for jobs
 *   whose lease it could not extend, and sweeps expired leases of dead hosts.
 *   Its rounds also carry the scheduler (scheduler.c: cron ticks, the
 *   limited-kinds refresh, priority aging) and retention, each bounded so
 *   the next lease renewal is not held up for long.
 * - A connection failure never ends a thread: it reconnects with capped
 *   backoff, logs the outage once and the recovery once, and prepares its
 *   statements again.
 * - With [database] pooler = transaction a session holds no state between
 *   statements (no settings, no prepared statements), so any statement may
 *   run on any server session the pooler lends.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "host/host.h"
#include "host/hosts.h"
#include "host/kinds.h"
#include "common/log.h"
#include "host/metrics.h"
#include "host/plugin.h"
#include "host/queue.h"
#include "host/scheduler.h"
#include "host/wake.h"
#include "common/util.h"

#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS SQ_RECONNECT_MAX_MS
#define REAP_BATCH 500

/* A job attempt as the host tracks it while the handler runs. */
struct job_ctx {
    skipq_job pub; /* first: handlers hold &pub */
    struct sq_worker *w;
    struct sq_slot *slot;
    PGconn *conn;   /* the worker's connection (may break) */
    char error[SKIPQ_ERROR_SIZE];
    int64_t retry_ms; /* -1: the kind's backoff */
    bool in_txn;      /* the handler asked for the connection */
    bool conn_broken; /* BEGIN failed: reconnect after the handler */
};

static struct job_ctx *ctx_of(const skipq_job *job)
{
    return (struct job_ctx *)job;
}

/* ---- services handlers call (through sq_host_api) ----------------------------- */

void sq_job_verror(skipq_job *job, const char *fmt, va_list ap)
{
    vsnprintf(ctx_of(job)->error, sizeof ctx_of(job)->error, fmt, ap);
    sq_utf8_sanitize(ctx_of(job)->error);
}

void sq_job_retry_in(skipq_job *job, int64_t delay_ms)
{
    ctx_of(job)->retry_ms = delay_ms < 0 ? 0 : delay_ms;
}

struct pg_conn *sq_job_conn(skipq_job *job)
{
    struct job_ctx *c = ctx_of(job);
    if (c->in_txn)
        return c->conn;
    if (c->conn_broken || !c->conn)
        return NULL;
    /* The session runs skipq's statements with enable_seqscan and jit off
     * (see open_session); the handler's statements are planned as usual.
     * Its search_path stays skipq's (pg_catalog, pg_temp: db.c) unless
     * pooler = transaction: a handler names its tables by schema, or sets
     * its own path with SET LOCAL. */
    PGresult *res = PQexec(c->conn, "BEGIN ISOLATION LEVEL READ COMMITTED;"
                                    " SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL jit TO DEFAULT");
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        log_warn("job %" PRId64 ": could not open a transaction for the handler: %s", job->id,
                 PQerrorMessage(c->conn));
        c->conn_broken = true;
        return NULL;
    }
    c->in_txn = true;
    return c->conn;
}

int sq_job_should_stop(const skipq_job *job)
{
    return atomic_load(&ctx_of(job)->slot->stop) != 0;
}

void sq_job_vlog(skipq_job *job, int level, const char *fmt, va_list ap)
{
    if (level > sq_log_threshold)
        return;
    char prefix[192];
    snprintf(prefix, sizeof prefix, "job %" PRId64 " (%s): ", job->id, job->kind);
    sq_log_vwrite(level, prefix, fmt, ap);
}

/* ---- helpers ---------------------------------------------------------------------- */

static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    log_debug("server notice: %s", message);
}

/* A fresh session with skipq's settings and statements. */
static PGconn *open_session(struct sq_host *h, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(&h->params, err, errlen);
    if (!conn)
        return NULL;
    PQsetNoticeProcessor(conn, notice_to_log, NULL);
    /* Whatever the role's default, skipq's transactions are READ COMMITTED:
     * SKIP LOCKED claims under REPEATABLE READ fail with 40001. */
    /* synchronous_commit = off (opt-in): a commit lost in a server crash
     * only means a job runs again, which at-least-once allows. */
    /* enable_seqscan = off: a prepared statement's generic plan is made
     * once, with the table sizes of that moment. Made on an empty queue it
     * read jobs by sequential scan, and when a burst then filled the table
     * each cycle scanned all of it (0.7 s per cycle at 300,000 rows, where
     * 25 ms is normal). Every statement skipq runs here has an index for
     * what it looks up; a handler's transaction (sq_job_conn) sets the
     * server's default back for itself. jit = off with it: a plan that
     * must still scan a one-row table sequentially costs over the JIT
     * threshold with the scan disabled, and compiling it took 170 ms per
     * statement. Short statements never gain from JIT anyway. */
    /* Behind a pooler in transaction mode no setting would stay with us:
     * host.c checks the isolation default at start-up instead, the config
     * refuses synchronous_commit = off there, and unnamed statements are
     * planned for the table as it is at each execution. */
    bool session = !h->cfg->pooled;
    if ((session && !sq_db_exec(conn, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                err, errlen)) ||
        (session && !sq_db_exec(conn, "SET enable_seqscan = off; SET jit = off", err, errlen)) ||
        (session && !h->cfg->synchronous_commit && !sq_db_exec(conn, "SET synchronous_commit = off", err, errlen)) ||
        !sq_queue_prepare(conn, err, errlen)) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

/*
 * Connect, retrying with capped exponential backoff until it works or the
 * host stops (when `until_stop`). The outage is logged once, the recovery
 * once.
 */
/* A worker's connection came up or went down (for /healthz and gauges). */
static void mark_conn(struct sq_worker *w, bool up)
{
    int64_t now = sq_now_ms();
    atomic_store(&w->beat, now);
    atomic_store(&w->connected, up);
    if (up)
        atomic_store(&w->down_since, 0);
    else if (atomic_load(&w->down_since) == 0)
        atomic_store(&w->down_since, now);
}

static PGconn *reconnect(struct sq_worker *w, bool until_stop)
{
    struct sq_host *h = w->host;
    const char *who = w->name;
    int64_t delay = RECONNECT_MIN_MS;
    bool reported = false;
    char err[512];
    for (;;) {
        mark_conn(w, false);
        PGconn *conn = open_session(h, err, sizeof err);
        if (conn) {
            mark_conn(w, true);
            if (reported)
                log_info("%s: connected to the database again", who);
            return conn;
        }
        if (!reported)
            log_warn("%s: cannot reach the database, retrying with backoff up to %ds: %s", who,
                     RECONNECT_MAX_MS / 1000, err);
        else
            log_debug("%s: still cannot reach the database: %s", who, err);
        reported = true;
        if (until_stop && atomic_load(&h->stopping))
            return NULL;
        struct timespec ts = {delay / 1000, (delay % 1000) * 1000000L};
        if (until_stop)
            sq_host_wait(h, NULL, 0, delay);
        else
            nanosleep(&ts, NULL);
        delay = delay * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : delay * 2;
    }
}

/* Occupy slot k with a claimed job (its timeout starts when it runs). */
static void take_slot(struct sq_worker *w, int k, const struct sq_claimed *c, int64_t lease_ms)
{
    struct sq_slot *sl = &w->slots[k];
    pthread_mutex_lock(&w->host->slots_lock);
    sl->job_id = c->id;
    sl->execution_id = c->execution_id;
    sl->lease_ms = lease_ms;
    sl->lease_deadline = sq_now_ms() + lease_ms;
    sl->timeout_at = 0;
    sl->timed_out = false;
    sl->returned = false;
    sl->finished = false;
    sl->error = NULL;
    atomic_store(&sl->stop, 0);
    pthread_mutex_unlock(&w->host->slots_lock);
}

static void start_timeout(struct sq_worker *w, int k, int64_t timeout_ms)
{
    pthread_mutex_lock(&w->host->slots_lock);
    w->slots[k].timeout_at = timeout_ms > 0 ? sq_now_ms() + timeout_ms : 0;
    pthread_mutex_unlock(&w->host->slots_lock);
}

static void free_slots(struct sq_worker *w)
{
    pthread_mutex_lock(&w->host->slots_lock);
    for (int k = 0; k < w->nslots; k++)
        w->slots[k].job_id = 0;
    pthread_mutex_unlock(&w->host->slots_lock);
}

static void free_slot(struct sq_worker *w, int k)
{
    pthread_mutex_lock(&w->host->slots_lock);
    w->slots[k].job_id = 0;
    pthread_mutex_unlock(&w->host->slots_lock);
}

/* The handler returned: from now on no timeout applies. Returns whether
 * the timeout had already passed. */
static bool slot_returned(struct sq_worker *w, int k)
{
    pthread_mutex_lock(&w->host->slots_lock);
    w->slots[k].returned = true;
    bool t = w->slots[k].timed_out;
    pthread_mutex_unlock(&w->host->slots_lock);
    return t;
}

/* ---- completion ---------------------------------------------------------------------- */

static void count_outcome(struct sq_kind *k, PGconn *conn, const struct sq_claimed *c, enum sq_complete r)
{
    if (!k || r == SQ_COMPLETE_ERROR)
        return;
    atomic_ulong *n = r == SQ_COMPLETE_DONE    ? &k->done
                      : r == SQ_COMPLETE_RETRY ? &k->retried
                      : r == SQ_COMPLETE_DEAD  ? &k->dead
                      : sq_queue_cancelled(conn, c->execution_id) ? &k->cancelled
                                                              : &k->fenced;
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

static void log_outcome(struct sq_kind *k, PGconn *conn, const struct sq_claimed *c, enum sq_complete r,
                        const char *error)
{
    count_outcome(k, conn, c, r);
    switch (r) {
    case SQ_COMPLETE_DONE:
        log_debug("job %" PRId64 " (%s) done on attempt %d", c->id, c->kind, c->attempt);
        break;
    case SQ_COMPLETE_RETRY:
        log_info("job %" PRId64 " (%s) failed attempt %d of %d, will retry: %s", c->id, c->kind, c->attempt,
                 c->max_attempts, error);
        break;
    case SQ_COMPLETE_DEAD:
        log_warn("job %" PRId64 " (%s) is dead after attempt %d of %d: %s", c->id, c->kind, c->attempt,
                 c->max_attempts, error);
        break;
    case SQ_COMPLETE_FENCED:
        log_warn("job %" PRId64 " (%s): result of execution %" PRId64
                 " discarded: the lease was lost and the job is no longer this worker's",
                 c->id, c->kind, c->execution_id);
        break;
    case SQ_COMPLETE_ERROR:
        break;
    }
}

/* Autocommit completion, retried across reconnects: fencing makes a repeat
 * harmless (it changes nothing the second time). */
static enum sq_complete complete_autocommit(struct sq_worker *w, PGconn **connp, const struct sq_claimed *c,
                                            skipq_outcome out, int64_t delay_ms, const char *error)
{
    char err[512];
    for (int tries = 0;; tries++) {
        if (!*connp)
            *connp = reconnect(w, false); /* retries until it works */
        enum sq_complete r = out == SKIPQ_DONE
                                 ? sq_queue_done(*connp, c->id, c->execution_id, err, sizeof err)
                                 : sq_queue_fail(*connp, c->id, c->execution_id, out == SKIPQ_FAIL, delay_ms,
                                                 error, err, sizeof err);
        if (r == SQ_COMPLETE_FENCED && tries > 0)
            return sq_queue_recorded(*connp, c->execution_id);
        if (r != SQ_COMPLETE_ERROR)
            return r;
        bool lost = sq_db_conn_lost(*connp, NULL);
        if (lost || tries < 3) {
            log_warn("job %" PRId64 ": could not record the outcome (will retry): %s", c->id, err);
            if (lost) {
                PQfinish(*connp);
                *connp = NULL;
            }
            continue;
        }
        log_error("job %" PRId64 ": could not record the outcome; its lease will expire and it will run again: %s",
                  c->id, err);
        return SQ_COMPLETE_ERROR;
    }
}

/* The handler's transaction: done marker and its writes commit together. */
static enum sq_complete complete_in_txn(struct sq_worker *w, PGconn **connp, const struct sq_claimed *c,
                                        skipq_outcome *out, char *error, size_t errlen)
{
    char err[512];
    PGconn *conn = *connp;
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    if (ts == PQTRANS_INERROR && *out == SKIPQ_DONE) {
        snprintf(error, errlen, "handler returned done but its transaction had failed: %s", PQerrorMessage(conn));
        *out = SKIPQ_RETRY;
    }
    if (*out == SKIPQ_DONE) {
        if (ts == PQTRANS_IDLE)
            log_warn("job %" PRId64 ": the handler ended the transaction skipq opened for it; its writes were "
                     "committed apart from the done marker",
                     c->id);
        enum sq_complete r = sq_queue_done(conn, c->id, c->execution_id, err, sizeof err);
        if (r == SQ_COMPLETE_DONE) {
            PGresult *res = PQexec(conn, "COMMIT");
            bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
            PQclear(res);
            if (ok)
                return r;
            /* COMMIT's outcome is unknown: ask, on a new session, whether our
             * execution is the job's done one. Never guess. */
            log_warn("job %" PRId64 ": connection lost during COMMIT; checking whether it landed", c->id);
            PQfinish(conn);
            *connp = conn = reconnect(w, false);
            if (sq_queue_committed_done(conn, c->id, c->execution_id))
                return SQ_COMPLETE_DONE;
            snprintf(error, errlen, "connection lost while committing the handler's transaction");
            *out = SKIPQ_RETRY;
            return SQ_COMPLETE_ERROR; /* record as a retry below */
        }
        PQclear(PQexec(conn, "ROLLBACK"));
        if (r == SQ_COMPLETE_FENCED) {
            log_warn("job %" PRId64 ": the handler's transaction was rolled back", c->id);
            return r;
        }
        snprintf(error, errlen, "could not mark the job done: %s", err);
        *out = SKIPQ_RETRY;
        return SQ_COMPLETE_ERROR;
    }
    PQclear(PQexec(conn, "ROLLBACK"));
    return SQ_COMPLETE_ERROR; /* not completed yet: the caller records the failure */
}

/* Outcomes waiting for the next cycle, with the jobs they belong to. */
struct pending {
    struct sq_outcomes o;
    struct sq_claimed *jobs; /* moved in; freed once recorded */
    struct sq_kind **kinds;  /* each job's kind (NULL: not registered) */
    char *applied;
    bool retried; /* a cycle carrying these outcomes failed once already */
};

/* Stands in for an error message strdup could not copy. */
static char no_memory_for_error[] = "";

static bool pending_init(struct pending *p, int cap)
{
    memset(p, 0, sizeof *p);
    size_t n = (size_t)cap;
    p->o.ids = calloc(n, sizeof *p->o.ids);
    p->o.execs = calloc(n, sizeof *p->o.execs);
    p->o.outcomes = calloc(n, sizeof *p->o.outcomes);
    p->o.delays = calloc(n, sizeof *p->o.delays);
    p->o.errors = calloc(n, sizeof *p->o.errors);
    p->jobs = calloc(n, sizeof *p->jobs);
    p->kinds = calloc(n, sizeof *p->kinds);
    p->applied = calloc(n, 1);
    return p->o.ids && p->o.execs && p->o.outcomes && p->o.delays && p->o.errors && p->jobs && p->kinds &&
           p->applied;
}

static void pending_clear(struct pending *p)
{
    for (size_t i = 0; i < p->o.n; i++) {
        if (p->o.errors[i] != no_memory_for_error)
            free(p->o.errors[i]);
        p->o.errors[i] = NULL;
        sq_claimed_clear(&p->jobs[i]);
    }
    p->o.n = 0;
    p->retried = false;
}

static void pending_free(struct pending *p)
{
    pending_clear(p);
    free(p->o.ids);
    free(p->o.execs);
    free(p->o.outcomes);
    free(p->o.delays);
    free(p->o.errors);
    free(p->jobs);
    free(p->kinds);
    free(p->applied);
}

/* Queue an outcome for the next cycle; takes over *c. */
static void pending_add(struct pending *p, struct sq_claimed *c, struct sq_kind *k, skipq_outcome out,
                        int64_t delay_ms, const char *error)
{
    size_t i = p->o.n++;
    p->kinds[i] = k;
    p->o.ids[i] = c->id;
    p->o.execs[i] = c->execution_id;
    p->o.outcomes[i] = (short)out;
    /* At most ten years: larger delays overflow an interval. */
    p->o.delays[i] = delay_ms < 0 ? 0 : delay_ms > 315360000000LL ? 315360000000LL : delay_ms;
    p->o.errors[i] = strdup(out == SKIPQ_DONE || !error ? "" : error);
    if (p->o.errors[i])
        sq_utf8_sanitize(p->o.errors[i]);
    else
        p->o.errors[i] = no_memory_for_error;
    p->jobs[i] = *c;
    memset(c, 0, sizeof *c);
}

/* A retry recorded at `now` runs again after its delay: wake for it then. */
static void note_retry(struct sq_worker *w, enum sq_complete r, int64_t delay_ms, int64_t now)
{
    if (r == SQ_COMPLETE_RETRY)
        sq_group_due(w->host, w->group, now + delay_ms);
}

static void pending_report(struct sq_worker *w, PGconn *conn, const struct pending *p)
{
    int64_t now = sq_now_ms();
    for (size_t i = 0; i < p->o.n; i++) {
        enum sq_complete r = (enum sq_complete)p->applied[i];
        if (r == SQ_COMPLETE_FENCED && p->retried)
            r = sq_queue_recorded(conn, p->o.execs[i]);
        log_outcome(p->kinds[i], conn, &p->jobs[i], r, p->o.errors[i] ? p->o.errors[i] : "");
        note_retry(w, r, p->o.delays[i], now);
    }
}

/* The cycle statement failed for a reason other than the connection:
 * record each outcome on its own so one bad row cannot block the rest. */
static void pending_flush_one_by_one(struct sq_worker *w, PGconn **connp, struct pending *p)
{
    for (size_t i = 0; i < p->o.n; i++) {
        enum sq_complete r = complete_autocommit(w, connp, &p->jobs[i], (skipq_outcome)p->o.outcomes[i],
                                                 p->o.delays[i], p->o.errors[i]);
        log_outcome(p->kinds[i], *connp, &p->jobs[i], r, p->o.errors[i]);
        note_retry(w, r, p->o.delays[i], sq_now_ms());
    }
    free_slots(w); /* before the strings the slots point to */
    pending_clear(p);
}

/*
 * Run the job held in slot k. Its outcome either goes to `pend` (recorded,
 * with its slot freed, by the next cycle) or, for a handler that used the
 * job's transaction, is committed here with the handler's writes.
 */
static void run_job(struct sq_worker *w, PGconn **connp, int k, struct sq_claimed *c, struct sq_kind *kr,
                    struct pending *pend, uint32_t *seed)
{
    struct sq_host *h = w->host;
    struct sq_slot *slot = &w->slots[k];
    const struct sq_handler *hd = kr ? kr->handler : NULL;
    int64_t timeout_ms = kr ? atomic_load(&kr->timeout_ms) : 0;
    if (atomic_load(&slot->stop)) {
        log_warn("job %" PRId64 " (%s): lease lost before the handler started; not running it", c->id, c->kind);
        free_slot(w, k);
        sq_claimed_clear(c);
        return;
    }
    struct job_ctx ctx = {
        .pub = {.api = &sq_host_api,
                .id = c->id,
                .execution_id = c->execution_id,
                .queue = w->group->queue,
                .kind = c->kind,
                .payload = c->payload,
                .payload_len = c->payload_len,
                .attempt = c->attempt,
                .max_attempts = c->max_attempts},
        .w = w,
        .slot = slot,
        .conn = *connp,
        .retry_ms = -1,
    };
    start_timeout(w, k, timeout_ms);

    skipq_outcome out;
    if (!hd) { /* cannot happen: the claim filters on registered kinds */
        snprintf(ctx.error, sizeof ctx.error, "no handler registered for kind \"%s\"", c->kind);
        out = SKIPQ_RETRY;
    } else {
        atomic_store(&w->busy, true);
        int64_t t0 = sq_now_us();
        out = hd->fn(&ctx.pub, hd->userdata);
        if (kr)
            sq_kind_observe(kr, sq_now_us() - t0);
        atomic_store(&w->beat, sq_now_ms());
        atomic_store(&w->busy, false);
        if (out != SKIPQ_DONE && out != SKIPQ_RETRY && out != SKIPQ_FAIL) {
            snprintf(ctx.error, sizeof ctx.error, "handler returned %d, which is not a skipq_outcome", (int)out);
            out = SKIPQ_RETRY;
        }
    }
    if (slot_returned(w, k) && out != SKIPQ_FAIL) {
        /* Past its timeout the attempt has failed, whatever the handler
         * says: its lease was no longer renewed and the job may already run
         * elsewhere. */
        snprintf(ctx.error, sizeof ctx.error, "timed out after %" PRId64 "ms", timeout_ms);
        out = SKIPQ_RETRY;
    }
    if (out != SKIPQ_DONE && !ctx.error[0])
        snprintf(ctx.error, sizeof ctx.error, "handler returned %s without an error message",
                 out == SKIPQ_FAIL ? "SKIPQ_FAIL" : "SKIPQ_RETRY");

    if (ctx.conn_broken) {
        PQfinish(*connp);
        *connp = NULL;
    } else if (ctx.in_txn) {
        enum sq_complete r = complete_in_txn(w, connp, c, &out, ctx.error, sizeof ctx.error);
        if (r != SQ_COMPLETE_ERROR) {
            log_outcome(kr, *connp, c, r, ctx.error);
            free_slot(w, k);
            sq_claimed_clear(c);
            return;
        }
    }
    int64_t delay = ctx.retry_ms;
    if (delay < 0)
        delay = sq_kind_backoff(kr, c->attempt, seed);
    pending_add(pend, c, kr, out, delay, ctx.error);
    /* Shutdown may need to record this outcome if the thread is still busy
     * with the rest of its batch when the grace period ends. */
    pthread_mutex_lock(&h->slots_lock);
    slot->finished = true;
    slot->outcome = (short)out;
    slot->delay_ms = pend->o.delays[pend->o.n - 1];
    slot->error = pend->o.errors[pend->o.n - 1];
    pthread_mutex_unlock(&h->slots_lock);
}

/* Shutdown began with claimed jobs not started: give them back now. */
static void release_unstarted(struct sq_worker *w, PGconn *conn, struct sq_claimed *jobs, int n)
{
    int64_t *ids = calloc((size_t)n, sizeof *ids), *execs = calloc((size_t)n, sizeof *execs);
    char err[512];
    for (int i = 0; ids && execs && i < n; i++) {
        ids[i] = jobs[i].id;
        execs[i] = jobs[i].execution_id;
    }
    if (ids && execs && conn && sq_queue_release(conn, ids, execs, (size_t)n, err, sizeof err) < 0)
        log_warn("%s: could not release %d unstarted job(s); their leases will expire: %s", w->name, n, err);
    for (int i = 0; i < n; i++)
        sq_claimed_clear(&jobs[i]);
    free(ids);
    free(execs);
}

/*
 * A cycle that died with its connection may have committed a claim whose
 * reply never came: those jobs are running under this worker's name, which
 * will never run them. Give them back now rather than when their leases
 * expire, uncharged (a job with max_attempts = 1 would otherwise end dead
 * without having run). False when the connection was lost again.
 */
static bool recover_lost_claims(struct sq_worker *w, PGconn **connp, const struct pending *pend)
{
    char err[512];
    int n = sq_queue_recover(*connp, w->ident, pend->o.ids, pend->o.n, err, sizeof err);
    if (n > 0)
        log_info("%s: gave back %d job(s) claimed just before the connection was lost", w->name, n);
    if (n >= 0)
        return true;
    if (sq_db_conn_lost(*connp, NULL)) {
        PQfinish(*connp);
        *connp = NULL;
        return false;
    }
    log_warn("%s: could not give back jobs claimed before the connection was lost; their leases will expire: %s",
             w->name, err);
    return true;
}

static void worker_exit(struct sq_host *h)
{
    pthread_mutex_lock(&h->lock);
    atomic_fetch_sub(&h->running, 1);
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

void *sq_worker_main(void *arg)
{
    struct sq_worker *w = arg;
    struct sq_host *h = w->host;
    struct sq_group *g = w->group;
    uint32_t seed = (uint32_t)(time(NULL) ^ (getpid() << 8) ^ (uint32_t)w->index * 2654435761u);
    char err[512];
    sq_log_set_thread(w->name);
    int cap = w->nslots;
    struct sq_claimed *claimed = calloc((size_t)cap, sizeof *claimed);
    struct sq_kind **kinds = calloc((size_t)cap, sizeof *kinds); /* claimed[k]'s */
    struct pending pend;
    memset(&pend, 0, sizeof pend);
    if (!claimed || !kinds || !pending_init(&pend, cap)) {
        log_error("%s: out of memory", w->name);
        free(claimed);
        free(kinds);
        pending_free(&pend);
        worker_exit(h);
        return NULL;
    }
    PGconn *conn = NULL;
    int limit = 1;
    bool reply_lost = false; /* a cycle died with its connection: it may have claimed */
    for (;;) {
        atomic_store(&w->beat, sq_now_ms());
        bool stopping = atomic_load(&h->stopping);
        if (stopping && pend.o.n == 0)
            break;
        /* With outcomes to record, keep trying even while stopping: the
         * main thread ends the process when the grace period is over. */
        if (!conn && !(conn = reconnect(w, pend.o.n == 0)))
            break;
        if (reply_lost && !recover_lost_claims(w, &conn, &pend))
            continue;
        reply_lost = false;
        unsigned long gen = atomic_load(&g->wake_gen);
        int n = sq_queue_cycle(conn, g->queue, g->kinds_array, g->leases_array, w->ident, stopping ? 0 : limit,
                               atomic_load(&g->limited), &pend.o, claimed, pend.applied, err, sizeof err);
        if (n < 0) {
            if (sq_db_conn_lost(conn, NULL)) {
                log_warn("%s: connection lost: %s", w->name, err);
                PQfinish(conn);
                conn = NULL;
                mark_conn(w, false);
                pend.retried = pend.o.n > 0;
                reply_lost = true;
                continue;
            }
            log_error("%s: claim failed: %s", w->name, err);
            pending_flush_one_by_one(w, &conn, &pend);
            sq_host_wait(h, NULL, 0, atomic_load(&h->poll_ms));
            continue;
        }
        pending_report(w, conn, &pend);
        free_slots(w); /* before the strings the slots point to */
        pending_clear(&pend);
        if (n == 0) {
            limit = 1;
            /* +-10% so a host's idle threads do not poll in lockstep. */
            int64_t poll = atomic_load(&h->poll_ms);
            if (!stopping)
                sq_host_wait(h, g, gen, poll * 9 / 10 + rand_r(&seed) % (poll / 5 + 1));
            continue;
        }
        /* Deep backlog: claim more next time; shallow: fewer. */
        limit = n == limit ? (limit * 2 < cap ? limit * 2 : cap) : n;
        for (int k = 0; k < n; k++) {
            struct sq_kind *kr = kinds[k] = sq_kinds_find(h->kinds, claimed[k].kind);
            if (kr)
                atomic_fetch_add_explicit(&kr->claimed, 1, memory_order_relaxed);
            take_slot(w, k, &claimed[k], kr ? kr->lease_ms : h->cfg->lease_ms);
        }
        int k = 0;
        for (; k < n && !atomic_load(&h->stopping); k++)
            run_job(w, &conn, k, &claimed[k], kinds[k], &pend, &seed);
        if (k < n) {
            release_unstarted(w, conn, claimed + k, n - k);
            for (int i = k; i < n; i++)
                free_slot(w, i);
        }
    }
    PQfinish(conn);
    atomic_store(&w->connected, false);
    free(claimed);
    free(kinds);
    pending_free(&pend);
    worker_exit(h);
    return NULL;
}

/* ---- heartbeat ------------------------------------------------------------------------ */

struct hb_snapshot {
    int64_t *ids, *execs, *leases;
    struct sq_slot **slot;
    char *state; /* enum sq_lease_state */
    size_t n;
};

/* Jobs past their kind's timeout are asked to stop and left out: their
 * lease runs out and the sweep retries them (or makes them dead). */
static void snapshot(struct sq_host *h, struct hb_snapshot *s)
{
    s->n = 0;
    int64_t now = sq_now_ms();
    pthread_mutex_lock(&h->slots_lock);
    for (int i = 0; i < h->nworkers; i++) {
        for (int k = 0; k < h->workers[i].nslots; k++) {
            struct sq_slot *sl = &h->workers[i].slots[k];
            if (!sl->job_id)
                continue;
            if (sl->timeout_at && now >= sl->timeout_at && !sl->timed_out && !sl->returned) {
                sl->timed_out = true;
                atomic_store(&sl->stop, 1);
                log_warn("job %" PRId64 ": past its kind's timeout; asking the handler to stop, lease not renewed",
                         sl->job_id);
            }
            if (sl->timed_out)
                continue;
            s->ids[s->n] = sl->job_id;
            s->execs[s->n] = sl->execution_id;
            s->leases[s->n] = sl->lease_ms;
            s->slot[s->n] = sl;
            s->n++;
        }
    }
    pthread_mutex_unlock(&h->slots_lock);
}

/* Apply a heartbeat's result: renew deadlines, raise should-stop on loss. */
static void apply_heartbeat(struct sq_host *h, struct hb_snapshot *s, bool ok, int64_t sent_at)
{
    pthread_mutex_lock(&h->slots_lock);
    for (size_t i = 0; i < s->n; i++) {
        struct sq_slot *sl = s->slot[i];
        if (sl->job_id != s->ids[i] || sl->execution_id != s->execs[i])
            continue; /* finished meanwhile */
        if (ok && s->state[i] == SQ_LEASE_EXTENDED) {
            sl->lease_deadline = sent_at + sl->lease_ms;
        } else if (ok && s->state[i] == SQ_LEASE_LOST) {
            /* A finished handler's outcome is on its way; the cycle that
             * records it (or is fenced) will say what happened. */
            if (!atomic_exchange(&sl->stop, 1) && !sl->finished)
                log_warn("job %" PRId64 ": lease lost (the job was reclaimed, released or finished elsewhere); "
                         "asking the handler to stop",
                         s->ids[i]);
        }
    }
    int64_t now = sq_now_ms();
    for (int i = 0; i < h->nworkers; i++) {
        for (int k = 0; k < h->workers[i].nslots; k++) {
            struct sq_slot *sl = &h->workers[i].slots[k];
            if (sl->job_id && now > sl->lease_deadline && !atomic_exchange(&sl->stop, 1))
                log_warn("job %" PRId64 ": lease could not be renewed before it expired; asking the handler to stop",
                         sl->job_id);
        }
    }
    pthread_mutex_unlock(&h->slots_lock);
}

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
    const struct {
        const char *status;
        int64_t age;
    } rules[] = {{"done", cfg->keep_done_ms}, {"dead", cfg->keep_dead_ms}, {"cancelled", cfg->keep_cancelled_ms}};
    int64_t end = sq_now_ms() + budget_ms;
    char err[512];
    bool behind = false;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (rules[i].age <= 0)
            continue;
        long total = 0;
        int n;
        do {
            n = sq_queue_retain(conn, rules[i].status, rules[i].age, cfg->retention_batch, err, sizeof err);
            if (n > 0)
                total += n;
        } while (n == cfg->retention_batch && sq_now_ms() < end);
        behind = behind || n == cfg->retention_batch;
        if (n == -2)
            log_warn("retention: could not delete %s jobs: %s", rules[i].status, err);
        if (total > 0)
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
        atomic_fetch_add_explicit(&k->lost, 1, memory_order_relaxed);
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
    sq_log_set_thread("hb");
    size_t cap = 1;
    for (int i = 0; i < h->nworkers; i++)
        cap += (size_t)h->workers[i].nslots;
    struct hb_snapshot s = {.ids = calloc(cap, sizeof(int64_t)),
                            .execs = calloc(cap, sizeof(int64_t)),
                            .leases = calloc(cap, sizeof(int64_t)),
                            .slot = calloc(cap, sizeof(struct sq_slot *)),
                            .state = calloc(cap, 1)};
    PGconn *conn = NULL;
    bool reported = false, registered = false, registry_warned = false, gone = false;
    char err[512];
    int64_t next = 0, next_retention = sq_now_ms() + h->cfg->retention_interval_ms;
    bool retention_behind = false;
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
        if (now < next) {
            /* An enqueue left children to settle: do it now, not at the
             * next round, so a child is not late by up to a heartbeat. */
            if (conn && !atomic_load(&h->stopping) && atomic_exchange(&h->deps_wake, false))
                sq_deps_round(h, conn);
            /* Not sq_host_wait: this thread must keep beating while a
             * stopping host drains its handlers. */
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        next = now + h->cfg->heartbeat_ms;
        if (!conn) {
            conn = open_session(h, err, sizeof err);
            mark_hb_conn(h, conn != NULL);
            if (!conn) {
                if (!reported)
                    log_warn("heartbeat: cannot reach the database (leases are not being renewed): %s", err);
                reported = true;
                next = now + (h->cfg->heartbeat_ms < 1000 ? h->cfg->heartbeat_ms : 1000);
                apply_heartbeat(h, &s, false, now);
                continue;
            }
            if (reported)
                log_info("heartbeat: connected to the database again");
            reported = false;
        }
        snapshot(h, &s);
        if (s.n > 0) {
            int64_t sent = sq_now_ms();
            int r = sq_queue_heartbeat(conn, s.ids, s.execs, s.leases, s.n, s.state, err, sizeof err);
            if (r < 0)
                log_warn("heartbeat failed: %s", err);
            apply_heartbeat(h, &s, r >= 0, sent);
        }
        if (!atomic_load(&h->stopping)) {
            int reaped = sq_queue_reap_kinds(conn, REAP_BATCH, count_reaped, h, err, sizeof err);
            if (reaped > 0) {
                log_info("recovered %d job(s) whose lease had expired", reaped);
                sq_host_wake(h, NULL);
            }
            else if (reaped < 0)
                log_warn("lease sweep failed: %s", err);
            registry_round(h, conn, &registered, &registry_warned);
            sq_sched_round(h, conn);
            if (retention && sq_now_ms() >= next_retention) {
                /* Behind (the last round ran out of time with more to
                 * delete): go on at every round, with half of it. */
                retention_behind = retention_round(h, conn, retention_behind ? h->cfg->heartbeat_ms / 2 : 1000);
                next_retention = retention_behind ? 0 : sq_now_ms() + h->cfg->retention_interval_ms;
            }
            sq_metrics_sample(h, conn);
        }
        if (PQstatus(conn) != CONNECTION_OK) {
            PQfinish(conn);
            conn = NULL;
            mark_hb_conn(h, false);
        }
    }
    if (registered && !gone && conn && !sq_hosts_gone(conn, h, err, sizeof err))
        log_warn("host registry: could not remove this host's row (it will age out): %s", err);
    PQfinish(conn);
    atomic_store(&h->hb_connected, false);
    free(s.ids);
    free(s.execs);
    free(s.leases);
    free(s.slot);
    free(s.state);
    return NULL;
}
