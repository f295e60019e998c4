/*
 * test_cli.c -- the skipq binary as scripts use it: exit codes (0 ok,
 * 1 runtime, 2 usage/config/input), what goes to stdout and stderr, and
 * that a refused command changes nothing in the database.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "skipq/skipq.h"

#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"

/* One column of one job as text (malloc'd; "" for NULL). */
static char *job_field(PGconn *conn, long long id, const char *expr)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT (%s)::text FROM skipq.jobs WHERE id = %lld", expr, id);
    PGresult *r = th_query(conn, sql);
    cr_assert_eq(PQntuples(r), 1, "job %lld not found", id);
    char *v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void expect_field(PGconn *conn, long long id, const char *expr, const char *want)
{
    char *v = job_field(conn, id, expr);
    cr_expect_str_eq(v, want, "job %lld: %s is \"%s\", expected \"%s\"", id, expr, v, want);
    free(v);
}

static long long jobs(PGconn *conn)
{
    return th_scalar(conn, "SELECT count(*) FROM skipq.jobs");
}

/* stdout must be exactly one id followed by a newline; returns it. */
static long long printed_id(const char *out)
{
    char *end;
    long long id = strtoll(out, &end, 10);
    cr_assert(end != out && id > 0 && strcmp(end, "\n") == 0, "stdout is not one job id: \"%s\"", out);
    return id;
}

/* A refused enqueue: exit 2, nothing on stdout, stderr naming the problem,
 * no job written. */
static void expect_enqueue_refused(const struct th_db *db, int st, char *out, char *err, const char *n1,
                                   const char *n2)
{
    cr_expect_eq(st, 2, "exit status %d, not 2; stderr: %s", st, err);
    cr_expect_str_eq(out, "", "stdout: %s", out);
    cr_expect(strncmp(err, "skipq enqueue: ", 15) == 0 || strstr(err, "\nskipq enqueue: "),
              "stderr has no \"skipq enqueue: \" message: %s", err);
    if (n1)
        cr_expect_not_null(strstr(err, n1), "stderr does not mention \"%s\": %s", n1, err);
    if (n2)
        cr_expect_not_null(strstr(err, n2), "stderr does not mention \"%s\": %s", n2, err);
    cr_expect_eq(jobs(db->conn), 0, "a refused enqueue wrote a job");
    free(out);
    free(err);
}

/* ---- enqueue -------------------------------------------------------------------- */

Test(cli_enqueue, prints_the_id_and_writes_the_row, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "mail.send", "{\"to\": \"a@example.com\", \"n\": 2}",
                    "--queue", "emails", "--priority", "7", "--max-attempts", "3", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    long long id = printed_id(out);
    cr_expect_eq(jobs(db.conn), 1);
    expect_field(db.conn, id, "queue", "emails");
    expect_field(db.conn, id, "kind", "mail.send");
    expect_field(db.conn, id, "priority", "7");
    expect_field(db.conn, id, "max_attempts", "3");
    expect_field(db.conn, id, "status", "pending");
    expect_field(db.conn, id, "attempts", "0");
    expect_field(db.conn, id, "payload = '{\"to\": \"a@example.com\", \"n\": 2}'::jsonb", "true");
    expect_field(db.conn, id, "run_at = created_at", "true");
    free(out);
    free(err);
}

Test(cli_enqueue, short_options_and_defaults, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "-q", "bulk", "-p", "-3", "-m", "1", "report", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    long long id = printed_id(out);
    expect_field(db.conn, id, "queue", "bulk");
    expect_field(db.conn, id, "priority", "-3");
    expect_field(db.conn, id, "max_attempts", "1");
    free(out);
    free(err);

    st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "plain", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    id = printed_id(out);
    expect_field(db.conn, id, "queue", "default");
    expect_field(db.conn, id, "priority", "0");
    expect_field(db.conn, id, "max_attempts", "5");
    expect_field(db.conn, id, "payload = '{}'::jsonb", "true");
    free(out);
    free(err);
}

Test(cli_enqueue, delay_puts_run_at_in_the_future, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--delay", "60", "later", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    long long id = printed_id(out);
    /* both timestamps come from the database clock of the enqueue */
    expect_field(db.conn, id, "(extract(epoch FROM run_at - created_at) * 1000)::bigint", "60000");
    long long ahead = th_scalarf(db.conn, "SELECT (extract(epoch FROM run_at - now()) * 1000)::bigint "
                                          "FROM skipq.jobs WHERE id = %lld",
                                 id);
    cr_expect(ahead > 50000 && ahead <= 60000, "run_at is %lldms ahead of the database's now()", ahead);
    free(out);
    free(err);
}

Test(cli_enqueue, delay_with_units, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "-d", "5m", "later", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    long long id = printed_id(out);
    expect_field(db.conn, id, "(extract(epoch FROM run_at - created_at) * 1000)::bigint", "300000");
    free(out);
    free(err);
}

Test(cli_enqueue, config_gives_database_and_kind_max_attempts, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char text[1024];
    snprintf(text, sizeof text, "[database]\nurl = %s\n\n[kind mail.send]\nmax_attempts = 9\n", db.conninfo);
    char *ini = th_write_file("enqueue.ini", text);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "-c", ini, "mail.send", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    long long id = printed_id(out);
    expect_field(db.conn, id, "max_attempts", "9");
    free(out);
    free(err);
    /* an explicit -m still wins over the INI */
    st = th_cli(&out, &err, "enqueue", "-c", ini, "-m", "2", "mail.send", NULL);
    cr_assert_eq(st, 0, "exit %d; stderr: %s", st, err);
    id = printed_id(out);
    expect_field(db.conn, id, "max_attempts", "2");
    free(out);
    free(err);
    free(ini);
}

Test(cli_enqueue, invalid_json, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "k", "{\"a\": ", NULL);
    expect_enqueue_refused(&db, st, out, err, "invalid JSON", NULL);
}

Test(cli_enqueue, empty_kind, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "", "{}", NULL);
    expect_enqueue_refused(&db, st, out, err, "kind", "empty");
}

Test(cli_enqueue, kind_with_a_space, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "mail send", NULL);
    expect_enqueue_refused(&db, st, out, err, "\"mail send\"", NULL);
}

Test(cli_enqueue, max_attempts_zero, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--max-attempts", "0", "k", NULL);
    expect_enqueue_refused(&db, st, out, err, "--max-attempts", "\"0\"");
}

Test(cli_enqueue, priority_not_a_number, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--priority", "abc", "k", NULL);
    expect_enqueue_refused(&db, st, out, err, "--priority", "\"abc\"");
}

Test(cli_enqueue, negative_delay, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--delay", "-5", "k", NULL);
    expect_enqueue_refused(&db, st, out, err, "--delay", "\"-5\"");
}

/* Duration and number flags are checked as text before any conversion
 * (a non-finite double converted to an integer is undefined behaviour),
 * and the message says what is wrong. */
Test(cli_enqueue, flags_that_are_not_numbers_say_what_is_wrong, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const struct {
        const char *flag, *value, *says;
    } bad[] = {
        {"--delay", "nan", "\"nan\" is not a number"},
        {"--delay", "inf", "\"inf\" is not a number"},
        {"--delay", "-inf", "take no sign"},
        {"--delay", "-0", "take no sign"},
        {"--delay", "1e300", "\"1e300\" is too long (maximum"},
        {"--delay", "99999999999999999999", "is too long"},
        {"--delay", "5s later", "is not a duration"},
        {"--unique-for", "nan", "\"nan\" is not a number"},
        {"--unique-for", "0", "is not positive"},
        {"--priority", "nan", "\"nan\" is not a number"},
        {"--priority", "1e3", "\"1e3\" is not a whole number"},
        {"--priority", "99999999999999999999", "is out of range"},
        {"--max-attempts", "-0", "\"-0\" is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out, *err;
        int st = strcmp(bad[i].flag, "--unique-for")
                     ? th_cli(&out, &err, "enqueue", "--db", db.conninfo, bad[i].flag, bad[i].value, "k", NULL)
                     : th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--unique-key", "u", bad[i].flag,
                              bad[i].value, "k", NULL);
        expect_enqueue_refused(&db, st, out, err, bad[i].flag, bad[i].says);
    }
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "top", "--interval", "nan", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "--interval: \"nan\" is not a number"), "%s", err);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "top", "--interval", "1e30s", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "is too long"), "%s", err);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "top", "--interval", "50ms", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "is out of range"), "%s", err);
    free(err);
    char *out = NULL;
    cr_expect_eq(th_cli(&out, &err, "top", "--interval", "1s", "-n", "1", "--db", db.conninfo, NULL), 0, "%s", err);
    cr_expect(strstr(out, "every 1000ms"), "%s", out);
    free(out);
    free(err);
}

Test(cli_enqueue, unknown_option, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "--frobnicate", "k", NULL);
    expect_enqueue_refused(&db, st, out, err, "frobnicate", "invalid option");
}

Test(cli_enqueue, missing_kind, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, NULL);
    expect_enqueue_refused(&db, st, out, err, "missing KIND", NULL);
}

Test(cli_enqueue, extra_argument, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "k", "{}", "surplus", NULL);
    expect_enqueue_refused(&db, st, out, err, "\"surplus\"", NULL);
}

/* ---- run: refusals before any job is touched ------------------------------------- */

/* Line number (1-based) of the first line of `path` containing `needle`. */
static int line_of(const char *path, const char *needle)
{
    char *text = th_read_file(path);
    char *at = strstr(text, needle);
    cr_assert_not_null(at, "%s does not contain %s", path, needle);
    int line = 1;
    for (char *p = text; p < at; p++)
        line += *p == '\n';
    free(text);
    return line;
}

/*
 * `skipq run -c ini` must exit 2 with every needle in its output, and leave
 * the job enqueued before it started alone: still pending, no attempt, no
 * execution row, no other job.
 */
static void expect_run_refused(const struct th_db *db, const char *ini, long long job, const char *n1,
                               const char *n2, const char *n3)
{
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 20000);
    if (st == -1)
        th_host_stop(pid, 5000);
    char logpath[700];
    snprintf(logpath, sizeof logpath, "%s.log", ini);
    char *log = th_read_file(logpath);
    cr_expect_eq(st, 2, "skipq run exited %d, not 2; output:\n%s", st, log);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i])
            cr_expect_not_null(strstr(log, needles[i]), "output does not mention \"%s\":\n%s", needles[i], log);
    cr_expect_eq(jobs(db->conn), 1);
    expect_field(db->conn, job, "status", "pending");
    expect_field(db->conn, job, "attempts", "0");
    cr_expect_eq(th_scalar(db->conn, "SELECT count(*) FROM skipq.job_executions"), 0);
    th_assert_clean_log(ini);
    free(log);
}

Test(cli_run, control_a_good_config_runs_the_job, .timeout = 60)
{
    /* the same setup as the refusals below, minus the fault */
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "control", NULL, NULL, "[queue default]\nthreads = 1\nkinds = test\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    free(ini);
}

Test(cli_run, unknown_config_key, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "badkey", "polling = 1s\n", NULL, "[queue default]\nthreads = 1\n");
    char where[700];
    snprintf(where, sizeof where, "%s:%d: ", ini, line_of(ini, "polling = 1s"));
    expect_run_refused(&db, ini, id, where, "unknown key \"polling\"", "[host]");
    free(ini);
}

Test(cli_run, plugin_built_for_another_abi, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "abi", NULL, NULL,
                            "[plugin future]\npath = " FIXTURE("bad_abi") "\n[queue default]\nthreads = 1\n");
    expect_run_refused(&db, ini, id, "\"future\"", "ABI 2.3", "ABI 1.1");
    free(ini);
}

Test(cli_run, missing_plugin_path, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char extra[1024], path[600];
    snprintf(path, sizeof path, "%s/not-there.so", th_tmpdir());
    snprintf(extra, sizeof extra, "[plugin ghost]\npath = %s\n[queue default]\nthreads = 1\n", path);
    char *ini = th_host_ini(&db, "ghost", NULL, NULL, extra);
    expect_run_refused(&db, ini, id, "\"ghost\"", path, NULL);
    free(ini);
}

Test(cli_run, two_plugins_register_one_kind, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "dup", NULL, NULL,
                            "[plugin dupper]\npath = " FIXTURE("dup_kind") "\n[queue default]\nthreads = 1\n");
    expect_run_refused(&db, ini, id, "kind \"test\"", "\"testkit\"", "\"dupper\"");
    free(ini);
}

Test(cli_run, queue_lists_a_kind_nobody_registered, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "nokind", NULL, NULL, "[queue default]\nthreads = 1\nkinds = test, nobody.here\n");
    char where[700];
    snprintf(where, sizeof where, "%s:%d: ", ini, line_of(ini, "[queue default]"));
    expect_run_refused(&db, ini, id, where, "[queue default]", "\"nobody.here\"");
    free(ini);
}

Test(cli_run, without_config, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, "run", NULL);
    cr_expect_eq(st, 2, "exit %d", st);
    cr_expect_not_null(strstr(err, "-c FILE"), "stderr: %s", err);
    free(out);
    free(err);
}

Test(cli_run, missing_config_file, .timeout = 60)
{
    char path[600];
    snprintf(path, sizeof path, "%s/absent.ini", th_tmpdir());
    char *out, *err;
    int st = th_cli(&out, &err, "run", "-c", path, NULL);
    cr_expect_eq(st, 2, "exit %d", st);
    cr_expect_not_null(strstr(err, path), "stderr: %s", err);
    free(out);
    free(err);
}

/* ---- migrate ------------------------------------------------------------------------ */

Test(cli_migrate, twice_second_applies_nothing, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "DROP SCHEMA skipq CASCADE");
    int version = skipq_schema_version_required();
    char *out, *err;
    int st = th_cli(&out, &err, "migrate", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "first migrate exited %d: %s", st, err);
    int v = -1, applied = -1;
    cr_expect_eq(sscanf(out, "skipq schema at version %d (%d migration", &v, &applied), 2, "stdout: %s", out);
    cr_expect_eq(v, version);
    cr_expect_gt(applied, 0, "stdout: %s", out);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.schema_migrations"), applied);
    free(out);
    free(err);

    st = th_cli(&out, &err, "migrate", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "second migrate exited %d: %s", st, err);
    char want[128];
    snprintf(want, sizeof want, "skipq schema at version %d (0 migrations applied)\n", version);
    cr_expect_str_eq(out, want);
    free(out);
    free(err);

    /* and the schema works */
    st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "k", NULL);
    cr_expect_eq(st, 0, "enqueue after migrate exited %d: %s", st, err);
    free(out);
    free(err);
}

Test(cli_migrate, enqueue_without_schema_is_a_runtime_error, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "DROP SCHEMA skipq CASCADE");
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "k", NULL);
    cr_expect_eq(st, 1, "exit %d; stderr: %s", st, err);
    cr_expect_not_null(strstr(err, "skipq migrate"), "stderr: %s", err);
    free(out);
    free(err);
}

/* ---- stats -------------------------------------------------------------------------- */

/* Collapse runs of blanks so table rows compare regardless of padding. */
static char *squeeze(const char *s)
{
    char *o = malloc(strlen(s) + 1), *p = o;
    for (; *s; s++) {
        if (*s == ' ' && p > o && p[-1] == ' ')
            continue;
        *p++ = *s;
    }
    *p = '\0';
    return o;
}

Test(cli_stats, counts_per_queue_and_kind, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    long long a1 = th_enqueue(db.conn, "a", "{}", NULL, 0, 0);
    th_enqueue(db.conn, "a", "{}", NULL, 0, 0);
    th_enqueue(db.conn, "a", "{}", NULL, 0, 0);
    long long b1 = th_enqueue(db.conn, "b", "{}", NULL, 0, 0);
    long long o1 = th_enqueue(db.conn, "a", "{}", "other", 0, 0);
    long long o2 = th_enqueue(db.conn, "a", "{}", "other", 0, 0);
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'done', finished_at = now() WHERE id IN (%lld, %lld)", a1, o1);
    th_execf(db.conn, "UPDATE skipq.jobs SET run_at = now() + interval '1 hour' WHERE id = %lld", b1);
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'dead', finished_at = now() WHERE id = %lld", o2);

    char *out, *err;
    int st = th_cli(&out, &err, "stats", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "exit %d: %s", st, err);
    char *t = squeeze(out);
    cr_expect_not_null(strstr(t, "queue kind ready scheduled blocked running expired oldest_ready_s done_1h dead_1h crashed_1h done dead "
                                 "cancelled p50_ms p95_ms p99_ms served paused\n"),
                       "%s", out);
    /* oldest_ready_s (between the two halves) is a second or so */
    cr_expect_not_null(strstr(t, "\ndefault a 2 0 0 0 0 "), "%s", out);
    cr_expect_not_null(strstr(t, " 1 0 0 1 0 0 - - - no no\ndefault b 0 1 0 0 0 - 0 0 0 0 0 0 - - - no no\n"), "%s", out);
    cr_expect_not_null(strstr(t, "\nother a 0 0 0 0 0 - 1 1 0 1 1 0 - - - no no\n"), "%s", out);
    cr_expect_not_null(strstr(t, "no live host serves kind \"a\" on queue \"default\": 2 job(s) ready"), "%s", out);
    free(t);
    free(out);
    free(err);

    st = th_cli(&out, &err, "stats", "--json", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "exit %d: %s", st, err);
    const char *want[] = {
        "{\"queues\":[{\"queue\":\"default\",\"kind\":\"a\",\"ready\":2,\"scheduled\":0,\"blocked\":0,\"running\":0,\"expired\":0,",
        "\"done_1h\":1,\"dead_1h\":0,\"crashed_1h\":0,\"done\":1,\"dead\":0,\"cancelled\":0,\"p50_ms\":null,\"p95_ms\":null,"
        "\"p99_ms\":null,\"served\":false,\"paused\":false},{\"queue\":\"default\",\"kind\":\"b\",\"ready\":0,\"scheduled\":1,",
        "{\"queue\":\"other\",\"kind\":\"a\",\"ready\":0,\"scheduled\":0,\"blocked\":0,\"running\":0,\"expired\":0,"
        "\"oldest_ready_s\":null,\"done_1h\":1,\"dead_1h\":1,\"crashed_1h\":0,\"done\":1,\"dead\":1,\"cancelled\":0,",
        "],\"unserved\":[{\"queue\":\"default\",\"kind\":\"a\",\"ready\":2}],\"paused\":[],\"hosts\":[],"
        "\"totals_since\":\""};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect_not_null(strstr(out, want[i]), "missing %s in %s", want[i], out);
    free(out);
    free(err);
}

Test(cli_stats, empty_database, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out, *err;
    int st = th_cli(&out, &err, "stats", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "exit %d: %s", st, err);
    cr_expect_not_null(strstr(out, "(no jobs)"), "%s", out);
    free(out);
    free(err);
    st = th_cli(&out, &err, "stats", "--json", "--db", db.conninfo, NULL);
    cr_assert_eq(st, 0, "exit %d: %s", st, err);
    const char *empty = "{\"queues\":[],\"unserved\":[],\"paused\":[],\"hosts\":[],\"totals_since\":\"";
    cr_expect_eq(strncmp(out, empty, strlen(empty)), 0, "%s", out);
    free(out);
    free(err);
}

/* ---- help and usage ------------------------------------------------------------------ */

Test(cli_usage, help_exits_0_on_stdout, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, "--help", NULL);
    cr_expect_eq(st, 0);
    cr_expect_not_null(strstr(out, "usage: skipq COMMAND"), "%s", out);
    cr_expect_str_eq(err, "");
    free(out);
    free(err);

    const char *cmds[] = {"enqueue", "run", "migrate", "stats"};
    for (int i = 0; i < 4; i++) {
        st = th_cli(&out, &err, cmds[i], "--help", NULL);
        cr_expect_eq(st, 0, "skipq %s --help exited %d", cmds[i], st);
        char want[64];
        snprintf(want, sizeof want, "usage: skipq %s", cmds[i]);
        cr_expect_not_null(strstr(out, want), "skipq %s --help printed: %s", cmds[i], out);
        cr_expect_str_eq(err, "");
        free(out);
        free(err);
    }
}

Test(cli_usage, unknown_command_exits_2, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, "bogus", NULL);
    cr_expect_eq(st, 2);
    cr_expect_not_null(strstr(err, "unknown command \"bogus\""), "%s", err);
    cr_expect_str_eq(out, "");
    free(out);
    free(err);
}

Test(cli_usage, no_command_exits_2, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, NULL);
    cr_expect_eq(st, 2);
    cr_expect_not_null(strstr(err, "usage: skipq"), "%s", err);
    free(out);
    free(err);
}

Test(cli_usage, unexpected_argument_exits_2, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, "stats", "extra", NULL);
    cr_expect_eq(st, 2);
    cr_expect_not_null(strstr(err, "\"extra\""), "%s", err);
    free(out);
    free(err);
}

Test(cli_usage, version, .timeout = 60)
{
    char *out, *err;
    int st = th_cli(&out, &err, "version", NULL);
    cr_expect_eq(st, 0);
    cr_expect(strncmp(out, "skipq " SKIPQ_VERSION " ", strlen("skipq " SKIPQ_VERSION " ")) == 0, "%s", out);
    free(out);
    free(err);
}

/* ---- which database: --db, then the INI's [database], then $DATABASE_URL ---------- */

#define NO_SUCH_DB "skipq_no_such_db_4711"

/* An INI whose [database] names a database that does not exist. */
static char *ini_with_missing_db(void)
{
    char text[1024];
    snprintf(text, sizeof text, "[database]\nurl = %s dbname=" NO_SUCH_DB "\n", th_admin_conninfo());
    return th_write_file("wrongdb.ini", text);
}

Test(cli_db, flag_beats_the_ini, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    unsetenv("DATABASE_URL");
    char *ini = ini_with_missing_db();
    char *out, *err;
    /* control: the INI alone is used, and fails naming its database */
    int st = th_cli(&out, &err, "enqueue", "-c", ini, "k", NULL);
    cr_expect_eq(st, 1, "exit %d; stderr: %s", st, err);
    cr_expect_not_null(strstr(err, NO_SUCH_DB), "stderr: %s", err);
    free(out);
    free(err);

    st = th_cli(&out, &err, "enqueue", "-c", ini, "--db", db.conninfo, "k", NULL);
    cr_expect_eq(st, 0, "exit %d; stderr: %s", st, err);
    cr_expect_eq(jobs(db.conn), 1);
    free(out);
    free(err);
    free(ini);
}

Test(cli_db, ini_beats_database_url, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char url[700];
    snprintf(url, sizeof url, "%s dbname=" NO_SUCH_DB, th_admin_conninfo());
    setenv("DATABASE_URL", url, 1);
    char text[1024];
    snprintf(text, sizeof text, "[database]\nurl = %s\n", db.conninfo);
    char *ini = th_write_file("rightdb.ini", text);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "-c", ini, "k", NULL);
    cr_expect_eq(st, 0, "exit %d; stderr: %s", st, err);
    cr_expect_eq(jobs(db.conn), 1);
    free(out);
    free(err);
    free(ini);
}

Test(cli_db, database_url_when_nothing_else, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char url[700];
    snprintf(url, sizeof url, "%s dbname=" NO_SUCH_DB, th_admin_conninfo());
    setenv("DATABASE_URL", url, 1);
    char *out, *err;
    /* control: a wrong DATABASE_URL is really what gets used */
    int st = th_cli(&out, &err, "enqueue", "k", NULL);
    cr_expect_eq(st, 1, "exit %d; stderr: %s", st, err);
    cr_expect_not_null(strstr(err, NO_SUCH_DB), "stderr: %s", err);
    free(out);
    free(err);

    setenv("DATABASE_URL", db.conninfo, 1);
    st = th_cli(&out, &err, "enqueue", "k", NULL);
    cr_expect_eq(st, 0, "exit %d; stderr: %s", st, err);
    cr_expect_eq(jobs(db.conn), 1);
    free(out);
    free(err);
    st = th_cli(&out, &err, "stats", "--json", NULL);
    cr_expect_eq(st, 0, "exit %d; stderr: %s", st, err);
    cr_expect_not_null(strstr(out, "\"kind\":\"k\",\"ready\":1"), "%s", out);
    free(out);
    free(err);
}

Test(cli_db, flag_beats_database_url, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char url[700];
    snprintf(url, sizeof url, "%s dbname=" NO_SUCH_DB, th_admin_conninfo());
    setenv("DATABASE_URL", url, 1);
    char *out, *err;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "k", NULL);
    cr_expect_eq(st, 0, "exit %d; stderr: %s", st, err);
    cr_expect_eq(jobs(db.conn), 1);
    free(out);
    free(err);
}
