/*
 * test_limits.c -- [kind NAME] max_running and rate across hosts, and
 * [queue NAME] priority_aging. Limits are checked from the audit trail:
 * overlapping job_executions intervals for max_running, claims per window of
 * started_at for rate. Aging is checked by what overtook what, under a
 * stream of higher-priority work that would starve the job without it.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Most executions of `kind` whose [started_at, finished_at) intervals overlap. */
static long long max_overlap(PGconn *c, const char *kind)
{
    return th_scalarf(c,
                      "WITH e AS (SELECT x.started_at AS s, coalesce(x.finished_at, 'infinity') AS f"
                      "             FROM skipq.job_executions x JOIN skipq.jobs j ON j.id = x.job_id"
                      "            WHERE j.kind = '%s')"
                      " SELECT coalesce(max((SELECT count(*) FROM e e2 WHERE e2.s <= e1.s AND e2.f > e1.s)), 0)"
                      "   FROM e e1",
                      kind);
}

/* testkit serves both kinds; the limited one shares the queue with a free one. */
static const char *TWO_KINDS = "kinds = test, test.other\n";

Test(limits, max_running_across_hosts, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 15}')) FROM generate_series(1, 240)");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test.other', '{\"sleep_ms\": 15}')) FROM generate_series(1, 120)");
    char extra[256];
    snprintf(extra, sizeof extra, "%s[queue default]\nthreads = 6\nbatch = 2\n[kind test]\nmax_running = 3\n",
             TWO_KINDS);
    struct host hosts[3] = {{.name = "lim1"}, {.name = "lim2"}, {.name = "lim3"}};
    for (int i = 0; i < 3; i++) {
        hosts[i].ini = th_host_ini(&db, hosts[i].name, NULL, NULL, extra);
        host_start(&hosts[i]);
    }
    cr_assert_eq(th_wait_scalar(db.conn, 360, 120000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 360);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(host_stop(&hosts[i], 15000), 0);
    long long limited = max_overlap(db.conn, "test"), unlimited = max_overlap(db.conn, "test.other");
    cr_expect_leq(limited, 3, "%lld jobs of a kind with max_running = 3 ran at once", limited);
    cr_expect_geq(limited, 2, "the limited kind never ran concurrently (%lld)", limited);
    cr_expect_gt(unlimited, 3, "the unlimited kind was held back too (%lld at most)", unlimited);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.kind_limits WHERE kind = 'test' AND max_running = 3"),
                 1);
    th_check_invariants(db.conn);
    for (int i = 0; i < 3; i++)
        th_assert_clean_log(hosts[i].ini);

    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "limits", "--json", "--db", db.conninfo, NULL), 0);
    cr_expect(out && strstr(out, "\"kind\":\"test\",\"max_running\":3,\"running\":0"), "%s", out);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "limits", "clear", "test", "--db", db.conninfo, NULL), 0);
    cr_expect(out && strstr(out, "limits cleared"), "%s", out);
    free(out);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.kind_limits"), 0);
    cr_expect_eq(th_cli(NULL, NULL, "limits", "clear", "--db", db.conninfo, NULL), 2);
}

Test(limits, rate_per_second_across_hosts, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test')) FROM generate_series(1, 36)");
    const char *extra = "[queue default]\nthreads = 4\nbatch = 4\n[kind test]\nrate = 6/s\n";
    struct host hosts[2] = {{.name = "rate1"}, {.name = "rate2"}};
    for (int i = 0; i < 2; i++) {
        hosts[i].ini = th_host_ini(&db, hosts[i].name, NULL, NULL, extra);
        host_start(&hosts[i]);
    }
    cr_assert_eq(th_wait_scalar(db.conn, 36, 120000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 36);
    for (int i = 0; i < 2; i++)
        cr_expect_eq(host_stop(&hosts[i], 15000), 0);
    long long most = th_scalar(db.conn, "SELECT max(n) FROM (SELECT count(*) AS n FROM skipq.job_executions"
                                        " GROUP BY date_trunc('second', started_at)) w");
    cr_expect_leq(most, 6, "%lld claims in one second with rate = 6/s", most);
    cr_expect_geq(th_scalar(db.conn, "SELECT count(DISTINCT date_trunc('second', started_at))"
                                     " FROM skipq.job_executions"),
                  6);
    th_check_invariants(db.conn);
    for (int i = 0; i < 2; i++)
        th_assert_clean_log(hosts[i].ini);
}

/* Every way out of running frees the slot: failures, lease expiry. */
Test(limits, failed_and_reaped_jobs_free_their_slot, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    const char *extra = "[queue default]\nthreads = 3\n[kind test]\nmax_running = 1\n";
    /* A host dies (SIGKILL) holding the only slot. */
    int64_t stuck = th_enqueue(db.conn, "test", "{\"sleep_ms\": 60000}", NULL, 100, 0);
    struct host a = {.name = "victim"};
    a.ini = th_host_ini(&db, a.name, NULL, NULL, extra);
    host_start(&a);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'running'", stuck);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, sql), 1);
    kill(a.pid, SIGKILL);
    waitpid(a.pid, NULL, 0);
    a.pid = 0;
    th_execf(db.conn, "UPDATE skipq.jobs SET payload = '{}' WHERE id = %" PRId64, stuck);
    /* Jobs that fail once, then succeed. */
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"fail_times\": 1, \"retry_in_ms\": 1}'))"
                      " FROM generate_series(1, 6)");
    struct host b = {.name = "survivor"};
    b.ini = th_host_ini(&db, b.name, NULL, NULL, extra);
    host_start(&b);
    cr_expect_eq(th_wait_scalar(db.conn, 7, 60000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 7);
    cr_expect_eq(host_stop(&b, 15000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64
                                     " AND status = 'lost'", stuck),
                 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE status = 'retry'"), 6);
    cr_expect_leq(max_overlap(db.conn, "test"), 1);
    th_check_invariants(db.conn);
    th_assert_clean_log(b.ini);
}

Test(limits, bad_limits_refused)
{
    struct th_db db;
    th_db_new(&db);
    static const struct {
        const char *text, *needle;
    } bad[] = {{"max_running = 0", "max_running"},
               {"max_running = many", "max_running"},
               {"rate = 10", "N/s or N/min"},
               {"rate = 10/h", "N/s or N/min"},
               {"rate = 0/s", "N/s or N/min"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[256], name[16];
        snprintf(extra, sizeof extra, "[queue default]\n[kind test]\n%s\n", bad[i].text);
        snprintf(name, sizeof name, "bad%zu", i);
        char *ini = th_host_ini(&db, name, NULL, NULL, extra);
        char *err = NULL;
        cr_expect_eq(th_cli(NULL, &err, "run", "-c", ini, NULL), 2, "%s", bad[i].text);
        char where[700];
        snprintf(where, sizeof where, "%s:", ini);
        cr_expect(err && strstr(err, where) && strstr(err, bad[i].needle), "%s: %s", bad[i].text, err);
        free(err);
    }
}

/* ---- priority aging --------------------------------------------------------------- */

/* The formula, on a clock faked through run_at: base + floor(waited / step), capped. */
Test(aging, formula_and_cap, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t a = th_enqueue(db.conn, "test", "{}", "aged", 0, 0);
    int64_t b = th_enqueue(db.conn, "test", "{}", "aged", -3, 0);
    int64_t c = th_enqueue(db.conn, "test", "{}", "aged", 50, 0);
    th_execf(db.conn, "UPDATE skipq.jobs SET run_at = now() - interval '10.5 seconds' WHERE id IN (%" PRId64 ", %" PRId64
                      ", %" PRId64 ")",
             a, b, c);
    /* The host ages queue "aged" but claims nothing there: it handles only
     * kind test.other, and the jobs are of kind test. */
    char *ini = th_host_ini(&db, "ager", NULL, NULL,
                            "kinds = test.other\n[queue aged]\npriority_aging = 1s\npriority_aging_cap = 5\n");
    pid_t pid = th_host_start(ini);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND priority = 5", a);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    /* 0 + floor(10.5 s / 1 s) = 10, capped at 5; -3 + 10 = 7, capped at 5; 50 is above the cap: untouched. */
    cr_expect_eq(th_scalarf(db.conn, "SELECT priority FROM skipq.jobs WHERE id = %" PRId64, a), 5);
    cr_expect_eq(th_scalarf(db.conn, "SELECT base_priority FROM skipq.jobs WHERE id = %" PRId64, a), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT priority FROM skipq.jobs WHERE id = %" PRId64, b), 5);
    cr_expect_eq(th_scalarf(db.conn, "SELECT base_priority FROM skipq.jobs WHERE id = %" PRId64, b), -3);
    cr_expect_eq(th_scalarf(db.conn, "SELECT priority FROM skipq.jobs WHERE id = %" PRId64, c), 50);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND base_priority IS NULL",
                            c),
                 1);
}

/*
 * Saturation: one thread serving 20 ms jobs (50/s) while priority-10 jobs
 * arrive at 100/s. Without aging the priority-0 job would wait for the
 * stream to end. With priority_aging = 200ms it is ordered like a
 * priority-10 job that arrived (10 - 0) x 200ms = 2 s after it, so no
 * priority-10 job that arrived later than that (plus slack for the sweep,
 * which runs on heartbeat rounds) may start before it.
 */
Test(aging, low_priority_job_not_starved, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "starve", NULL, NULL, "[queue default]\nthreads = 1\npriority_aging = 200ms\n");
    pid_t pid = th_host_start(ini);
    int64_t low = 0;
    bool started = false;
    for (int round = 0; round < 250 && !started; round++) { /* at most ~25 s of stream */
        th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 20}', priority => 10))"
                          " FROM generate_series(1, 10)");
        if (round == 10)
            low = th_enqueue(db.conn, "test", "{\"sleep_ms\": 20}", NULL, 0, 0);
        if (low && round % 5 == 0)
            started = th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, low) > 0;
        usleep(100 * 1000);
    }
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_assert(started, "the priority-0 job was starved for the whole stream");
    long long waiting = th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending' AND base_priority"
                                           " IS NOT NULL");
    cr_expect_gt(waiting, 0, "the stream was not saturating: nothing was left waiting");
    long long overtook = th_scalarf(db.conn,
                                    "SELECT count(*) FROM skipq.jobs h JOIN skipq.job_executions he ON he.job_id = h.id,"
                                    "       skipq.jobs l JOIN skipq.job_executions le ON le.job_id = l.id"
                                    " WHERE l.id = %" PRId64 " AND h.id <> l.id"
                                    "   AND h.created_at > l.created_at + interval '2 seconds' + interval '3 seconds'"
                                    "   AND he.started_at < le.started_at",
                                    low);
    cr_expect_eq(overtook, 0, "%lld later high-priority jobs overtook the aged job", overtook);
    cr_expect_eq(th_scalarf(db.conn, "SELECT base_priority FROM skipq.jobs WHERE id = %" PRId64, low), 0);
    th_check_invariants(db.conn);
}
