/*
 * test_batch.c -- a thread holding several claimed jobs (`batch`): a job
 * whose handler already returned keeps its lease until its outcome is
 * recorded, whatever happens to the jobs after it in the batch; and with
 * the default `batch` a thread claims many quick jobs at once but slow
 * ones one at a time, so a backlog of slow jobs is shared between hosts;
 * a session shared by handler threads holds slow jobs two claims deep at
 * most, one per thread whatever the batch, and claims quick ones more
 * than one per thread.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static long long executions(PGconn *c, int64_t id)
{
    return th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, id);
}

/* The jobs of one claim share their worker and their started_at (the
 * claiming statement's now()): the most one claim of `host` took. */
static long long largest_claim(PGconn *c, const char *host)
{
    return th_scalarf(c,
                      "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM skipq.job_executions"
                      " WHERE split_part(worker, ':', 1) = '%s' GROUP BY worker, started_at) AS claims",
                      host);
}

static long long runs_by(PGconn *c, const char *host)
{
    return th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE split_part(worker, ':', 1) = '%s'", host);
}

/* Default batch, two hosts of one thread each, 20 jobs of 300 ms: each
 * thread claims one job at a time (300 ms is past the claim's time budget),
 * so neither host holds jobs the other could run. */
Test(batch, slow_jobs_are_shared_between_hosts_with_the_default_batch, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *queue = "[queue default]\nthreads = 1\n";
    char *ini_a = th_host_ini(&db, "share-a", NULL, NULL, queue);
    char *ini_b = th_host_ini(&db, "share-b", NULL, NULL, queue);
    pid_t a = th_host_start(ini_a), b = th_host_start(ini_b);
    cr_assert_eq(th_wait_scalar(db.conn, 2, 30000, "SELECT count(*) FROM skipq.hosts"), 2, "the hosts did not start");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 300}')) FROM generate_series(1, 20)");
    cr_assert_eq(th_wait_scalar(db.conn, 20, 60000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 20,
                 "the slow jobs did not finish");
    cr_expect_eq(th_host_stop(a, 20000), 0);
    cr_expect_eq(th_host_stop(b, 20000), 0);
    long long ra = runs_by(db.conn, "share-a"), rb = runs_by(db.conn, "share-b");
    cr_expect_eq(ra + rb, 20);
    cr_expect(ra <= 15 && rb <= 15, "one host ran %lld of the 20 slow jobs, the other %lld", ra > rb ? ra : rb,
              ra > rb ? rb : ra);
    cr_expect_eq(largest_claim(db.conn, "share-a"), 1, "a claim of host a held %lld slow jobs",
                 largest_claim(db.conn, "share-a"));
    cr_expect_eq(largest_claim(db.conn, "share-b"), 1, "a claim of host b held %lld slow jobs",
                 largest_claim(db.conn, "share-b"));
    th_check_invariants(db.conn);
    th_assert_clean_log(ini_a);
    th_assert_clean_log(ini_b);
}

/* 24 jobs of 1.2 s for one session of four handler threads (`queue`, the
 * host's [queue default] section): run them all, exactly once, and say how
 * many the session held at once at most. */
static long long most_held_of_slow_jobs(struct th_db *db, const char *host, const char *queue)
{
    th_execf(db->conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 1200}')) FROM generate_series(1, 24)");
    char *ini = th_host_ini(db, host, NULL, NULL, queue);
    pid_t pid = th_host_start(ini);
    long long most = 0, done = 0;
    for (int64_t deadline = th_now_ms() + 60000; done < 24 && th_now_ms() < deadline; usleep(50 * 1000)) {
        long long held = th_scalar(db->conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'");
        if (held > most)
            most = held;
        done = th_scalar(db->conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    }
    cr_assert_eq(done, 24, "only %lld of the 24 slow jobs finished", done);
    cr_expect_eq(th_host_stop(pid, 20000), 0);
    cr_expect_eq(th_scalar(db->conn, "SELECT count(*) FROM skipq.job_executions"), 24);
    th_check_invariants(db->conn);
    th_assert_clean_log(ini);
    return most;
}

/* batch 4: the session claims ahead while its threads run, but once a
 * claim has taken longer than the claim budget it holds at most two claims
 * (8 jobs) -- one running, one claimed ahead -- never a third that other
 * hosts could have started, even when it waits longer than a poll
 * interval. */
Test(batch, slow_jobs_on_a_shared_session_are_held_at_most_two_claims_deep, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    long long most = most_held_of_slow_jobs(&db, "deep", "[queue default]\nthreads = 4\nconnections = 1\nbatch = 4\n");
    cr_expect_leq(most, 8, "the session held %lld slow jobs at once for its 4 threads", most);
    cr_expect_geq(most, 4, "the session never held more than %lld jobs: its threads did not run side by side", most);
}

/* The default batch (64), more than the session's four threads can start
 * at once: slow jobs are still claimed no more than one per thread, two
 * claims deep. */
Test(batch, slow_jobs_on_a_shared_session_are_held_one_per_thread_whatever_the_batch, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    long long most = most_held_of_slow_jobs(&db, "wide", "[queue default]\nthreads = 4\nconnections = 1\n");
    cr_expect_leq(most, 8, "the session held %lld slow jobs at once for its 4 threads", most);
    cr_expect_leq(largest_claim(db.conn, "wide"), 4, "one claim took %lld slow jobs for 4 threads",
                  largest_claim(db.conn, "wide"));
}

/* n quick jobs (`payload`) for one host (`queue`, its [queue default]
 * section): run them all, each exactly once, and say how many jobs the
 * host's largest claim took. */
static long long largest_claim_of_quick_jobs(struct th_db *db, const char *host, const char *queue, int n,
                                             const char *payload)
{
    th_execf(db->conn, "SELECT count(skipq.enqueue('test', '%s')) FROM generate_series(1, %d)", payload, n);
    char *ini = th_host_ini(db, host, NULL, NULL, queue);
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db->conn, n, 60000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), n,
                 "the quick jobs did not finish");
    cr_expect_eq(th_host_stop(pid, 20000), 0);
    cr_expect_eq(th_scalar(db->conn, "SELECT count(*) FROM skipq.job_executions"), n);
    cr_expect_eq(th_scalar(db->conn, "SELECT count(DISTINCT job_id) FROM skipq.job_executions"), n);
    th_check_invariants(db->conn);
    th_assert_clean_log(ini);
    return largest_claim(db->conn, host);
}

/* One session for four handler threads, default batch, a backlog of 2,000
 * quick jobs: a claim grows past one job per thread while its jobs run
 * within the claim budget (fewer claims, each walking the ready index's
 * dead entries once). */
Test(batch, quick_jobs_on_a_shared_session_are_claimed_more_than_one_per_thread, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    long long most = largest_claim_of_quick_jobs(&db, "many", "[queue default]\nthreads = 4\nconnections = 1\n", 2000,
                                                 "{\"sleep_ms\": 1}");
    cr_expect_geq(most, 16, "the largest claim held only %lld quick jobs for 4 threads", most);
}

/* Default batch, one thread, a backlog of 500 quick jobs: claims grow
 * while they come back full and quick, so some claim takes many jobs. */
Test(batch, quick_jobs_grow_the_claim_with_the_default_batch, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    long long most = largest_claim_of_quick_jobs(&db, "grow", "[queue default]\nthreads = 1\n", 500, "{}");
    cr_expect_geq(most, 16, "the largest claim held only %lld quick jobs", most);
}

/* The first job finishes at once; the second hangs past its kind's timeout.
 * The first must not time out while it waits for the second. */
Test(batch, finished_job_does_not_time_out_behind_a_slow_one, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* A thread's first claim takes 1 job, its second 2: `quick` alone, then
     * `quick2` (finished at once) with `slow` behind it in the same batch,
     * outlasting both the timeout and the 3 s lease. */
    int64_t quick = th_enqueue(db.conn, "test", "{}", NULL, 10, 0);
    int64_t quick2 = th_enqueue(db.conn, "test", "{}", NULL, 6, 0);
    int64_t slow = th_enqueue(db.conn, "test", "{\"sleep_ms\": 6000, \"ignore_stop\": true}", NULL, 5, 1);
    int64_t slow2 = th_enqueue(db.conn, "test", "{\"sleep_ms\": 6000, \"ignore_stop\": true}", NULL, 3, 1);
    char *ini = th_host_ini(&db, "batch-timeout", NULL, NULL,
                            "[queue default]\nthreads = 1\nbatch = 2\n\n[kind test]\ntimeout = 1s\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 4, 60000,
                                "SELECT count(*) FROM skipq.jobs WHERE status IN ('done', 'dead')"),
                 4, "jobs did not finish");
    cr_expect_eq(th_host_stop(pid, 20000), 0);
    int64_t quicks[2] = {quick, quick2};
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(executions(db.conn, quicks[i]), 1, "quick job %" PRId64 " ran %lld times", quicks[i],
                     executions(db.conn, quicks[i]));
        cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'done'",
                                quicks[i]),
                     1);
    }
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id IN (%" PRId64 ", %" PRId64
                                     ") AND status = 'dead'",
                            slow, slow2),
                 2, "the slow jobs did not time out");
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* Grace runs out while the second job of a batch runs: the first, already
 * finished, is recorded done -- not released to run again. */
Test(batch, grace_expiry_records_finished_jobs, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t warm = th_enqueue(db.conn, "test", "{}", NULL, 20, 0); /* first claim is 1 job */
    int64_t quick = th_enqueue(db.conn, "test", "{}", NULL, 10, 0);
    int64_t slow = th_enqueue(db.conn, "test", "{\"sleep_ms\": 30000, \"ignore_stop\": true}", NULL, 5, 0);
    char *ini = th_host_ini(&db, "batch-grace", "shutdown_grace = 1s\n", NULL, "[queue default]\nthreads = 1\nbatch = 2\n");
    pid_t pid = th_host_start(ini);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64 " AND status = 'running'", slow);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, sql), 1, "the slow job never started");
    usleep(300000);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'done'", warm), 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'done'", quick), 1,
                 "a finished job was not recorded done at grace expiry");
    cr_expect_eq(executions(db.conn, quick), 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'pending'", slow), 1,
                 "the running job was not released");
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}
