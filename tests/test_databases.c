/*
 * test_databases.c -- one host serving queues in two PostgreSQL clusters:
 * [database] (the shared test server) and [database b] (a private cluster
 * this test stops and starts again).
 *
 * What users rely on: while one cluster is down, the other's queues keep
 * draining and the host stays up; /healthz names the database that is
 * unreachable; when it is back, its queues resume; every job runs exactly
 * once in each database; /metrics tells the databases apart; and the CLI
 * reaches either one by name.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char DONE_SQL[] = "SELECT count(*) FROM skipq.jobs WHERE status = 'done'";
/* A job done exactly once: one execution, and it is the done one. */
static const char RAN_TWICE_SQL[] = "SELECT count(*) FROM (SELECT job_id FROM skipq.job_executions"
                                    " GROUP BY job_id HAVING count(*) > 1) t";

static void enqueue_many(PGconn *c, const char *queue, int n)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 1}', queue => '%s')) FROM generate_series(1, %d)",
             queue, n);
    cr_assert_eq(th_scalar(c, sql), n);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Wait until the host's log holds `needle` `n` times (or 20 s); the log. */
static char *wait_log(const char *ini, const char *needle, int n)
{
    int64_t end = th_now_ms() + 20000;
    for (;;) {
        char *log = th_host_log(ini);
        if (count(log, needle) >= n || th_now_ms() > end)
            return log;
        free(log);
        usleep(50 * 1000);
    }
}

/* Poll /healthz until it answers `want` (or 30 s pass); the last body. */
static char *healthz_until(int port, int want, int *status)
{
    int64_t end = th_now_ms() + 30000;
    for (;;) {
        char *text = th_http_get(port, "/healthz", status);
        if (*status == want || th_now_ms() > end)
            return text;
        free(text);
        usleep(200000);
    }
}

static void pg_sh(const char *verb, const struct th_cluster *c)
{
    char cmd[700], port[16] = "";
    if (strcmp(verb, "start") == 0)
        snprintf(port, sizeof port, "%d", c->port);
    snprintf(cmd, sizeof cmd, "%s/scripts/pg.sh %s %s %s >/dev/null 2>&1", SKIPQ_SOURCE_DIR, verb, c->dir, port);
    cr_assert_eq(system(cmd), 0, "pg.sh %s %s failed", verb, c->dir);
}

/* A test database on a private cluster, the shared server staying this
 * process's test server. */
static void db_on_cluster(struct th_cluster *c, struct th_db *db)
{
    char *shared = strdup(th_admin_conninfo());
    th_cluster_start(c, "dbs");
    th_cluster_use(c);
    th_db_new(db);
    setenv("SKIPQ_TEST_DB", shared, 1);
    free(shared);
}

/* One host serving two databases: `a` on the shared test server
 * ([database]) and `b` on a private cluster ([database b]), with /metrics
 * on `port`. */
struct two {
    struct th_db a, b;
    struct th_cluster cb;
    int port;
    char *ini;
};

/* Queue qa in a and qb in b, `threads` each, `isolation` thread or process. */
static void two_databases(struct two *t, const char *name, int threads, const char *isolation)
{
    th_db_new(&t->a);
    db_on_cluster(&t->cb, &t->b);
    t->port = th_free_port();
    char extra[1400];
    snprintf(extra, sizeof extra,
             "[database b]\nurl = %s\n\n"
             "[metrics]\nlisten = 127.0.0.1:%d\nunhealthy_after = 1s\n\n"
             "[queue qa]\nthreads = %d\nisolation = %s\n\n"
             "[queue qb]\ndatabase = b\nthreads = %d\nisolation = %s\n",
             t->b.conninfo, t->port, threads, isolation, threads, isolation);
    t->ini = th_host_ini(&t->a, name, NULL, NULL, extra);
}

/* The host stops cleanly, every job ran once in each database, the
 * invariants hold there and the log is clean. Returns the log (free it). */
static char *stop_and_expect_once_in_both(struct two *t, pid_t pid)
{
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalar(t->a.conn, RAN_TWICE_SQL), 0, "a job of database default ran twice");
    cr_expect_eq(th_robust_scalar(&t->b, RAN_TWICE_SQL), 0, "a job of database b ran twice");
    th_check_invariants(t->a.conn);
    th_check_invariants(t->b.conn);
    th_assert_clean_log(t->ini);
    return th_host_log(t->ini);
}

Test(databases, a_stopped_cluster_stops_only_its_own_queues_and_they_resume_when_it_returns, .timeout = 300)
{
    struct two t;
    two_databases(&t, "two-databases", 3, "thread");

    enqueue_many(t.a.conn, "qa", 300);
    enqueue_many(t.b.conn, "qb", 300);
    pid_t pid = th_host_start(t.ini);
    cr_assert_eq(th_wait_scalar(t.a.conn, 300, 60000, DONE_SQL), 300, "database default did not drain");
    cr_assert_eq(th_wait_scalar(t.b.conn, 300, 60000, DONE_SQL), 300, "database b did not drain");
    int status = 0;
    free(healthz_until(t.port, 200, &status));
    cr_assert_eq(status, 200, "/healthz is not ok with both databases up");

    /* SIGHUP with the file unchanged: each database compares its own part. */
    cr_assert_eq(kill(pid, SIGHUP), 0);
    char *log = wait_log(t.ini, "configuration reloaded: 0 change(s) applied, 0 need a restart", 2);
    cr_expect_eq(count(log, "configuration reloaded: 0 change(s) applied, 0 need a restart"), 2,
                 "each database should reload with nothing to apply:\n%s", log);
    cr_expect_eq(count(log, "needs a restart"), 0, "an unchanged file reloaded as changed:\n%s", log);
    free(log);

    /* b goes away with jobs that fall due while it is down: a keeps
     * draining, the host stays up, /healthz names b. */
    cr_assert_eq(th_scalar(t.b.conn, "SELECT count(skipq.enqueue('test', '{}', queue => 'qb',"
                                   " run_at => pg_catalog.now() + interval '2 seconds'))"
                                   " FROM generate_series(1, 100)"),
                 100);
    int64_t due = th_now_ms() + 2500;
    PQfinish(t.b.conn);
    t.b.conn = NULL;
    pg_sh("stop", &t.cb);
    enqueue_many(t.a.conn, "qa", 400);
    cr_expect_eq(th_wait_scalar(t.a.conn, 700, 60000, DONE_SQL), 700,
                 "database default stopped draining while database b was down");
    char *body = healthz_until(t.port, 503, &status);
    cr_expect_eq(status, 503, "/healthz stayed %d with database b down: %s", status, body);
    cr_expect_not_null(strstr(body, "database b:"), "/healthz does not name database b: %s", body);
    cr_expect_null(strstr(body, "database default:"), "/healthz blames database default: %s", body);
    free(body);
    cr_assert_eq(kill(pid, 0), 0, "the host exited while database b was down");

    /* b is back: its queues resume, /healthz is ok again. */
    while (th_now_ms() < due) /* the delayed jobs fell due while b was down */
        usleep(100000);
    pg_sh("start", &t.cb);
    long long seen = th_wait_robust(&t.b, 400, 30000, DONE_SQL);
    cr_assert_eq(seen, 400, "the jobs that fell due while database b was down did not run after it (%lld)", seen);
    enqueue_many(t.b.conn, "qb", 200);
    cr_expect_eq(th_wait_scalar(t.b.conn, 600, 60000, DONE_SQL), 600, "database b's queue did not resume");
    body = healthz_until(t.port, 200, &status);
    cr_expect_eq(status, 200, "/healthz did not recover: %s", body);
    free(body);

    /* /metrics: each database's counters under its own label. */
    char *text = th_http_get(t.port, "/metrics", &status);
    cr_expect_eq(status, 200);
    cr_expect_not_null(strstr(text, "skipq_jobs_done_total{database=\"default\",kind=\"test\"} 700"),
                       "no done count of 700 for database default:\n%s", text);
    cr_expect_not_null(strstr(text, "skipq_jobs_done_total{database=\"b\",kind=\"test\"} 600"),
                       "no done count of 600 for database b:\n%s", text);
    cr_expect_not_null(strstr(text, "skipq_database_connections{database=\"b\"}"), "%s", text);
    free(text);

    /* The CLI reaches each database by name. */
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "stats", "-c", t.ini, "--database", "b", "--json", NULL), 0, "%s", err);
    cr_expect_not_null(strstr(out, "\"qb\""), "stats --database b does not show queue qb: %s", out);
    cr_expect_null(strstr(out, "\"qa\""), "stats --database b shows queue qa: %s", out);
    free(out), free(err);
    cr_expect_eq(th_cli(&out, &err, "stats", "-c", t.ini, "--json", NULL), 0, "%s", err);
    cr_expect_not_null(strstr(out, "\"qa\""), "stats without --database does not show queue qa: %s", out);
    free(out), free(err);
    cr_expect_eq(th_cli(&out, &err, "jobs", "list", "-c", t.ini, "--database", "b", "--queue", "qb", "--limit", "1",
                        NULL),
                 0, "%s", err);
    cr_expect_not_null(strstr(out, "qb"), "jobs list --database b: %s", out);
    free(out), free(err);
    cr_expect_eq(th_cli(&out, &err, "stats", "-c", t.ini, "--database", "nowhere", NULL), 2);
    cr_expect_not_null(strstr(err, "no [database nowhere] section (its databases: default, b)"), "%s", err);
    free(out), free(err);

    log = stop_and_expect_once_in_both(&t, pid);
    cr_expect_not_null(strstr(log, "[b/"), "the log does not say which lines are database b's");
    cr_expect_not_null(strstr(log, "2 databases"), "the start-up line does not count the databases");
    free(log);
}

/*
 * A database down when the host starts does not keep the others from
 * starting: its queues start once it answers. A host stopped before then
 * exits cleanly.
 */
Test(databases, a_cluster_down_at_start_up_starts_its_queues_when_it_answers, .timeout = 300)
{
    struct two t;
    two_databases(&t, "late-database", 2, "thread");
    enqueue_many(t.b.conn, "qb", 200);
    PQfinish(t.b.conn);
    t.b.conn = NULL;
    pg_sh("stop", &t.cb);

    /* Stopped while b is still down: a clean exit, at once. */
    pid_t pid = th_host_start(t.ini);
    char *log = wait_log(t.ini, "its queues start once it answers", 1);
    cr_assert_not_null(strstr(log, "its queues start once it answers"), "%s", log);
    free(log);
    int64_t asked = th_now_ms();
    cr_expect_eq(th_host_stop(pid, 30000), 0, "a host waiting for a database did not stop cleanly");
    cr_expect_lt(th_now_ms() - asked, 15000, "stopping took %lld ms", (long long)(th_now_ms() - asked));

    /* Started again, b still down: a drains, /healthz names b. */
    enqueue_many(t.a.conn, "qa", 300);
    pid = th_host_start(t.ini);
    cr_expect_eq(th_wait_scalar(t.a.conn, 300, 60000, DONE_SQL), 300, "database default did not start without b");
    int status = 0;
    char *body = healthz_until(t.port, 503, &status);
    cr_expect_eq(status, 503);
    cr_expect_not_null(strstr(body, "database b: unreachable since start-up"), "%s", body);
    cr_expect_null(strstr(body, "database default:"), "%s", body);
    free(body);
    cr_assert_eq(kill(pid, 0), 0, "the host exited with database b down");

    /* b answers: its queue starts, /healthz is ok. */
    pg_sh("start", &t.cb);
    long long done = th_wait_robust(&t.b, 200, 60000, DONE_SQL);
    cr_expect_eq(done, 200, "database b's queue did not start when it answered (%lld done)", done);
    body = healthz_until(t.port, 200, &status);
    cr_expect_eq(status, 200, "/healthz did not turn ok: %s", body);
    free(body);
    log = stop_and_expect_once_in_both(&t, pid);
    cr_expect_not_null(strstr(log, "the database answers: starting its queues"), "%s", log);
    free(log);
}

/* The same with worker processes: each is started on its host's database. */
Test(databases, worker_processes_serve_the_database_of_their_group, .timeout = 300)
{
    struct two t;
    two_databases(&t, "two-databases-process", 2, "process");
    enqueue_many(t.a.conn, "qa", 200);
    enqueue_many(t.b.conn, "qb", 200);
    pid_t pid = th_host_start(t.ini);
    cr_expect_eq(th_wait_scalar(t.a.conn, 200, 60000, DONE_SQL), 200, "database default did not drain");
    cr_expect_eq(th_wait_scalar(t.b.conn, 200, 60000, DONE_SQL), 200, "database b did not drain");
    free(stop_and_expect_once_in_both(&t, pid));
}

/* Which database a command means is never guessed. */
Test(databases, a_command_that_cannot_tell_which_database_is_refused, .timeout = 60)
{
    char *only_named = th_write_file("named.ini", "[database eu]\nhost = /nowhere\n\n[database us]\nhost = /nowhere\n");
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "stats", "-c", only_named, NULL), 2);
    cr_expect_not_null(strstr(err, "declares [database eu], [database us] and no [database]: say which with "
                                   "--database NAME"),
                       "%s", err);
    free(out), free(err);
    cr_expect_eq(th_cli(&out, &err, "stats", "--database", "eu", NULL), 2);
    cr_expect_not_null(strstr(err, "--database eu names a section of the INI file: give it with -c FILE"), "%s", err);
    free(out), free(err);

    struct th_db a;
    th_db_new(&a);
    char *ini = th_host_ini(&a, "cron-nowhere", NULL, NULL,
                            "[database eu]\nhost = /nowhere\n\n[queue q]\n\n"
                            "[cron c]\nschedule = @daily\nkind = test\ndatabase = eu\n");
    cr_expect_eq(th_cli(&out, &err, "run", "-c", ini, "--db", a.conninfo, NULL), 2);
    cr_expect_not_null(strstr(err, "declares several databases: --db replaces one of them"), "%s", err);
    free(out), free(err);
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_exit(pid, 30000), 2, "a schedule in a database no queue is served in must stop the host");
    char *log = th_host_log(ini);
    cr_expect_not_null(strstr(log, "[cron c] database = eu: no [queue] section of this file serves that database"),
                       "%s", log);
    free(log);
}
