/* listen.h -- the listener thread: LISTEN for new jobs and wake idle threads. */
#ifndef SQ_LISTEN_H
#define SQ_LISTEN_H

/* The thread's body; arg is the struct sq_host. Runs until the host stops. */
void *sq_listener_main(void *arg);

#endif
