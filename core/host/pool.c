/*
 * pool.c -- a worker's handler threads: [queue] threads shared among fewer
 * [queue] connections.
 *
 * WHY
 * Most handlers wait (an HTTP call, an e-mail, a query elsewhere). With one
 * session per handler thread, 128 such handlers mean 128 server backends
 * on a server with a few cores, all claiming and committing one small
 * transaction after another: they wait on each other's row locks and WAL
 * flushes, not on their handlers. With a pool, one session claims for a
 * share of the threads, records their outcomes in one statement, and
 * claims the next jobs while the last ones run (worker.c); the handler
 * threads here only run jobs.
 *
 * DESIGN
 * - The worker hands a claim's jobs in as a batch; handler threads take
 *   them in order (so the jobs never started are always the batch's tail,
 *   which the worker gives back when the host stops) and report each
 *   return. A worker keeps up to SQ_POOL_PARTS batches in the pool
 *   (worker.c): the oldest running, the next claimed while it runs.
 * - Once the host stops, no handler thread takes another job; waiting for
 *   a batch then ends when the jobs that were taken have returned.
 * - A handler that asks for its job's connection gets its thread's own
 *   session (jobapi.c opens it on first use; it is kept for the next job),
 *   so "side effects and done marker in one commit" holds here too. Only
 *   pools running transactional handlers pay for those sessions.
 */
#include "host/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "host/session.h"

struct sq_pool {
    struct sq_worker *w;
    sq_pool_run_fn *run;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a batch came, or quit */
    pthread_cond_t done; /* a batch is over (batch_over) */
    struct sq_batch *queue[SQ_POOL_PARTS]; /* batches with jobs not yet taken, oldest first */
    int nq;
    bool quit;
    int n;
    struct sq_hand *hands;
};

static void pop_front(struct sq_pool *p)
{
    memmove(p->queue, p->queue + 1, (size_t)(p->nq - 1) * sizeof *p->queue);
    p->nq--;
}

/* Is b over: closed, every job returned, or stopping with every job that
 * was taken returned? Under p->lock. */
static bool batch_over(const struct sq_pool *p, const struct sq_batch *b)
{
    return b->closed || b->returned >= b->n || (atomic_load(&p->w->host->stopping) && b->returned == b->taken);
}

static void *hand_main(void *arg)
{
    struct sq_hand *hd = arg;
    struct sq_pool *p = hd->pool;
    struct sq_host *h = p->w->host;
    sq_host_log_thread(h, hd->session.name);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->quit && (p->nq == 0 || atomic_load(&h->stopping)))
            pthread_cond_wait(&p->work, &p->lock);
        if (p->quit)
            break;
        struct sq_batch *b = p->queue[0];
        int i = b->taken++;
        if (b->taken == b->n)
            pop_front(p);
        pthread_mutex_unlock(&p->lock);
        p->run(hd, b, i);
        pthread_mutex_lock(&p->lock);
        b->returned++;
        if (batch_over(p, b))
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    if (hd->conn)
        sq_session_close(&hd->session, &hd->conn);
    return NULL;
}

/* A worker-shaped owner for a handler thread's session: session.c names,
 * publishes and marks it like a worker's. */
static void hand_init(struct sq_pool *p, struct sq_hand *hd, int i)
{
    struct sq_worker *w = p->w, *s = &hd->session;
    hd->pool = p;
    hd->index = i;
    hd->seed = (uint32_t)(sq_now_ms() ^ ((int64_t)getpid() << 8) ^ (uint32_t)(w->index * 131 + i) * 2654435761u);
    s->host = w->host;
    s->index = w->index;
    s->group = w->group;
    snprintf(s->name, sizeof s->name, "w%d.%d", w->index % 1000, i % 1000); /* w3.17: worker 3, thread 17 */
    snprintf(s->ident, sizeof s->ident, "%s", w->ident);
    s->live = &hd->live;
    s->slots_lock = w->slots_lock;
    s->handlers = 1;
    pthread_mutex_init(&s->conn_lock, NULL);
    s->sock = -1;
    s->ctl = -1;
}

struct sq_pool *sq_pool_start(struct sq_worker *w, int n, sq_pool_run_fn *run)
{
    struct sq_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->hands = calloc((size_t)n, sizeof *p->hands))) {
        free(p);
        return NULL;
    }
    p->w = w;
    p->run = run;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < n; i++) {
        hand_init(p, &p->hands[i], i);
        if (pthread_create(&p->hands[i].thread, NULL, hand_main, &p->hands[i]) != 0) {
            log_error("%s: cannot start handler thread %d of %d", w->name, i + 1, n);
            sq_pool_free(p);
            return NULL;
        }
        p->hands[i].started = true;
        p->n = i + 1;
    }
    return p;
}

void sq_pool_submit(struct sq_pool *p, struct sq_batch *b)
{
    pthread_mutex_lock(&p->lock);
    b->taken = b->returned = 0;
    b->closed = false;
    if (b->n > 0 && p->nq < SQ_POOL_PARTS) {
        p->queue[p->nq++] = b;
        pthread_cond_broadcast(&p->work);
    } else if (b->n > 0) {
        log_error("%s: handler pool queue full (a bug); the batch's leases will bring its jobs back",
                  p->w->name);
        b->closed = true;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Wait on p->done for at most ms (the stop and new jobs are announced on
 * the host's conditions, not this one: callers look again). */
static void wait_done(struct sq_pool *p, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&p->done, &p->lock, &ts);
}

int sq_pool_wait_any(struct sq_pool *p, struct sq_batch *const *b, int n, int64_t until_ms, const atomic_ulong *gen,
                     unsigned long seen)
{
    pthread_mutex_lock(&p->lock);
    int over = -1;
    for (;;) {
        for (int i = 0; i < n && over < 0; i++)
            if (batch_over(p, b[i]))
                over = i;
        if (over >= 0 || (gen && atomic_load(gen) != seen) || sq_now_ms() >= until_ms)
            break;
        wait_done(p, gen ? 5 : 20); /* a wake is seen within 5 ms */
    }
    pthread_mutex_unlock(&p->lock);
    return over;
}

int sq_pool_wait(struct sq_pool *p, struct sq_batch *b)
{
    pthread_mutex_lock(&p->lock);
    while (!batch_over(p, b))
        wait_done(p, 20);
    if (!b->closed) {
        b->closed = true;
        for (int i = 0; i < p->nq; i++)
            if (p->queue[i] == b) {
                memmove(p->queue + i, p->queue + i + 1, (size_t)(p->nq - i - 1) * sizeof *p->queue);
                p->nq--;
                break;
            }
    }
    int taken = b->taken;
    pthread_mutex_unlock(&p->lock);
    return taken;
}

void sq_pool_lock(struct sq_pool *p)
{
    pthread_mutex_lock(&p->lock);
}

void sq_pool_unlock(struct sq_pool *p)
{
    pthread_mutex_unlock(&p->lock);
}

void sq_pool_free(struct sq_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n; i++)
        if (p->hands[i].started)
            pthread_join(p->hands[i].thread, NULL);
    for (int i = 0; i < p->n; i++)
        pthread_mutex_destroy(&p->hands[i].session.conn_lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p->hands);
    free(p);
}
