/* queue.h -- the job protocol: every statement a worker, the heartbeat or shutdown sends. */
#ifndef SQ_QUEUE_H
#define SQ_QUEUE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

struct sq_claimed {
    int64_t id;
    int64_t execution_id;
    char *kind;    /* malloc'd */
    char *payload; /* malloc'd JSON text */
    size_t payload_len;
    int attempt;
    int max_attempts;
    int64_t lease_ms; /* what is left of its lease when less than its kind's (a hand-over); 0: a whole one */
};

/* Prepare every statement on a fresh session (nothing to do when unnamed). */
bool sq_queue_prepare(PGconn *conn, char *err, size_t errlen);

/* Send every statement unnamed instead of prepared, for sessions behind a
 * pooler in transaction mode. Process-wide: call before any thread starts. */
void sq_queue_use_unnamed(bool on);

/* Most payload bytes one claim takes ([host] claim_bytes); a claim always
 * takes at least one job. Process-wide, and safe to change while threads
 * claim (a reload). */
void sq_queue_set_claim_bytes(int64_t bytes);
int64_t sq_queue_claim_bytes(void);

/*
 * Claim up to `limit` runnable jobs of `queue` whose kind is in kinds[]
 * (with lease_ms[i] for kinds[i]) in one statement: lock, insert the
 * execution rows, mark running. Returns the number claimed (0..limit) or -1
 * on error (message in err). Claimed jobs go to out[]; free each with
 * sq_claimed_clear().
 */
int sq_queue_claim(PGconn *conn, const char *queue, const char *kinds_array, const char *leases_array,
                   const char *worker, int limit, struct sq_claimed *out, char *err, size_t errlen);
void sq_claimed_clear(struct sq_claimed *c);

/* Result of a fenced completion. */
enum sq_complete {
    SQ_COMPLETE_ERROR = -1,  /* SQL failed; see err (and sq_db_conn_lost) */
    SQ_COMPLETE_FENCED = 0,  /* the job is no longer this execution's: nothing changed */
    SQ_COMPLETE_DONE = 1,
    SQ_COMPLETE_RETRY = 2,   /* back to pending with a delay */
    SQ_COMPLETE_DEAD = 3
};

/* Outcomes of finished jobs, recorded in bulk by sq_queue_cycle() or
 * sq_queue_record(). */
struct sq_outcomes {
    int64_t *ids;
    int64_t *execs;
    short *outcomes;  /* skipq_outcome: 0 done, 1 retry, 2 fail */
    int64_t *delays;  /* retry delay, ms */
    char **errors;    /* "" for none */
    size_t n;
    size_t dropping;  /* of the n, done jobs of kinds this host runs with keep_done = off:
                       * when all are, the outcomes delete before they lock */
};

/*
 * Record outcomes, fenced per job, and claim nothing: the one outcome
 * statement. applied[i] receives the sq_complete of done[i]. Returns 0, or
 * -1 on error (nothing was recorded). Shutdown records the outcomes of
 * handlers that had returned with it.
 */
int sq_queue_record(PGconn *conn, const struct sq_outcomes *done, char *applied, char *err, size_t errlen);

/* A single completion: sq_queue_record() of a batch of one (inside a
 * handler's transaction too: the done marker commits with its writes). */
enum sq_complete sq_queue_done(PGconn *conn, int64_t id, int64_t execution_id, char *err, size_t errlen);
enum sq_complete sq_queue_fail(PGconn *conn, int64_t id, int64_t execution_id, bool permanent, int64_t delay_ms,
                               const char *error, char *err, size_t errlen);

/*
 * Fencing read-backs, for the rare paths that need them.
 * sq_queue_recorded: an outcome changed nothing, on a retry of a statement
 * whose reply was lost: did the first try commit it? Only the worker that
 * holds an execution marks it done, retry or dead (the sweep writes lost,
 * shutdown interrupted), so its status says: DONE, RETRY or DEAD if it
 * did, FENCED if not (or when it cannot be read).
 * sq_queue_cancelled: a fenced execution was cancelled by an operator
 * (rather than taken over). False on a broken connection.
 * sq_queue_committed_done: after the connection died during COMMIT of a
 * handler's transaction: is this execution its job's done one?
 */
enum sq_complete sq_queue_recorded(PGconn *conn, int64_t id, int64_t execution_id);
bool sq_queue_cancelled(PGconn *conn, int64_t id, int64_t execution_id);
bool sq_queue_committed_done(PGconn *conn, int64_t id, int64_t execution_id);

/*
 * One round trip: record `done` (fenced per job) and claim up to `limit`
 * jobs as sq_queue_claim() does. With `limited`, the claim also honours
 * skipq.kind_limits (max_running, rate) for the kinds that have a row
 * there; without, it ignores them (the plain, cheaper statement). applied[i] receives the sq_complete of
 * done[i] (SQ_COMPLETE_FENCED if it changed nothing). Returns the number of
 * jobs claimed, or -1 on error (nothing was recorded or claimed).
 */
int sq_queue_cycle(PGconn *conn, const char *queue, const char *kinds_array, const char *leases_array,
                   const char *worker, int limit, bool limited, const struct sq_outcomes *done,
                   struct sq_claimed *out, char *applied, char *err, size_t errlen);

enum sq_lease_state {
    SQ_LEASE_LOST = 0,     /* no longer this execution's: reclaimed, released or finished */
    SQ_LEASE_EXTENDED = 1,
    SQ_LEASE_BUSY = 2      /* still ours, but locked by someone right now: not renewed this time */
};

/*
 * Extend the leases of the given running executions without waiting for
 * any row lock. On success returns the number extended and sets state[i]
 * (an enum sq_lease_state) for each.
 */
int sq_queue_heartbeat(PGconn *conn, const int64_t *ids, const int64_t *execs, const int64_t *lease_ms, size_t n,
                       char *state, char *err, size_t errlen);

/* Expired leases -> pending (or dead when out of attempts); returns count. */
int sq_queue_reap(PGconn *conn, int limit, char *err, size_t errlen);
/* The same, calling each (may be NULL) with the kind of every job recovered. */
int sq_queue_reap_kinds(PGconn *conn, int limit, void (*each)(void *arg, const char *kind), void *arg, char *err,
                        size_t errlen);

/* After a lost connection: give back jobs claimed under `worker` by a
 * cycle whose reply never arrived (all its running jobs except the n in
 * `held`), uncharged. Returns the count, -1 on error. */
int sq_queue_recover(PGconn *conn, const char *worker, const int64_t *held, size_t n, char *err, size_t errlen);
/* The same for any reason `why` (the executions' error and the jobs'
 * last_error): a worker process that died gives back, through its
 * supervisor, the jobs it had claimed and not started. */
int sq_queue_give_back(PGconn *conn, const char *worker, const int64_t *held, size_t n, const char *why, char *err,
                       size_t errlen);

/* Hand-over at enqueue (sql/060_handoff.sql): an idle worker of `host`
 * (its skipq.hosts id) registers as waiting for jobs of `kinds_array` (with
 * their leases, as for a claim) in `queue` for valid_ms, and takes its registration back when it claims
 * work of its own. What became of the registration: */
enum sq_waiter {
    SQ_WAITER_ERROR = -1,
    SQ_WAITER_KEPT,    /* set: it was there and is refreshed */
    SQ_WAITER_NEW,     /* set: there was none */
    SQ_WAITER_BUSY,    /* an enqueue holds it right now, handing this worker a job */
    SQ_WAITER_REMOVED, /* unset: removed */
    SQ_WAITER_GONE     /* unset: there was none */
};
/* Set: `since` (sincelen bytes) receives when the registration began, as
 * the database prints a timestamptz ("" when busy). */
enum sq_waiter sq_queue_waiter_set(PGconn *conn, const char *worker, const char *host, const char *queue,
                                   const char *kinds_array, const char *leases_array, int64_t valid_ms, char *since,
                                   size_t sincelen, char *err, size_t errlen);
/* Unset; with wait, a row a commit holds is waited for (up to 5 s). */
enum sq_waiter sq_queue_waiter_unset(PGconn *conn, const char *worker, bool wait, char *err, size_t errlen);
/* The worker exits: its row goes (GONE: a job had been handed to it). */
enum sq_waiter sq_queue_waiter_gone(PGconn *conn, const char *worker, char *err, size_t errlen);
/* The jobs an enqueue handed to `worker`, read into out[0..cap) as a claim
 * would, except the nheld jobs in `held`: those of ids[0..nids) or, with
 * ids NULL, every job running under its name whose attempt started at
 * `since` or later (when it registered: jobs it held before are not
 * hand-overs). A job whose lease is more than half gone gets a whole lease
 * again first (fenced); one with less than a whole lease left says so in
 * lease_ms. Returns the count, -1 on error. */
int sq_queue_handed(PGconn *conn, const char *worker, const int64_t *ids, size_t nids, const char *since,
                    const int64_t *held, size_t nheld, struct sq_claimed *out, int cap, char *err, size_t errlen);

/* A dead worker process's session may still be running its last
 * statement on the server (a backend notices its client is gone only when
 * it next reads or writes): end it and wait up to wait_ms for it to be
 * gone, so nothing it claims commits after its jobs were given back.
 * Only a server process of the session's own role is ended. Returns 1 when
 * none is left, 0 when it is still there after wait_ms, -1 on error. */
int sq_queue_end_backend(PGconn *conn, int pid, int wait_ms, char *err, size_t errlen);

/* Shutdown: give back jobs whose handlers are still running. */
int sq_queue_release(PGconn *conn, const int64_t *ids, const int64_t *execs, size_t n, char *err, size_t errlen);

/* Retention: delete up to `limit` jobs in `status` finished more than
 * age_ms ago. Returns the number deleted, -1 if another host holds the
 * retention lock, -2 on error. */
int sq_queue_retain(PGconn *conn, const char *status, int64_t age_ms, int limit, char *err, size_t errlen);
/* The same for done jobs that left skipq.jobs as they finished (sql/058):
 * the executions of up to limit that finished more than age_ms ago. */
int sq_queue_retain_left(PGconn *conn, int64_t age_ms, int limit, char *err, size_t errlen);

/* Format a text array as a PostgreSQL array literal (sq_int8_array: util.h). */
char *sq_text_array(const char *const *v, size_t n);

#endif
