/* test_smoke.c -- the harness itself: a database, a host, one job. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "harness.h"

Test(smoke, host_runs_one_job, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "smoke", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = th_host_start(ini);
    long long done = th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    cr_expect_eq(done, 1, "job %lld not done", (long long)id);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    th_assert_clean_log(ini);
}
