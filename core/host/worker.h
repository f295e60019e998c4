/* worker.h -- a worker thread: claim, run the handlers, record the outcomes. */
#ifndef SQ_WORKER_H
#define SQ_WORKER_H

struct sq_worker;

/* The thread's body; arg is its struct sq_worker. Returns when the host
 * stops and its outcomes are recorded (or the grace period ends). */
void *sq_worker_main(void *arg);

#endif
