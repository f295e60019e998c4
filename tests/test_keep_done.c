/*
 * test_keep_done.c -- [kind NAME] keep_done = off: a job of the kind that
 * ends done leaves skipq.jobs in the transaction that records it, and what
 * users read about it stays true: its executions (with its queue and kind),
 * `skipq jobs show`, the counts of `skipq stats`, depends_on naming it, and
 * retention. Jobs the row still matters for keep it. The worker role still
 * may not delete a job any other way.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define LEFT_SQL "SELECT count(*) FROM skipq.job_executions WHERE queue IS NOT NULL"

static char *host_ini(const struct th_db *db, const char *name, const char *kind_extra, const char *more)
{
    char extra[512];
    snprintf(extra, sizeof extra,
             "[queue default]\nthreads = 2\n[kind test]\n%s\nbackoff_base = 10ms\nbackoff_cap = 20ms\n%s",
             kind_extra, more ? more : "");
    return th_host_ini(db, name, NULL, NULL, extra);
}

/* Field `key` of the `skipq stats --json` row for default/test (malloc'd). */
static char *stats_field(const struct th_db *db, const char *key)
{
    char *out = NULL, *err = NULL;
    cr_assert_eq(th_cli(&out, &err, "stats", "--json", "--db", db->conninfo, NULL), 0, "stats --json: %s", err);
    const char *params[2] = {out, key};
    PGresult *r = PQexecParams(db->conn,
                               "SELECT q ->> $2 FROM jsonb_array_elements($1::jsonb -> 'queues') q"
                               " WHERE q ->> 'queue' = 'default' AND q ->> 'kind' = 'test'",
                               2, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    char *v = strdup(PQntuples(r) && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    free(out);
    free(err);
    return v;
}

static void expect_stat(const struct th_db *db, const char *key, const char *want)
{
    char *v = stats_field(db, key);
    cr_expect_str_eq(v, want, "skipq stats: %s", key);
    free(v);
}

Test(keep_done, a_done_job_leaves_the_table_and_its_executions_stay_with_its_queue_and_kind, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *ini = host_ini(&db, "leave", "keep_done = off", NULL);
    struct host h = {.name = "leave", .ini = ini};
    host_start(&h);
    long long plain = th_scalar(c, "SELECT skipq.enqueue('test', '{}')");
    long long retried = th_scalar(c, "SELECT skipq.enqueue('test', '{\"fail_times\": 1}')");
    cr_assert_eq(th_wait_scalar(c, 2, 30000, LEFT_SQL), 2, "the done jobs did not leave; see %s.log", ini);
    cr_assert(th_wait_log(ini, "kind \"test\": done jobs leave skipq.jobs as they finish", 5000),
              "the host did not say what keep_done does");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 0, "a done job stayed in skipq.jobs");
    th_expect_text(c, "done:default:test:1", "SELECT string_agg(status || ':' || queue || ':' || kind || ':' || attempt, ',')"
                                             " FROM skipq.job_executions WHERE job_id = %lld", plain);
    /* The retried attempt is recorded as it was; the done one says whose. */
    th_expect_text(c, "retry:-,done:default/test",
                   "SELECT string_agg(status || ':' || coalesce(queue || '/' || kind, '-'), ',' ORDER BY attempt)"
                   " FROM skipq.job_executions WHERE job_id = %lld", retried);

    /* skipq jobs show: what is left of the job, and its executions. */
    char *out = NULL, *err = NULL;
    char id[24];
    snprintf(id, sizeof id, "%lld", retried);
    cr_assert_eq(th_cli(&out, &err, "jobs", "show", id, "--json", "--db", db.conninfo, NULL), 0,
                 "jobs show of a job that left: %s", err);
    const char *params[1] = {out};
    PGresult *r = PQexecParams(c,
                               "SELECT (j -> 'job' -> 0 ->> 'status') || ':' || (j -> 'job' -> 0 ->> 'queue') || ':'"
                               "       || (j -> 'job' -> 0 ->> 'kind') || ':' || (j -> 'job' -> 0 ->> 'attempts') || ':'"
                               "       || jsonb_array_length(j -> 'executions')"
                               "  FROM (SELECT $1::jsonb AS j) x",
                               1, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "not JSON: %s", out);
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "done:default:test:2:2", "jobs show --json: %s", out);
    PQclear(r);
    free(out);
    free(err);
    cr_expect_neq(th_cli(NULL, &err, "jobs", "show", "999999", "--db", db.conninfo, NULL), 0);
    cr_expect(err && strstr(err, "no job with id 999999"), "%s", err);
    free(err);

    /* skipq stats counts them: in the last hour, and in the totals once the
     * hosts have folded them in. */
    expect_stat(&db, "done_1h", "2");
    expect_stat(&db, "done", "2");
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_execf(c, "SELECT skipq.advance_totals(0)");
    cr_expect_eq(th_scalar(c, "SELECT done FROM skipq.job_totals WHERE queue = 'default' AND kind = 'test'"), 2,
                 "the totals did not fold in the jobs that left");
    expect_stat(&db, "done", "2");
    th_check_invariants(c);
    th_assert_clean_log(ini);
}

Test(keep_done, jobs_the_row_still_matters_for_keep_it, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *ini = host_ini(&db, "keep", "keep_done = off", NULL);
    struct host h = {.name = "keep", .ini = ini};
    /* Enqueued before the host runs, so none has ended yet. */
    long long keyed1 = th_scalar(c, "SELECT skipq.enqueue('test', '{}', ordering_key => 'k')");
    long long keyed2 = th_scalar(c, "SELECT skipq.enqueue('test', '{}', ordering_key => 'k')");
    long long unique = th_scalar(c, "SELECT skipq.enqueue('test', '{}', unique_key => 'u', unique_for => '1 hour')");
    long long dead = th_scalar(c, "SELECT skipq.enqueue('test', '{\"permanent\": \"no\"}')");
    long long other = th_scalar(c, "SELECT skipq.enqueue('test.kept', '{}')");
    host_start(&h);
    cr_assert_eq(th_wait_scalar(c, 0, 30000, "SELECT count(*) FROM skipq.jobs WHERE status NOT IN ('done', 'dead')"
                                             " AND kind = 'test'"),
                 0, "jobs did not finish; see %s.log", ini);
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_expect_text(c, "done,done,done,dead", "SELECT string_agg(status, ',' ORDER BY id) FROM skipq.jobs"
                                             " WHERE id IN (%lld, %lld, %lld, %lld)", keyed1, keyed2, unique, dead);
    cr_expect_eq(th_scalar(c, LEFT_SQL), 0, "a job whose row matters left skipq.jobs");
    /* The key was released by the update, as always: nothing holds it. */
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.ordering_keys"), 0);
    /* The window still holds: the same unique key is refused. */
    cr_expect_eq(th_scalar(c, "SELECT skipq.enqueue('test', '{}', 'nobody', unique_key => 'u', unique_for => '1 hour')"),
                 unique, "the uniqueness window ended when its job did");
    /* Kind test.kept: no host runs it; it stays pending. */
    th_expect_text(c, "pending", "SELECT status FROM skipq.jobs WHERE id = %lld", other);
    th_check_invariants(c);
    th_assert_clean_log(ini);
}

/* One claim of done jobs, all of a kind this host drops: those that may
 * leave do, in the statement that records them; in the same batch a job
 * with an ordering key, and every job once skipq.kind_options says the kind
 * keeps its done jobs (another host set it), are updated to done instead. */
Test(keep_done, a_batch_of_done_jobs_lets_go_only_those_that_may_leave, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *ini = th_host_ini(&db, "batch", NULL, NULL, "[queue default]\nthreads = 1\nbatch = 50\n[kind test]\nkeep_done = off\n");
    struct host h = {.name = "batch", .ini = ini};
    /* Enqueued before the host runs: one claim takes them all. */
    th_execf(c, "SELECT skipq.enqueue('test', '{}') FROM generate_series(1, 20)");
    long long keyed = th_scalar(c, "SELECT skipq.enqueue('test', '{}', ordering_key => 'k')");
    th_execf(c, "SELECT skipq.enqueue('test', '{}') FROM generate_series(1, 20)");
    host_start(&h);
    cr_assert_eq(th_wait_scalar(c, 40, 30000, LEFT_SQL), 40, "the plain jobs did not leave; see %s.log", ini);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'done'"), 41);
    th_expect_text(c, "done", "SELECT status FROM skipq.jobs WHERE id = %lld", keyed);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 1, "a job that may leave stayed");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.ordering_keys"), 0, "the key was not released");
    cr_expect_eq(th_scalar(c, "SELECT coalesce(sum(n), 0) FROM skipq.done_counts"), 40);

    /* Another host has set the kind to keep its done jobs since: this host
     * still runs it with keep_done = off, and the row decides. */
    th_execf(c, "UPDATE skipq.kind_options SET keep_done = true, set_by = 'elsewhere' WHERE kind = 'test'");
    th_execf(c, "SELECT skipq.enqueue('test', '{}') FROM generate_series(1, 10)");
    cr_assert_eq(th_wait_scalar(c, 11, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 11,
                 "the jobs of a kind that keeps its done jobs did not end done in skipq.jobs; see %s.log", ini);
    cr_expect_eq(th_scalar(c, LEFT_SQL), 40, "a job of a kind that keeps its done jobs left");
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_check_invariants(c);
    th_assert_clean_log(ini);
}

Test(keep_done, a_parent_that_left_done_counts_as_done_for_depends_on, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *ini = host_ini(&db, "deps", "keep_done = off", NULL);
    struct host h = {.name = "deps", .ini = ini};
    host_start(&h);
    long long parent = th_scalar(c, "SELECT skipq.enqueue('test', '{}')");
    cr_assert_eq(th_wait_scalar(c, 1, 30000, LEFT_SQL), 1, "the parent did not leave; see %s.log", ini);
    /* Both ways in: enqueue_ex (through enqueue) and enqueue_many. */
    long long child = th_scalarf(c, "SELECT skipq.enqueue('test.kept', '{}', 'nobody', depends_on => ARRAY[%lld])",
                                 parent);
    th_expect_text(c, "pending", "SELECT status FROM skipq.jobs WHERE id = %lld", child);
    th_execf(c, "SELECT skipq.enqueue_many('[{\"kind\": \"test.kept\", \"queue\": \"nobody\", \"depends_on\": [%lld]}]')",
             parent);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test.kept' AND status = 'pending'"), 2);
    /* An id that never was a job is still refused, by both. */
    cr_expect_str_eq(th_sqlstate(c, "SELECT skipq.enqueue('test', '{}', depends_on => ARRAY[987654321])"), "22023");
    cr_expect_str_eq(th_sqlstate(c, "SELECT skipq.enqueue_many('[{\"kind\": \"test\", \"depends_on\": [987654321]}]')"),
                     "22023");
    /* A child enqueued while its parent runs is released when the parent
     * ends and leaves (by the host's settlement, the parent then gone). */
    long long slow = th_scalar(c, "SELECT skipq.enqueue('test', '{\"sleep_ms\": 300}')");
    cr_assert_eq(th_wait_scalar(c, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1);
    long long late = th_scalarf(c, "SELECT skipq.enqueue('test', '{}', depends_on => ARRAY[%lld])", slow);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld AND status = 'done'", late);
    cr_expect_eq(th_wait_scalar(c, 1, 30000, sql), 1, "the child of a parent that left was never run; see %s.log", ini);
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_check_invariants(c);
    th_assert_clean_log(ini);
}

/* The last host to start (or reload) with keep_done sets it for every
 * host, and says what it replaced; a host without the key changes nothing. */
Test(keep_done, the_last_host_to_set_keep_done_sets_it_and_says_what_it_replaced, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *off = host_ini(&db, "off", "keep_done = off", NULL);
    struct host a = {.name = "off", .ini = off};
    host_start(&a);
    cr_assert_eq(th_wait_scalar(c, 1, 30000, "SELECT count(*) FROM skipq.kind_options WHERE NOT keep_done"), 1);
    cr_expect_eq(host_stop(&a, 15000), 0);
    char *none = host_ini(&db, "none", "", NULL);
    struct host b = {.name = "none", .ini = none};
    host_start(&b);
    long long first = th_scalar(c, "SELECT skipq.enqueue('test', '{}')");
    cr_assert_eq(th_wait_scalar(c, 1, 30000, LEFT_SQL), 1, "a host without the key did not follow the row");
    cr_expect_eq(host_stop(&b, 15000), 0);
    char *on = host_ini(&db, "on", "keep_done = on", NULL);
    struct host d = {.name = "on", .ini = on};
    host_start(&d);
    cr_assert(th_wait_log(on, "kind \"test\": keep_done on replaces off, set by host \"off\"", 20000),
              "the host did not say what it replaced; see %s.log", on);
    long long second = th_scalar(c, "SELECT skipq.enqueue('test', '{}')");
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", second);
    cr_expect_eq(th_wait_scalar(c, 1, 30000, sql), 1, "keep_done = on did not keep the done job");
    cr_expect_eq(host_stop(&d, 15000), 0);
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld", first), 0);
    th_expect_text(c, "true:on", "SELECT keep_done || ':' || set_by FROM skipq.kind_options WHERE kind = 'test'");
    th_check_invariants(c);
    th_assert_clean_log(off);
    th_assert_clean_log(none);
    th_assert_clean_log(on);
}

/* [retention] done: the executions of jobs that left go at the same age,
 * a retried attempt with the done one; younger ones stay. */
Test(keep_done, retention_deletes_what_is_left_of_a_job_at_the_done_age, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    char *ini = host_ini(&db, "ret", "keep_done = off", "[retention]\ndone = 3s\ninterval = 200ms\n");
    struct host h = {.name = "ret", .ini = ini};
    host_start(&h);
    th_execf(c, "SELECT skipq.enqueue('test', '{\"fail_times\": 1}') FROM generate_series(1, 3)");
    cr_assert_eq(th_wait_scalar(c, 3, 30000, LEFT_SQL), 3, "the jobs did not leave; see %s.log", ini);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 6);
    long long young = th_scalar(c, "SELECT skipq.enqueue('test', '{}', run_at => now() + interval '2 seconds')");
    cr_expect_eq(th_wait_scalar(c, 0, 30000, "SELECT count(*) FROM skipq.job_executions WHERE attempt = 2"
                                             " OR status = 'retry'"),
                 0, "the executions of the jobs that left were not deleted; see %s.log", ini);
    cr_assert(th_wait_log(ini, "retention: deleted the executions of 3 done job(s) that left skipq.jobs", 5000));
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld AND queue IS NOT NULL",
             young);
    cr_expect_eq(th_wait_scalar(c, 1, 30000, sql), 1, "the younger job did not leave");
    cr_expect_eq(host_stop(&h, 15000), 0);
    cr_expect_eq(th_scalar(c, sql), 1, "a job that left less than the done age ago lost its history");
    th_check_invariants(c);
    th_assert_clean_log(ini);
}

/* The worker role finishes jobs this way only: skipq.finish_dropping()
 * deletes a job that is running the execution named, of a kind that drops
 * its done jobs, and nothing else; DELETE itself stays refused. */
Test(keep_done, the_worker_role_can_drop_only_a_running_job_it_names_by_its_execution, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    struct th_db as_w = th_db_as_role(&db, "w");
    PGconn *w = PQconnectdb(as_w.conninfo);
    cr_assert_eq(PQstatus(w), CONNECTION_OK, "connect as the worker role: %s", PQerrorMessage(w));
    long long pending = th_scalar(db.conn, "SELECT skipq.enqueue('test', '{}')");
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'done', finished_at = now() WHERE id = %lld", pending);
    long long done = pending;
    pending = th_scalar(db.conn, "SELECT skipq.enqueue('test', '{}')");
    cr_expect_eq(th_scalarf(w, "SELECT count(*) FROM skipq.finish_dropping(ARRAY[%lld, %lld], ARRAY[1, 2])",
                            done, pending),
                 0, "finish_dropping took a job that is not running");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 2);
    cr_expect_str_eq(th_sqlstate(w, "DELETE FROM skipq.jobs"), "42501");
    /* A running job, named by another execution id: untouched. */
    th_execf(db.conn, "WITH e AS (INSERT INTO skipq.job_executions (job_id, attempt, worker) VALUES (%lld, 1, 'w')"
                      " RETURNING id) UPDATE skipq.jobs SET status = 'running', attempts = 1, current_execution_id ="
                      " (SELECT id FROM e), lease_expires_at = now() + interval '1 minute' WHERE id = %lld",
             pending, pending);
    long long eid = th_scalarf(db.conn, "SELECT current_execution_id FROM skipq.jobs WHERE id = %lld", pending);
    cr_expect_eq(th_scalarf(w, "SELECT count(*) FROM skipq.finish_dropping(ARRAY[%lld], ARRAY[%lld])", pending,
                            eid + 1),
                 0, "finish_dropping took a job running another execution");
    /* Named right, but of a kind that keeps its done jobs: skipq.kind_options decides, not the caller. */
    cr_expect_eq(th_scalarf(w, "SELECT count(*) FROM skipq.finish_dropping(ARRAY[%lld], ARRAY[%lld])", pending,
                            eid),
                 0, "finish_dropping took a job of a kind that keeps its done jobs");
    th_execf(db.conn, "INSERT INTO skipq.kind_options (kind, keep_done, set_by) VALUES ('test', false, 'a test')");
    cr_expect_eq(th_scalarf(w, "SELECT count(*) FROM skipq.finish_dropping(ARRAY[%lld], ARRAY[%lld])", pending,
                            eid),
                 1, "finish_dropping did not finish the running job it was named with its execution");
    th_expect_text(db.conn, "done:default:test", "SELECT status || ':' || queue || ':' || kind FROM"
                                                 " skipq.job_executions WHERE id = %lld", eid);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %lld", pending), 0);
    PQfinish(w);
}

/* A host running as skipq_worker (sql/roles.sql) registers keep_done and
 * finishes its kind's done jobs this way: the grants cover the whole path. */
Test(keep_done, a_host_running_as_the_worker_role_lets_done_jobs_leave, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    struct th_db as_w = th_db_as_role(&db, "w");
    char *ini = host_ini(&as_w, "worker-role", "keep_done = off", NULL);
    struct host h = {.name = "worker-role", .ini = ini};
    host_start(&h);
    th_execf(db.conn, "SELECT skipq.enqueue('test', '{}') FROM generate_series(1, 20)");
    cr_expect_eq(th_wait_scalar(db.conn, 20, 30000, LEFT_SQL), 20, "the worker role's host did not let them leave;"
                                                                   " see %s.log", ini);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}
