/*
 * listen.c -- wake idle threads when jobs arrive, instead of at their next
 * poll.
 *
 * One thread per host owns one connection that LISTENs on "skipq_jobs"
 * (sql/004_notify.sql sends the queue name when runnable jobs are inserted)
 * and wakes only the idle threads of the groups serving that queue. For
 * delayed jobs (sql/041_notify_delayed.sql) it passes on when they fall
 * due, and one idle thread wakes then. When an enqueue leaves children for
 * the dependency round (sql/050_scoped_keys.sql), it has the heartbeat
 * thread run that round at once; when a queue or a kind is paused or
 * resumed (sql/054_pause.sql), it has it read skipq.paused at once. When
 * an enqueue hands a job to one of the host's idle threads
 * (sql/060_handoff.sql), it wakes that thread alone.
 *
 * DESIGN
 * - A notification is a hint. Polling stays the path that guarantees
 *   progress, so a lost notification costs latency, never a job.
 * - Notifications sent while this session is down are simply not delivered,
 *   so after every (re)connect the thread LISTENs (committed before anything
 *   else) and then wakes every group for one claim pass, and has every
 *   thread look for jobs handed to it meanwhile (handoff.c).
 * - Reconnecting, it waits like a worker (jittered steps up to
 *   SQ_RECONNECT_MAX_MS, woken when another session of the host is made
 *   again; wake.c), and a listener back wakes the reconnecting workers.
 * - A half-open connection looks idle forever: when nothing has arrived for
 *   a heartbeat interval the thread runs a trivial query, and reconnects if
 *   it fails. keepalives and tcp_user_timeout (db.c) bound that query.
 * - LISTEN belongs to a session, which a pooler in transaction mode does
 *   not give us: [database] listen_conninfo names a direct connection for
 *   it, and without one host.c does not start this thread at all.
 */
#include "host/listen.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/state.h"
#include "host/wake.h"

#define LISTEN_POLL_MS 200

static PGconn *listen_connect(struct sq_host *h, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(sq_host_listen_params(h), err, errlen);
    if (conn && !sq_db_exec(conn, "LISTEN skipq_jobs", err, errlen)) {
        PQfinish(conn);
        conn = NULL;
    }
    return conn;
}

/* Further ahead than this, a due time is left to the poll: no job is
 * enqueued more than 10 years ahead, and anyone may NOTIFY. */
#define DUE_MAX_MS 315360000000LL

/* The MS of "+MS": digits only, at most DUE_MAX_MS; -1 otherwise. Parsed
 * by hand, so an absurd value is refused, never overflowed. */
static int64_t due_ms(const char *s)
{
    if (*s++ != '+' || !*s)
        return -1;
    int64_t ms = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || ms > DUE_MAX_MS / 10)
            return -1;
        ms = ms * 10 + (*s - '0');
    }
    return ms <= DUE_MAX_MS ? ms : -1;
}

/* The id of "!h JOB EXECUTION WORKER" (sql/060_handoff.sql), with *worker
 * set to WORKER; -1 when the payload is not of that form. */
static int64_t handed_id(const char *s, const char **worker)
{
    char *end;
    if (strncmp(s, "!h ", 3) != 0 || s[3] < '0' || s[3] > '9')
        return -1;
    long long id = strtoll(s + 3, &end, 10);
    if (*end != ' ' || end[1] < '0' || end[1] > '9')
        return -1;
    strtoll(end + 1, &end, 10); /* the execution: the thread reads it with the job */
    if (*end != ' ' || !end[1] || id <= 0)
        return -1;
    *worker = end + 1;
    return id;
}

/* "QUEUE": runnable jobs now; "QUEUE +MS": the earliest delayed job of an
 * insert falls due in MS milliseconds (sql/041_notify_delayed.sql);
 * "!deps": an enqueue left children for the dependency round
 * (sql/050_scoped_keys.sql; no queue name starts with '!'); "!paused": a
 * queue or a kind was paused or resumed (sql/054_pause.sql); "!h JOB
 * EXECUTION WORKER": an enqueue handed a job to an idle thread
 * (sql/060_handoff.sql), perhaps this host's. A payload of
 * no form this host knows is ignored: notifications are hints, and any
 * role that can connect may send one. */
static void announce(struct sq_host *h, char *payload)
{
    const char *worker;
    int64_t job = handed_id(payload, &worker);
    if (job > 0) {
        sq_host_handed(h, worker, job);
        return;
    }
    if (strcmp(payload, "!deps") == 0) {
        sq_host_want_deps(h);
        return;
    }
    if (strcmp(payload, "!paused") == 0) {
        sq_host_want_paused(h);
        return;
    }
    char *sp = strchr(payload, ' ');
    if (!sp) {
        sq_host_wake(h, payload);
        return;
    }
    *sp = '\0';
    int64_t ms = due_ms(sp + 1);
    if (ms < 0) {
        log_debug("listener: ignoring a notification whose due time is not +MS within 10 years");
        return;
    }
    sq_host_due(h, payload, sq_now_ms() + ms);
}

/* Act on pending notifications; false if the session broke. */
static bool drain(struct sq_host *h, PGconn *conn)
{
    if (!PQconsumeInput(conn))
        return false;
    PGnotify *n;
    while ((n = PQnotifies(conn)) != NULL) {
        announce(h, n->extra);
        PQfreemem(n);
    }
    return true;
}

void *sq_listener_main(void *arg)
{
    struct sq_host *h = arg;
    sq_host_log_thread(h, "listen");
    PGconn *conn = NULL;
    bool reported = false, listening_logged = false;
    int64_t step = SQ_RECONNECT_MIN_MS, last_traffic = 0;
    uint32_t seed = (uint32_t)(sq_now_ms() ^ ((int64_t)getpid() << 12) ^ 0x5bd1e995u);
    char err[512];
    while (!sq_host_stopping(h)) {
        if (!conn) {
            unsigned long seen = sq_host_reconnect_gen(h);
            conn = listen_connect(h, err, sizeof err);
            if (!conn) {
                if (!reported)
                    log_warn("listener: cannot reach the database; idle threads fall back to polling: %s", err);
                reported = true;
                sq_host_wait_reconnect(h, seen, sq_reconnect_backoff(&step, &seed), true);
                continue;
            }
            sq_host_set_listener_connected(h, true);
            sq_host_reconnected(h);
            if (reported)
                log_info("listener: connected to the database again");
            else if (!listening_logged) {
                char where[256];
                sq_db_describe(conn, where, sizeof where);
                log_info("listener: listening for new jobs on %s", where);
            }
            listening_logged = true;
            reported = false;
            step = SQ_RECONNECT_MIN_MS;
            last_traffic = sq_now_ms();
            sq_host_wake(h, NULL); /* anything notified while we were away */
            sq_host_handed_lost(h);
            sq_host_want_paused(h);
        }
        struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
        int r = poll(&p, 1, LISTEN_POLL_MS);
        bool ok = true;
        if (r > 0) {
            ok = drain(h, conn);
            last_traffic = sq_now_ms();
        } else if (sq_now_ms() - last_traffic > sq_host_config(h)->heartbeat_ms) {
            ok = sq_db_exec(conn, "SELECT 1", err, sizeof err) && drain(h, conn);
            last_traffic = sq_now_ms();
        }
        if (!ok || PQstatus(conn) != CONNECTION_OK) {
            log_warn("listener: connection lost; reconnecting: %s", PQerrorMessage(conn));
            PQfinish(conn);
            conn = NULL;
            sq_host_set_listener_connected(h, false);
        }
    }
    PQfinish(conn);
    sq_host_set_listener_connected(h, false);
    return NULL;
}
