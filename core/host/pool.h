/* pool.h -- a worker's handler threads, when it serves more threads than it has sessions. */
#ifndef SQ_POOL_H
#define SQ_POOL_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "host/state.h"

struct sq_pool;

/* How many claims a worker with handler threads keeps in its pool at once:
 * the oldest running, the others claimed while it runs (worker.c). */
#define SQ_POOL_PARTS 3

/* One claim's jobs, handed to the pool. The worker fills n and arg; the
 * counters are the pool's (under its lock). */
struct sq_batch {
    int n;        /* jobs claimed */
    int taken;    /* handed to a handler thread, in order: jobs [taken, n) never started */
    int returned; /* their handlers returned */
    bool closed;  /* the worker stopped waiting: nothing more is taken */
    void *arg;    /* the worker's, for run */
};

/* A handler thread. A handler that asks for its job's connection gets a
 * session of this thread's own (opened on first use, kept), owned by
 * `session`, which names it in the log as a worker's is. */
struct sq_hand {
    struct sq_pool *pool;
    int index;
    pthread_t thread;
    bool started;
    struct sq_worker session; /* a worker-shaped owner for its session (name, socket, progress) */
    struct sq_worker_live live;
    PGconn *conn; /* NULL until a handler needs it */
    uint32_t seed;
};

/* Run job i of b on hand h (a handler thread). */
typedef void sq_pool_run_fn(struct sq_hand *h, struct sq_batch *b, int i);

/* Start n handler threads for worker w. NULL: out of memory or no thread. */
struct sq_pool *sq_pool_start(struct sq_worker *w, int n, sq_pool_run_fn *run);
/* Hand b's jobs to the handler threads (after any batch handed before). */
void sq_pool_submit(struct sq_pool *p, struct sq_batch *b);
/* Wait until every job of b has returned, or, once the host stops, every
 * job a handler took; then close b. Returns b->taken. */
int sq_pool_wait(struct sq_pool *p, struct sq_batch *b);
/* Wait until one of the n batches b[] is over (as sq_pool_wait finds it)
 * and return its index, without closing it; or give up (-1) at monotonic
 * `until_ms` (INT64_MAX: never) or, with gen, as soon as *gen is no longer
 * `seen` (new jobs were announced). */
int sq_pool_wait_any(struct sq_pool *p, struct sq_batch *const *b, int n, int64_t until_ms, const atomic_ulong *gen,
                     unsigned long seen);
/* The lock a handler thread holds to hand in its outcome (the worker's
 * pending list and slots are shared by the handler threads). */
void sq_pool_lock(struct sq_pool *p);
void sq_pool_unlock(struct sq_pool *p);
/* Stop and join the handler threads (after every batch was waited for)
 * and close their sessions. */
void sq_pool_free(struct sq_pool *p);

#endif
