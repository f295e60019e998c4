/*
 * test_stats.c -- what an operator reads: the host registry, skipq stats
 * (against a job mix whose numbers are known), the totals that survive
 * retention, and skipq top.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* The value at `path` (a text[] literal such as '{queues,0,ready}') of a
 * JSON document, parsed by PostgreSQL; NULL for a JSON null or no value.
 * Fails the test if the document does not parse. Returns malloc'd text. */
static char *json_at(PGconn *c, const char *json, const char *path)
{
    const char *params[2] = {json, path};
    PGresult *r = PQexecParams(c, "SELECT $1::jsonb #>> $2::text[]", 2, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "not JSON (%s): %s", PQresultErrorMessage(r), json);
    char *v = PQgetisnull(r, 0, 0) ? NULL : strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* The stats --json row for queue/kind, as a JSON text (malloc'd), or NULL. */
static char *stats_row(PGconn *c, const char *json, const char *queue, const char *kind)
{
    const char *params[3] = {json, queue, kind};
    PGresult *r = PQexecParams(c,
                               "SELECT q::text FROM jsonb_array_elements($1::jsonb -> 'queues') q"
                               " WHERE q ->> 'queue' = $2 AND q ->> 'kind' = $3",
                               3, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    char *v = PQntuples(r) ? strdup(PQgetvalue(r, 0, 0)) : NULL;
    PQclear(r);
    return v;
}

static void expect_field(PGconn *c, const char *row, const char *key, const char *want)
{
    char path[64];
    snprintf(path, sizeof path, "{%s}", key);
    char *v = json_at(c, row, path);
    if (!want)
        cr_expect_null(v, "%s: want null, got %s in %s", key, v, row);
    else
        cr_expect(v && strcmp(v, want) == 0, "%s: want %s, got %s in %s", key, want, v ? v : "null", row);
    free(v);
}

static char *stats_json(const struct th_db *db)
{
    char *out = NULL, *err = NULL;
    int rc = th_cli(&out, &err, "stats", "--json", "--db", db->conninfo, NULL);
    cr_assert_eq(rc, 0, "stats --json failed: %s", err);
    free(err);
    return out;
}

/* Is there an "unserved" entry for queue/kind? */
static bool unserved(PGconn *c, const char *json, const char *queue, const char *kind)
{
    const char *params[3] = {json, queue, kind};
    PGresult *r = PQexecParams(c,
                               "SELECT count(*) FROM jsonb_array_elements($1::jsonb -> 'unserved') u"
                               " WHERE u ->> 'queue' = $2 AND u ->> 'kind' = $3",
                               3, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    bool found = strcmp(PQgetvalue(r, 0, 0), "0") != 0;
    PQclear(r);
    return found;
}

Test(stats, hosts_register_serve_and_leave, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* One slow job keeps the only default thread busy, so two stay ready. */
    for (int i = 0; i < 3; i++)
        th_enqueue(db.conn, "test", "{\"sleep_ms\": 20000}", NULL, 0, 0);
    th_enqueue(db.conn, "test", "{}", "nobody", 0, 0); /* no host serves queue nobody */
    char *ini = th_host_ini(&db, "reg", NULL, NULL,
                            "[queue default]\nthreads = 1\nkinds = test\n\n[queue mail]\nthreads = 2\nkinds = test\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.hosts"), 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.hosts WHERE id = 'reg:%d' AND name = 'reg'"
                                     " AND pid = %d AND threads = 3 AND queues = '{default,mail}'"
                                     " AND kinds = '{test}' AND serves = '{default/test,mail/test}'"
                                     " AND version <> '' AND hostname <> ''"
                                     " AND skipq.host_alive(heartbeat_at, heartbeat_ms)",
                            (int)pid, (int)pid),
                 1, "the host's row is wrong");
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1);
    /* The heartbeat refreshes the row. */
    long long beat = th_scalar(db.conn, "SELECT extract(epoch FROM heartbeat_at) * 1000 FROM skipq.hosts");
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.hosts WHERE extract(epoch FROM heartbeat_at) * 1000 > %lld",
             beat);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 10000, sql), 1, "heartbeat_at never moved");

    char *json = stats_json(&db);
    cr_expect(unserved(db.conn, json, "nobody", "test"), "no unserved line for queue nobody: %s", json);
    cr_expect(!unserved(db.conn, json, "default", "test"), "a served kind was reported unserved: %s", json);
    char *h = json_at(db.conn, json, "{hosts,0,alive}");
    cr_expect(h && strcmp(h, "true") == 0, "%s", json);
    free(h);
    h = json_at(db.conn, json, "{hosts,0,running}");
    cr_expect(h && strcmp(h, "1") == 0, "running per host: %s", json);
    free(h);
    h = json_at(db.conn, json, "{hosts,0,queues,1}");
    cr_expect(h && strcmp(h, "mail") == 0, "%s", json);
    free(h);
    free(json);
    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "no live host serves kind \"test\" on queue \"nobody\": 1 job(s) ready") != NULL, "%s", out);
    cr_expect(strstr(out, "on queue \"default\"") == NULL, "%s", out);
    free(out);

    /* A clean stop removes the row; the default jobs left are now unserved. */
    cr_expect_eq(th_host_stop(pid, 40000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.hosts"), 0, "the row outlived a clean stop");
    json = stats_json(&db);
    cr_expect(unserved(db.conn, json, "default", "test"), "%s", json);
    free(json);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

Test(stats, killed_host_ages_out, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "doomed", NULL, NULL, "[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    const char *alive = "SELECT count(*) FROM skipq.hosts WHERE skipq.host_alive(heartbeat_at, heartbeat_ms)";
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, alive), 1);
    kill(pid, SIGKILL);
    th_wait_exit(pid, 10000);
    /* heartbeat 500ms in the test INI: not alive after 1.5 s of silence. */
    cr_expect_eq(th_wait_scalar(db.conn, 0, 15000, alive), 0, "a killed host stayed alive");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.hosts"), 1, "the row should stay, not alive");
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *json = stats_json(&db);
    char *v = json_at(db.conn, json, "{hosts,0,alive}");
    cr_expect(v && strcmp(v, "false") == 0, "%s", json);
    free(v);
    cr_expect(unserved(db.conn, json, "default", "test"), "a dead host still counts as serving: %s", json);
    free(json);
}

/* n jobs of queue 'mix', `kind`, in `status`, with extra column values. */
static void jobs(PGconn *c, int n, const char *kind, const char *status, const char *cols, const char *vals)
{
    th_execf(c, "INSERT INTO skipq.jobs (queue, kind, status%s%s) SELECT 'mix', '%s', '%s'%s%s FROM generate_series(1, %d)",
             *cols ? ", " : "", cols, kind, status, *vals ? ", " : "", vals, n);
}

Test(stats, numbers_of_a_known_mix, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    jobs(c, 3, "a", "pending", "run_at", "now() - interval '10 minutes'");
    jobs(c, 1, "a", "pending", "", "");
    jobs(c, 2, "a", "pending", "run_at", "now() + interval '1 hour'");
    jobs(c, 1, "a", "running", "attempts, lease_expires_at, current_execution_id", "1, now() + interval '1 minute', 1");
    jobs(c, 2, "a", "running", "attempts, lease_expires_at, current_execution_id", "1, now() - interval '1 minute', 1");
    jobs(c, 4, "a", "done", "attempts, finished_at", "1, now() - interval '5 minutes'");
    jobs(c, 5, "a", "done", "attempts, finished_at", "1, now() - interval '2 hours'");
    jobs(c, 1, "a", "dead", "attempts, finished_at", "1, now() - interval '30 minutes'");
    jobs(c, 6, "a", "dead", "attempts, finished_at", "1, now() - interval '3 hours'");
    jobs(c, 2, "a", "cancelled", "finished_at", "now() - interval '1 minute'");
    /* Handler durations of kind b: 1..100 ms (recent), and one old huge one
     * that is outside the window; a lost attempt is not a handler duration. */
    jobs(c, 1, "b", "done", "attempts, finished_at", "101, now()");
    th_execf(c, "INSERT INTO skipq.job_executions (job_id, attempt, worker, status, started_at, finished_at)"
                " SELECT (SELECT id FROM skipq.jobs WHERE kind = 'b'), i, 'w', 'done', now() - interval '10 minutes',"
                "        now() - interval '10 minutes' + i * interval '1 millisecond' FROM generate_series(1, 100) i");
    th_execf(c, "INSERT INTO skipq.job_executions (job_id, attempt, worker, status, started_at, finished_at) VALUES"
                " ((SELECT id FROM skipq.jobs WHERE kind = 'b'), 101, 'w', 'done', now() - interval '2 hours',"
                "  now() - interval '1 hour'),"
                " ((SELECT id FROM skipq.jobs WHERE kind = 'b'), 102, 'w', 'lost', now() - interval '20 minutes',"
                "  now() - interval '5 minutes')");

    char *json = stats_json(&db);
    char *a = stats_row(c, json, "mix", "a"), *b = stats_row(c, json, "mix", "b");
    cr_assert(a && b, "%s", json);
    expect_field(c, a, "ready", "4");
    expect_field(c, a, "scheduled", "2");
    expect_field(c, a, "running", "3");
    expect_field(c, a, "expired", "2");
    char *age = json_at(c, a, "{oldest_ready_s}");
    cr_expect(age && atoi(age) >= 600 && atoi(age) < 700, "oldest_ready_s %s", age);
    free(age);
    expect_field(c, a, "done_1h", "4");
    expect_field(c, a, "dead_1h", "1");
    /* Jobs inserted here finished before the totals watermark (the
     * migration), so only those after it count: use the rollup instead. */
    expect_field(c, a, "p50_ms", NULL);
    expect_field(c, b, "p50_ms", "50.5");
    expect_field(c, b, "p95_ms", "95.1"); /* percentile_cont: 95.05 */
    expect_field(c, b, "p99_ms", "99.0"); /* 99.01 */
    expect_field(c, a, "served", "false");
    char *keys = json_at(c, json, "{totals_since}");
    cr_expect(keys != NULL, "no totals_since: %s", json);
    free(keys);
    free(a);
    free(b);
    free(json);
}

/* An execution of the job of kind `kind` (one per kind here), started
 * `ago` ago and finished a millisecond later. */
static void execution(PGconn *c, const char *kind, const char *status, const char *error, const char *ago)
{
    th_execf(c,
             "INSERT INTO skipq.job_executions (job_id, attempt, worker, status, error, started_at, finished_at)"
             " SELECT id, (SELECT count(*) + 1 FROM skipq.job_executions e WHERE e.job_id = j.id), 'w', '%s', '%s',"
             "        now() - interval '%s', now() - interval '%s' + interval '1 millisecond'"
             "   FROM skipq.jobs j WHERE kind = '%s'",
             status, error, ago, ago, kind);
}

/*
 * Crashes ('crashed': the worker process died under the attempt, in
 * process isolation) per kind, over the last hour like the other *_1h
 * figures: in stats, in top's queue rows, and per kind in top with the
 * latest cause; top counts them as failed attempts.
 */
Test(stats, crashes_per_kind_over_the_last_hour, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    jobs(c, 1, "a", "pending", "attempts, max_attempts", "9, 20");
    jobs(c, 1, "b", "dead", "attempts, finished_at", "3, now()");
    execution(c, "a", "crashed", "killed by SIGSEGV", "2 hours"); /* outside the hour */
    execution(c, "a", "crashed", "killed by SIGABRT", "40 minutes");
    execution(c, "a", "retry", "planned failure", "30 minutes"); /* a failure, not a crash */
    execution(c, "a", "crashed", "exceeded max_memory (300 MB > 192 MB)", "20 minutes");
    execution(c, "a", "crashed", "killed by SIGSEGV", "1 second");
    execution(c, "b", "crashed", "exit status 3", "10 minutes");
    execution(c, "b", "lost", "lease expired", "5 minutes");

    char *json = stats_json(&db);
    char *a = stats_row(c, json, "mix", "a"), *b = stats_row(c, json, "mix", "b");
    cr_assert(a && b, "%s", json);
    expect_field(c, a, "crashed_1h", "3");
    expect_field(c, b, "crashed_1h", "1");
    free(a);
    free(b);
    free(json);
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "  crashed_1h  ") != NULL, "no crashed_1h column: %s", out);
    free(out);

    cr_assert_eq(th_cli(&out, NULL, "top", "-n", "1", "--json", "--db", db.conninfo, NULL), 0);
    char *v = json_at(c, out, "{queues,0,crashed_1h}");
    cr_expect(v && strcmp(v, "4") == 0, "crashed_1h of queue mix: %s", out);
    free(v);
    const char *want[][3] = {{"0", "a", "3"}, {"1", "b", "1"}};
    const char *cause[] = {"killed by SIGSEGV", "exit status 3"};
    for (int i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "{crashed,%s,kind}", want[i][0]);
        v = json_at(c, out, path);
        cr_expect(v && strcmp(v, want[i][1]) == 0, "%s: %s", path, out);
        free(v);
        snprintf(path, sizeof path, "{crashed,%s,crashed_1h}", want[i][0]);
        v = json_at(c, out, path);
        cr_expect(v && strcmp(v, want[i][2]) == 0, "%s: %s", path, out);
        free(v);
        snprintf(path, sizeof path, "{crashed,%s,last_cause}", want[i][0]);
        v = json_at(c, out, path);
        cr_expect(v && strcmp(v, cause[i]) == 0, "%s: %s", path, out);
        free(v);
    }
    /* The crash a second ago is a failed attempt of the last 10 s, and the
     * last error. */
    v = json_at(c, out, "{failed_per_s}");
    cr_expect(v && strcmp(v, "0.1") == 0, "failed_per_s: %s", out);
    free(v);
    v = json_at(c, out, "{last_error,error}");
    cr_expect(v && strcmp(v, "killed by SIGSEGV") == 0, "last_error: %s", out);
    free(v);
    free(out);
    cr_assert_eq(th_cli(&out, NULL, "top", "-n", "1", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "\ncrashed in the last hour: kind a 3 (last: killed by SIGSEGV), kind b 1 (last: exit status 3)\n")
                  != NULL,
              "%s", out);
    cr_expect(strstr(out, "  crashed_1h") != NULL, "no crashed_1h column: %s", out);
    free(out);
}

Test(stats, totals_are_exact_and_survive_retention, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    /* Start the totals an hour ago, as if the migration had run then. */
    th_execf(c, "UPDATE skipq.job_totals_mark SET through = now() - interval '1 hour', began_at = through");
    jobs(c, 7, "t", "done", "attempts, finished_at", "1, now() - interval '50 minutes'");
    jobs(c, 2, "t", "dead", "attempts, finished_at", "1, now() - interval '40 minutes'");
    jobs(c, 3, "t", "cancelled", "finished_at", "now() - interval '20 minutes'");
    char *json = stats_json(&db), *row = stats_row(c, json, "mix", "t");
    expect_field(c, row, "done", "7");
    expect_field(c, row, "dead", "2");
    expect_field(c, row, "cancelled", "3");
    free(row);
    free(json);
    /* Roll them up, then let retention-like deletes take them: the totals
     * stay, the last hour does not. */
    cr_expect_eq(th_scalar(c, "SELECT skipq.advance_totals(0)"), 12);
    cr_expect_eq(th_scalar(c, "SELECT skipq.advance_totals(0)"), 0, "counted twice");
    th_execf(c, "DELETE FROM skipq.jobs WHERE kind = 't' AND status = 'done'");
    jobs(c, 1, "t", "done", "attempts, finished_at", "1, now()");
    json = stats_json(&db);
    row = stats_row(c, json, "mix", "t");
    expect_field(c, row, "done", "8");
    expect_field(c, row, "done_1h", "1");
    expect_field(c, row, "dead", "2");
    free(row);
    free(json);
}

/*
 * Hosts finish jobs while retention deletes them as fast as it may, and
 * every host advances the totals: at the end the totals count every job
 * exactly once, though none of them is left in the table.
 */
Test(stats, totals_under_retention_with_three_hosts, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    const int n = 3000;
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, %d)", n);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"fail\": \"no\"}', max_attempts => 1))"
                      " FROM generate_series(1, 100)");
    struct host hosts[3] = {{.name = "ta"}, {.name = "tb"}, {.name = "tc"}};
    for (int i = 0; i < 3; i++) {
        hosts[i].ini = th_host_ini(&db, hosts[i].name, NULL, NULL,
                                   "[queue default]\nthreads = 4\nbatch = 8\n\n"
                                   "[retention]\ndone = 300ms\ndead = 300ms\ninterval = 200ms\nbatch = 500\n");
        host_start(&hosts[i]);
    }
    cr_expect_eq(th_wait_scalar(db.conn, 0, 120000, "SELECT count(*) FROM skipq.jobs"), 0,
                 "retention did not empty the table");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(host_stop(&hosts[i], 15000), 0);
    char *json = stats_json(&db), *row = stats_row(db.conn, json, "default", "test");
    cr_assert(row, "%s", json);
    char want[16];
    snprintf(want, sizeof want, "%d", n);
    expect_field(db.conn, row, "done", want);
    expect_field(db.conn, row, "dead", "100");
    free(row);
    free(json);
    for (int i = 0; i < 3; i++)
        th_assert_clean_log(hosts[i].ini);
}

Test(stats, top_refreshes_and_exits, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "test", "{}", "q1", 0, 0);
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "top", "--iterations", "2", "--interval", "100", "--db", db.conninfo, NULL), 0,
                 "%s", err);
    char *first = strstr(out, "skipq top"), *second = first ? strstr(first + 1, "skipq top") : NULL;
    cr_expect(first && second && !strstr(second + 1, "skipq top"), "want two refreshes: %s", out);
    cr_expect(strstr(out, "\033[") == NULL, "cleared a screen that is not a terminal");
    cr_expect(strstr(out, "q1") != NULL, "%s", out);
    free(out);
    free(err);

    cr_expect_eq(th_cli(&out, NULL, "top", "-n", "2", "-i", "100", "--json", "--db", db.conninfo, NULL), 0);
    char *nl = strchr(out, '\n');
    cr_assert(nl && nl[1] && strchr(nl + 1, '\n') && !strchr(nl + 1, '\n')[1], "want two lines: %s", out);
    *nl = '\0';
    char *v = json_at(db.conn, out, "{queues,0,ready}");
    cr_expect(v && strcmp(v, "1") == 0, "%s", out);
    free(v);
    v = json_at(db.conn, nl + 1, "{done_per_s}");
    cr_expect(v != NULL, "%s", nl + 1);
    free(v);
    v = json_at(db.conn, nl + 1, "{hosts_alive}");
    cr_expect(v && strcmp(v, "0") == 0, "%s", nl + 1);
    free(v);
    free(out);

    /* Without --iterations it runs until SIGTERM or SIGINT, then exits 0. */
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            execl(SKIPQ_BIN, SKIPQ_BIN, "top", "--interval", "200", "--db", db.conninfo, (char *)NULL);
            _exit(127);
        }
        usleep(600 * 1000);
        cr_expect_eq(th_wait_exit(pid, 100), -1, "top exited on its own");
        kill(pid, sigs[i]);
        cr_expect_eq(th_wait_exit(pid, 10000), 0, "top did not exit 0 on signal %d", sigs[i]);
    }
}

Test(stats, bad_flags_and_help, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    const char *bad[][4] = {{"stats", "--bogus", NULL, NULL},   {"stats", "extra", NULL, NULL},
                            {"top", "--interval", "5", NULL},   {"top", "--interval", "abc", NULL},
                            {"top", "--iterations", "0", NULL}, {"top", "--iterations", "-3", NULL},
                            {"top", "now", NULL, NULL},         {"top", "--bogus", NULL, NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *err = NULL;
        int rc = bad[i][2] ? th_cli(NULL, &err, bad[i][0], bad[i][1], bad[i][2], "--db", db.conninfo, NULL)
                           : th_cli(NULL, &err, bad[i][0], bad[i][1], "--db", db.conninfo, NULL);
        cr_expect_eq(rc, 2, "%s %s: exit %d", bad[i][0], bad[i][1], rc);
        cr_expect(strstr(err, "Try 'skipq") != NULL, "%s", err);
        free(err);
    }
    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "top", "--help", NULL), 0);
    cr_expect(strstr(out, "--iterations") != NULL, "%s", out);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "stats", "--help", NULL), 0);
    cr_expect(strstr(out, "no live host") != NULL || strstr(out, "no\nlive host") != NULL, "%s", out);
    free(out);
    /* An unreachable database is a runtime failure. */
    cr_expect_eq(th_cli(NULL, NULL, "top", "-n", "1", "--db", "host=/nonexistent port=1", NULL), 1);
}
