/*
 * listen.c -- wake idle threads when jobs arrive, instead of at their next
 * poll.
 *
 * One thread per host owns one connection that LISTENs on "skipq_jobs"
 * (sql/004_notify.sql sends the queue name when runnable jobs are inserted)
 * and wakes only the idle threads of the groups serving that queue. For
 * delayed jobs (sql/041_notify_delayed.sql) it passes on when they fall
 * due, and one idle thread wakes then.
 *
 * DESIGN
 * - A notification is a hint. Polling stays the path that guarantees
 *   progress, so a lost notification costs latency, never a job.
 * - Notifications sent while this session is down are simply not delivered,
 *   so after every (re)connect the thread LISTENs (committed before anything
 *   else) and then wakes every group for one claim pass.
 * - A half-open connection looks idle forever: when nothing has arrived for
 *   a heartbeat interval the thread runs a trivial query, and reconnects if
 *   it fails. keepalives and tcp_user_timeout (db.c) bound that query.
 * - LISTEN belongs to a session, which a pooler in transaction mode does
 *   not give us: [database] listen_conninfo names a direct connection for
 *   it, and without one host.c does not start this thread at all.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "host.h"
#include "log.h"
#include "util.h"

#define LISTEN_POLL_MS 200

static PGconn *listen_connect(struct sq_host *h, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(&h->listen_params, err, errlen);
    if (conn && !sq_db_exec(conn, "LISTEN skipq_jobs", err, errlen)) {
        PQfinish(conn);
        conn = NULL;
    }
    return conn;
}

/* "QUEUE": runnable jobs now; "QUEUE +MS": the earliest delayed job of an
 * insert falls due in MS milliseconds (sql/041_notify_delayed.sql). */
static void announce(struct sq_host *h, char *payload)
{
    char *sp = strchr(payload, ' ');
    if (!sp) {
        sq_host_wake(h, payload);
        return;
    }
    *sp = '\0';
    char *end;
    long long ms = strtoll(sp + 1, &end, 10);
    if (sp[1] != '+' || *end || ms < 0)
        return; /* not a form this host knows */
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
    sq_log_set_thread("listen");
    PGconn *conn = NULL;
    bool reported = false, listening_logged = false;
    int64_t delay = 100, last_traffic = 0;
    char err[512];
    while (!atomic_load(&h->stopping)) {
        if (!conn) {
            conn = listen_connect(h, err, sizeof err);
            if (!conn) {
                if (!reported)
                    log_warn("listener: cannot reach the database; idle threads fall back to polling: %s", err);
                reported = true;
                sq_host_wait(h, NULL, 0, delay);
                delay = delay * 2 > 10000 ? 10000 : delay * 2;
                continue;
            }
            atomic_store(&h->listener_connected, true);
            if (reported)
                log_info("listener: connected to the database again");
            else if (!listening_logged) {
                char where[256];
                sq_db_describe(conn, where, sizeof where);
                log_info("listener: listening for new jobs on %s", where);
            }
            listening_logged = true;
            reported = false;
            delay = 100;
            last_traffic = sq_now_ms();
            sq_host_wake(h, NULL); /* anything notified while we were away */
        }
        struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
        int r = poll(&p, 1, LISTEN_POLL_MS);
        bool ok = true;
        if (r > 0) {
            ok = drain(h, conn);
            last_traffic = sq_now_ms();
        } else if (sq_now_ms() - last_traffic > h->cfg->heartbeat_ms) {
            ok = sq_db_exec(conn, "SELECT 1", err, sizeof err) && drain(h, conn);
            last_traffic = sq_now_ms();
        }
        if (!ok || PQstatus(conn) != CONNECTION_OK) {
            log_warn("listener: connection lost; reconnecting: %s", PQerrorMessage(conn));
            PQfinish(conn);
            conn = NULL;
            atomic_store(&h->listener_connected, false);
        }
    }
    PQfinish(conn);
    atomic_store(&h->listener_connected, false);
    return NULL;
}
