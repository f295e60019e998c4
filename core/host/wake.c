/*
 * wake.c -- how idle worker threads wait, and what wakes them.
 *
 * Each thread group has a condition variable (under host->lock) and a
 * generation counter: a wake bumps the counter and broadcasts, so a wake
 * that lands while a thread is busy claiming is seen when it comes back to
 * wait, not lost. Next to it, each group keeps the monotonic times at which
 * jobs it knows of fall due (its own retries, delayed jobs announced by
 * NOTIFY): an idle thread sleeps until the first of them instead of its
 * whole poll interval, and one due time wakes one thread, not the group.
 * Shutdown broadcasts to everyone. The worker processes of a process
 * group wait in their own processes: wakes and due times for such a group
 * go to them through their control pipes (procs.c) as well.
 *
 * Threads that lost their session wait between attempts here too. When the
 * database comes back (a restart, a failover), the first session of the
 * host to reconnect wakes the others, so the whole host is back within one
 * attempt instead of each thread's next backoff step. The steps themselves
 * are jittered (a random half to all of each), so neither the threads of a
 * host nor the hosts of a fleet hit the new primary in lockstep.
 */
#include "host/wake.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "host/ctl.h"
#include "host/state.h"

static struct timespec realtime_in(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* With host->lock held: drop g's due times up to `now`; how many there were. */
static int due_pop_locked(struct sq_group *g, int64_t now)
{
    int k = 0;
    while (k < g->ndue && g->due[k] <= now)
        k++;
    if (k > 0) {
        memmove(g->due, g->due + k, (size_t)(g->ndue - k) * sizeof g->due[0]);
        g->ndue -= k;
    }
    return k;
}

/*
 * A due time wakes one thread, not the group: the others see it gone and
 * sleep on. When several jobs fell due at once, the one thread that took
 * them wakes the rest as a notification would.
 */
static void wait_for(struct sq_host *h, struct sq_group *g, const atomic_bool *handed, unsigned long seen_gen,
                     int64_t ms)
{
    int64_t deadline = sq_now_ms() + ms;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        if (atomic_load(&h->stopping) || (g && atomic_load(&g->wake_gen) != seen_gen) ||
            (handed && atomic_load(handed)))
            break;
        int64_t now = sq_now_ms(), until = deadline;
        if (g && g->ndue > 0) {
            int k = due_pop_locked(g, now);
            if (k > 1) {
                atomic_fetch_add(&g->wake_gen, 1);
                pthread_cond_broadcast(&g->wake);
            }
            if (k > 0)
                break;
            if (g->due[0] < until)
                until = g->due[0];
        }
        if (now >= deadline)
            break;
        struct timespec ts = realtime_in(until - now);
        pthread_cond_timedwait(g ? &g->wake : &h->wake, &h->lock, &ts);
    }
    pthread_mutex_unlock(&h->lock);
}

void sq_host_wait(struct sq_host *h, struct sq_group *g, unsigned long seen_gen, int64_t ms)
{
    wait_for(h, g, NULL, seen_gen, ms);
}

void sq_worker_wait(struct sq_worker *w, unsigned long seen_gen, int64_t ms)
{
    wait_for(w->host, w->group, &w->handed, seen_gen, ms);
}

/*
 * Hand-overs (sql/060_handoff.sql) wake the one thread named, not its
 * group: the others see no wake of their group and sleep on. The thread
 * reads the jobs itself; the ids only spare it a search by its name.
 */
void sq_host_handed(struct sq_host *h, const char *ident, int64_t id)
{
    if (!atomic_load(&h->workers_built))
        return;
    for (int i = 0; i < h->nworkers; i++) {
        struct sq_worker *w = &h->workers[i];
        if (strcmp(w->ident, ident) != 0)
            continue;
        pthread_mutex_lock(&h->lock);
        if (w->nhanded < SQ_HANDED_MAX)
            w->handed_ids[w->nhanded++] = id;
        else
            w->handed_lost = true;
        atomic_store(&w->handed, true);
        pthread_cond_broadcast(&w->group->wake);
        pthread_mutex_unlock(&h->lock);
        return;
    }
}

/* The listener may have missed hand-overs (it reconnected): every thread
 * that can hold a registration looks for jobs under its name. A worker
 * with a handler pool never registers (handoff.c), and never reads the
 * flag, so it is left asleep. */
void sq_host_handed_lost(struct sq_host *h)
{
    if (!atomic_load(&h->workers_built))
        return;
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->nworkers; i++) {
        struct sq_worker *w = &h->workers[i];
        if (w->handlers != 1)
            continue;
        w->handed_lost = true;
        atomic_store(&w->handed, true);
        pthread_cond_broadcast(&w->group->wake);
    }
    pthread_mutex_unlock(&h->lock);
}

int sq_worker_take_handed(struct sq_worker *w, int64_t *ids, bool *lost)
{
    struct sq_host *h = w->host;
    pthread_mutex_lock(&h->lock);
    int n = w->nhanded;
    memcpy(ids, w->handed_ids, (size_t)n * sizeof *ids);
    *lost = w->handed_lost;
    w->nhanded = 0;
    w->handed_lost = false;
    atomic_store(&w->handed, false);
    pthread_mutex_unlock(&h->lock);
    return n;
}

void sq_group_due(struct sq_host *h, struct sq_group *g, int64_t at)
{
    pthread_mutex_lock(&h->lock);
    int n = g->ndue;
    if (n == SQ_DUE_MAX && at >= g->due[n - 1]) {
        pthread_mutex_unlock(&h->lock);
        return; /* later than all we keep: left to the poll */
    }
    if (n == SQ_DUE_MAX)
        n--;
    int i = n;
    for (; i > 0 && g->due[i - 1] > at; i--)
        g->due[i] = g->due[i - 1];
    g->due[i] = at;
    g->ndue = n + 1;
    /* A new soonest time: sleeping threads recompute their timeout. */
    if (i == 0)
        pthread_cond_broadcast(&g->wake);
    pthread_mutex_unlock(&h->lock);
    sq_ctl_send(h, (size_t)(g - h->groups), SQ_CTL_DUE, at); /* a process group's workers keep their own */
}

void sq_host_due(struct sq_host *h, const char *queue, int64_t at)
{
    for (size_t i = 0; i < h->ngroups; i++)
        if (strcmp(h->groups[i].queue, queue) == 0)
            sq_group_due(h, &h->groups[i], at);
}

void sq_host_wake(struct sq_host *h, const char *queue)
{
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->ngroups; i++) {
        struct sq_group *g = &h->groups[i];
        if (queue && strcmp(g->queue, queue) != 0)
            continue;
        atomic_fetch_add(&g->wake_gen, 1);
        pthread_cond_broadcast(&g->wake);
    }
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; h->procs && i < h->ngroups; i++)
        if (!queue || strcmp(h->groups[i].queue, queue) == 0)
            sq_ctl_send(h, i, SQ_CTL_WAKE, 0);
}

void sq_host_reconnected(struct sq_host *h)
{
    pthread_mutex_lock(&h->lock);
    atomic_fetch_add(&h->reconnect_gen, 1);
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

unsigned long sq_host_reconnect_gen(struct sq_host *h)
{
    return atomic_load(&h->reconnect_gen);
}

void sq_host_wait_reconnect(struct sq_host *h, unsigned long seen, int64_t ms, bool until_stop)
{
    int64_t deadline = sq_now_ms() + ms;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        if ((until_stop && atomic_load(&h->stopping)) || atomic_load(&h->reconnect_gen) != seen)
            break;
        int64_t now = sq_now_ms();
        if (now >= deadline)
            break;
        struct timespec ts = realtime_in(deadline - now);
        pthread_cond_timedwait(&h->wake, &h->lock, &ts);
    }
    pthread_mutex_unlock(&h->lock);
}

int64_t sq_reconnect_backoff(int64_t *step, uint32_t *seed)
{
    int64_t s = *step < SQ_RECONNECT_MIN_MS ? SQ_RECONNECT_MIN_MS : *step;
    int64_t wait = s / 2 + (int64_t)(rand_r(seed) % (unsigned)(s / 2 + 1));
    *step = s * 2 > SQ_RECONNECT_MAX_MS ? SQ_RECONNECT_MAX_MS : s * 2;
    return wait;
}

void sq_host_stop(struct sq_host *h)
{
    pthread_mutex_lock(&h->lock);
    atomic_store(&h->stopping, true);
    pthread_cond_broadcast(&h->wake);
    for (size_t i = 0; i < h->ngroups; i++)
        pthread_cond_broadcast(&h->groups[i].wake);
    pthread_mutex_unlock(&h->lock);
}
