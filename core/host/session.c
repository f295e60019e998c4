/*
 * session.c -- a database session as skipq's threads use it.
 *
 * Each worker thread, and the heartbeat thread, owns one session for its
 * whole life, re-made after a loss. A session is made with skipq's
 * settings and the protocol's statements prepared (queue.c); a worker that
 * loses its session reconnects with capped, jittered backoff (0.1 s
 * doubling to SQ_RECONNECT_MAX_MS, each wait a random half to all of its
 * step), logs the outage once and the recovery once, prepares its
 * statements again, and never ends for it. A session made again wakes the
 * host's other reconnecting threads (wake.c): after a failover the first
 * thread to find the new primary brings the rest of the host with it,
 * instead of each waiting out its own step.
 *
 * With [database] pooler = transaction a session holds no state between
 * statements (no settings, no prepared statements), so any statement may
 * run on any server session the pooler lends.
 */
#include "host/session.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/queue.h"
#include "host/state.h"
#include "host/wake.h"

static void notice_to_log(void *arg, const char *message)
{
    (void)arg;
    log_debug("server notice: %s", message);
}

PGconn *sq_session_open(struct sq_host *h, char *err, size_t errlen)
{
    return sq_session_open_for(h, NULL, err, errlen);
}

PGconn *sq_session_open_for(struct sq_host *h, struct sq_worker *w, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(&h->params, err, errlen);
    if (!conn)
        return NULL;
    /* Published before the set-up below: a path that dies between the
     * connection and its first replies is cut like any other call. */
    if (w)
        sq_session_publish(w, conn);
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
     * statement. Short statements never gain from JIT anyway.
     * plan_cache_mode = force_generic_plan: the claim's parameters (a
     * queue, arrays of kinds and leases, a limit) never change which index
     * is right, yet PostgreSQL kept planning the cycle anew at each call,
     * about as long as running it. With sequential scans off, the generic
     * plan made on an empty table reads the same indexes as a custom one
     * made on a full table. */
    /* Behind a pooler in transaction mode no setting would stay with us:
     * host.c checks the isolation default at start-up instead, the config
     * refuses synchronous_commit = off there, and unnamed statements are
     * planned for the table as it is at each execution. */
    bool session = !h->cfg->database.pooled;
    if ((session && !sq_db_exec(conn, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                err, errlen)) ||
        (session && !sq_db_exec(conn,
                                "SET enable_seqscan = off; SET jit = off;"
                                " SET plan_cache_mode = force_generic_plan",
                                err, errlen)) ||
        (session && !h->cfg->synchronous_commit && !sq_db_exec(conn, "SET synchronous_commit = off", err, errlen)) ||
        !sq_queue_prepare(conn, err, errlen)) {
        if (w)
            sq_session_publish(w, NULL);
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

void sq_session_mark(struct sq_worker *w, bool up)
{
    int64_t now = sq_now_ms();
    atomic_store(&w->live->beat, now);
    atomic_store(&w->live->connected, up);
    if (up)
        atomic_store(&w->live->down_since, 0);
    else if (atomic_load(&w->live->down_since) == 0)
        atomic_store(&w->live->down_since, now);
}

PGconn *sq_session_reconnect(struct sq_worker *w, bool until_stop)
{
    struct sq_host *h = w->host;
    const char *who = w->name;
    int64_t step = SQ_RECONNECT_MIN_MS;
    /* Per thread and per host, so no two threads draw the same waits. */
    uint32_t seed = (uint32_t)(sq_now_ms() ^ ((int64_t)getpid() << 12) ^ (uint32_t)w->index * 2654435761u);
    bool reported = false;
    char err[512];
    for (;;) {
        sq_session_mark(w, false);
        unsigned long seen = sq_host_reconnect_gen(h);
        PGconn *conn = sq_session_open_for(h, w, err, sizeof err);
        if (conn) {
            sq_session_mark(w, true);
            if (reported)
                log_info("%s: connected to the database again", who);
            sq_host_reconnected(h);
            return conn;
        }
        if (!reported)
            log_warn("%s: cannot reach the database, retrying with backoff up to %ds: %s", who,
                     SQ_RECONNECT_MAX_MS / 1000, err);
        else
            log_debug("%s: still cannot reach the database: %s", who, err);
        reported = true;
        if (until_stop && atomic_load(&h->stopping))
            return NULL;
        /* With outcomes to record (!until_stop) the thread keeps trying
         * while the host stops; a session made again still wakes it. */
        sq_host_wait_reconnect(h, seen, sq_reconnect_backoff(&step, &seed), until_stop);
    }
}

void sq_session_publish(struct sq_worker *w, PGconn *conn)
{
    pthread_mutex_lock(&w->conn_lock);
    w->sock = conn ? PQsocket(conn) : -1;
    pthread_mutex_unlock(&w->conn_lock);
    if (w->live) /* a worker's; the host's own sessions have none */
        atomic_store(&w->live->backend_pid, conn ? PQbackendPID(conn) : 0);
}

void sq_session_close(struct sq_worker *w, PGconn **connp)
{
    sq_session_publish(w, NULL);
    PQfinish(*connp);
    *connp = NULL;
}

bool sq_session_cut(struct sq_worker *w)
{
    pthread_mutex_lock(&w->conn_lock);
    bool cut = w->sock >= 0 && shutdown(w->sock, SHUT_RDWR) == 0;
    pthread_mutex_unlock(&w->conn_lock);
    return cut;
}

/* One session stuck past the deadline: cut it, at most once per deadline. */
static void cut_if_stuck(struct sq_worker *w, const char *what, int64_t idle_ms, int64_t deadline, int64_t now)
{
    if (idle_ms <= deadline || now - w->cut_at < deadline)
        return;
    w->cut_at = now;
    if (sq_session_cut(w))
        log_warn("%s: no reply from the database for %" PRId64 "s (reply_timeout %" PRId64
                 "ms): dropping the connection and reconnecting",
                 what, idle_ms / 1000, deadline);
}

void sq_session_cut_stuck(struct sq_host *h)
{
    int64_t deadline = h->cfg->reply_timeout_ms, now = sq_now_ms();
    if (!deadline || !atomic_load(&h->workers_built))
        return;
    /* Beyond a poll interval: an idle thread goes round its loop once per poll. */
    int64_t poll = atomic_load(&h->poll_ms) * 11 / 10;
    for (int i = 0; i < h->nworkers; i++) {
        struct sq_worker *w = &h->workers[i];
        int64_t beat = atomic_load(&w->live->beat);
        if (w->group->process || atomic_load(&w->live->busy) || !beat)
            continue; /* a process is its supervisor's; a handler its timeout's */
        /* Reconnecting, an attempt may take a backoff step and libpq's
         * connect_timeout before its set-up statements can hang. */
        int64_t allow = atomic_load(&w->live->down_since) ? SQ_RECONNECT_MAX_MS + SQ_CONNECT_ATTEMPT_MS : poll;
        cut_if_stuck(w, w->name, now - beat - allow, deadline, now);
    }
    int64_t hb = atomic_load(&h->hb_beat), sup = atomic_load(&h->sup_beat);
    if (hb)
        cut_if_stuck(&h->hb, "heartbeat", now - hb, deadline, now);
    if (sup)
        cut_if_stuck(&h->sup, "worker processes' supervisor", now - sup, deadline, now);
}
