/*
 * test_retention.c -- [retention]: finished jobs older than their status's
 * age go, with their executions; everything else stays.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

/* n finished jobs of `status`, finished `age` ago, each with one execution. */
static void finished_jobs(PGconn *c, int n, const char *status, const char *age, const char *kind)
{
    th_execf(c,
             "WITH j AS (INSERT INTO skipq.jobs (queue, kind, status, attempts, finished_at)"
             " SELECT 'default', '%s', '%s', 1, now() - interval '%s' FROM generate_series(1, %d) RETURNING id)"
             " INSERT INTO skipq.job_executions (job_id, attempt, worker, status, finished_at)"
             " SELECT id, 1, 'old', CASE '%s' WHEN 'cancelled' THEN 'lost' ELSE '%s' END, now() - interval '%s' FROM j",
             kind, status, age, n, status, status, age);
    th_execf(c, "UPDATE skipq.jobs j SET current_execution_id = e.id FROM skipq.job_executions e"
                " WHERE e.job_id = j.id AND j.current_execution_id IS NULL");
}

Test(retention, old_finished_jobs_go_with_their_executions, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    finished_jobs(db.conn, 2500, "done", "2 hours", "old.done");  /* more than one batch */
    finished_jobs(db.conn, 10, "done", "10 minutes", "new.done");
    finished_jobs(db.conn, 7, "dead", "3 hours", "old.dead");
    finished_jobs(db.conn, 5, "dead", "90 minutes", "new.dead");
    finished_jobs(db.conn, 4, "cancelled", "3 hours", "old.cancelled");
    th_enqueue(db.conn, "later", "{}", NULL, 0, 0); /* pending, and no host serves it */
    char *ini = th_host_ini(&db, "retention", NULL, NULL,
                            "[queue default]\nthreads = 1\nkinds = test\n\n"
                            "[retention]\ndone = 1h\ndead = 2h\ninterval = 200ms\nbatch = 1000\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 0, 30000, "SELECT count(*) FROM skipq.jobs WHERE kind LIKE 'old.d%'"), 0,
                 "old done/dead jobs were not deleted");
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'new.done'"), 10);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'new.dead'"), 5);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'old.cancelled'"), 4,
                 "cancelled jobs went without a cancelled age");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending'"), 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions e"
                                    " WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = e.job_id)"),
                 0, "executions outlived their jobs");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 10 + 5 + 4);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* More to delete than one round may take: the host goes on at its next
 * heartbeat rounds instead of waiting for the next retention interval. */
Test(retention, a_host_behind_keeps_deleting_at_its_heartbeats_before_the_next_interval, .timeout = 240)
{
    struct th_db db;
    th_db_new(&db);
    finished_jobs(db.conn, 10000, "done", "2 hours", "old.done");
    /* Batches of 10 with a one-second budget: the first round cannot
     * delete them all; the next one is due 30 s later. */
    char *ini = th_host_ini(&db, "catch-up", NULL, NULL,
                            "[queue default]\nthreads = 1\nkinds = test\n\n"
                            "[retention]\ndone = 1h\ninterval = 30s\nbatch = 10\n");
    pid_t pid = th_host_start(ini);
    long long left = 10000;
    for (int i = 0; i < 600 && left == 10000; i++) { /* the first round, about 30 s in */
        usleep(100000);
        left = th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs");
    }
    cr_assert_lt(left, 10000, "retention never started; see %s.log", ini);
    /* The first round stops after its second. What is left then must
     * keep shrinking at the next heartbeats (500 ms here), long before the
     * next interval: how fast depends on the machine, that it goes on
     * does not. */
    int64_t first = th_now_ms();
    while (th_now_ms() < first + 2000)
        usleep(100000);
    long long after_first = th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs");
    if (after_first > 0) {
        long long now = after_first;
        while (now == after_first && th_now_ms() < first + 12000) {
            usleep(100000);
            now = th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs");
        }
        cr_expect_lt(now, after_first, "nothing deleted between the first round and 12 s after it began (%lld left); "
                                       "see %s.log", after_first, ini);
    }
    cr_expect_eq(th_wait_scalar(db.conn, 0, 150000, "SELECT count(*) FROM skipq.jobs"), 0,
                 "retention did not finish; see %s.log", ini);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 0, "executions outlived their jobs");
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* Two hosts with retention on: the advisory lock lets one delete at a time;
 * together they still clear everything, and neither trips over the other. */
Test(retention, two_hosts_clear_history_together, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    finished_jobs(db.conn, 3000, "done", "2 days", "old.done");
    const char *extra = "[queue default]\nthreads = 1\nkinds = test\n\n[retention]\ndone = 1d\ninterval = 100ms\n"
                        "batch = 100\n";
    char *a = th_host_ini(&db, "ret-a", NULL, NULL, extra), *b = th_host_ini(&db, "ret-b", NULL, NULL, extra);
    pid_t pa = th_host_start(a), pb = th_host_start(b);
    cr_expect_eq(th_wait_scalar(db.conn, 0, 60000, "SELECT count(*) FROM skipq.jobs"), 0);
    cr_expect_eq(th_host_stop(pa, 10000), 0);
    cr_expect_eq(th_host_stop(pb, 10000), 0);
    th_assert_clean_log(a);
    th_assert_clean_log(b);
}
