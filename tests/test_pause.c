/*
 * test_pause.c -- pausing a queue or a kind: `skipq pause` and `skipq
 * resume`, skipq.pause() and skipq.resume() (sql/054_pause.sql), and what
 * stats and top show; and the hosts' side (core/host/pause.c): no claim of
 * a paused queue or kind within one heartbeat, running jobs finishing, a
 * resume claiming again, /metrics saying so.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>

#include "harness.h"

static void expect_cli(int want, const char *want_out, const char *want_err, const char *a, const char *b,
                       const char *c, const char *db)
{
    char *out = NULL, *err = NULL;
    int st = c ? th_cli(&out, &err, a, b, c, "--db", db, NULL) : b ? th_cli(&out, &err, a, b, "--db", db, NULL)
                                                                   : th_cli(&out, &err, a, "--db", db, NULL);
    cr_expect_eq(st, want, "skipq %s %s %s: exit %d\n%s%s", a, b ? b : "", c ? c : "", st, out, err);
    if (want_out)
        cr_expect(strstr(out, want_out) != NULL, "skipq %s %s %s printed: %s", a, b ? b : "", c ? c : "", out);
    if (want_err)
        cr_expect(strstr(err, want_err) != NULL, "skipq %s %s %s said: %s", a, b ? b : "", c ? c : "", err);
    free(out);
    free(err);
}

Test(pause, pause_and_resume_a_queue_or_a_kind_from_the_cli, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "mail", "{}", "reports", 0, 5);
    expect_cli(0, "queue \"reports\" paused\n", NULL, "pause", "--queue", "reports", db.conninfo);
    expect_cli(0, "queue \"reports\" was already paused\n", NULL, "pause", "--queue", "reports", db.conninfo);
    expect_cli(0, "kind \"mail\" paused\n", NULL, "pause", "--kind", "mail", db.conninfo);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 2);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused WHERE paused_by = current_user"), 2);

    /* stats and top say so, as text and as JSON */
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "paused (no new claims): queue reports, kind mail\n") != NULL, "%s", out);
    cr_expect(strstr(out, "  paused\n") != NULL && strstr(out, "  yes\n") != NULL, "the paused column: %s", out);
    free(out);
    cr_assert_eq(th_cli(&out, NULL, "stats", "--json", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "\"paused\":true}") != NULL, "%s", out);
    cr_expect(strstr(out, "\"paused\":[{\"scope\":\"queue\",\"name\":\"reports\",\"paused_at\":") != NULL, "%s", out);
    free(out);
    cr_assert_eq(th_cli(&out, NULL, "top", "--iterations", "1", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "paused (no new claims): queue reports, kind mail") != NULL, "%s", out);
    free(out);
    cr_assert_eq(th_cli(&out, NULL, "top", "--iterations", "1", "--json", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "\"dead_1h\":0,\"crashed_1h\":0,\"paused\":true}") != NULL, "%s", out);
    free(out);

    expect_cli(0, "queue \"reports\" resumed\n", NULL, "resume", "--queue", "reports", db.conninfo);
    expect_cli(0, "queue \"reports\" was not paused\n", NULL, "resume", "--queue", "reports", db.conninfo);
    expect_cli(0, "kind \"mail\" resumed\n", NULL, "resume", "--kind", "mail", db.conninfo);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    cr_assert_eq(th_cli(&out, NULL, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "paused (no new claims)") == NULL, "%s", out);
    free(out);
    PQfinish(db.conn);
}

Test(pause, bad_flags_are_usage_errors_and_change_nothing, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    expect_cli(2, NULL, "give --queue Q or --kind K", "pause", NULL, NULL, db.conninfo);
    expect_cli(2, NULL, "give one of --queue and --kind, once", "pause", "--queue=a", "--kind=b", db.conninfo);
    expect_cli(2, NULL, "give one of --queue and --kind, once", "resume", "--queue=a", "--queue=b", db.conninfo);
    expect_cli(2, NULL, "--queue: \"two words\" is not a valid name", "pause", "--queue", "two words", db.conninfo);
    expect_cli(2, NULL, "--kind: \"\" is not a valid name", "pause", "--kind", "", db.conninfo);
    expect_cli(2, NULL, "unexpected argument \"extra\"", "pause", "--queue=a", "extra", db.conninfo);
    expect_cli(0, "usage: skipq pause --queue Q | --kind K", NULL, "pause", "--help", NULL, db.conninfo);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    PQfinish(db.conn);
}

Test(pause, the_functions_check_their_arguments_and_tell_the_hosts, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const char *const bad[][2] = {
        {"SELECT skipq.pause('queues', 'default')", "skipq.pause: scope must be 'queue' or 'kind' (got 'queues')"},
        {"SELECT skipq.pause(NULL, 'default')", "skipq.pause: scope must be 'queue' or 'kind' (got NULL)"},
        {"SELECT skipq.pause('queue', 'two words')", "skipq.pause: a queue name is 1 to 128 characters"},
        {"SELECT skipq.resume('kind', '')", "skipq.resume: a kind name is 1 to 128 characters"},
        {"SELECT skipq.resume('kind', NULL)", "(got NULL)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        PGresult *r = PQexec(db.conn, bad[i][0]);
        cr_expect_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE) ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : "",
                         "22023", "%s", bad[i][0]);
        cr_expect(strstr(PQresultErrorMessage(r), bad[i][1]) != NULL, "%s: %s", bad[i][0], PQresultErrorMessage(r));
        PQclear(r);
    }
    /* a change is announced on skipq_jobs as '!paused'; no change, nothing */
    PGconn *l = th_connect(&db);
    PQclear(th_query(l, "LISTEN skipq_jobs"));
    cr_expect_eq(th_scalar(db.conn, "SELECT skipq.pause('kind', 'mail')::int"), 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT skipq.pause('kind', 'mail')::int"), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT skipq.resume('kind', 'mail')::int"), 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT skipq.resume('kind', 'mail')::int"), 0);
    int got = 0;
    for (int64_t end = th_now_ms() + 5000; got < 2 && th_now_ms() < end; usleep(20 * 1000)) {
        PQconsumeInput(l);
        PGnotify *n;
        while ((n = PQnotifies(l)) != NULL) {
            cr_expect_str_eq(n->extra, "!paused");
            got++;
            PQfreemem(n);
        }
    }
    usleep(200 * 1000);
    PQconsumeInput(l);
    for (PGnotify *n; (n = PQnotifies(l)) != NULL; PQfreemem(n))
        got++;
    cr_expect_eq(got, 2, "%d notifications for two changes", got);
    PQfinish(l);
    PQfinish(db.conn);
}

Test(pause, only_a_role_allowed_to_may_pause, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "psql -qX -v ON_ERROR_STOP=1 \"%s\" -f %s/sql/roles.sql >/dev/null 2>&1", db.conninfo,
             SKIPQ_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0, "roles.sql failed");
    th_execf(db.conn, "DROP ROLE IF EXISTS %s_w; CREATE ROLE %s_w LOGIN IN ROLE skipq_worker", db.name, db.name);
    char ci[700];
    snprintf(ci, sizeof ci, "%s user=%s_w", db.conninfo, db.name);
    /* the worker reads the paused set (its hosts will), and changes nothing */
    PGconn *w = PQconnectdb(ci);
    cr_assert_eq(PQstatus(w), CONNECTION_OK, "%s", PQerrorMessage(w));
    PGresult *r = PQexec(w, "SELECT count(*) FROM skipq.paused");
    cr_expect_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(w));
    PQclear(r);
    PQfinish(w);
    expect_cli(1, NULL, "permission denied for function pause", "pause", "--queue", "default", ci);
    expect_cli(1, NULL, "permission denied for function resume", "resume", "--queue", "default", ci);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    th_execf(db.conn, "DROP OWNED BY %s_w; DROP ROLE %s_w", db.name, db.name);
    PQfinish(db.conn);
}

/* ---- the hosts (core/host/pause.c) ----------------------------------------------------------------- */

/* Jobs of `kind` on `queue` that have started (an execution) since the
 * pause took effect: `at` is a timestamptz literal. */
static long long claimed_since(PGconn *c, const char *kind, const char *at)
{
    return th_scalarf(c,
                      "SELECT count(*) FROM skipq.job_executions e JOIN skipq.jobs j ON j.id = e.job_id"
                      " WHERE j.kind = '%s' AND e.started_at > '%s'::timestamptz",
                      kind, at);
}

Test(pause, a_host_stops_claiming_a_paused_queue_within_one_heartbeat_and_claims_again_on_resume, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/ledger", th_tmpdir());
    /* heartbeat 500 ms (th_host_ini); two threads */
    char *ini = th_host_ini(&db, "pz", NULL, ledger, "[queue default]\nthreads = 2\nkinds = test\n");
    pid_t host = th_host_start(ini);
    int64_t slow1 = th_enqueue(db.conn, "test", "{\"sleep_ms\": 2500}", "default", 0, 5);
    int64_t slow2 = th_enqueue(db.conn, "test", "{\"sleep_ms\": 2500}", "default", 0, 5);
    cr_assert_eq(th_wait_scalar(db.conn, 2, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 2);
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "pause", "--queue", "default", "--db", db.conninfo, NULL), 0);
    free(out);
    /* one heartbeat after the pause, no claim may start */
    PGresult *r = th_query(db.conn, "SELECT (paused_at + interval '500 ms')::text FROM skipq.paused");
    char after[64];
    snprintf(after, sizeof after, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    for (int i = 0; i < 5; i++)
        th_enqueue(db.conn, "test", "{}", "default", 0, 5);
    /* the running jobs finish */
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id IN (%lld, %lld) AND status = 'done'",
             (long long)slow1, (long long)slow2);
    cr_expect_eq(th_wait_scalar(db.conn, 2, 20000, sql), 2, "jobs running at the pause did not finish");
    /* and for a while after, the new ones wait (this must time out) */
    cr_expect_eq(th_wait_scalar(db.conn, 1, 3000,
                                "SELECT (count(*) > 0)::int FROM skipq.jobs WHERE status <> 'pending'"
                                " AND payload = '{}'"),
                 0, "a job of a paused queue was claimed");
    cr_expect_eq(claimed_since(db.conn, "test", after), 0, "claims started more than a heartbeat after the pause");
    /* resume: they run */
    cr_assert_eq(th_cli(&out, NULL, "resume", "--queue", "default", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_expect_eq(th_wait_scalar(db.conn, 7, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 7,
                 "resumed, the queue was not claimed again");
    cr_expect_eq(th_host_stop(host, 15000), 0);
    th_assert_clean_log(ini);
    th_check_invariants(db.conn);
    PQfinish(db.conn);
}

Test(pause, a_paused_kind_is_not_claimed_on_any_queue_while_its_neighbours_run, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "pause", "--kind", "test.other", "--db", db.conninfo, NULL), 0);
    free(out);
    char *ini = th_host_ini(&db, "pk", NULL, NULL,
                            "kinds = test, test.other\n\n"  /* testkit's: the kinds it registers */
                            "[queue default]\nthreads = 2\nkinds = test, test.other\n\n"
                            "[queue second]\nthreads = 1\nkinds = test.other\n");
    pid_t host = th_host_start(ini);
    for (int i = 0; i < 5; i++) {
        th_enqueue(db.conn, "test", "{}", "default", 0, 5);
        th_enqueue(db.conn, "test.other", "{}", "default", 0, 5);
        th_enqueue(db.conn, "test.other", "{}", "second", 0, 5);
    }
    cr_expect_eq(th_wait_scalar(db.conn, 5, 20000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test'"
                                                   " AND status = 'done'"),
                 5, "the kind beside the paused one stopped too");
    cr_expect_eq(th_wait_scalar(db.conn, 1, 3000, "SELECT (count(*) > 0)::int FROM skipq.jobs"
                                                  " WHERE kind = 'test.other' AND status <> 'pending'"),
                 0, "a paused kind was claimed");
    cr_assert_eq(th_cli(&out, NULL, "resume", "--kind", "test.other", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_expect_eq(th_wait_scalar(db.conn, 10, 20000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test.other'"
                                                    " AND status = 'done'"),
                 10);
    cr_expect_eq(th_host_stop(host, 15000), 0);
    th_assert_clean_log(ini);
    PQfinish(db.conn);
}

Test(pause, a_kind_paused_while_a_host_runs_stops_being_claimed_and_its_running_job_finishes, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "pr", NULL, NULL,
                            "kinds = test, test.other\n\n[queue default]\nthreads = 2\nkinds = test, test.other\n");
    pid_t host = th_host_start(ini);
    int64_t slow = th_enqueue(db.conn, "test.other", "{\"sleep_ms\": 2000}", "default", 0, 5);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'running'",
             (long long)slow);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1, "the host never started the first job");
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "pause", "--kind", "test.other", "--db", db.conninfo, NULL), 0);
    free(out);
    PGresult *r = th_query(db.conn, "SELECT (paused_at + interval '500 ms')::text FROM skipq.paused");
    char after[64];
    snprintf(after, sizeof after, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    /* the pause binds from one heartbeat on: enqueue after that */
    cr_assert_eq(th_wait_scalar(db.conn, 1, 5000, "SELECT (now() > paused_at + interval '500 ms')::int"
                                                  " FROM skipq.paused"),
                 1);
    for (int i = 0; i < 4; i++) {
        th_enqueue(db.conn, "test.other", "{}", "default", 0, 5);
        th_enqueue(db.conn, "test", "{}", "default", 0, 5);
    }
    /* the running job of the paused kind finishes; the other kind runs on */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", (long long)slow);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1, "the job running at the pause did not finish");
    cr_expect_eq(th_wait_scalar(db.conn, 4, 20000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test'"
                                                   " AND status = 'done'"),
                 4, "the kind beside the paused one stopped too");
    cr_expect_eq(th_wait_scalar(db.conn, 1, 3000, "SELECT (count(*) > 0)::int FROM skipq.jobs"
                                                  " WHERE kind = 'test.other' AND payload = '{}' AND status <> 'pending'"),
                 0, "a paused kind was claimed");
    cr_expect_eq(claimed_since(db.conn, "test.other", after), 0,
                 "claims of the kind started more than a heartbeat after the pause");
    cr_assert_eq(th_cli(&out, NULL, "resume", "--kind", "test.other", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_expect_eq(th_wait_scalar(db.conn, 5, 20000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'test.other'"
                                                   " AND status = 'done'"),
                 5, "resumed, the kind was not claimed again");
    cr_expect_eq(th_host_stop(host, 15000), 0);
    th_assert_clean_log(ini);
    th_check_invariants(db.conn);
    PQfinish(db.conn);
}

/* The value of the /metrics sample `series` (name{labels}), -1 when absent. */
static double scrape(int port, const char *series)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 'http://127.0.0.1:%d/metrics'", port);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[1024];
    double v = -1;
    size_t n = strlen(series);
    while (fgets(line, sizeof line, p))
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            v = strtod(line + n + 1, NULL);
    pclose(p);
    return v;
}

static bool scrape_until(int port, const char *series, double want)
{
    for (int64_t end = th_now_ms() + 10000; th_now_ms() < end; usleep(100 * 1000))
        if (scrape(port, series) == want)
            return true;
    return false;
}

Test(pause, metrics_show_what_a_host_has_paused, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int port = 0;
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        getsockname(fd, (struct sockaddr *)&a, &len);
        close(fd);
        port = ntohs(a.sin_port);
    }
    char more[300];
    snprintf(more, sizeof more,
             "kinds = test, test.other\n\n[queue default]\nkinds = test, test.other\n\n"
             "[metrics]\nlisten = 127.0.0.1:%d\n",
             port);
    char *ini = th_host_ini(&db, "pm", NULL, NULL, more);
    pid_t host = th_host_start(ini);
    static const char q[] = "skipq_queue_paused{queue=\"default\"}", k[] = "skipq_kind_paused{kind=\"test.other\"}";
    cr_expect(scrape_until(port, q, 0), "%s is not 0 at first", q);
    cr_expect(scrape_until(port, k, 0), "%s is not 0 at first", k);
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "pause", "--queue", "default", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_assert_eq(th_cli(&out, NULL, "pause", "--kind", "test.other", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_expect(scrape_until(port, q, 1), "%s never became 1", q);
    cr_expect(scrape_until(port, k, 1), "%s never became 1", k);
    cr_expect_eq(scrape(port, "skipq_kind_paused{kind=\"test\"}"), 0);
    cr_assert_eq(th_cli(&out, NULL, "resume", "--queue", "default", "--db", db.conninfo, NULL), 0);
    free(out);
    cr_expect(scrape_until(port, q, 0), "%s is still 1 after resume", q);
    cr_expect_eq(th_host_stop(host, 15000), 0);
    th_assert_clean_log(ini);
    PQfinish(db.conn);
}
