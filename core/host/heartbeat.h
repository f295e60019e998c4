/* heartbeat.h -- the heartbeat thread: leases, the sweep, and the host's periodic rounds. */
#ifndef SQ_HEARTBEAT_H
#define SQ_HEARTBEAT_H

/* The thread's body; arg is the struct sq_host. Runs while worker threads
 * run (host->running > 0). */
void *sq_heartbeat_main(void *arg);

#endif
