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
 * - Who registers: a thread that runs its jobs itself (no handler pool),
 *   in the host process, of a group with no limited kind, while the
 *   host's listener is connected (a hand-over is announced by NOTIFY, and
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
    return w->handlers == 1 && !h->in_child && h->listener_started && atomic_load(&h->listener_connected) &&
           !atomic_load(&w->group->limited) && !atomic_load(&h->stopping);
}

void sq_handoff_idle(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const char *kinds_array,
                     const char *leases_array)
{
    if (!suits(w)) {
        sq_handoff_busy(w, ho, conn);
        return;
    }
    /* Registered, it is left alone for a term: the host's beats keep the
     * row fresh, and a write here would hold it for a moment, which an
     * enqueue passes over. Once a term, the thread checks that its row is
     * still there (if not, a job was handed to it unannounced). */
    int64_t now = sq_now_ms();
    if (ho->registered && now - ho->set_ms < valid_ms(w->host))
        return;
    char err[512];
    enum sq_waiter r = sq_queue_waiter_set(conn, w->ident, w->group->queue, kinds_array, leases_array,
                                           valid_ms(w->host), err, sizeof err);
    switch (r) {
    case SQ_WAITER_KEPT:
        ho->registered = true;
        ho->set_ms = now;
        break;
    case SQ_WAITER_NEW:
        if (ho->registered)
            ho->look = true; /* its row went since: an enqueue took it */
        ho->registered = true;
        ho->set_ms = now;
        break;
    case SQ_WAITER_BUSY: /* an enqueue is handing it a job: its commit announces it */
        ho->registered = false;
        break;
    default:
        log_debug("%s: could not register as waiting for jobs (new jobs wake it instead): %s", w->name, err);
        ho->registered = false;
        break;
    }
}

void sq_handoff_busy(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn)
{
    if (!ho->registered || !conn)
        return;
    char err[512];
    enum sq_waiter r = sq_queue_waiter_unset(conn, w->ident, err, sizeof err);
    ho->registered = false;
    if (r == SQ_WAITER_GONE)
        ho->look = true; /* handed a job since its last look */
    else if (r == SQ_WAITER_ERROR)
        log_debug("%s: could not take back its registration as waiting (it lapses by itself): %s", w->name, err);
}

bool sq_handoff_pending(const struct sq_worker *w, const struct sq_handoff *ho)
{
    return ho->look || atomic_load(&w->handed);
}

int sq_handoff_take(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const int64_t *held, size_t nheld,
                    struct sq_claimed *out, int cap, char *err, size_t errlen)
{
    int64_t ids[SQ_HANDED_MAX];
    bool lost = false;
    int nids = sq_worker_take_handed(w, ids, &lost);
    /* After the listener was away, only a thread that had a row can have
     * been handed anything. */
    bool any = ho->look || (lost && ho->registered);
    ho->look = false;
    if (nids == 0 && !any)
        return 0;
    int n = sq_queue_handed(conn, w->ident, any ? NULL : ids, (size_t)nids, held, nheld, out, cap, err, errlen);
    if (n < 0) {
        ho->look = true; /* try again once the session is back */
        return -1;
    }
    if (n > 0)
        ho->registered = false; /* the enqueue removed its row */
    return n;
}

void sq_handoff_exit(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const int64_t *held, size_t nheld)
{
    if (!conn)
        return;
    bool had = ho->registered || sq_handoff_pending(w, ho);
    sq_handoff_busy(w, ho, conn);
    if (!had && !ho->look)
        return;
    char err[512];
    int n = sq_queue_give_back(conn, w->ident, held, nheld, "interrupted: handed to a thread as its host stopped",
                               err, sizeof err);
    if (n > 0)
        log_info("%s: gave back %d job(s) handed to it as the host stopped", w->name, n);
    else if (n < 0)
        log_warn("%s: could not give back jobs handed to it as the host stopped; their leases will expire: %s",
                 w->name, err);
}
