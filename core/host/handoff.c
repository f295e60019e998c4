/*
 * handoff.c -- an idle worker thread takes new jobs from the enqueue
 * itself, instead of claiming them after it is woken.
 *
 * Why: on an idle host, most of the time from an enqueue's commit to its
 * handler's start was the claim -- a write transaction on a server process
 * that had been asleep. When a thread registers as waiting
 * (skipq.waiting, sql/060_handoff.sql), the insert's own transaction claims
 * the job for it, and the thread only reads it, fenced by its execution.
 *
 * DESIGN
 * - Who registers ([host] handoff = on, the default): a thread that runs
 *   its jobs itself (no handler pool), in the host process, of a group with
 *   no limited kind, while the host's listener is connected (a hand-over is announced by NOTIFY, and
 *   without a listener the thread would learn of it only at its next poll).
 *   Every other thread claims as before, and so does everyone for the jobs
 *   the migration leaves to the claim.
 * - When: after a claim found nothing, before the thread waits. The row
 *   holds for as long as a host counts as alive after a beat, and each of
 *   the host's beats renews it: the threads of a host that stops beating
 *   (killed, frozen, cut off) stop getting jobs when their rows lapse. The
 *   thread itself writes the row again only once a term (a write holds the
 *   row for a moment, and an enqueue passes over a row that is held). A thread that
 *   then claims work of its own takes its row back before running it, so
 *   no job is handed to a busy thread.
 * - Never waiting on an enqueue: the enqueue holds the row it hands over
 *   until it commits, and an application's transaction may stay open. The
 *   database functions give up on a held row at once ('busy'), and the
 *   thread then counts on the notification that the commit sends.
 * - A hand-over nobody heard of: when the thread's row went missing
 *   without a notification for it ('new' or 'gone' where it had one), or
 *   the listener was away, the thread looks for jobs running under its
 *   name that it does not hold. A notification can therefore be lost
 *   without a job waiting for its lease to end, unless the host itself is
 *   gone -- then the lease sweep gives the job back, as for any claim.
 */
#include "host/handoff.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/state.h"
#include "host/wake.h"

/* How long a registration holds: as long as a host counts as alive after
 * a beat (skipq.host_alive), since each beat renews it (host_beat()). */
static int64_t valid_ms(const struct sq_host *h)
{
    return 3 * sq_host_config(h)->heartbeat_ms;
}

static bool suits(const struct sq_worker *w)
{
    const struct sq_host *h = w->host;
    return sq_host_config(h)->handoff && w->handlers == 1 && !h->in_child && h->listener_started &&
           atomic_load(&h->listener_connected) &&
           !atomic_load(&w->group->limited) && !atomic_load(&h->stopping);
}

/* Take the thread's row back. A row held by a commit (a hand-over, or the
 * host's beat) is waited for, since a commit holds it only while it
 * commits. */
static enum sq_waiter unset(struct sq_worker *w, PGconn *conn)
{
    char err[512];
    enum sq_waiter r = sq_queue_waiter_unset(conn, w->ident, false, err, sizeof err);
    if (r == SQ_WAITER_BUSY)
        r = sq_queue_waiter_unset(conn, w->ident, true, err, sizeof err);
    if (r == SQ_WAITER_ERROR || r == SQ_WAITER_BUSY)
        log_warn("%s: could not take back its registration as waiting for jobs (it lapses by itself): %s", w->name,
                 r == SQ_WAITER_BUSY ? "held for 5 s by a commit" : err);
    return r;
}

void sq_handoff_idle(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const char *kinds_array,
                     const char *leases_array)
{
    if (!suits(w)) {
        sq_handoff_pause(w, ho, conn);
        return;
    }
    /* Registered, it is left alone for a heartbeat: the host's beats keep
     * the row fresh, and a write here would hold it for a moment, which an
     * enqueue passes over. Then the thread checks that its row is still
     * there (if not, a job was handed to it unannounced). */
    int64_t now = sq_now_ms();
    if (ho->registered && now - ho->set_ms < sq_host_config(w->host)->heartbeat_ms)
        return;
    char err[512], since[sizeof ho->since], host[sizeof w->ident];
    snprintf(host, sizeof host, "%s:%d", sq_host_name(w->host), (int)getpid()); /* its skipq.hosts row (hosts.c) */
    enum sq_waiter r = sq_queue_waiter_set(conn, w->ident, host, w->group->queue, kinds_array, leases_array,
                                           valid_ms(w->host), since, sizeof since, err, sizeof err);
    switch (r) {
    case SQ_WAITER_NEW:
        if (ho->registered && ho->since[0]) {
            /* Its row went since: an enqueue took it. The look covers
             * what was handed over since the row it took began. */
            ho->look = true;
            ho->registered = true;
            ho->set_ms = now;
            break;
        }
        /* fall through */
    case SQ_WAITER_KEPT:
        ho->registered = true;
        ho->set_ms = now;
        snprintf(ho->since, sizeof ho->since, "%s", since);
        break;
    case SQ_WAITER_BUSY: /* a commit holds it: a hand-over announces itself, a beat lets go */
        ho->registered = true;
        break;
    default:
        log_debug("%s: could not register as waiting for jobs (new jobs wake it instead): %s", w->name, err);
        ho->registered = true; /* as far as it knows: taken back before it runs anything */
        break;
    }
}

/*
 * The thread holds claimed[0..n) and has taken its row back, finding it
 * gone: jobs were handed to it since it registered. They join the batch
 * while there is room; the rest go back uncharged.
 */
static int join_handed(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, struct sq_claimed *claimed, int n,
                       int cap)
{
    char err[512];
    int64_t *held = calloc((size_t)cap, sizeof *held);
    if (!held) {
        ho->look = true;
        return n;
    }
    for (int i = 0; i < n; i++)
        held[i] = claimed[i].id;
    int m = ho->since[0] ? sq_queue_handed(conn, w->ident, NULL, 0, ho->since, held, (size_t)n, claimed + n, cap - n,
                                           err, sizeof err)
                         : 0;
    if (m < 0) {
        log_warn("%s: could not read the jobs handed to it (they are looked for again): %s", w->name, err);
        ho->look = true;
        m = 0;
    }
    for (int i = n; i < n + m; i++)
        held[i] = claimed[i].id;
    if (m == cap - n) { /* perhaps more than fit */
        int back = sq_queue_give_back(conn, w->ident, held, (size_t)(n + m),
                                      "interrupted: handed to a thread whose batch was full", err, sizeof err);
        if (back > 0)
            log_info("%s: gave back %d job(s) handed to it with its batch full", w->name, back);
        else if (back < 0)
            ho->look = true;
    }
    free(held);
    return n + m;
}

int sq_handoff_claimed(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, struct sq_claimed *claimed, int n,
                       int cap)
{
    if (!ho->registered || !conn)
        return n;
    enum sq_waiter r = unset(w, conn);
    if (r == SQ_WAITER_ERROR || r == SQ_WAITER_BUSY) {
        ho->look = true; /* whatever was handed over is read after this batch */
        return n;
    }
    ho->registered = false;
    return r == SQ_WAITER_GONE ? join_handed(w, ho, conn, claimed, n, cap) : n;
}

void sq_handoff_pause(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn)
{
    if (!ho->registered || !conn)
        return;
    enum sq_waiter r = unset(w, conn);
    if (r == SQ_WAITER_REMOVED)
        ho->registered = false;
    else if (r == SQ_WAITER_GONE) {
        ho->registered = false;
        ho->look = true;
    }
}

bool sq_handoff_pending(const struct sq_worker *w, const struct sq_handoff *ho)
{
    return ho->look || atomic_load(&w->handed);
}

int sq_handoff_take(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, struct sq_claimed *out, int cap,
                    char *err, size_t errlen)
{
    int64_t ids[SQ_HANDED_MAX];
    bool lost = false;
    int nids = sq_worker_take_handed(w, ids, &lost);
    /* After the listener was away, only a thread that had a row can have
     * been handed anything. */
    bool any = ho->look || (lost && ho->registered);
    ho->look = false;
    if ((nids == 0 && !any) || (any && !ho->since[0]))
        return 0;
    int n = sq_queue_handed(conn, w->ident, any ? NULL : ids, (size_t)nids, ho->since, NULL, 0, out, cap, err, errlen);
    if (n < 0) {
        ho->look = any || nids > 0; /* try again once the session is back */
        return -1;
    }
    /* Perhaps more than fit: a look by name that filled the batch, or more
     * ids announced than it holds. (All the ids it was given, read, leave
     * nothing to look for: with batch = 1 every hand-over filled it.) */
    if (n == cap && (any || nids > cap))
        ho->look = true;
    if (n > 0 && !any)
        ho->registered = false; /* the enqueue removed its row */
    else if (n > 0)
        n = sq_handoff_claimed(w, ho, conn, out, n, cap); /* its row may be back: take it before they run */
    return n;
}

void sq_handoff_exit(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn)
{
    if (!conn || !ho->since[0])
        return; /* never registered: nothing can have been handed to it */
    char err[512];
    enum sq_waiter r = sq_queue_waiter_gone(conn, w->ident, err, sizeof err);
    if (r == SQ_WAITER_ERROR || r == SQ_WAITER_BUSY)
        log_warn("%s: could not remove its registration as waiting for jobs (it lapses by itself): %s", w->name,
                 r == SQ_WAITER_BUSY ? "held for 5 s by a commit" : err);
    if (r != SQ_WAITER_GONE && r != SQ_WAITER_BUSY && !sq_handoff_pending(w, ho))
        return;
    int n = sq_queue_give_back(conn, w->ident, NULL, 0, "interrupted: handed to a thread as its host stopped", err,
                               sizeof err);
    if (n > 0)
        log_info("%s: gave back %d job(s) handed to it as the host stopped", w->name, n);
    else if (n < 0)
        log_warn("%s: could not give back jobs handed to it as the host stopped; their leases will expire: %s",
                 w->name, err);
}
