/*
 * test_lifecycle.c -- jobs end to end through real `skipq run` processes
 * with the testkit plugin: retries and their backoff, dead jobs, priority,
 * delayed jobs, routing by queue and kind, and transactional handlers.
 *
 * Every wait is a deadline poll (th_wait_scalar); times are compared on the
 * database clock, never asserted as speeds.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

/* The host the test is running, killed if a wait fails so no orphan outlives
 * the test. */
static pid_t current_host;

static pid_t start_host(const char *ini)
{
    current_host = th_host_start(ini);
    return current_host;
}

/* ---- helpers ------------------------------------------------------------------------ */

/* Wait until job `id` has status `status`; fail the test (with the host log
 * path) if it does not within WAIT_MS. */
static void wait_status(PGconn *c, int64_t id, const char *status, const char *ini)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = '%s'", id,
             status);
    long long n = th_wait_scalar(c, 1, WAIT_MS, sql);
    if (n != 1) {
        char *now = th_textf(c,
                             "SELECT status || ' attempts=' || attempts || ' last_error=' || coalesce(last_error, '')"
                             " FROM skipq.jobs WHERE id = %" PRId64,
                             id);
        if (current_host > 0)
            th_host_stop(current_host, 5000);
        current_host = 0;
        cr_assert_fail("job %" PRId64 " did not become %s within %d ms (now: %s); see %s.log", id, status, WAIT_MS,
                       now, ini);
    }
}

/* Stop the host, check its log, and check the invariants every scenario
 * must leave behind (th_check_invariants). */
static void stop_host(PGconn *conn, pid_t pid, const char *ini)
{
    current_host = 0;
    cr_expect_eq(th_host_stop(pid, 15000), 0, "host did not stop cleanly; see %s.log", ini);
    th_assert_clean_log(ini);
    th_check_invariants(conn);
}

/* A job that must never have been touched by a host. */
static void expect_untouched(PGconn *c, int64_t id)
{
    th_expect_text(c, "pending 0", "SELECT status || ' ' || attempts FROM skipq.jobs WHERE id = %" PRId64, id);
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, id), 0,
                 "job %" PRId64 " was claimed", id);
}

/* Milliseconds between two timestamptz expressions, on the DB clock. */
static double ms_between(PGconn *c, const char *from, const char *to, int64_t job)
{
    char *v = th_textf(c,
                       "SELECT extract(epoch FROM (%s) - (%s)) * 1000 FROM skipq.jobs j"
                       " JOIN skipq.job_executions e1 ON e1.job_id = j.id AND e1.attempt = 1"
                       " LEFT JOIN skipq.job_executions e2 ON e2.job_id = j.id AND e2.attempt = 2"
                       " LEFT JOIN skipq.job_executions e3 ON e3.job_id = j.id AND e3.attempt = 3"
                       " WHERE j.id = %" PRId64,
                       to, from, job);
    double d = v ? strtod(v, NULL) : 0.0; /* SQL NULL: no such attempt */
    free(v);
    return d;
}

/* ---- retries ------------------------------------------------------------------------- */

Test(lifecycle, retries_with_growing_backoff_then_done, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{\"fail_times\": 2}", NULL, 0, 5);
    char *ini = th_host_ini(&db, "backoff", NULL, NULL,
                            "[queue default]\nthreads = 1\n\n[kind test]\nbackoff_base = 200ms\nbackoff_cap = 10s\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, id, "done", ini);
    stop_host(db.conn, pid, ini);

    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 3);
    th_expect_text(db.conn, "retry,retry,done",
                   "SELECT string_agg(status, ',' ORDER BY attempt) FROM skipq.job_executions WHERE job_id = %" PRId64,
                   id);
    th_expect_text(db.conn, "planned failure 1 of 2|planned failure 2 of 2|",
                   "SELECT string_agg(coalesce(error, ''), '|' ORDER BY attempt) FROM skipq.job_executions"
                   " WHERE job_id = %" PRId64,
                   id);
    /* Retry n waits at least base * 2^(n-1) / 2 (equal jitter): 100 ms, then
     * 200 ms. The next start can only come after run_at, which the failure
     * set from the same now() as its finished_at. */
    double gap1 = ms_between(db.conn, "e1.finished_at", "e2.started_at", id);
    double gap2 = ms_between(db.conn, "e2.finished_at", "e3.started_at", id);
    cr_expect_geq(gap1, 100 - 20, "first retry came after %.1f ms, before the backoff's 100 ms minimum", gap1);
    cr_expect_geq(gap2, 200 - 20, "second retry came after %.1f ms, before the backoff's 200 ms minimum", gap2);
    /* The last retry delay is visible exactly: run_at = finished_at + delay.
     * Retry 2 with base 200 ms must be in [200, 400] ms; the default policy
     * (base 1 s) would give [1000, 2000]. */
    double delay2 = ms_between(db.conn, "e2.finished_at", "j.run_at", id);
    cr_expect(delay2 >= 200 - 1 && delay2 <= 400 + 1,
              "second retry delay %.1f ms is outside [200, 400] for backoff_base = 200ms", delay2);
}

Test(lifecycle, backoff_cap_bounds_the_delay, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{\"fail_times\": 3}", NULL, 0, 5);
    char *ini = th_host_ini(&db, "cap", NULL, NULL,
                            "[queue default]\nthreads = 1\n\n[kind test]\nbackoff_base = 100ms\nbackoff_cap = 150ms\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, id, "done", ini);
    stop_host(db.conn, pid, ini);
    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 4);
    /* Retry 3 uncapped would be 400 ms ([200, 400] jittered); capped: [75, 150]. */
    char *v = th_textf(db.conn,
                       "SELECT extract(epoch FROM j.run_at - e.finished_at) * 1000 FROM skipq.jobs j"
                       " JOIN skipq.job_executions e ON e.job_id = j.id AND e.attempt = 3 WHERE j.id = %" PRId64,
                       id);
    double delay3 = v ? strtod(v, NULL) : 0.0;
    free(v);
    cr_expect(delay3 >= 75 - 1 && delay3 <= 150 + 1, "third retry delay %.1f ms ignores backoff_cap = 150ms", delay3);
}

Test(lifecycle, always_failing_job_ends_dead, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{\"fail\": \"upstream said no\", \"retry_in_ms\": 10}", NULL, 0, 3);
    char *ini = th_host_ini(&db, "dead", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, id, "dead", ini);
    /* Give a wrongly re-queued job the chance to run again before looking. */
    int64_t probe = th_enqueue(db.conn, "test", "{}", NULL, -100, 0);
    wait_status(db.conn, probe, "done", ini);
    stop_host(db.conn, pid, ini);

    th_expect_text(db.conn, "dead 3 3 upstream said no",
                   "SELECT concat_ws(' ', status, attempts, max_attempts, last_error)"
                   " FROM skipq.jobs WHERE id = %" PRId64,
                   id);
    th_expect_text(db.conn, "f", "SELECT finished_at IS NULL FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(db.conn, "retry,retry,dead",
                   "SELECT string_agg(status, ',' ORDER BY attempt) FROM skipq.job_executions WHERE job_id = %" PRId64,
                   id);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64
                            " AND error = 'upstream said no' AND finished_at IS NOT NULL",
                            id),
                 3);
    /* retry_in_ms overrides the kind's backoff (default base 1 s): the failure
     * of attempt 2 set run_at to its own now() + 10 ms. */
    th_expect_text(db.conn, "t",
                   "SELECT j.run_at = e.finished_at + interval '10 milliseconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.job_id = j.id AND e.attempt = 2 WHERE j.id = %" PRId64,
                   id);
}

Test(lifecycle, permanent_failure_is_dead_after_one_attempt, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{\"permanent\": \"bad input: no Empfänger\"}", NULL, 0, 5);
    char *ini = th_host_ini(&db, "permanent", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, id, "dead", ini);
    int64_t probe = th_enqueue(db.conn, "test", "{}", NULL, -100, 0);
    wait_status(db.conn, probe, "done", ini);
    stop_host(db.conn, pid, ini);
    th_expect_text(db.conn, "dead 1 bad input: no Empfänger",
                   "SELECT concat_ws(' ', status, attempts, last_error) FROM skipq.jobs WHERE id = %" PRId64, id);
    th_expect_text(db.conn, "dead|bad input: no Empfänger",
                   "SELECT string_agg(status || '|' || error, ',') FROM skipq.job_executions WHERE job_id = %" PRId64,
                   id);
}

/* ---- ordering and timing ----------------------------------------------------------------- */

Test(lifecycle, higher_priority_runs_first, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    enum { N = 6 };
    int64_t low[N], high[N];
    /* Low first, so FIFO order alone would run them first. */
    for (int i = 0; i < N; i++)
        low[i] = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    for (int i = 0; i < N; i++)
        high[i] = th_enqueue(db.conn, "test", "{}", NULL, 10, 0);
    char ledger[512];
    snprintf(ledger, sizeof ledger, "%s/priority.ledger", th_tmpdir());
    char *ini = th_host_ini(&db, "priority", NULL, ledger, "[queue default]\nthreads = 1\n");
    pid_t pid = start_host(ini);
    long long done = th_wait_scalar(db.conn, 2 * N, WAIT_MS, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    stop_host(db.conn, pid, ini);
    cr_assert_eq(done, 2 * N, "only %lld of %d jobs done; see %s.log", done, 2 * N, ini);

    int64_t *order = NULL;
    size_t n = th_read_ledger(ledger, &order);
    cr_assert_eq(n, (size_t)(2 * N), "ledger has %zu lines", n);
    for (size_t i = 0; i < n; i++) {
        bool is_high = false;
        for (int k = 0; k < N; k++)
            is_high |= order[i] == high[k];
        if (i < (size_t)N)
            cr_expect(is_high, "position %zu ran job %" PRId64 " (low priority) before all high-priority jobs", i,
                      order[i]);
        else
            cr_expect(!is_high, "position %zu ran high-priority job %" PRId64 " after a low one", i, order[i]);
    }
    /* Equal priorities run in FIFO order. */
    for (int k = 0; k < N; k++) {
        cr_expect_eq(order[k], high[k]);
        cr_expect_eq(order[N + k], low[k]);
    }
    free(order);
}

Test(lifecycle, delayed_job_waits_for_run_at, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "delayed", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    long long id = th_scalar(db.conn, "SELECT skipq.enqueue('test', run_at => now() + interval '2 seconds')");
    int64_t now_job = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    wait_status(db.conn, now_job, "done", ini);
    /* Whenever we look, the delayed job has not started before its run_at. */
    th_expect_text(db.conn, "t",
                   "SELECT (status = 'pending' AND attempts = 0) OR now() >= run_at FROM skipq.jobs WHERE id = %lld",
                   id);
    wait_status(db.conn, id, "done", ini);
    stop_host(db.conn, pid, ini);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld", id), 1);
    th_expect_text(db.conn, "t",
                   "SELECT e.started_at >= j.run_at FROM skipq.jobs j JOIN skipq.job_executions e ON e.job_id = j.id"
                   " WHERE j.id = %lld",
                   id);
    th_expect_text(db.conn, "t",
                   "SELECT e.started_at >= j.created_at + interval '2 seconds' FROM skipq.jobs j"
                   " JOIN skipq.job_executions e ON e.job_id = j.id WHERE j.id = %lld",
                   id);
}

/* ---- due times: delayed jobs and retries start when due, not at the next poll --------- */

/* With a 30 s poll, anything that starts within a few seconds of its run_at
 * was woken for it. */
#define SLOW_POLL "poll_interval = 30s\n"
#define WOKEN_WITHIN_MS 5000.0

/* Wait until the host's listener has logged that it listens: a delayed job
 * enqueued before that is announced to nobody. */
static void wait_listening(const char *ini)
{
    for (int i = 0; i < 300; i++) {
        char *log = th_host_log(ini);
        bool up = log && strstr(log, "listening for new jobs");
        free(log);
        if (up)
            return;
        usleep(100000);
    }
    if (current_host > 0)
        th_host_stop(current_host, 5000);
    current_host = 0;
    cr_assert_fail("the host never logged that it listens; see %s.log", ini);
}

Test(due, delayed_job_starts_when_due_not_at_next_poll, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "due-delayed", SLOW_POLL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_listening(ini);
    long long id = th_scalar(db.conn, "SELECT skipq.enqueue('test', run_at => now() + interval '1500 milliseconds')");
    wait_status(db.conn, id, "done", ini);
    stop_host(db.conn, pid, ini);
    double late = ms_between(db.conn, "j.run_at", "e1.started_at", id);
    cr_expect_geq(late, 0, "the delayed job started %.1f ms before its run_at", -late);
    cr_expect_lt(late, WOKEN_WITHIN_MS, "the delayed job started %.1f ms after its run_at: found by the poll", late);
}

Test(due, retry_starts_when_due_not_at_next_poll, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "due-retry", SLOW_POLL, NULL,
                            "[queue default]\nthreads = 2\n\n[kind test]\nbackoff_base = 400ms\nbackoff_cap = 400ms\n");
    pid_t pid = start_host(ini);
    wait_listening(ini);
    int64_t id = th_enqueue(db.conn, "test", "{\"fail_times\": 2}", NULL, 0, 5);
    wait_status(db.conn, id, "done", ini);
    stop_host(db.conn, pid, ini);
    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 3);
    double gap1 = ms_between(db.conn, "e1.finished_at", "e2.started_at", id);
    double gap2 = ms_between(db.conn, "e2.finished_at", "e3.started_at", id);
    cr_expect_geq(gap1, 200 - 20, "first retry after %.1f ms, before its backoff", gap1);
    cr_expect_lt(gap1, WOKEN_WITHIN_MS, "first retry after %.1f ms: found by the poll", gap1);
    cr_expect_lt(gap2, WOKEN_WITHIN_MS, "second retry after %.1f ms: found by the poll", gap2);
}

/* ---- plans that outlive the table size they were made for -------------------------------- */

/*
 * Enqueue a burst of `jobs` into a running host, wait until `done_after`
 * jobs are done, stop the host and read `stat_sql`, a counter of
 * `counters_of` reset just before the burst. The host's sessions report
 * their counters as they end, so they are all in (read before the invariant
 * checks, which scan the table themselves).
 */
static long long drain_burst(struct th_db *db, pid_t pid, const char *ini, const char *counters_of, long jobs,
                             long long done_after, const char *stat_sql)
{
    /* This session's own counters (the migrations' scans) go in first. */
    th_execf(db->conn, "SELECT pg_stat_force_next_flush()");
    th_execf(db->conn, "SELECT 1");
    th_execf(db->conn, "SELECT pg_stat_reset_single_table_counters('%s'::regclass)", counters_of);
    th_execf(db->conn, "SELECT count(skipq.enqueue('test')) FROM generate_series(1, %ld)", jobs);
    long long done = th_wait_scalar(db->conn, done_after, 120000,
                                    "SELECT count(*) FROM skipq.job_executions WHERE status = 'done'");
    current_host = 0;
    cr_expect_eq(th_host_stop(pid, 15000), 0, "host did not stop cleanly; see %s.log", ini);
    cr_assert_eq(done, done_after, "the burst was not drained; see %s.log", ini);
    usleep(200000);
    th_execf(db->conn, "SELECT pg_stat_clear_snapshot()");
    return th_scalar(db->conn, stat_sql);
}

/*
 * A host that has idled on an empty queue has its statements planned for
 * an empty table; a burst must still be read by index. (A generic plan
 * made on the empty table scanned all of skipq.jobs in every cycle: 0.7 s
 * per cycle at 300,000 rows, and a drain that all but stopped.)
 */
Test(lifecycle, burst_after_idle_reads_jobs_by_index, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    /* No autovacuum on jobs here: its ANALYZE would refresh the statistics
     * this test needs stale, and its VACUUM summarizes new BRIN ranges
     * (jobs_finished_brin) by a heap scan that seq_scan counts too. */
    th_execf(db.conn, "ALTER TABLE skipq.jobs SET (autovacuum_enabled = false)");
    char *ini = th_host_ini(&db, "burst", NULL, NULL, "[queue default]\nthreads = 2\nbatch = 200\n");
    pid_t pid = start_host(ini);
    wait_listening(ini);
    /* Small jobs one at a time: every statement runs often enough on the
     * near-empty table for PostgreSQL to settle on its generic plan. */
    for (int i = 0; i < 12; i++)
        wait_status(db.conn, th_enqueue(db.conn, "test", "{}", NULL, 0, 0), "done", ini);
    usleep(500000);
    long long scans = drain_burst(&db, pid, ini, "skipq.jobs", 20000, 20012,
                                  "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'skipq.jobs'::regclass");
    cr_expect_eq(scans, 0, "skipq.jobs was read by sequential scan %lld times while draining the burst", scans);
    th_assert_clean_log(ini);
    th_check_invariants(db.conn);
}

/*
 * A claim reads each job it claims once, whatever the statistics say. After
 * an ANALYZE of a table of done jobs, the planner believes pending jobs are
 * rare and a claimed batch one row: a claim whose update read the batch's
 * ids beside a join on id then read every id of the batch again for each
 * job (at batch 500, 470 index entries per job).
 */
Test(lifecycle, burst_after_a_history_of_done_jobs_reads_each_claimed_job_once, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "ALTER TABLE skipq.jobs SET (autovacuum_enabled = false)");
    th_execf(db.conn, "INSERT INTO skipq.jobs (queue, kind, payload, status, finished_at)"
                      " SELECT 'default', 'test', '{}', 'done', now() FROM generate_series(1, 50000)");
    th_execf(db.conn, "ANALYZE skipq.jobs");
    char *ini = th_host_ini(&db, "history", NULL, NULL, "[queue default]\nthreads = 2\nbatch = 500\n");
    pid_t pid = start_host(ini);
    wait_listening(ini);
    long long read = drain_burst(&db, pid, ini, "skipq.jobs_pkey", 10000, 10000,
                                 "SELECT idx_tup_read FROM pg_stat_user_indexes"
                                 " WHERE indexrelid = 'skipq.jobs_pkey'::regclass");
    /* A claim and its outcome read a job by id two or three times, and each
     * lease renewal (slow builds renew more often per job) once: about 5 per
     * job here. Reading the batch again for each job was 470. */
    cr_expect_leq(read, 20 * 10000, "the drain read %lld entries of skipq.jobs_pkey for 10,000 jobs", read);
    th_assert_clean_log(ini);
    th_execf(db.conn, "DELETE FROM skipq.jobs WHERE current_execution_id IS NULL"); /* the history never ran */
    th_check_invariants(db.conn);
}

/* ---- routing ---------------------------------------------------------------------------------- */

Test(routing, unregistered_kind_is_never_claimed, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* Higher priority than the runnable work: a claim ignoring kinds takes it first. */
    int64_t other = th_enqueue(db.conn, "other", "{}", NULL, 100, 0);
    int64_t t1 = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "only_test", NULL, NULL, "kinds = test\n\n[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, t1, "done", ini);
    int64_t t2 = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    wait_status(db.conn, t2, "done", ini);
    stop_host(db.conn, pid, ini);
    expect_untouched(db.conn, other);

    /* Control: a host that does register the kind runs it. */
    char *ini2 = th_host_ini(&db, "with_other", NULL, NULL, "kinds = test, other\n\n[queue default]\nthreads = 1\n");
    pid = start_host(ini2);
    wait_status(db.conn, other, "done", ini2);
    stop_host(db.conn, pid, ini2);
}

Test(routing, group_claims_only_its_queue, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t in_b = th_enqueue(db.conn, "test", "{}", "b", 100, 0);
    int64_t in_a = th_enqueue(db.conn, "test", "{}", "a", 0, 0);
    char *ini = th_host_ini(&db, "queue_a", NULL, NULL, "[queue a]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, in_a, "done", ini);
    int64_t in_a2 = th_enqueue(db.conn, "test", "{}", "a", 0, 0);
    wait_status(db.conn, in_a2, "done", ini);
    stop_host(db.conn, pid, ini);
    expect_untouched(db.conn, in_b);
    int64_t in_default = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);

    char *ini2 = th_host_ini(&db, "queue_b", NULL, NULL, "[queue b]\nthreads = 1\n");
    pid = start_host(ini2);
    wait_status(db.conn, in_b, "done", ini2);
    stop_host(db.conn, pid, ini2);
    expect_untouched(db.conn, in_default);
}

Test(routing, group_kinds_restrict_registered_kinds, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t other = th_enqueue(db.conn, "test.other", "{}", "a", 100, 0);
    int64_t t1 = th_enqueue(db.conn, "test", "{}", "a", 0, 0);
    char *ini = th_host_ini(&db, "a_test_only", NULL, NULL,
                            "kinds = test, test.other\n\n[queue a]\nthreads = 2\nkinds = test\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, t1, "done", ini);
    int64_t t2 = th_enqueue(db.conn, "test", "{}", "a", 0, 0);
    wait_status(db.conn, t2, "done", ini);
    stop_host(db.conn, pid, ini);
    expect_untouched(db.conn, other);

    /* Control: the plugin did register test.other; a group serving every kind runs it. */
    char *ini2 = th_host_ini(&db, "a_all", NULL, NULL, "kinds = test, test.other\n\n[queue a]\nthreads = 1\n");
    pid = start_host(ini2);
    wait_status(db.conn, other, "done", ini2);
    stop_host(db.conn, pid, ini2);
}

/* ---- transactional handlers ---------------------------------------------------------------- */

Test(lifecycle, txn_effects_commit_with_done_and_roll_back_on_failure, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* planner: the settings the handler's statements were planned with
     * (the host's own -- enable_seqscan and jit off, generic plans only --
     * must not reach them). */
    PQclear(th_query(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint,"
                              " planner text DEFAULT current_setting('enable_seqscan') || '/'"
                              " || current_setting('jit') || '/' || current_setting('plan_cache_mode'))"));
    int64_t ok = th_enqueue(db.conn, "test", "{\"txn\": true}", NULL, 0, 0);
    int64_t bad = th_enqueue(db.conn, "test", "{\"txn\": true, \"fail\": \"x\", \"retry_in_ms\": 10}", NULL, 0, 2);
    char *ini = th_host_ini(&db, "txn", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_host(ini);
    wait_status(db.conn, ok, "done", ini);
    wait_status(db.conn, bad, "dead", ini);
    stop_host(db.conn, pid, ini);

    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM public.testkit_effects WHERE job_id = %" PRId64, ok), 1,
                 "a done transactional job should leave exactly one effects row");
    th_expect_text(db.conn, "on/on/auto", "SELECT planner FROM public.testkit_effects WHERE job_id = %" PRId64, ok);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM public.testkit_effects f JOIN skipq.job_executions e"
                            " ON e.id = f.execution_id AND e.job_id = f.job_id JOIN skipq.jobs j"
                            " ON j.current_execution_id = e.id"
                            " WHERE f.job_id = %" PRId64 " AND e.status = 'done' AND j.status = 'done'",
                            ok),
                 1, "the effects row is not the done execution's");
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM public.testkit_effects WHERE job_id = %" PRId64, bad), 0,
                 "a failed transactional job left effects behind");
    th_expect_text(db.conn, "retry,dead",
                   "SELECT string_agg(status, ',' ORDER BY attempt) FROM skipq.job_executions WHERE job_id = %" PRId64,
                   bad);
    th_expect_text(db.conn, "x", "SELECT last_error FROM skipq.jobs WHERE id = %" PRId64, bad);
}

/*
 * A handler's error text is not always valid UTF-8 (testkit cuts messages at
 * 255 bytes, the host at SKIPQ_ERROR_SIZE - 1, both inside a character if
 * need be). The failure must still be recorded -- dead after one attempt --
 * and the worker must go on to the next job.
 */
Test(lifecycle, failure_with_message_cut_inside_a_character, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* 150 two-byte characters: longer than testkit's 255-byte message buffer. */
    char payload[512] = "{\"permanent\": \"";
    for (int i = 0; i < 150; i++)
        strcat(payload, "\xc3\xa9");
    strcat(payload, "\"}");
    int64_t id = th_enqueue(db.conn, "test", payload, NULL, 10, 5);
    int64_t probe = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "utf8", NULL, NULL, "[queue default]\nthreads = 1\n");
    pid_t pid = start_host(ini);
    /* The one worker reaches the probe only once the failure is recorded. */
    wait_status(db.conn, probe, "done", ini);
    wait_status(db.conn, id, "dead", ini);
    stop_host(db.conn, pid, ini);
    th_expect_text(db.conn, "dead 1 t",
                   "SELECT concat_ws(' ', status, attempts, last_error LIKE repeat(U&'\\00e9', 100) || '%%')"
                   " FROM skipq.jobs WHERE id = %" PRId64,
                   id);
}
