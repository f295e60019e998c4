/*
 * test_operate.c -- the operator's commands: skipq jobs list|show, retry,
 * cancel, against real hosts.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

Test(operate, cancel_running_and_pending_jobs, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t running = th_enqueue(db.conn, "test", "{\"sleep_ms\": 60000, \"txn\": true}", NULL, 10, 0);
    int64_t pending = th_enqueue(db.conn, "test", "{}", "later", 0, 0); /* no host serves "later" */
    th_execf(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    char *ini = th_host_ini(&db, "cancel", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = th_host_start(ini);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'running'", running);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, sql), 1);

    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "cancel", th_id_text(running), th_id_text(pending), "--db", db.conninfo, NULL), 0,
                 "%s", err);
    cr_expect(strstr(out, "2 job(s) cancelled") != NULL, "%s", out);
    /* The handler is told at the next heartbeat and gives up; its attempt
     * ends cancelled, its transactional write is rolled back, never done. */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64 " AND status = 'cancelled'", running);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 10000, sql), 1);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1,
                 "the host stopped working after a cancel");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id IN (%" PRId64 ", %" PRId64
                                     ") AND status = 'cancelled'",
                            running, pending),
                 2);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64
                                     " AND status = 'done'",
                            running),
                 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM public.testkit_effects"), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, pending), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
    free(out);
    free(err);

    /* Finished jobs cannot be cancelled; ids must be ids. */
    cr_expect_eq(th_cli(&out, NULL, "cancel", th_id_text(running), "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "0 job(s) cancelled") != NULL, "%s", out);
    cr_expect_eq(th_cli(NULL, NULL, "cancel", "12x", "--db", db.conninfo, NULL), 2);
    cr_expect_eq(th_cli(NULL, NULL, "cancel", "--db", db.conninfo, NULL), 2);
}

Test(operate, retry_dead_jobs_with_filters, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"fail_times\": 1}', max_attempts => 1))"
                      " FROM generate_series(1, 3)");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test.other', '{\"fail_times\": 1}', max_attempts => 1))"
                      " FROM generate_series(1, 2)");
    char *ini = th_host_ini(&db, "retry", NULL, NULL, "[queue default]\nthreads = 2\n");
    /* testkit registers test.other too */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sed -i 's|^path = \\(.*testkit.so\\)$|path = \\1\\nkinds = test, test.other|' %s", ini);
    cr_assert_eq(system(cmd), 0);
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 5, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'dead'"), 5);

    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "retry", "--dead", "--kind", "test", "--db", db.conninfo, NULL), 0, "%s", err);
    cr_expect(strstr(out, "3 job(s) back to pending") != NULL, "%s", out);
    cr_expect_eq(th_wait_scalar(db.conn, 3, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 3);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test.other' AND status = 'dead'"), 2,
                 "--kind test redrove other kinds");
    /* Attempts extended, not reset: two attempts on record, max 2. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test' AND attempts = 2"
                                    " AND max_attempts = 2"),
                 3);
    free(out);
    free(err);

    /* By id, with more attempts; and --since in the future matches nothing. */
    int64_t one = th_scalar(db.conn, "SELECT min(id) FROM skipq.jobs WHERE kind = 'test.other'");
    cr_expect_eq(th_cli(&out, NULL, "retry", "--dead", "--since", "2999-01-01", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "0 job(s)") != NULL, "%s", out);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "retry", th_id_text(one), "--attempts", "3", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "1 job(s) back to pending") != NULL, "%s", out);
    cr_expect_eq(th_wait_scalar(db.conn, 4, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 4);
    cr_expect_eq(th_scalarf(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE id = %" PRId64, one), 4);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);

    cr_expect_eq(th_cli(NULL, NULL, "retry", "--dead", "--since", "garbage", "--db", db.conninfo, NULL), 2);
    cr_expect_eq(th_cli(NULL, NULL, "retry", "--db", db.conninfo, NULL), 2);
    cr_expect_eq(th_cli(NULL, NULL, "retry", "5", "--dead", "--db", db.conninfo, NULL), 2);
}

Test(operate, jobs_list_and_show, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t a = th_enqueue(db.conn, "test", "{\"fail_times\": 1, \"retry_in_ms\": 1}", "mail", 0, 0);
    th_enqueue(db.conn, "test", "{}", "other", 0, 0);
    char *ini = th_host_ini(&db, "show", NULL, NULL, "[queue mail]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);

    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "jobs", "show", th_id_text(a), "--json", "--db", db.conninfo, NULL), 0, "%s", err);
    cr_expect(strstr(out, "\"status\":\"done\"") != NULL, "%s", out);
    cr_expect(strstr(out, "\"status\":\"retry\"") != NULL, "the retried attempt is missing: %s", out);
    cr_expect(strstr(out, "planned failure 1 of 1") != NULL, "%s", out);
    cr_expect(strstr(out, "\"worker\":\"show:") != NULL, "%s", out);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "jobs", "list", "--queue", "other", "--json", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "\"queue\":\"other\"") && !strstr(out, "\"queue\":\"mail\""), "%s", out);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "jobs", "list", "--status", "done", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "mail") && !strstr(out, "other"), "%s", out);
    free(out);
    cr_expect_eq(th_cli(NULL, &err, "jobs", "show", "999999", "--db", db.conninfo, NULL), 1);
    cr_expect(strstr(err, "no job with id 999999") != NULL, "%s", err);
    cr_expect_eq(th_cli(NULL, NULL, "jobs", "list", "--status", "weird", "--db", db.conninfo, NULL), 2);
    cr_expect_eq(th_cli(NULL, NULL, "jobs", "show", "abc", "--db", db.conninfo, NULL), 2);
    cr_expect_eq(th_cli(NULL, NULL, "jobs", "--db", db.conninfo, NULL), 2);
}
