/*
 * test_queue.c -- the SQL protocol of core/host/queue.h, driven directly on test
 * connections: claim order and filters, the claim's audit row and lease, the
 * foreign-key lock trap, fenced completions, the lease sweep, retries,
 * heartbeats, release, skipq.enqueue() and the retry backoff.
 *
 * Times are compared on the database clock only, and where possible between
 * two values written by the same statement (same now()), so the assertions
 * are exact and never depend on how fast the machine is.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "host/kinds.h"
#include "host/queue.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* A connection with the queue statements prepared, and a guard against hangs:
 * a claim that blocked on a lock would fail instead of hanging the test. */
static PGconn *qconn(const struct th_db *db)
{
    PGconn *c = th_connect(db);
    char err[512];
    cr_assert(sq_queue_prepare(c, err, sizeof err), "sq_queue_prepare: %s", err);
    PQclear(th_query(c, "SET statement_timeout = '20s'"));
    return c;
}

/* Claim up to `limit` jobs of `queue` for the given kinds and leases. */
static int claim_k(PGconn *c, const char *queue, const char *const *kinds, const int64_t *leases, size_t nk,
                   const char *worker, int limit, struct sq_claimed *out)
{
    char *ka = sq_text_array(kinds, nk);
    char *la = sq_int8_array(leases, nk);
    cr_assert(ka && la);
    char err[512] = "";
    int n = sq_queue_claim(c, queue, ka, la, worker, limit, out, err, sizeof err);
    cr_assert_geq(n, 0, "sq_queue_claim failed: %s", err);
    cr_assert_leq(n, limit, "claim returned %d jobs for LIMIT %d", n, limit);
    free(ka);
    free(la);
    return n;
}

/* Claim at most one job of one kind. Returns 0 or 1. */
static int claim1(PGconn *c, const char *queue, const char *kind, int64_t lease_ms, const char *worker,
                  struct sq_claimed *out)
{
    const char *kinds[1] = {kind};
    int64_t leases[1] = {lease_ms};
    return claim_k(c, queue, kinds, leases, 1, worker, 1, out);
}

/* Claim exactly one job and return it (fails the test otherwise). */
static struct sq_claimed must_claim(PGconn *c, const char *kind, int64_t lease_ms, const char *worker)
{
    struct sq_claimed out = {0};
    cr_assert_eq(claim1(c, "default", kind, lease_ms, worker, &out), 1, "expected a job of kind %s to claim", kind);
    return out;
}

/* SELECT skipq.enqueue(<args>) */
static int64_t enq(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int64_t enq(PGconn *c, const char *fmt, ...)
{
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    long long id = th_scalarf(c, "SELECT skipq.enqueue(%s)", args);
    cr_assert_gt(id, 0);
    return (int64_t)id;
}

/* Run SQL expected to fail; returns its SQLSTATE (malloc'd) and message. */
static char *fails_with(PGconn *c, const char *sql, char **message)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    cr_assert(st == PGRES_FATAL_ERROR, "expected an error from: %s (status %s)", sql, PQresStatus(st));
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    char *s = strdup(state ? state : "");
    if (message)
        *message = strdup(PQresultErrorMessage(r));
    PQclear(r);
    return s;
}

static const char *job_status(PGconn *c, int64_t id, char *buf, size_t len)
{
    char *s = th_textf(c, "SELECT status FROM skipq.jobs WHERE id = %" PRId64, id);
    snprintf(buf, len, "%s", s ? s : "NULL");
    free(s);
    return buf;
}

#define EXPECT_STATUS(c, id, want)                                                                              \
    do {                                                                                                        \
        char sbuf_[32];                                                                                         \
        cr_expect_str_eq(job_status((c), (id), sbuf_, sizeof sbuf_), (want), "job %" PRId64 " status", (id)); \
    } while (0)

/* ---- claim order and filters ------------------------------------------------------------ */

Test(claim, order_is_priority_then_run_at_then_id, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    /* Enqueued in an order that differs from the expected claim order. */
    int64_t lo_old_a = enq(c, "'k', run_at => '2020-01-01 00:00:00+00'");
    int64_t neg = enq(c, "'k', priority => -1, run_at => '2000-01-01 00:00:00+00'");
    int64_t hi_late = enq(c, "'k', priority => 5, run_at => '2020-01-01 00:00:05+00'");
    int64_t hi_early = enq(c, "'k', priority => 5, run_at => '2020-01-01 00:00:01+00'");
    int64_t lo_old_b = enq(c, "'k', run_at => '2020-01-01 00:00:00+00'"); /* same run_at: id breaks the tie */
    int64_t lo_new = enq(c, "'k', run_at => now() - interval '1 second'");
    int64_t want[] = {hi_early, hi_late, lo_old_a, lo_old_b, lo_new, neg};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct sq_claimed j = must_claim(c, "k", 30000, "w");
        cr_expect_eq(j.id, want[i], "claim %zu: got job %" PRId64 ", expected %" PRId64, i, j.id, want[i]);
        sq_claimed_clear(&j);
    }
    struct sq_claimed none = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0, "nothing should be left to claim");
    PQfinish(c);
}

Test(claim, future_run_at_waits_until_due, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    /* The future job has the higher priority: only run_at can hold it back. */
    int64_t later = enq(c, "'k', priority => 100, run_at => now() + interval '1 hour'");
    int64_t now_job = enq(c, "'k'");
    struct sq_claimed j = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j.id, now_job, "claimed %" PRId64 " instead of the runnable job", j.id);
    sq_claimed_clear(&j);
    struct sq_claimed none = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0, "a job due in an hour was claimed");
    EXPECT_STATUS(c, later, "pending");
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, later), 0);

    th_execf(c, "UPDATE skipq.jobs SET run_at = now() - interval '1 second' WHERE id = %" PRId64, later);
    j = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j.id, later, "the job became due but was not claimed");
    sq_claimed_clear(&j);
    PQfinish(c);
}

Test(claim, honours_queue_and_kinds, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    /* Jobs that must never be returned get the higher priority. */
    int64_t other_queue = enq(c, "'a', queue => 'q2', priority => 50");
    int64_t other_kind = enq(c, "'c', queue => 'q1', priority => 50");
    int64_t a = enq(c, "'a', queue => 'q1'");
    int64_t b = enq(c, "'b', queue => 'q1'");
    const char *kinds[2] = {"a", "b"};
    int64_t leases[2] = {1000, 60000};
    struct sq_claimed out[10] = {{0}};
    int n = claim_k(c, "q1", kinds, leases, 2, "w", 10, out);
    cr_expect_eq(n, 2, "claimed %d jobs from q1 for kinds {a,b}", n);
    bool got_a = false, got_b = false;
    for (int i = 0; i < n; i++) {
        cr_expect(out[i].id == a || out[i].id == b, "claimed job %" PRId64 " (%s), outside queue q1 or kinds {a,b}",
                  out[i].id, out[i].kind);
        if (out[i].id == a) {
            got_a = true;
            cr_expect_str_eq(out[i].kind, "a");
        }
        if (out[i].id == b) {
            got_b = true;
            cr_expect_str_eq(out[i].kind, "b");
        }
        sq_claimed_clear(&out[i]);
    }
    cr_expect(got_a && got_b);
    /* Each kind got its own lease. */
    cr_expect_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e ON e.id = "
                            "j.current_execution_id WHERE j.id = %" PRId64
                            " AND j.lease_expires_at = e.started_at + interval '1000 milliseconds'",
                            a),
                 1, "kind a should have the 1000 ms lease");
    cr_expect_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e ON e.id = "
                            "j.current_execution_id WHERE j.id = %" PRId64
                            " AND j.lease_expires_at = e.started_at + interval '60000 milliseconds'",
                            b),
                 1, "kind b should have the 60000 ms lease");
    EXPECT_STATUS(c, other_queue, "pending");
    EXPECT_STATUS(c, other_kind, "pending");
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id IN (%" PRId64 ", %" PRId64 ")",
                            other_queue, other_kind),
                 0);
    /* Nothing else matches, however often we ask. */
    n = claim_k(c, "q1", kinds, leases, 2, "w", 10, out);
    cr_expect_eq(n, 0);
    /* The other kind is claimable by a claim that names it. */
    struct sq_claimed j = {0};
    cr_expect_eq(claim1(c, "q1", "c", 30000, "w", &j), 1);
    cr_expect_eq(j.id, other_kind);
    sq_claimed_clear(&j);
    cr_expect_eq(claim1(c, "q2", "a", 30000, "w", &j), 1);
    cr_expect_eq(j.id, other_queue);
    sq_claimed_clear(&j);
    PQfinish(c);
}

Test(claim, records_one_execution_and_marks_running, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    int64_t id = enq(c, "'k', payload => '{\"x\": 1}', max_attempts => 4");
    struct sq_claimed j = must_claim(c, "k", 45000, "host-a:1:t0");
    cr_expect_eq(j.id, id);
    cr_expect_eq(j.attempt, 1);
    cr_expect_eq(j.max_attempts, 4);
    cr_expect_str_eq(j.kind, "k");
    cr_expect_str_eq(j.payload, "{\"x\": 1}");
    cr_expect_eq(j.payload_len, strlen(j.payload));

    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, id), 1);
    cr_expect_eq(th_scalarf(c, "SELECT id FROM skipq.job_executions WHERE job_id = %" PRId64, id), j.execution_id);
    th_expect_text(c, "running", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "host-a:1:t0", "SELECT worker FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, NULL, "SELECT finished_at FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    cr_expect_eq(th_scalarf(c, "SELECT attempt FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id), 1);

    EXPECT_STATUS(c, id, "running");
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 1);
    th_expect_text(c, "host-a:1:t0", "SELECT locked_by FROM skipq.jobs WHERE id = %" PRId64, id);
    cr_expect_eq(th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, id),
                 j.execution_id);
    /* The lease is the claim's now() + the kind's lease: exact, on the DB clock. */
    th_expect_text(c, "t",
                   "SELECT j.lease_expires_at = e.started_at + interval '45000 milliseconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.id = j.current_execution_id WHERE j.id = %" PRId64,
                   id);
    th_expect_text(c, "t",
                   "SELECT lease_expires_at > now() + interval '30 seconds' FROM skipq.jobs WHERE id = %" PRId64, id);

    /* Second attempt: attempt = attempts, a second row, a new execution id. */
    th_execf(c, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, id);
    char err[512];
    cr_assert_eq(sq_queue_reap(c, 100, err, sizeof err), 1, "%s", err);
    struct sq_claimed j2 = must_claim(c, "k", 45000, "host-b:2:t0");
    cr_expect_eq(j2.id, id);
    cr_expect_eq(j2.attempt, 2);
    cr_expect_neq(j2.execution_id, j.execution_id);
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 2);
    cr_expect_eq(th_scalarf(c, "SELECT attempt FROM skipq.job_executions WHERE id = %" PRId64, j2.execution_id), 2);
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, id), 2);
    cr_expect_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64
                            " AND status = 'running'",
                            id),
                 1);
    sq_claimed_clear(&j);
    sq_claimed_clear(&j2);
    PQfinish(c);
}

Test(claim, limit_bounds_jobs_and_execution_rows, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    for (int i = 0; i < 5; i++)
        enq(c, "'k'");
    const char *kinds[1] = {"k"};
    int64_t leases[1] = {30000};
    struct sq_claimed out[10] = {{0}};
    int n = claim_k(c, "default", kinds, leases, 1, "w", 3, out);
    cr_expect_eq(n, 3);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 3);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 3);
    for (int i = 0; i < n; i++) {
        cr_expect_eq(th_scalarf(c,
                                "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e ON e.job_id = j.id"
                                " WHERE j.id = %" PRId64 " AND e.id = %" PRId64
                                " AND j.current_execution_id = e.id",
                                out[i].id, out[i].execution_id),
                     1, "claimed job %" PRId64 " does not match its execution row", out[i].id);
        for (int k = 0; k < i; k++)
            cr_expect_neq(out[i].id, out[k].id, "job returned twice by one claim");
        sq_claimed_clear(&out[i]);
    }
    n = claim_k(c, "default", kinds, leases, 1, "w", 10, out);
    cr_expect_eq(n, 2, "the remaining two jobs");
    for (int i = 0; i < n; i++)
        sq_claimed_clear(&out[i]);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 5);
    n = claim_k(c, "default", kinds, leases, 1, "w", 10, out);
    cr_expect_eq(n, 0);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 5);
    PQfinish(c);
}

Test(claim, uncommitted_enqueue_is_invisible, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    PGconn *other = th_connect(&db);
    PQclear(th_query(other, "BEGIN"));
    int64_t id = enq(other, "'k'");
    struct sq_claimed j = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 0, "claimed a job whose enqueue has not committed");
    PQclear(th_query(other, "COMMIT"));
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 1);
    cr_expect_eq(j.id, id);
    sq_claimed_clear(&j);
    PQfinish(other);
    PQfinish(c);
}

/* ---- the foreign-key lock trap -------------------------------------------------------- */

Test(claim, not_blocked_by_key_share_lock, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    PGconn *other = th_connect(&db);
    int64_t id = enq(c, "'k'");
    PQclear(th_query(other, "BEGIN"));
    th_execf(other, "SELECT 1 FROM skipq.jobs WHERE id = %" PRId64 " FOR KEY SHARE", id);
    PQclear(th_query(c, "SET lock_timeout = '5s'"));
    struct sq_claimed j = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 1,
                 "a FOR KEY SHARE lock (what a foreign key check takes) hid the job from the claim");
    if (j.id) {
        cr_expect_eq(j.id, id);
        EXPECT_STATUS(c, id, "running");
        sq_claimed_clear(&j);
    }
    PQclear(th_query(other, "COMMIT"));
    PQfinish(other);
    PQfinish(c);
}

Test(claim, not_blocked_by_open_fk_insert, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    PGconn *other = th_connect(&db);
    int64_t id = enq(c, "'k'");
    /* An application table that references jobs, and an uncommitted row in
     * it: the foreign key check holds KEY SHARE on the job row. */
    th_execf(c, "CREATE TABLE public.job_links (job_id bigint NOT NULL REFERENCES skipq.jobs (id))");
    PQclear(th_query(other, "BEGIN"));
    th_execf(other, "INSERT INTO public.job_links VALUES (%" PRId64 ")", id);
    PQclear(th_query(c, "SET lock_timeout = '5s'"));
    struct sq_claimed j = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 1,
                 "an open transaction that inserted a row referencing the job hid it from the claim");
    if (j.id) {
        cr_expect_eq(j.id, id);
        sq_claimed_clear(&j);
    }
    PQclear(th_query(other, "ROLLBACK"));
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, id), 1);
    PQfinish(other);
    PQfinish(c);
}

Test(claim, skips_row_locked_for_update_without_blocking, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    PGconn *other = th_connect(&db);
    int64_t locked = enq(c, "'k', priority => 10");
    PQclear(th_query(other, "BEGIN"));
    th_execf(other, "SELECT 1 FROM skipq.jobs WHERE id = %" PRId64 " FOR NO KEY UPDATE", locked);
    /* A blocked claim would hit this and fail instead of returning 0. */
    PQclear(th_query(c, "SET lock_timeout = '3s'"));
    struct sq_claimed j = {0};
    int64_t t0 = th_now_ms();
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 0, "claimed a row another transaction has locked");
    /* Not a speed assertion: lock_timeout (3 s) would have fired had it waited. */
    cr_expect_lt(th_now_ms() - t0, 3000, "the claim waited for the lock instead of skipping the row");
    /* Another job is still claimable past the locked one. */
    int64_t free_job = enq(c, "'k'");
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 1);
    cr_expect_eq(j.id, free_job);
    sq_claimed_clear(&j);
    PQclear(th_query(other, "ROLLBACK"));
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &j), 1, "the job was not claimable once unlocked");
    cr_expect_eq(j.id, locked);
    sq_claimed_clear(&j);
    PQfinish(other);
    PQfinish(c);
}

/* ---- fencing and the lease sweep ----------------------------------------------------------- */

Test(fencing, stale_worker_cannot_complete, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *ca = qconn(&db);
    PGconn *cb = qconn(&db);
    char err[512];
    int64_t id = enq(ca, "'k', max_attempts => 5");
    struct sq_claimed a = must_claim(ca, "k", 30000, "A");
    th_execf(ca, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, id);
    cr_assert_eq(sq_queue_reap(ca, 100, err, sizeof err), 1, "reap: %s", err);
    EXPECT_STATUS(ca, id, "pending");
    th_expect_text(ca, "lost", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);
    th_expect_text(ca, "f", "SELECT finished_at IS NULL FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);
    /* A cannot complete a job that is back in the queue either. */
    cr_expect_eq(sq_queue_done(ca, a.id, a.execution_id, err, sizeof err), SQ_COMPLETE_FENCED);
    EXPECT_STATUS(ca, id, "pending");

    struct sq_claimed b = must_claim(cb, "k", 30000, "B");
    cr_assert_eq(b.id, id);
    cr_expect_neq(b.execution_id, a.execution_id);
    cr_expect_eq(b.attempt, 2);

    cr_expect_eq(sq_queue_done(ca, a.id, a.execution_id, err, sizeof err), SQ_COMPLETE_FENCED,
                 "A's late done was not fenced");
    cr_expect_eq(sq_queue_fail(ca, a.id, a.execution_id, true, 0, "A's late failure", err, sizeof err),
                 SQ_COMPLETE_FENCED, "A's late fail was not fenced");
    EXPECT_STATUS(ca, id, "running");
    cr_expect_eq(th_scalarf(ca, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, id),
                 b.execution_id);
    th_expect_text(ca, "B", "SELECT locked_by FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(ca, "running", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, b.execution_id);
    th_expect_text(ca, "lost", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);
    th_expect_text(ca, NULL, "SELECT error FROM skipq.job_executions WHERE id = %" PRId64, b.execution_id);
    cr_expect_eq(th_scalarf(ca, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64
                                " AND last_error = 'A''s late failure'", id),
                 0, "the fenced failure wrote last_error");

    /* A second open execution row made by hand (nothing in skipq makes one:
     * a claim inserts its row under the job's row lock) gives its holder
     * nothing: outcomes are fenced on jobs.current_execution_id. */
    int64_t intruder = th_scalarf(ca, "INSERT INTO skipq.job_executions (job_id, attempt, worker)"
                                      " VALUES (%" PRId64 ", 3, 'intruder') RETURNING id", id);
    cr_expect_eq(sq_queue_done(ca, id, intruder, err, sizeof err), SQ_COMPLETE_FENCED,
                 "an execution that is not the job's current one completed it");
    EXPECT_STATUS(ca, id, "running");

    cr_expect_eq(sq_queue_done(cb, b.id, b.execution_id, err, sizeof err), SQ_COMPLETE_DONE, "%s", err);
    EXPECT_STATUS(ca, id, "done");
    th_expect_text(ca, "done", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, b.execution_id);
    th_expect_text(ca, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(ca, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(ca, "lost", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);
    /* Completing twice changes nothing the second time. */
    cr_expect_eq(sq_queue_done(cb, b.id, b.execution_id, err, sizeof err), SQ_COMPLETE_FENCED);
    cr_expect_eq(sq_queue_fail(cb, b.id, b.execution_id, false, 0, "late", err, sizeof err), SQ_COMPLETE_FENCED);
    EXPECT_STATUS(ca, id, "done");
    sq_claimed_clear(&a);
    sq_claimed_clear(&b);
    PQfinish(ca);
    PQfinish(cb);
}

Test(reaper, last_attempt_goes_dead, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t id = enq(c, "'k', max_attempts => 1");
    struct sq_claimed j = must_claim(c, "k", 30000, "w");
    th_execf(c, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, id);
    cr_expect_eq(sq_queue_reap(c, 100, err, sizeof err), 1, "%s", err);
    EXPECT_STATUS(c, id, "dead");
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, "t", "SELECT last_error ILIKE '%%lease%%' FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, "lost", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    /* A dead job is never claimed again. */
    struct sq_claimed none = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0);
    cr_expect_eq(sq_queue_reap(c, 100, err, sizeof err), 0);
    sq_claimed_clear(&j);
    PQfinish(c);
}

Test(reaper, leaves_unexpired_leases_alone, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t expired = enq(c, "'k'");
    int64_t live = enq(c, "'k'");
    struct sq_claimed a = must_claim(c, "k", 60000, "w");
    struct sq_claimed b = must_claim(c, "k", 60000, "w");
    cr_assert_eq(a.id, expired);
    cr_assert_eq(b.id, live);
    th_execf(c, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 millisecond' WHERE id = %" PRId64,
             expired);
    char *lease_before = th_textf(c, "SELECT lease_expires_at::text FROM skipq.jobs WHERE id = %" PRId64, live);
    cr_expect_eq(sq_queue_reap(c, 100, err, sizeof err), 1, "%s", err);
    EXPECT_STATUS(c, expired, "pending");
    EXPECT_STATUS(c, live, "running");
    th_expect_text(c, lease_before, "SELECT lease_expires_at::text FROM skipq.jobs WHERE id = %" PRId64, live);
    th_expect_text(c, "running", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, b.execution_id);
    cr_expect_eq(sq_queue_reap(c, 100, err, sizeof err), 0);
    /* The live worker can still complete. */
    cr_expect_eq(sq_queue_done(c, b.id, b.execution_id, err, sizeof err), SQ_COMPLETE_DONE);
    free(lease_before);
    sq_claimed_clear(&a);
    sq_claimed_clear(&b);
    PQfinish(c);
}

/* ---- failures --------------------------------------------------------------------------------- */

Test(fail, retryable_goes_back_with_delay, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t id = enq(c, "'k', max_attempts => 3");
    struct sq_claimed j = must_claim(c, "k", 30000, "w");
    cr_expect_eq(sq_queue_fail(c, j.id, j.execution_id, false, 5000, "smtp timeout", err, sizeof err),
                 SQ_COMPLETE_RETRY, "%s", err);
    EXPECT_STATUS(c, id, "pending");
    th_expect_text(c, "retry", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "smtp timeout", "SELECT error FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "smtp timeout", "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, NULL, "SELECT finished_at FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, id);
    /* run_at = the failure's now() + delay: exact on the DB clock. */
    th_expect_text(c, "t",
                   "SELECT j.run_at = e.finished_at + interval '5000 milliseconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.job_id = j.id WHERE e.id = %" PRId64,
                   j.execution_id);
    struct sq_claimed none = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0, "claimed during the retry delay");

    /* Due again: the second attempt, then the last. */
    th_execf(c, "UPDATE skipq.jobs SET run_at = now() - interval '1 second' WHERE id = %" PRId64, id);
    struct sq_claimed j2 = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j2.attempt, 2);
    cr_expect_eq(sq_queue_fail(c, j2.id, j2.execution_id, false, 0, "again", err, sizeof err), SQ_COMPLETE_RETRY);
    struct sq_claimed j3 = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j3.attempt, 3);
    cr_expect_eq(sq_queue_fail(c, j3.id, j3.execution_id, false, 5000, "third strike", err, sizeof err),
                 SQ_COMPLETE_DEAD, "the last attempt's failure should kill the job");
    EXPECT_STATUS(c, id, "dead");
    th_expect_text(c, "dead", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j3.execution_id);
    th_expect_text(c, "third strike", "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, id);
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 3);
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0);
    th_execf(c, "UPDATE skipq.jobs SET run_at = now() - interval '1 hour' WHERE id = %" PRId64, id);
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0, "a dead job was claimed");
    th_expect_text(c, "retry,retry,dead",
                   "SELECT string_agg(status, ',' ORDER BY attempt) FROM skipq.job_executions WHERE job_id = %" PRId64,
                   id);
    sq_claimed_clear(&j);
    sq_claimed_clear(&j2);
    sq_claimed_clear(&j3);
    PQfinish(c);
}

Test(fail, permanent_is_dead_at_once, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t id = enq(c, "'k', max_attempts => 5");
    struct sq_claimed j = must_claim(c, "k", 30000, "w");
    cr_expect_eq(sq_queue_fail(c, j.id, j.execution_id, true, 1000, "malformed address", err, sizeof err),
                 SQ_COMPLETE_DEAD, "%s", err);
    EXPECT_STATUS(c, id, "dead");
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 1);
    th_expect_text(c, "malformed address", "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(c, "dead", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "malformed address", "SELECT error FROM skipq.job_executions WHERE id = %" PRId64,
                   j.execution_id);
    th_execf(c, "UPDATE skipq.jobs SET run_at = now() - interval '1 hour' WHERE id = %" PRId64, id);
    struct sq_claimed none = {0};
    cr_expect_eq(claim1(c, "default", "k", 30000, "w", &none), 0, "a permanently failed job was claimed again");
    sq_claimed_clear(&j);
    PQfinish(c);
}

/* ---- heartbeat and release ----------------------------------------------------------------- */

Test(heartbeat, extends_only_matching_executions, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t mine = enq(c, "'k'");
    int64_t stolen = enq(c, "'k'");
    int64_t finished = enq(c, "'k'");
    struct sq_claimed a = must_claim(c, "k", 2000, "A");
    struct sq_claimed b = must_claim(c, "k", 2000, "A");
    struct sq_claimed f = must_claim(c, "k", 2000, "A");
    cr_assert(a.id == mine && b.id == stolen && f.id == finished);
    /* `stolen` is reclaimed by B after its lease ran out; `finished` is done. */
    th_execf(c, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, stolen);
    cr_assert_eq(sq_queue_reap(c, 100, err, sizeof err), 1, "%s", err);
    struct sq_claimed b2 = must_claim(c, "k", 2000, "B");
    cr_assert_eq(b2.id, stolen);
    cr_assert_eq(sq_queue_done(c, f.id, f.execution_id, err, sizeof err), SQ_COMPLETE_DONE);
    char *stolen_lease = th_textf(c, "SELECT lease_expires_at::text FROM skipq.jobs WHERE id = %" PRId64, stolen);

    int64_t ids[3] = {a.id, b.id, f.id};
    int64_t execs[3] = {a.execution_id, b.execution_id, f.execution_id};
    int64_t leases[3] = {120000, 120000, 120000};
    char state[3] = {SQ_LEASE_LOST, SQ_LEASE_EXTENDED, SQ_LEASE_EXTENDED};
    int n = sq_queue_heartbeat(c, ids, execs, leases, 3, state, err, sizeof err);
    cr_expect_eq(n, 1, "heartbeat: %s", err);
    cr_expect_eq(state[0], SQ_LEASE_EXTENDED, "the owned lease was not extended");
    cr_expect_eq(state[1], SQ_LEASE_LOST, "a lease reclaimed by another worker was not reported lost");
    cr_expect_eq(state[2], SQ_LEASE_LOST, "a finished job's lease was not reported lost");
    th_expect_text(c, "t",
                   "SELECT lease_expires_at > now() + interval '100 seconds' FROM skipq.jobs WHERE id = %" PRId64,
                   mine);
    th_expect_text(c, stolen_lease, "SELECT lease_expires_at::text FROM skipq.jobs WHERE id = %" PRId64, stolen);
    cr_expect_eq(th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, stolen),
                 b2.execution_id);
    th_expect_text(c, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, finished);
    EXPECT_STATUS(c, finished, "done");

    /* A pending job (lease swept, not yet reclaimed) is not extended either. */
    th_execf(c, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, mine);
    cr_assert_eq(sq_queue_reap(c, 100, err, sizeof err), 1, "%s", err);
    state[0] = SQ_LEASE_EXTENDED;
    cr_expect_eq(sq_queue_heartbeat(c, ids, execs, leases, 1, state, err, sizeof err), 0);
    cr_expect_eq(state[0], SQ_LEASE_LOST);
    EXPECT_STATUS(c, mine, "pending");
    th_expect_text(c, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, mine);
    free(stolen_lease);
    sq_claimed_clear(&a);
    sq_claimed_clear(&b);
    sq_claimed_clear(&b2);
    sq_claimed_clear(&f);
    PQfinish(c);
}

Test(release, gives_job_back_without_using_an_attempt, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    int64_t id = enq(c, "'k', max_attempts => 2, run_at => now() - interval '1 hour'");
    struct sq_claimed j = must_claim(c, "k", 30000, "w");
    int64_t ids[1] = {j.id}, execs[1] = {j.execution_id};
    cr_expect_eq(sq_queue_release(c, ids, execs, 1, err, sizeof err), 1, "%s", err);
    EXPECT_STATUS(c, id, "pending");
    th_expect_text(c, "interrupted", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.job_executions WHERE id = %" PRId64, j.execution_id);
    cr_expect_eq(th_scalarf(c, "SELECT max_attempts FROM skipq.jobs WHERE id = %" PRId64, id), 3);
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 1);
    th_expect_text(c, NULL, "SELECT lease_expires_at FROM skipq.jobs WHERE id = %" PRId64, id);
    /* Runnable now: run_at = the release's now(). */
    th_expect_text(c, "t",
                   "SELECT j.run_at = e.finished_at FROM skipq.jobs j JOIN skipq.job_executions e ON e.job_id = j.id"
                   " WHERE e.id = %" PRId64,
                   j.execution_id);
    /* The old execution can no longer complete it. */
    cr_expect_eq(sq_queue_done(c, j.id, j.execution_id, err, sizeof err), SQ_COMPLETE_FENCED);
    /* Releasing a stale execution changes nothing. */
    cr_expect_eq(sq_queue_release(c, ids, execs, 1, err, sizeof err), 0);
    cr_expect_eq(th_scalarf(c, "SELECT max_attempts FROM skipq.jobs WHERE id = %" PRId64, id), 3);

    /* Two more attempts are left (the interrupted one did not count). */
    struct sq_claimed j2 = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j2.id, id);
    cr_expect_eq(j2.attempt, 2);
    cr_expect_eq(j2.max_attempts, 3);
    cr_expect_eq(sq_queue_fail(c, j2.id, j2.execution_id, false, 0, "x", err, sizeof err), SQ_COMPLETE_RETRY,
                 "attempt 2 of 3 should be retried");
    struct sq_claimed j3 = must_claim(c, "k", 30000, "w");
    cr_expect_eq(j3.attempt, 3);
    cr_expect_eq(sq_queue_fail(c, j3.id, j3.execution_id, false, 0, "x", err, sizeof err), SQ_COMPLETE_DEAD);
    sq_claimed_clear(&j);
    sq_claimed_clear(&j2);
    sq_claimed_clear(&j3);
    PQfinish(c);
}

/* A cycle whose reply was lost with the connection: the worker gives back
 * what it claimed, except the jobs whose outcomes it still holds, and never
 * another worker's. */
Test(release, recover_gives_back_lost_claims_uncharged, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512];
    for (int i = 0; i < 5; i++)
        enq(c, "'k', max_attempts => 1");
    struct sq_claimed lost[3], held = {0}, other = {0};
    for (int i = 0; i < 3; i++)
        lost[i] = must_claim(c, "k", 30000, "h:1:w0");
    held = must_claim(c, "k", 30000, "h:1:w0");
    other = must_claim(c, "k", 30000, "h:1:w1");
    int64_t keep[1] = {held.id};
    cr_expect_eq(sq_queue_recover(c, "h:1:w0", keep, 1, err, sizeof err), 3, "%s", err);
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(c, lost[i].id, "pending");
        cr_expect_eq(th_scalarf(c, "SELECT max_attempts FROM skipq.jobs WHERE id = %" PRId64, lost[i].id), 2,
                     "the lost attempt is not charged");
        th_expect_text(c, "interrupted", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64,
                       lost[i].execution_id);
    }
    EXPECT_STATUS(c, held.id, "running");
    EXPECT_STATUS(c, other.id, "running");
    /* The held outcome still records; a second recovery finds nothing. */
    cr_expect_eq(sq_queue_done(c, held.id, held.execution_id, err, sizeof err), SQ_COMPLETE_DONE);
    cr_expect_eq(sq_queue_recover(c, "h:1:w0", NULL, 0, err, sizeof err), 0, "%s", err);
    /* The given-back jobs run again, and with max_attempts 1 they still get
     * their one real attempt. */
    struct sq_claimed again = must_claim(c, "k", 30000, "h:1:w0");
    cr_expect_eq(again.attempt, 2);
    cr_expect_eq(sq_queue_done(c, again.id, again.execution_id, err, sizeof err), SQ_COMPLETE_DONE);
    for (int i = 0; i < 3; i++)
        sq_claimed_clear(&lost[i]);
    sq_claimed_clear(&held);
    sq_claimed_clear(&other);
    sq_claimed_clear(&again);
    PQfinish(c);
}

/* ---- the worker cycle: record outcomes and claim in one statement -------------------------- */

/* Run one sq_queue_cycle for kind "k" in queue "default" with a 30 s lease. */
static int cycle(PGconn *c, const char *worker, int limit, size_t n, int64_t *ids, int64_t *execs, short *outcomes,
                 int64_t *delays, char **errors, struct sq_claimed *out, char *applied, char *err, size_t errlen)
{
    const char *kinds[1] = {"k"};
    int64_t leases[1] = {30000};
    char *ka = sq_text_array(kinds, 1), *la = sq_int8_array(leases, 1);
    struct sq_outcomes o = {
        .ids = ids, .execs = execs, .outcomes = outcomes, .delays = delays, .errors = errors, .n = n};
    int r = ka && la ? sq_queue_cycle(c, "default", ka, la, worker, limit, false, &o, out, applied, err, errlen)
                     : (snprintf(err, errlen, "out of memory"), -1);
    free(ka);
    free(la);
    return r;
}

Test(cycle, records_outcomes_and_claims, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512] = "";
    int64_t jd = enq(c, "'k', max_attempts => 3");
    int64_t jr = enq(c, "'k', max_attempts => 3");
    int64_t jf = enq(c, "'k', max_attempts => 3");
    int64_t js = enq(c, "'k', max_attempts => 3");
    struct sq_claimed d = must_claim(c, "k", 30000, "W"), r = must_claim(c, "k", 30000, "W");
    struct sq_claimed f = must_claim(c, "k", 30000, "W"), s = must_claim(c, "k", 30000, "W");
    cr_assert(d.id == jd && r.id == jr && f.id == jf && s.id == js);
    int64_t next = enq(c, "'k', payload => '{\"n\": 5}'");

    /* Error texts that need quoting in an array literal come back verbatim. */
    const char *retry_msg = "try \"again\", {later} \\ back; NULL";
    char *errors[4] = {"", (char *)retry_msg, "NULL", "stale"};
    int64_t ids[4] = {d.id, r.id, f.id, s.id};
    int64_t execs[4] = {d.execution_id, r.execution_id, f.execution_id, s.execution_id + 1000};
    short outcomes[4] = {0, 1, 2, 0};
    int64_t delays[4] = {0, 60000, 0, 0};
    char applied[4] = {9, 9, 9, 9};
    struct sq_claimed out[5] = {{0}};
    int n = cycle(c, "W", 5, 4, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err);
    cr_assert_eq(n, 1, "cycle claimed %d (%s)", n, err);
    cr_expect_eq(out[0].id, next, "the cycle claimed %" PRId64 " instead of the only runnable job", out[0].id);
    cr_expect_eq(out[0].attempt, 1);
    cr_expect_str_eq(out[0].kind, "k");
    cr_expect_str_eq(out[0].payload, "{\"n\": 5}");
    cr_expect_eq(applied[0], SQ_COMPLETE_DONE);
    cr_expect_eq(applied[1], SQ_COMPLETE_RETRY);
    cr_expect_eq(applied[2], SQ_COMPLETE_DEAD);
    cr_expect_eq(applied[3], SQ_COMPLETE_FENCED);

    EXPECT_STATUS(c, jd, "done");
    th_expect_text(c, "done", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, d.execution_id);
    th_expect_text(c, NULL, "SELECT error FROM skipq.job_executions WHERE id = %" PRId64, d.execution_id);
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, jd);

    EXPECT_STATUS(c, jr, "pending");
    th_expect_text(c, "retry", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, r.execution_id);
    th_expect_text(c, retry_msg, "SELECT error FROM skipq.job_executions WHERE id = %" PRId64, r.execution_id);
    th_expect_text(c, retry_msg, "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, jr);
    th_expect_text(c, NULL, "SELECT finished_at FROM skipq.jobs WHERE id = %" PRId64, jr);
    th_expect_text(c, "t",
                   "SELECT j.run_at = e.finished_at + interval '60000 milliseconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.job_id = j.id WHERE e.id = %" PRId64,
                   r.execution_id);

    EXPECT_STATUS(c, jf, "dead");
    cr_expect_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, jf), 1);
    th_expect_text(c, "dead", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, f.execution_id);
    th_expect_text(c, "NULL", "SELECT error FROM skipq.job_executions WHERE id = %" PRId64, f.execution_id);
    th_expect_text(c, "NULL", "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, jf);

    /* The fenced outcome changed nothing. */
    EXPECT_STATUS(c, js, "running");
    th_expect_text(c, "running", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, s.execution_id);
    cr_expect_eq(th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, js),
                 s.execution_id);

    /* The new claim is a claim like any other. */
    EXPECT_STATUS(c, next, "running");
    th_expect_text(c, "W", "SELECT worker FROM skipq.job_executions WHERE id = %" PRId64, out[0].execution_id);
    th_expect_text(c, "t",
                   "SELECT j.lease_expires_at = e.started_at + interval '30000 milliseconds'"
                   " AND j.current_execution_id = e.id AND j.attempts = 1 FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.job_id = j.id WHERE j.id = %" PRId64,
                   next);
    sq_claimed_clear(&out[0]);
    sq_claimed_clear(&d);
    sq_claimed_clear(&r);
    sq_claimed_clear(&f);
    sq_claimed_clear(&s);
    PQfinish(c);
}

Test(cycle, last_attempt_retry_is_dead_and_limit_zero_only_records, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512] = "";
    int64_t last = enq(c, "'k', max_attempts => 1");
    int64_t again = enq(c, "'k', max_attempts => 2");
    struct sq_claimed a = must_claim(c, "k", 30000, "W"), b = must_claim(c, "k", 30000, "W");
    cr_assert(a.id == last && b.id == again);
    int64_t waiting = enq(c, "'k'");
    char *errors[2] = {"out of tries", "once more"};
    int64_t ids[2] = {a.id, b.id}, execs[2] = {a.execution_id, b.execution_id}, delays[2] = {0, 0};
    short outcomes[2] = {1, 1};
    char applied[2] = {9, 9};
    struct sq_claimed out[4] = {{0}};
    /* limit 0, as a stopping host sends: record, claim nothing. */
    int n = cycle(c, "W", 0, 2, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err);
    cr_assert_eq(n, 0, "cycle: %d (%s)", n, err);
    cr_expect_eq(applied[0], SQ_COMPLETE_DEAD, "a retry on the last attempt must be dead");
    cr_expect_eq(applied[1], SQ_COMPLETE_RETRY);
    EXPECT_STATUS(c, last, "dead");
    th_expect_text(c, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, last);
    th_expect_text(c, "dead", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);
    EXPECT_STATUS(c, again, "pending");
    EXPECT_STATUS(c, waiting, "pending");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'running'"), 0);

    /* The next cycle (no outcomes) claims the retried job and the waiting one. */
    n = cycle(c, "W", 4, 0, NULL, NULL, NULL, NULL, NULL, out, applied, err, sizeof err);
    cr_expect_eq(n, 2, "cycle: %d (%s)", n, err);
    bool saw_again = false;
    for (int i = 0; i < n; i++) {
        if (out[i].id == again) {
            saw_again = true;
            cr_expect_eq(out[i].attempt, 2);
        } else {
            cr_expect_eq(out[i].id, waiting);
        }
        sq_claimed_clear(&out[i]);
    }
    cr_expect(saw_again, "a job retried with no delay was not claimed again");
    sq_claimed_clear(&a);
    sq_claimed_clear(&b);
    PQfinish(c);
}

Test(cycle, stale_outcome_after_reclaim_is_fenced, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *ca = qconn(&db), *cb = qconn(&db);
    char err[512] = "";
    int64_t id = enq(ca, "'k'");
    struct sq_claimed a = must_claim(ca, "k", 30000, "A");
    th_execf(ca, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %" PRId64, id);
    cr_assert_eq(sq_queue_reap(ca, 10, err, sizeof err), 1, "%s", err);
    struct sq_claimed out[2] = {{0}};
    char applied[1] = {9};
    cr_assert_eq(cycle(cb, "B", 1, 0, NULL, NULL, NULL, NULL, NULL, out, applied, err, sizeof err), 1, "%s", err);
    struct sq_claimed b = out[0];
    cr_assert_eq(b.id, id);

    int64_t ids[1] = {a.id}, execs[1] = {a.execution_id}, delays[1] = {0};
    short outcomes[1] = {0};
    char *errors[1] = {""};
    cr_expect_eq(cycle(ca, "A", 1, 1, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err), 0);
    cr_expect_eq(applied[0], SQ_COMPLETE_FENCED, "A's stale done applied");
    EXPECT_STATUS(ca, id, "running");
    th_expect_text(ca, "running", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, b.execution_id);
    th_expect_text(ca, "lost", "SELECT status FROM skipq.job_executions WHERE id = %" PRId64, a.execution_id);

    ids[0] = b.id;
    execs[0] = b.execution_id;
    cr_expect_eq(cycle(cb, "B", 1, 1, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err), 0);
    cr_expect_eq(applied[0], SQ_COMPLETE_DONE);
    EXPECT_STATUS(ca, id, "done");
    sq_claimed_clear(&a);
    sq_claimed_clear(&b);
    PQfinish(ca);
    PQfinish(cb);
}

Test(cycle, failed_statement_records_and_claims_nothing, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512] = "";
    int64_t good = enq(c, "'k'");
    int64_t bad = enq(c, "'k'");
    struct sq_claimed g = must_claim(c, "k", 30000, "W"), b = must_claim(c, "k", 30000, "W");
    int64_t waiting = enq(c, "'k'");
    /* An error text cut inside a UTF-8 character: the database refuses it. */
    char *errors[2] = {"fine", "caf\xc3"};
    int64_t ids[2] = {g.id, b.id}, execs[2] = {g.execution_id, b.execution_id}, delays[2] = {0, 0};
    short outcomes[2] = {1, 1};
    char applied[2] = {9, 9};
    struct sq_claimed out[2] = {{0}};
    int n = cycle(c, "W", 2, 2, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err);
    cr_expect_eq(n, -1, "a cycle carrying invalid UTF-8 succeeded (%d)", n);
    cr_expect_eq(PQstatus(c), CONNECTION_OK, "a statement error must not cost the connection");
    /* All or nothing. */
    EXPECT_STATUS(c, good, "running");
    EXPECT_STATUS(c, bad, "running");
    EXPECT_STATUS(c, waiting, "pending");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 2);
    sq_claimed_clear(&g);
    sq_claimed_clear(&b);
    PQfinish(c);
}

/* The rows of both statements come back before the commit: a cycle whose
 * commit fails (here a deferred check; in production, a session ended
 * while its commit waited for a standby) must report nothing recorded and
 * nothing claimed, or the host would count done jobs that are not. */
Test(cycle, a_cycle_whose_commit_fails_records_and_claims_nothing, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    char err[512] = "";
    th_execf(db.conn, "CREATE FUNCTION public.refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS"
                      " $$BEGIN RAISE EXCEPTION 'refused at commit'; END$$");
    th_execf(db.conn, "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON skipq.job_executions"
                      " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'done')"
                      " EXECUTE FUNCTION public.refuse_at_commit()");
    int64_t done = enq(c, "'k'");
    struct sq_claimed d = must_claim(c, "k", 30000, "W");
    int64_t waiting = enq(c, "'k'");
    char *errors[1] = {""};
    int64_t ids[1] = {d.id}, execs[1] = {d.execution_id}, delays[1] = {0};
    short outcomes[1] = {0};
    char applied[1] = {9};
    struct sq_claimed out[1] = {{0}};
    int n = cycle(c, "W", 1, 1, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err);
    cr_expect_eq(n, -1, "a cycle whose commit failed reported success (%d; applied %d)", n, applied[0]);
    cr_expect(strstr(err, "refused at commit") != NULL, "the error does not say why the commit failed: %s", err);
    cr_expect_eq(PQstatus(c), CONNECTION_OK, "a failed commit must not cost the connection");
    EXPECT_STATUS(c, done, "running");
    EXPECT_STATUS(c, waiting, "pending");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 1);
    /* The session is usable: without the check the same cycle records and claims. */
    th_execf(db.conn, "DROP TRIGGER refuse_at_commit ON skipq.job_executions");
    n = cycle(c, "W", 1, 1, ids, execs, outcomes, delays, errors, out, applied, err, sizeof err);
    cr_expect_eq(n, 1, "the cycle after the failed commit failed: %s", err);
    cr_expect_eq(applied[0], SQ_COMPLETE_DONE);
    EXPECT_STATUS(c, done, "done");
    EXPECT_STATUS(c, waiting, "running");
    sq_claimed_clear(&out[0]);
    sq_claimed_clear(&d);
    PQfinish(c);
}

/* ---- skipq.enqueue() ----------------------------------------------------------------------- */

static void expect_enqueue_refused(PGconn *c, const char *args, const char *want_state, const char *names)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT skipq.enqueue(%s)", args);
    char *msg = NULL;
    char *state = fails_with(c, sql, &msg);
    cr_expect_str_eq(state, want_state, "%s: SQLSTATE", sql);
    if (names)
        cr_expect(strstr(msg, names) != NULL, "%s: the message does not name %s: %s", sql, names, msg);
    free(state);
    free(msg);
}

Test(enqueue, rejects_bad_arguments, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    expect_enqueue_refused(c, "''", "22023", "kind");
    expect_enqueue_refused(c, "NULL", "22023", "kind");
    expect_enqueue_refused(c, "'k', queue => ''", "22023", "queue");
    expect_enqueue_refused(c, "'k', max_attempts => 0", "22023", "max_attempts");
    expect_enqueue_refused(c, "'k', max_attempts => -3", "22023", "max_attempts");
    expect_enqueue_refused(c, "'k', payload => 'not json'", "22P02", NULL);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 0, "a refused enqueue wrote a job");
    /* And the defaults of a good one. */
    int64_t id = enq(c, "'k'");
    th_expect_text(c, "default|{}|0|5|pending|0",
                   "SELECT concat_ws('|', queue, payload::text, priority, max_attempts, status, attempts)"
                   " FROM skipq.jobs WHERE id = %" PRId64,
                   id);
    th_expect_text(c, "t", "SELECT run_at <= now() FROM skipq.jobs WHERE id = %" PRId64, id);
}

Test(enqueue, follows_the_callers_transaction, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    PQclear(th_query(c, "BEGIN"));
    enq(c, "'k', payload => '{\"n\": 1}'");
    PQclear(th_query(c, "ROLLBACK"));
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 0, "a rolled-back enqueue left a job");
    PQclear(th_query(c, "BEGIN"));
    int64_t id = enq(c, "'k', payload => '{\"n\": 2}'");
    PQclear(th_query(c, "COMMIT"));
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 1);
    th_expect_text(c, "{\"n\": 2}", "SELECT payload::text FROM skipq.jobs WHERE id = %" PRId64, id);
}

/* ---- backoff ------------------------------------------------------------------------------- */

static int64_t expected_d(int attempt, int64_t base, int64_t cap)
{
    int64_t d = base;
    for (int i = 1; i < attempt && d < cap; i++)
        d *= 2;
    return d < cap ? d : cap;
}

Test(backoff, within_bounds_and_capped)
{
    const int64_t cases[][2] = {{200, 10000}, {1000, 3600000}, {1, 1000}, {333, 5000}, {1000, 1000}, {7, 9}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t base = cases[k][0], cap = cases[k][1];
        for (int attempt = 1; attempt <= 40; attempt++) {
            int64_t d = expected_d(attempt, base, cap);
            for (uint32_t s = 0; s < 200; s++) {
                uint32_t seed = s * 2654435761u + (uint32_t)attempt;
                int64_t v = sq_backoff_ms(attempt, base, cap, &seed);
                cr_assert(v >= d / 2 && v <= d,
                          "backoff(attempt %d, base %" PRId64 ", cap %" PRId64 ") = %" PRId64
                          ", outside [%" PRId64 ", %" PRId64 "]",
                          attempt, base, cap, v, d / 2, d);
                cr_assert_leq(v, cap);
            }
        }
    }
    /* Huge attempt numbers and caps do not overflow. */
    uint32_t seed = 42;
    int64_t v = sq_backoff_ms(1000000, 1000, 9000000000000000LL, &seed);
    cr_expect(v >= 4500000000000000LL && v <= 9000000000000000LL, "backoff at the largest cap: %" PRId64, v);
    v = sq_backoff_ms(1000000, 1000, 3600000, &seed);
    cr_expect(v >= 1800000 && v <= 3600000, "%" PRId64, v);
}

Test(backoff, grows_exponentially)
{
    const int64_t base = 100, cap = 1000000;
    double prev_mean = 0;
    int64_t prev_max = 0;
    for (int attempt = 1; attempt <= 8; attempt++) {
        double sum = 0;
        int64_t lo = INT64_MAX, hi = 0;
        const int samples = 2000;
        for (int s = 0; s < samples; s++) {
            uint32_t seed = (uint32_t)s * 2246822519u + 7u;
            int64_t v = sq_backoff_ms(attempt, base, cap, &seed);
            sum += (double)v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        double mean = sum / samples;
        /* Each retry waits at least as long as any earlier one could. */
        cr_expect_geq(lo, prev_max, "attempt %d: minimum %" PRId64 " below the previous attempt's maximum %" PRId64,
                      attempt, lo, prev_max);
        if (attempt > 1)
            cr_expect(mean > prev_mean * 1.8 && mean < prev_mean * 2.2,
                      "attempt %d: mean %.1f is not about twice the previous %.1f", attempt, mean, prev_mean);
        /* Jittered: the samples spread over most of [d/2, d]. */
        int64_t d = base << (attempt - 1);
        cr_expect(lo <= d / 2 + d / 10 && hi >= d - d / 10,
                  "attempt %d: samples in [%" PRId64 ", %" PRId64 "] do not spread over [%" PRId64 ", %" PRId64 "]",
                  attempt, lo, hi, d / 2, d);
        prev_mean = mean;
        prev_max = hi;
    }
}

/* The heartbeat never waits for a row lock: a job locked by someone else
 * right now (its own worker completing it) is reported busy, not lost, and
 * not renewed -- waiting there deadlocked against batched completions. */
Test(queue, heartbeat_skips_locked_rows_without_calling_them_lost, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = qconn(&db);
    PGconn *other = th_connect(&db);
    char err[512];
    enq(c, "'k'");
    struct sq_claimed a = must_claim(c, "k", 2000, "A");
    th_execf(other, "BEGIN; SELECT 1 FROM skipq.jobs WHERE id = %" PRId64 " FOR NO KEY UPDATE", a.id);
    int64_t ids[1] = {a.id}, execs[1] = {a.execution_id}, leases[1] = {120000};
    char state[1] = {SQ_LEASE_LOST};
    int64_t t0 = th_now_ms();
    cr_expect_eq(sq_queue_heartbeat(c, ids, execs, leases, 1, state, err, sizeof err), 0, "%s", err);
    cr_expect_lt(th_now_ms() - t0, 1000, "the heartbeat waited for a row lock");
    cr_expect_eq(state[0], SQ_LEASE_BUSY);
    th_execf(other, "ROLLBACK");
    cr_expect_eq(sq_queue_heartbeat(c, ids, execs, leases, 1, state, err, sizeof err), 1, "%s", err);
    cr_expect_eq(state[0], SQ_LEASE_EXTENDED);
    sq_claimed_clear(&a);
    PQfinish(other);
    PQfinish(c);
}

/* How many entries of jobs_lease (the index of running jobs) the
 * database's sessions have read, as far as their statistics have reached
 * the server. */
static long long lease_index_reads(PGconn *c)
{
    return th_scalar(c, "SELECT idx_tup_read FROM pg_catalog.pg_stat_user_indexes"
                        " WHERE schemaname = 'skipq' AND indexrelname = 'jobs_lease'");
}

/* Other hosts' running jobs are not this host's work. With 20,000 of them
 * running (and the statistics taken while none ran, as after a quiet
 * night), a host's outcomes and lease renewals still reach its own jobs by
 * primary key. Planned generically, they once read every running job
 * through jobs_lease, once per statement. */
Test(queue, a_host_reads_its_own_running_jobs_not_every_running_job, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "ALTER TABLE skipq.jobs SET (autovacuum_enabled = false)");
    th_execf(db.conn, "INSERT INTO skipq.jobs (queue, kind) SELECT 'elsewhere', 'test' FROM generate_series(1, 20000)");
    th_execf(db.conn, "ANALYZE skipq.jobs");
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'running', locked_by = 'another host', current_execution_id = id,"
                      " lease_expires_at = now() + interval '1 hour' WHERE queue = 'elsewhere'");
    long long before = lease_index_reads(db.conn);
    /* Slow jobs, so leases are renewed (every 500 ms here), and many quick
     * ones, so many outcomes are recorded. */
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 1500}')) FROM generate_series(1, 4)");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 300)");
    char *ini = th_host_ini(&db, "own-jobs", NULL, NULL, "[queue default]\nthreads = 4\nconnections = 1\nbatch = 8\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 304, 60000,
                                "SELECT count(*) FROM skipq.jobs WHERE queue = 'default' AND status = 'done'"),
                 304, "the host did not finish its jobs");
    cr_expect_eq(th_host_stop(pid, 20000), 0);
    /* A session's statistics reach the server at the latest when it ends. */
    cr_assert_eq(th_wait_scalar(db.conn, 0, 20000,
                                "SELECT count(*) FROM pg_catalog.pg_stat_activity"
                                " WHERE datname = current_database() AND pid <> pg_backend_pid()"),
                 0, "the host's sessions did not end");
    long long read = lease_index_reads(db.conn) - before;
    cr_expect_lt(read, 20000, "the host read %lld entries of jobs_lease for its 304 jobs: it went through every"
                              " running job to find its own", read);
    cr_expect_geq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE status = 'done'"), 304);
    th_execf(db.conn, "DELETE FROM skipq.jobs WHERE queue = 'elsewhere'");
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/*
 * A cycle records its outcomes, then claims from a snapshot taken after
 * them. Here the outcome waits on a row lock the test holds, and while it
 * waits the job the claim would pick first is cancelled (another host's
 * claim would take it the same way). The claim must pass that job by
 * without locking it: a claim that read a snapshot from before the wait
 * saw it still pending, locked its newest version and kept the lock until
 * it committed -- and a worker running such a job waits for that lock to
 * record its outcome.
 */
Test(queue, a_cycle_claims_from_a_snapshot_taken_after_its_outcomes, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t first = th_enqueue(db.conn, "test", "{\"sleep_ms\": 800}", NULL, 10, 1);
    char *ini = th_host_ini(&db, "snapshot", NULL, NULL, "[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1,
                 "the first job did not start");

    PGconn *holder = th_connect(&db);
    th_execf(holder, "BEGIN");
    th_execf(holder, "SELECT 1 FROM skipq.jobs WHERE id = %" PRId64 " FOR SHARE", first);
    int64_t next = th_enqueue(db.conn, "test", "{}", NULL, 5, 1);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000,
                                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND application_name = 'skipq' AND wait_event_type = 'Lock'"),
                 1, "the host's outcome of the first job never waited for the test's row lock");
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'cancelled', finished_at = now() WHERE id = %" PRId64, next);
    th_execf(holder, "COMMIT");
    PQfinish(holder);

    char done_sql[160];
    snprintf(done_sql, sizeof done_sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'done'",
             first);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, done_sql), 1, "the first job's outcome was not recorded");
    cr_expect_eq(th_host_stop(pid, 20000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT xmax::text::bigint FROM skipq.jobs WHERE id = %" PRId64, next), 0,
                 "the cycle's claim locked job %" PRId64 " after it was cancelled: it read a snapshot from before"
                 " its outcomes",
                 next);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, next), 0,
                 "the cancelled job ran");
    th_assert_clean_log(ini);
}

/* One cycle on its own thread (no assertion there): it records `job` done,
 * then claims one job. */
struct waiting_cycle {
    PGconn *conn;
    struct sq_claimed job;
    struct sq_claimed out[1];
    int claimed;
    char err[512];
};

static void *run_waiting_cycle(void *arg)
{
    struct waiting_cycle *w = arg;
    int64_t ids[1] = {w->job.id}, execs[1] = {w->job.execution_id}, delays[1] = {0};
    short outcomes[1] = {0};
    char *errors[1] = {""};
    char applied[1];
    w->claimed = cycle(w->conn, "A", 1, 1, ids, execs, outcomes, delays, errors, w->out, applied, w->err,
                       sizeof w->err);
    return NULL;
}

Test(queue, an_attempt_is_recorded_as_started_after_the_job_it_follows_in_its_key_ended, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *ca = qconn(&db), *cb = qconn(&db), *holder = th_connect(&db);
    char err[512] = "";
    int64_t other = enq(ca, "'k'");
    int64_t first = enq(ca, "'k', ordering_key => 's'");
    int64_t second = enq(ca, "'k', ordering_key => 's'");
    struct waiting_cycle a = {.conn = ca, .job = must_claim(ca, "k", 30000, "A")};
    struct sq_claimed b = must_claim(cb, "k", 30000, "B");
    cr_assert(a.job.id == other && b.id == first);

    /* Worker A's cycle begins, and its outcome waits for the test's lock. */
    th_execf(holder, "BEGIN");
    th_execf(holder, "SELECT 1 FROM skipq.jobs WHERE id = %" PRId64 " FOR SHARE", other);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_waiting_cycle, &a), 0);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000,
                                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock'"),
                 1, "worker A's outcome never waited for the test's row lock");
    /* Meanwhile worker B ends the key's first job, in a later transaction. */
    cr_assert_eq(sq_queue_done(cb, b.id, b.execution_id, err, sizeof err), SQ_COMPLETE_DONE, "%s", err);
    th_execf(holder, "COMMIT");
    pthread_join(t, NULL);

    cr_assert_eq(a.claimed, 1, "worker A's cycle claimed %d (%s)", a.claimed, a.err);
    cr_expect_eq(a.out[0].id, second);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT (s.started_at >= f.finished_at)::int FROM skipq.job_executions s,"
                            " skipq.job_executions f WHERE s.id = %" PRId64 " AND f.id = %" PRId64,
                            a.out[0].execution_id, b.execution_id),
                 1, "the key's second job is recorded as started before its first one ended");
    th_expect_text(db.conn, "t",
                   "SELECT j.lease_expires_at = e.started_at + interval '30000 milliseconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.id = j.current_execution_id WHERE j.id = %" PRId64,
                   second);
    sq_claimed_clear(&a.out[0]);
    sq_claimed_clear(&a.job);
    sq_claimed_clear(&b);
    PQfinish(holder);
    PQfinish(cb);
    PQfinish(ca);
}
