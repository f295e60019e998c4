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
    bool registered; /* as far as the thread knows, skipq.waiting has its row */
    bool look;       /* a job may have been handed over unannounced: look by name */
    int64_t set_ms;  /* monotonic ms of its last registration */
};

/* Nothing to claim: before the thread waits, register it (or keep its row
 * fresh) for the kinds it would claim, when hand-overs suit it now. */
void sq_handoff_idle(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const char *kinds_array,
                     const char *leases_array);
/* The thread claimed jobs of its own (or stops claiming): take its row
 * back, so that no enqueue hands it a job while it is busy. */
void sq_handoff_busy(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn);
/* Whether the thread has hand-overs to read (announced or suspected). */
bool sq_handoff_pending(const struct sq_worker *w, const struct sq_handoff *ho);
/* Read the jobs handed to the thread into out[0..cap), as a claim would,
 * leaving the nheld it holds. Returns the count (0: none after all), -1 on
 * error (err says what; the caller's connection handling applies). */
int sq_handoff_take(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const int64_t *held, size_t nheld,
                    struct sq_claimed *out, int cap, char *err, size_t errlen);
/* The thread exits: take its row back, and give back uncharged what was
 * handed to it and never read. */
void sq_handoff_exit(struct sq_worker *w, struct sq_handoff *ho, PGconn *conn, const int64_t *held, size_t nheld);

#endif
