/*
 * slots.c -- the jobs a host holds, one slot per job a worker claimed.
 *
 * A slot is taken when its job is claimed and kept, with the job's lease,
 * until the cycle that records the job's outcome has committed (a
 * finished handler's outcome may wait for the rest of its batch). Three
 * kinds of thread look at the slots, always under host->slots_lock:
 * - the worker that owns them: take, start the kind's timeout when the
 *   handler starts, mark returned and finished, clear;
 * - the heartbeat thread, each round: which leases to renew (jobs past
 *   their kind's timeout are asked to stop and left out: their lease runs
 *   out and the sweep retries them, or makes them dead), then the result:
 *   new deadlines, and should-stop for jobs whose lease was lost or
 *   could not be renewed in time;
 * - shutdown: at its start, note when the grace ends (the handlers'
 *   deadline); when the grace is over, raise should-stop and count who
 *   still runs; when the stop window after it is over too, stop
 *   everything, and say which jobs still run and which finished without
 *   their outcome recorded.
 * Only `stop` is read without the lock (atomic: the handler polls it).
 *
 * Each worker names its lock: the host's slots_lock for worker threads;
 * for a worker process (procs.c) a robust, process-shared mutex beside its
 * slots in the memory it shares with the host. A process killed while
 * holding it leaves it "owner died": the next locker (the host) marks it
 * consistent and goes on -- a slot is a few words, always left readable.
 */
#include "host/slots.h"

#include <inttypes.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "host/queue.h"
#include "host/state.h"

void sq_slots_lock(struct sq_worker *w)
{
    if (pthread_mutex_lock(w->slots_lock) == EOWNERDEAD)
        pthread_mutex_consistent(w->slots_lock);
}

void sq_slots_unlock(struct sq_worker *w)
{
    pthread_mutex_unlock(w->slots_lock);
}

void sq_slot_take(struct sq_worker *w, int k, const struct sq_claimed *c, int kind, int64_t lease_ms)
{
    struct sq_slot *sl = &w->slots[k];
    sq_slots_lock(w);
    sl->job_id = c->id;
    sl->execution_id = c->execution_id;
    sl->attempt = c->attempt;
    sl->kind = kind;
    sl->lease_ms = lease_ms;
    sl->lease_deadline = sq_now_ms() + lease_ms;
    sl->started_at = 0;
    sl->timeout_at = 0;
    sl->timed_out = false;
    sl->returned = false;
    sl->finished = false;
    sl->error[0] = '\0';
    atomic_store(&sl->stop, 0);
    sq_slots_unlock(w);
}

void sq_slot_start(struct sq_worker *w, int k, int64_t timeout_ms)
{
    sq_slots_lock(w);
    int64_t now = sq_now_ms();
    w->slots[k].started_at = now;
    w->slots[k].timeout_at = timeout_ms > 0 ? now + timeout_ms : 0;
    sq_slots_unlock(w);
}

void sq_slots_clear(struct sq_worker *w, int from, int n)
{
    sq_slots_lock(w);
    for (int k = from; k < from + n && k < w->nslots; k++)
        w->slots[k].job_id = 0;
    sq_slots_unlock(w);
}

void sq_slot_clear(struct sq_worker *w, int k)
{
    sq_slots_lock(w);
    w->slots[k].job_id = 0;
    sq_slots_unlock(w);
}

bool sq_slot_returned(struct sq_worker *w, int k)
{
    sq_slots_lock(w);
    w->slots[k].returned = true;
    bool t = w->slots[k].timed_out;
    sq_slots_unlock(w);
    return t;
}

void sq_slot_finish(struct sq_worker *w, int k, short outcome, int64_t delay_ms, const char *error)
{
    struct sq_slot *sl = &w->slots[k];
    sq_slots_lock(w);
    sl->finished = true;
    sl->outcome = outcome;
    sl->delay_ms = delay_ms;
    sq_strlcpy(sl->error, error ? error : "", sizeof sl->error);
    sq_slots_unlock(w);
}

/* ---- every slot of the host ----------------------------------------------------------- */

size_t sq_slots_capacity(const struct sq_host *h)
{
    size_t cap = 1;
    for (int i = 0; i < h->nworkers; i++)
        cap += (size_t)h->workers[i].nslots;
    return cap;
}

void sq_slots_snapshot(struct sq_host *h, struct sq_leases *s)
{
    s->n = 0;
    int64_t now = sq_now_ms();
    for (int i = 0; i < h->nworkers; i++) {
        sq_slots_lock(&h->workers[i]);
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
            s->worker[s->n] = i;
            s->n++;
        }
        sq_slots_unlock(&h->workers[i]);
    }
}

void sq_slots_renewed(struct sq_host *h, const struct sq_leases *s, bool ok, int64_t sent_at)
{
    for (size_t i = 0; i < s->n; i++) {
        struct sq_slot *sl = s->slot[i];
        sq_slots_lock(&h->workers[s->worker[i]]);
        if (sl->job_id != s->ids[i] || sl->execution_id != s->execs[i]) {
            sq_slots_unlock(&h->workers[s->worker[i]]);
            continue; /* finished meanwhile */
        }
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
        sq_slots_unlock(&h->workers[s->worker[i]]);
    }
    int64_t now = sq_now_ms();
    for (int i = 0; i < h->nworkers; i++) {
        sq_slots_lock(&h->workers[i]);
        for (int k = 0; k < h->workers[i].nslots; k++) {
            struct sq_slot *sl = &h->workers[i].slots[k];
            if (sl->job_id && now > sl->lease_deadline && !atomic_exchange(&sl->stop, 1))
                log_warn("job %" PRId64 ": lease could not be renewed before it expired; asking the handler to stop",
                         sl->job_id);
        }
        sq_slots_unlock(&h->workers[i]);
    }
}

/* Slots whose handler has started and not returned, under the lock. */
static bool running(const struct sq_slot *sl)
{
    return sl->job_id && sl->started_at && !sl->returned;
}

int sq_slots_stopping(struct sq_host *h, int64_t at)
{
    int n = 0;
    for (int i = 0; i < h->nworkers; i++) {
        sq_slots_lock(&h->workers[i]);
        for (int k = 0; k < h->workers[i].nslots; k++) {
            atomic_store(&h->workers[i].slots[k].stop_at, at);
            n += running(&h->workers[i].slots[k]);
        }
        sq_slots_unlock(&h->workers[i]);
    }
    return n;
}

int sq_slots_tell_stop(struct sq_host *h)
{
    int n = 0;
    for (int i = 0; i < h->nworkers; i++) {
        sq_slots_lock(&h->workers[i]);
        for (int k = 0; k < h->workers[i].nslots; k++) {
            atomic_store(&h->workers[i].slots[k].stop, 1);
            n += running(&h->workers[i].slots[k]);
        }
        sq_slots_unlock(&h->workers[i]);
    }
    return n;
}

bool sq_slots_stop_all(struct sq_host *h, int64_t *ids, int64_t *execs, size_t *n, struct sq_outcomes *done)
{
    bool ok = true;
    for (int i = 0; ok && i < h->nworkers; i++) {
        sq_slots_lock(&h->workers[i]);
        for (int k = 0; k < h->workers[i].nslots; k++) {
            struct sq_slot *sl = &h->workers[i].slots[k];
            atomic_store(&sl->stop, 1);
            if (!sl->job_id)
                continue;
            if (sl->finished) {
                size_t d = done->n++;
                done->ids[d] = sl->job_id;
                done->execs[d] = sl->execution_id;
                done->outcomes[d] = sl->outcome;
                done->delays[d] = sl->delay_ms;
                done->errors[d] = strdup(sl->error);
                ok = done->errors[d] != NULL;
            } else {
                ids[*n] = sl->job_id;
                execs[*n] = sl->execution_id;
                (*n)++;
            }
        }
        sq_slots_unlock(&h->workers[i]);
    }
    return ok;
}
