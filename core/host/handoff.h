/* handoff.h -- an idle worker thread takes new jobs from the enqueue itself (sql/060_handoff.sql). */
#ifndef SQ_HANDOFF_H
#define SQ_HANDOFF_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/queue.h"

struct sq_worker;

/* A worker thread's side of the hand-over. */
struct sq_handoff {
    bool registered; /* skipq.waiting may hold its row */
    bool look;       /* a job may have been handed over unannounced: look by name */
    int64_t set_ms;  /* monotonic ms of its last registration */
    char since[48];  /* when its registration began, as the database printed it ("": never registered) */
};

/* Nothing to claim: before the thread waits, register it (or check its
 * row, once a heartbeat) for the kinds it would claim, when hand-overs
 * suit it now. */
void sq_handoff_idle(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const char *kinds_array,
                     const char *leases_array);
/* The thread claimed claimed[0..n) itself: before they run, take its row
 * back, so that no enqueue hands it a job while it is busy. A job handed to
 * it meanwhile joins the batch (up to cap); any beyond go back uncharged.
 * Returns the batch's new size. */
int sq_handoff_claimed(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, struct sq_claimed *claimed, int n,
                       int cap);
/* The thread stops claiming (paused): take its row back; what was handed
 * to it meanwhile is read at its next look. */
void sq_handoff_pause(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn);
/* Whether the thread has hand-overs to read (announced or suspected). */
bool sq_handoff_pending(const struct sq_worker *w, const struct sq_handoff *ho);
/* Read the jobs handed to the thread, which holds none, into out[0..cap),
 * as a claim would. Returns the count (0: none after all), -1 on error
 * (err says what; the caller's connection handling applies). */
int sq_handoff_take(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, struct sq_claimed *out, int cap,
                    char *err, size_t errlen);
/* The thread exits: take its row back, and give back uncharged what was
 * handed to it and never read. */
void sq_handoff_exit(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn);

#endif
