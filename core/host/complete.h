/* complete.h -- completion and fencing: in-transaction and autocommit completions, pending outcomes. */
#ifndef SQ_COMPLETE_H
#define SQ_COMPLETE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/queue.h"
#include "skipq/plugin.h"

struct sq_kind;
struct sq_worker;

/* Outcomes waiting for the next cycle, with the jobs they belong to. */
struct sq_pending {
    struct sq_outcomes o;
    struct sq_claimed *jobs; /* moved in; freed once recorded */
    struct sq_kind **kinds;  /* each job's kind (NULL: not registered) */
    char *applied;           /* what the cycle made of each (enum sq_complete) */
    bool retried;            /* a cycle carrying these outcomes failed once already */
    int slot_base, slot_n;   /* the worker's slots these jobs hold: [base, base + n) */
};

/* Room for `cap` outcomes (a worker's batch). False: out of memory (free
 * it all the same). */
bool sq_pending_init(struct sq_pending *p, int cap);
/* Forget the recorded outcomes (and free their jobs). */
void sq_pending_clear(struct sq_pending *p);
void sq_pending_free(struct sq_pending *p);
/* Queue an outcome for the next cycle; takes over *c. Returns its index. */
size_t sq_pending_add(struct sq_pending *p, struct sq_claimed *c, struct sq_kind *k, skipq_outcome out,
                      int64_t delay_ms, const char *error);
/* After a cycle: count and log each outcome (asking what a fenced one of
 * a retried cycle became), and wake for the retries when they are due. */
void sq_pending_report(struct sq_worker *w, PGconn *conn, const struct sq_pending *p);
/* The cycle statement failed for a reason other than the connection:
 * record each outcome on its own, then free the worker's slots and clear. */
void sq_pending_flush_one_by_one(struct sq_worker *w, PGconn **connp, struct sq_pending *p);

/*
 * The handler used the job's transaction: commit the done marker with its
 * writes, or roll them back. Returns what was recorded; SQ_COMPLETE_ERROR
 * when nothing was, with *out and `error` saying what the caller must now
 * record (a failure, or a retry when the done marker could not be written).
 */
enum sq_complete sq_complete_in_txn(struct sq_worker *w, PGconn **connp, const struct sq_claimed *c,
                                    skipq_outcome *out, char *error, size_t errlen);

/* Count an outcome in k's counters (k may be NULL) and log it. */
void sq_complete_log(struct sq_kind *k, PGconn *conn, const struct sq_claimed *c, enum sq_complete r,
                     const char *error);

#endif
