/*
 * test_bulk.c -- bulk enqueue: skipq.enqueue_many() in SQL, the C API
 * skipq_enqueue_many(), and `skipq enqueue --file` (whole file or nothing).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "skipq/skipq.h"

Test(bulk, enqueue_many_keeps_order_and_fields, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGresult *r = th_query(db.conn,
                           "SELECT array_agg(id ORDER BY ord) FROM skipq.enqueue_many('["
                           "{\"kind\": \"a\", \"payload\": {\"n\": 1}},"
                           "{\"kind\": \"b\", \"queue\": \"mail\", \"priority\": 7, \"max_attempts\": 2},"
                           "{\"kind\": \"c\", \"delay_ms\": 60000}]') WITH ORDINALITY AS t(id, ord)");
    PQclear(r);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 3);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'a' AND payload = '{\"n\": 1}'"
                                    " AND queue = 'default' AND priority = 0 AND max_attempts = 5"),
                 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'b' AND queue = 'mail'"
                                    " AND priority = 7 AND max_attempts = 2"),
                 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'c'"
                                    " AND run_at BETWEEN now() + interval '59 seconds' AND now() + interval '61 seconds'"),
                 1);
    /* ids follow input order */
    cr_expect_eq(th_scalar(db.conn, "SELECT ((array_agg(kind ORDER BY id))::text = '{a,b,c}')::int FROM skipq.jobs"), 1);
}

Test(bulk, enqueue_many_refuses_the_whole_batch, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const struct {
        const char *json, *needle;
    } cases[] = {
        {"[{\"kind\": \"ok\"}, {\"kind\": \"bad kind\"}]", "job 1: kind"},
        {"[{\"kind\": \"ok\"}, {\"kind\": \"ok\", \"queue\": \"\"}]", "job 1: queue"},
        {"[{\"kind\": \"ok\", \"priority\": 5000000}]", "job 0: priority"},
        {"[{\"kind\": \"ok\", \"max_attempts\": 0}]", "job 0: max_attempts"},
        {"[{\"kind\": \"ok\", \"delay_ms\": -5}]", "job 0: delay_ms"},
        {"[{\"payload\": {}}]", "job 0: kind"},
        {"[1]", "job 0: is not an object"},
        {"{\"kind\": \"ok\"}", "must be a JSON array"},
        {"[{\"kind\": \"ok\", \"payload\": {\"a\": \"\\u0000\"}}]", "invalid JSON"},
    };
    char err[SKIPQ_ERRBUF_SIZE];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t n = -1;
        skipq_rc rc = skipq_enqueue_many(db.conn, cases[i].json, &n, err, sizeof err);
        cr_expect_eq(rc, SKIPQ_EINVAL, "%s: rc %d (%s)", cases[i].json, rc, err);
        cr_expect(strstr(err, cases[i].needle) != NULL, "%s: message \"%s\" lacks \"%s\"", cases[i].json, err,
                  cases[i].needle);
    }
    th_execf(db.conn, "UPDATE skipq.settings SET value = '100' WHERE key = 'max_payload_bytes'");
    cr_expect_eq(skipq_enqueue_many(db.conn, "[{\"kind\": \"ok\", \"payload\": {\"x\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}]",
                                    NULL, err, sizeof err),
                 SKIPQ_EINVAL);
    cr_expect(strstr(err, "the limit is 100") != NULL, "%s", err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0, "a refused batch wrote rows");
}

static char *write_lines(const char *name, int n, int bad_at, const char *bad)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", th_tmpdir(), name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 1; i <= n; i++) {
        if (i == bad_at)
            fprintf(f, "%s\n", bad);
        else
            fprintf(f, "{\"kind\": \"noop\", \"payload\": {\"i\": %d}}\n", i);
        if (i % 1000 == 0)
            fputs("\n", f); /* blank lines are skipped but still counted */
    }
    fclose(f);
    return strdup(path);
}

Test(bulk, cli_file_is_all_or_nothing, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *out = NULL, *err = NULL;
    char *good = write_lines("good.ndjson", 12000, 0, NULL);
    cr_expect_eq(th_cli(&out, &err, "enqueue", "--file", good, "--db", db.conninfo, NULL), 0, "%s", err);
    cr_expect_eq(atoll(out), 12000, "printed %s", out);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(DISTINCT payload) FROM skipq.jobs WHERE kind = 'noop'"), 12000);
    free(out);
    free(err);

    /* A bad line in the third batch: nothing from the first two stays.
     * Line 11000 holds job 11000 plus the 10 blank lines before it. */
    th_execf(db.conn, "TRUNCATE skipq.jobs, skipq.job_executions");
    char *bad = write_lines("bad.ndjson", 12000, 11000, "{\"kind\": \"no spaces allowed\"}");
    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", bad, "--db", db.conninfo, NULL), 2, "%s", err);
    char where[700];
    snprintf(where, sizeof where, "%s:%d:", bad, 11000 + 10);
    cr_expect(strstr(err, where) != NULL, "stderr lacks %s: %s", where, err);
    cr_expect(strstr(err, "nothing was enqueued") != NULL, "%s", err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    free(err);

    char *syntax = write_lines("syntax.ndjson", 20, 7, "{\"kind\": oops}");
    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", syntax, "--db", db.conninfo, NULL), 2, "%s", err);
    snprintf(where, sizeof where, "%s:7:", syntax);
    cr_expect(strstr(err, where) != NULL, "stderr lacks %s: %s", where, err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    free(err);

    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", good, "--queue", "x", "--db", db.conninfo, NULL), 2);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", "/nonexistent/file", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "/nonexistent/file") != NULL, "%s", err);
    free(err);
}

Test(bulk, enqueue_many_checks_run_at, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const char *const bad[] = {
        "[{\"kind\": \"ok\", \"run_at\": \"infinity\"}]",
        "[{\"kind\": \"ok\", \"run_at\": \"9999-01-01\"}]",
        "[{\"kind\": \"ok\", \"run_at\": null}]",
        "[{\"kind\": \"ok\", \"run_at\": \"next tuesday-ish\"}]",
    };
    char err[SKIPQ_ERRBUF_SIZE];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect_eq(skipq_enqueue_many(db.conn, bad[i], NULL, err, sizeof err), SKIPQ_EINVAL, "%s: %s", bad[i], err);
        cr_expect(strstr(err, "job 0: run_at") != NULL, "%s: %s", bad[i], err);
    }
    cr_expect_eq(skipq_enqueue_many(db.conn, "[{\"kind\": \"ok\", \"run_at\": \"2001-01-01T00:00:00Z\"}]", NULL, err,
                                    sizeof err),
                 SKIPQ_OK, "%s", err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 1);
}

Test(bulk, cli_file_refuses_two_objects_on_a_line, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *path = th_write_file("two.ndjson", "{\"kind\": \"a\"}\n{\"kind\": \"b\"},{\"kind\": \"c\"}\n{\"kind\": \"d\"}\n");
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", path, "--db", db.conninfo, NULL), 2, "%s", err);
    char where[700];
    snprintf(where, sizeof where, "%s:2:", path);
    cr_expect(strstr(err, where) != NULL, "stderr lacks %s: %s", where, err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    free(err);
}

/*
 * Each line is one JSON object on its own. Joined into one JSON text, two
 * bad lines made good jobs ({"ids":[1 then 2]},{...}: two jobs, exit 0),
 * and a NUL byte silently ended a line (jobs after it lost, exit 0). The
 * inputs are the fuzz corpus of `enqueue --file`, each with what it must
 * give; a file added to the corpus must be added here.
 */
Test(bulk, cli_file_parses_each_line_on_its_own, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    static const struct {
        const char *file;
        int line; /* 0: good */
        const char *says;
    } cases[] = {
        {"two_bad_lines_joining_into_json.ndjson", 1, "invalid JSON"},
        {"nul_bytes_ending_lines.ndjson", 1, "a NUL byte at byte 13"},
        {"nul_byte_starting_line_3.ndjson", 3, "a NUL byte at byte 1"},
        {"invalid_utf8_on_line_2.ndjson", 2, "invalid UTF-8"},
        {"two_objects_on_line_2.ndjson", 2, "invalid JSON"},
        {"an_array_on_line_2.ndjson", 2, "is not an object"},
        {"a_good_start_then_a_cut_line_4.ndjson", 4, "invalid JSON"},
        {"good_crlf_blank_and_no_final_newline.ndjson", 0, NULL},
    };
    const char *dir = SKIPQ_SOURCE_DIR "/tests/fuzz/corpus/enqueue_file";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[700], where[800];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        snprintf(where, sizeof where, "%s:%d: ", path, cases[i].line);
        char *out = NULL, *err = NULL;
        int st = th_cli(&out, &err, "enqueue", "--file", path, "--db", db.conninfo, NULL);
        if (cases[i].line) {
            cr_expect_eq(st, 2, "%s: exit %d: %s", cases[i].file, st, err);
            cr_expect_str_eq(out, "", "%s", cases[i].file);
            cr_expect(strstr(err, where) != NULL, "%s: stderr lacks %s: %s", cases[i].file, where, err);
            cr_expect(strstr(err, cases[i].says) != NULL, "%s: stderr lacks \"%s\": %s", cases[i].file,
                      cases[i].says, err);
            cr_expect(strstr(err, "nothing was enqueued") != NULL, "%s: %s", cases[i].file, err);
            cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0, "%s enqueued jobs", cases[i].file);
        } else {
            cr_expect_eq(st, 0, "%s: exit %d: %s", cases[i].file, st, err);
            cr_expect_str_eq(out, "3\n", "%s", cases[i].file);
            cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'a'"
                                            " AND payload = '{\"t\": \"caf\u00e9 \\u001b[2J\"}'"),
                         1);
            cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'b' AND queue = 'q'"), 1);
            cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'c'"
                                            " AND payload = '{\"ids\": [1, 2]}'"),
                         1);
            th_execf(db.conn, "TRUNCATE skipq.jobs, skipq.job_executions");
        }
        free(out);
        free(err);
    }
    /* Every seed of the corpus has its expectation above. */
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    for (struct dirent *e; (e = readdir(d));) {
        bool known = e->d_name[0] == '.';
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !known; i++)
            known = strcmp(cases[i].file, e->d_name) == 0;
        cr_expect(known, "%s/%s has no expectation in this test", dir, e->d_name);
    }
    closedir(d);
}

/* ---- the COPY path: skipq_copy_begin/add/end ---------------------------------------------- */

Test(bulk, copy_writes_every_job_with_its_options, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_copy *cp = NULL;
    cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    /* Payloads with every character COPY's text format must escape. */
    for (int i = 0; i < 5000; i++) {
        char payload[96];
        snprintf(payload, sizeof payload, "{\"n\": %d, \"s\": \"tab\\t nl\\n bs\\\\ cr\\r\"}\n\t ", i);
        skipq_enqueue_opts o = {0};
        if (i % 10 == 0) {
            o.queue = "mail";
            o.priority = 3;
            o.max_attempts = 2;
            o.delay_ms = 60000;
        }
        cr_assert_eq(skipq_copy_add(cp, i % 2 ? "odd" : "even", payload, &o, err, sizeof err), SKIPQ_OK, "%s", err);
    }
    int64_t n = -1;
    cr_assert_eq(skipq_copy_end(cp, &n, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_expect_eq(n, 5000);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending'"), 5000);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(DISTINCT (payload->>'n')::int) FROM skipq.jobs"), 5000);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"
                                    " WHERE payload->>'s' = E'tab\\t nl\\n bs\\\\ cr\\r'"),
                 5000, "payload text must survive COPY escaping");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'even' AND queue = 'mail'"
                                    " AND priority = 3 AND max_attempts = 2"
                                    " AND run_at BETWEEN now() + interval '50 s' AND now() + interval '61 s'"),
                 500);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE queue = 'default' AND priority = 0"
                                    " AND max_attempts = 5 AND run_at <= now()"),
                 4500);
}

Test(bulk, copy_refuses_bad_jobs_and_names_them, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PQclear(th_query(db.conn, "UPDATE skipq.settings SET value = '64' WHERE key = 'max_payload_bytes'"));
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_copy *cp = NULL;
    cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_add(cp, "ok", NULL, NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    static const struct {
        const char *kind, *payload, *queue;
        int priority, attempts;
        int64_t delay;
        const char *needle;
    } bad[] = {
        {"bad kind", "{}", NULL, 0, 0, 0, "job 1: kind"},
        {"", "{}", NULL, 0, 0, 0, "job 1: kind"},
        {"ok", "{}", "no/slash", 0, 0, 0, "job 1: queue"},
        {"ok", "{}", NULL, 2000000, 0, 0, "job 1: priority"},
        {"ok", "{}", NULL, 0, 100001, 0, "job 1: max_attempts"},
        {"ok", "{}", NULL, 0, -1, 0, "job 1: max_attempts"},
        {"ok", "{}", NULL, 0, 0, -1, "job 1: delay"},
        {"ok", "{\"pad\": \"0123456789012345678901234567890123456789012345678901234567890\"}", NULL, 0, 0, 0,
         "more than the 64-byte limit"},
    };
    skipq_enqueue_opts keyed = {.ordering_key = "k1"};
    cr_expect_eq(skipq_copy_add(cp, "ok", NULL, &keyed, err, sizeof err), SKIPQ_EINVAL);
    cr_expect(strstr(err, "not by COPY") != NULL, "%s", err);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        skipq_enqueue_opts o = {.queue = bad[i].queue, .priority = bad[i].priority,
                                .max_attempts = bad[i].attempts, .delay_ms = bad[i].delay};
        cr_expect_eq(skipq_copy_add(cp, bad[i].kind, bad[i].payload, &o, err, sizeof err), SKIPQ_EINVAL, "case %zu",
                     i);
        cr_expect(strstr(err, bad[i].needle) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].needle);
    }
    cr_assert_eq(skipq_copy_add(cp, "ok", "{\"x\": 1}", NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    int64_t n = -1;
    cr_assert_eq(skipq_copy_end(cp, &n, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_expect_eq(n, 2, "refused jobs are left out, the others written");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 2);
}

Test(bulk, copy_with_bad_json_writes_nothing, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const char *payloads[] = {"{\"a\": ", "{\"a\": \"\\u0000\"}", "not json"};
    for (size_t k = 0; k < sizeof payloads / sizeof *payloads; k++) {
        char err[SKIPQ_ERRBUF_SIZE];
        skipq_copy *cp = NULL;
        cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
        for (int i = 0; i < 100; i++)
            cr_assert_eq(skipq_copy_add(cp, "ok", i == 42 ? payloads[k] : "{}", NULL, err, sizeof err), SKIPQ_OK);
        int64_t n = -1;
        cr_expect_eq(skipq_copy_end(cp, &n, err, sizeof err), SKIPQ_EINVAL, "payload %s: %s", payloads[k], err);
        cr_expect(strstr(err, "job 42:") != NULL, "the message names the job: %s", err);
        cr_expect_eq(n, 0);
        cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0, "nothing written");
        cr_expect_eq(PQtransactionStatus(db.conn), PQTRANS_IDLE, "the connection is usable again");
    }
}

Test(bulk, copy_joins_the_callers_transaction_and_abort_cancels, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char err[SKIPQ_ERRBUF_SIZE];
    PQclear(th_query(db.conn, "BEGIN"));
    skipq_copy *cp = NULL;
    cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(skipq_copy_add(cp, "ok", NULL, NULL, err, sizeof err), SKIPQ_OK);
    cr_assert_eq(skipq_copy_end(cp, NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    PQclear(th_query(db.conn, "ROLLBACK"));
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0, "rolled back with the caller");

    cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(skipq_copy_add(cp, "ok", NULL, NULL, err, sizeof err), SKIPQ_OK);
    skipq_copy_abort(cp);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0, "abort writes nothing");
    cr_expect_eq(th_scalar(db.conn, "SELECT 1"), 1, "the connection is usable after an abort");
}
