/* slots.h -- the jobs a host holds: taken at claim, kept until their outcome is recorded. */
#ifndef SQ_SLOTS_H
#define SQ_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sq_claimed;
struct sq_host;
struct sq_outcomes;
struct sq_slot;
struct sq_worker;

/* ---- a worker's own slots (k: the job's place in its batch) ---- */

/* The lock of w's slots (a robust one left by a dead process is taken over). */
void sq_slots_lock(struct sq_worker *w);
void sq_slots_unlock(struct sq_worker *w);

/* Occupy slot k with a claimed job of kind index `kind` (-1: none); its
 * timeout starts when it runs. */
void sq_slot_take(struct sq_worker *w, int k, const struct sq_claimed *c, int kind, int64_t lease_ms);
/* The handler starts now; the kind's timeout (0: none) runs from here. */
void sq_slot_start(struct sq_worker *w, int k, int64_t timeout_ms);
/* The handler returned: from now on no timeout applies. Returns whether
 * the timeout had already passed. */
bool sq_slot_returned(struct sq_worker *w, int k);
/* The outcome waits for the next cycle; shutdown may record it if the
 * thread is still busy with the rest of its batch when the grace period
 * ends. The slot keeps a copy of `error` (SQ_SLOT_ERROR bytes at most). */
void sq_slot_finish(struct sq_worker *w, int k, short outcome, int64_t delay_ms, const char *error);
void sq_slot_clear(struct sq_worker *w, int k);
/* Free slots [from, from + n). */
void sq_slots_clear(struct sq_worker *w, int from, int n);

/* ---- every slot of the host ---- */

/* How many jobs the host can hold at once, plus one. */
size_t sq_slots_capacity(const struct sq_host *h);

/* The leases a heartbeat renews (arrays of sq_slots_capacity()). */
struct sq_leases {
    int64_t *ids, *execs, *leases;
    struct sq_slot **slot;
    int *worker; /* index of each slot's worker */
    char *state; /* enum sq_lease_state, from sq_queue_heartbeat() */
    size_t n;
};
/* The leases to renew now; a job past its kind's timeout is asked to stop
 * and left out. */
void sq_slots_snapshot(struct sq_host *h, struct sq_leases *s);
/* Apply a heartbeat's result (ok: the statement ran; sent_at: monotonic ms
 * it was sent): renew deadlines, raise should-stop on loss or expiry. */
void sq_slots_renewed(struct sq_host *h, const struct sq_leases *s, bool ok, int64_t sent_at);

/* Shutdown begins: every slot learns when the grace ends (`at`, monotonic
 * ms: skipq_job_deadline_ms). Returns how many handlers are running. */
int sq_slots_stopping(struct sq_host *h, int64_t at);
/* The grace is over: raise should-stop for every slot. Returns how many
 * handlers are still running. */
int sq_slots_tell_stop(struct sq_host *h);

/* Shutdown: ask every handler to stop; the jobs still running go to
 * ids/execs (n of them), those whose handlers returned to `done`. False:
 * out of memory. */
bool sq_slots_stop_all(struct sq_host *h, int64_t *ids, int64_t *execs, size_t *n, struct sq_outcomes *done);

#endif
