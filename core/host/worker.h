/* worker.h -- a worker thread: claim, run the handlers, record the outcomes. */
#ifndef SQ_WORKER_H
#define SQ_WORKER_H

struct sq_worker;

/* The thread's body; arg is its struct sq_worker. Returns when the host
 * stops and its outcomes are recorded (or the grace period ends). */
void *sq_worker_main(void *arg);
/* The most jobs one claim of w takes: the group's batch (with handler
 * threads, pool.c, more than they can start at once only while the claim's
 * jobs run within the claim budget: part_limit in worker.c). */
int sq_worker_claim_cap(const struct sq_worker *w);

#endif
