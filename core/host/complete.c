/*
 * complete.c -- recording what a handler's attempt came to, fenced.
 *
 * DESIGN
 * - A handler that never asks for the connection runs with no transaction
 *   open: the claim has committed, and its outcome waits in the worker's
 *   pending list for the next cycle, which records it in the same round
 *   trip as the next claim (queue.c). A finished job keeps its slot, and so
 *   its lease, until the cycle that records its outcome has committed.
 * - A handler that asks for the connection gets BEGIN on the worker's
 *   connection, and its writes commit with the done marker
 *   (sq_complete_in_txn), or roll back with a failure or a fenced
 *   completion. When the connection dies during that COMMIT, the outcome is
 *   asked of the database on a new session, never guessed.
 * - Every outcome is fenced on the execution (queue.c): one that changes
 *   nothing was either taken over (the lease was lost), cancelled by an
 *   operator, or -- when the statement carrying it was sent again after a
 *   lost reply -- committed by the first try. The read-backs of queue.c
 *   tell these apart, only on those rare paths.
 * - When a cycle fails for a reason other than the connection, each
 *   outcome is recorded on its own (autocommit, retried across reconnects:
 *   fencing makes a repeat harmless), so one bad row cannot block the rest.
 */
#include "host/complete.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "host/kinds.h"
#include "host/session.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"

static void count_outcome(struct sq_kind *k, PGconn *conn, const struct sq_claimed *c, enum sq_complete r)
{
    if (!k || r == SQ_COMPLETE_ERROR)
        return;
    atomic_ulong *n = r == SQ_COMPLETE_DONE                              ? &k->n->done
                      : r == SQ_COMPLETE_RETRY                           ? &k->n->retried
                      : r == SQ_COMPLETE_DEAD                            ? &k->n->dead
                      : sq_queue_cancelled(conn, c->id, c->execution_id) ? &k->n->cancelled
                                                                         : &k->n->fenced;
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

void sq_complete_log(struct sq_kind *k, PGconn *conn, const struct sq_claimed *c, enum sq_complete r,
                     const char *error)
{
    count_outcome(k, conn, c, r);
    switch (r) {
    case SQ_COMPLETE_DONE:
        log_debug("job %" PRId64 " (%s) done on attempt %d", c->id, c->kind, c->attempt);
        break;
    case SQ_COMPLETE_RETRY:
        log_info("job %" PRId64 " (%s) failed attempt %d of %d, will retry: %s", c->id, c->kind, c->attempt,
                 c->max_attempts, error);
        break;
    case SQ_COMPLETE_DEAD:
        log_warn("job %" PRId64 " (%s) is dead after attempt %d of %d: %s", c->id, c->kind, c->attempt,
                 c->max_attempts, error);
        break;
    case SQ_COMPLETE_FENCED:
        log_warn("job %" PRId64 " (%s): result of execution %" PRId64
                 " discarded: the lease was lost and the job is no longer this worker's",
                 c->id, c->kind, c->execution_id);
        break;
    case SQ_COMPLETE_ERROR:
        break;
    }
}

/* Autocommit completion, retried across reconnects: fencing makes a repeat
 * harmless (it changes nothing the second time). */
static enum sq_complete complete_autocommit(struct sq_worker *w, PGconn **connp, const struct sq_claimed *c,
                                            skipq_outcome out, int64_t delay_ms, const char *error)
{
    char err[512];
    for (int tries = 0;; tries++) {
        if (!*connp)
            *connp = sq_session_reconnect(w, false); /* retries until it works */
        enum sq_complete r = out == SKIPQ_DONE
                                 ? sq_queue_done(*connp, c->id, c->execution_id, err, sizeof err)
                                 : sq_queue_fail(*connp, c->id, c->execution_id, out == SKIPQ_FAIL, delay_ms,
                                                 error, err, sizeof err);
        if (r == SQ_COMPLETE_FENCED && tries > 0)
            return sq_queue_recorded(*connp, c->id, c->execution_id);
        if (r != SQ_COMPLETE_ERROR)
            return r;
        bool lost = sq_db_conn_lost(*connp, NULL);
        if (lost || tries < 3) {
            log_warn("job %" PRId64 ": could not record the outcome (will retry): %s", c->id, err);
            if (lost)
                sq_session_close(w, connp);
            continue;
        }
        log_error("job %" PRId64 ": could not record the outcome; its lease will expire and it will run again: %s",
                  c->id, err);
        return SQ_COMPLETE_ERROR;
    }
}

enum sq_complete sq_complete_in_txn(struct sq_worker *w, PGconn **connp, const struct sq_claimed *c,
                                    skipq_outcome *out, char *error, size_t errlen)
{
    char err[512];
    PGconn *conn = *connp;
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    if (ts == PQTRANS_INERROR && *out == SKIPQ_DONE) {
        snprintf(error, errlen, "handler returned done but its transaction had failed: %s", PQerrorMessage(conn));
        *out = SKIPQ_RETRY;
    }
    if (*out == SKIPQ_DONE) {
        if (ts == PQTRANS_IDLE)
            log_warn("job %" PRId64 ": the handler ended the transaction skipq opened for it; its writes were "
                     "committed apart from the done marker",
                     c->id);
        enum sq_complete r = sq_queue_done(conn, c->id, c->execution_id, err, sizeof err);
        if (r == SQ_COMPLETE_DONE) {
            PGresult *res = PQexec(conn, "COMMIT");
            bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
            PQclear(res);
            if (ok)
                return r;
            /* COMMIT's outcome is unknown: ask, on a new session, whether our
             * execution is the job's done one. Never guess. */
            log_warn("job %" PRId64 ": connection lost during COMMIT; checking whether it landed", c->id);
            sq_session_close(w, connp);
            *connp = conn = sq_session_reconnect(w, false);
            if (sq_queue_committed_done(conn, c->id, c->execution_id))
                return SQ_COMPLETE_DONE;
            snprintf(error, errlen, "connection lost while committing the handler's transaction");
            *out = SKIPQ_RETRY;
            return SQ_COMPLETE_ERROR; /* record as a retry below */
        }
        PQclear(PQexec(conn, "ROLLBACK"));
        if (r == SQ_COMPLETE_FENCED) {
            log_warn("job %" PRId64 ": the handler's transaction was rolled back", c->id);
            return r;
        }
        snprintf(error, errlen, "could not mark the job done: %s", err);
        *out = SKIPQ_RETRY;
        return SQ_COMPLETE_ERROR;
    }
    PQclear(PQexec(conn, "ROLLBACK"));
    return SQ_COMPLETE_ERROR; /* not completed yet: the caller records the failure */
}

/* Stands in for an error message strdup could not copy. */
static char no_memory_for_error[] = "";

bool sq_pending_init(struct sq_pending *p, int cap)
{
    memset(p, 0, sizeof *p);
    size_t n = (size_t)cap;
    p->slot_n = cap;
    p->o.ids = calloc(n, sizeof *p->o.ids);
    p->o.execs = calloc(n, sizeof *p->o.execs);
    p->o.outcomes = calloc(n, sizeof *p->o.outcomes);
    p->o.delays = calloc(n, sizeof *p->o.delays);
    p->o.errors = calloc(n, sizeof *p->o.errors);
    p->jobs = calloc(n, sizeof *p->jobs);
    p->kinds = calloc(n, sizeof *p->kinds);
    p->applied = calloc(n, 1);
    return p->o.ids && p->o.execs && p->o.outcomes && p->o.delays && p->o.errors && p->jobs && p->kinds &&
           p->applied;
}

void sq_pending_clear(struct sq_pending *p)
{
    for (size_t i = 0; i < p->o.n; i++) {
        if (p->o.errors[i] != no_memory_for_error)
            free(p->o.errors[i]);
        p->o.errors[i] = NULL;
        sq_claimed_clear(&p->jobs[i]);
    }
    p->o.n = 0;
    p->o.dropping = 0;
    p->retried = false;
}

void sq_pending_free(struct sq_pending *p)
{
    sq_pending_clear(p);
    free(p->o.ids);
    free(p->o.execs);
    free(p->o.outcomes);
    free(p->o.delays);
    free(p->o.errors);
    free(p->jobs);
    free(p->kinds);
    free(p->applied);
}

size_t sq_pending_add(struct sq_pending *p, struct sq_claimed *c, struct sq_kind *k, skipq_outcome out,
                      int64_t delay_ms, const char *error)
{
    size_t i = p->o.n++;
    p->kinds[i] = k;
    p->o.ids[i] = c->id;
    p->o.execs[i] = c->execution_id;
    p->o.outcomes[i] = (short)out;
    if (out == SKIPQ_DONE && k && atomic_load(&k->keep_done) == 0)
        p->o.dropping++;
    /* At most ten years: larger delays overflow an interval. */
    p->o.delays[i] = delay_ms < 0 ? 0 : delay_ms > 315360000000LL ? 315360000000LL : delay_ms;
    p->o.errors[i] = strdup(out == SKIPQ_DONE || !error ? "" : error);
    if (p->o.errors[i])
        sq_utf8_sanitize(p->o.errors[i]);
    else
        p->o.errors[i] = no_memory_for_error;
    p->jobs[i] = *c;
    memset(c, 0, sizeof *c);
    return i;
}

/* A retry recorded at `now` runs again after its delay: wake for it then. */
static void note_retry(struct sq_worker *w, enum sq_complete r, int64_t delay_ms, int64_t now)
{
    if (r == SQ_COMPLETE_RETRY)
        sq_group_due(w->host, w->group, now + delay_ms);
}

void sq_pending_report(struct sq_worker *w, PGconn *conn, const struct sq_pending *p)
{
    int64_t now = sq_now_ms();
    for (size_t i = 0; i < p->o.n; i++) {
        enum sq_complete r = (enum sq_complete)p->applied[i];
        if (r == SQ_COMPLETE_FENCED && p->retried)
            r = sq_queue_recorded(conn, p->o.ids[i], p->o.execs[i]);
        sq_complete_log(p->kinds[i], conn, &p->jobs[i], r, p->o.errors[i] ? p->o.errors[i] : "");
        note_retry(w, r, p->o.delays[i], now);
    }
}

void sq_pending_flush_one_by_one(struct sq_worker *w, PGconn **connp, struct sq_pending *p)
{
    for (size_t i = 0; i < p->o.n; i++) {
        enum sq_complete r = complete_autocommit(w, connp, &p->jobs[i], (skipq_outcome)p->o.outcomes[i],
                                                 p->o.delays[i], p->o.errors[i]);
        sq_complete_log(p->kinds[i], *connp, &p->jobs[i], r, p->o.errors[i]);
        note_retry(w, r, p->o.delays[i], sq_now_ms());
    }
    sq_slots_clear(w, p->slot_base, p->slot_n); /* before the strings the slots point to */
    sq_pending_clear(p);
}
