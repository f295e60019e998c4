/*
 * test_sched_enqueue.c -- enqueue-time scheduling: unique jobs (one job per
 * key however many enqueuers race), per-key serial order (never two jobs of
 * a key at once, in enqueue order, retries holding the key, across hosts),
 * and dependencies (a job waits for its parents, and dies with them).
 *
 * Sizes scale with SKIPQ_HAMMER_SCALE like the hammer suite's.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "skipq/skipq.h"

/* Enqueue through the C API with options; fails the test on error. */
static int64_t enq(PGconn *conn, const char *payload, const skipq_enqueue_opts *o)
{
    int64_t id = 0;
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_rc rc = skipq_enqueue(conn, "test", payload, o, &id, err, sizeof err);
    cr_assert_eq(rc, SKIPQ_OK, "enqueue: %s", err);
    return id;
}

/* ---- unique jobs ---------------------------------------------------------------------- */

Test(sched_unique, same_key_returns_the_holder_until_it_ends, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int existing = -1;
    skipq_enqueue_opts o = {.unique_key = "report:42", .existing_out = &existing};
    int64_t a = enq(db.conn, "{\"n\": 1}", &o);
    cr_expect_eq(existing, 0);
    int64_t b = enq(db.conn, "{\"n\": 2}", &o);
    cr_expect_eq(b, a, "the second enqueue added job %" PRId64, b);
    cr_expect_eq(existing, 1);
    skipq_enqueue_opts other = {.unique_key = "report:43", .existing_out = &existing};
    cr_expect_neq(enq(db.conn, NULL, &other), a);
    cr_expect_eq(existing, 0);

    /* Running still holds it; done releases it. */
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'running', lease_expires_at = now() + interval '1 minute',"
                      " current_execution_id = 0 WHERE id = %" PRId64, a);
    cr_expect_eq(enq(db.conn, NULL, &o), a);
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'done', finished_at = now(), lease_expires_at = NULL"
                      " WHERE id = %" PRId64, a);
    int64_t c = enq(db.conn, NULL, &o);
    cr_expect_neq(c, a);
    cr_expect_eq(existing, 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_key = 'report:42'"), 2);

    /* SQL: enqueue() returns the id, enqueue_ex() says which. */
    cr_expect_eq(th_scalar(db.conn, "SELECT skipq.enqueue('test', unique_key => 'report:42')"), c);
    cr_expect_eq(th_scalar(db.conn, "SELECT existing::int FROM skipq.enqueue_ex('test', unique_key => 'report:42')"),
                 1);
    /* A blocked job holds its key too. */
    th_execf(db.conn, "SELECT skipq.enqueue('test', unique_key => 'child', depends_on => ARRAY[%" PRId64 "])", c);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'blocked'"), 1);
    th_execf(db.conn, "SELECT skipq.enqueue('test', unique_key => 'child')");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_key = 'child'"), 1);

    /* The CLI prints the holder's id and says so on stderr. */
    char *out = NULL, *err = NULL;
    cr_assert_eq(th_cli(&out, &err, "enqueue", "test", "--unique-key", "report:42", "--db", db.conninfo, NULL), 0,
                 "%s", err);
    cr_expect_eq(strtoll(out, NULL, 10), c, "%s", out);
    cr_expect(strstr(err, "existing") != NULL, "%s", err);
    free(out);
    free(err);
    cr_assert_eq(th_cli(&out, &err, "enqueue", "test", "--unique-key", "fresh", "--db", db.conninfo, NULL), 0, "%s",
                 err);
    cr_expect(strstr(err, "existing") == NULL, "%s", err);
    free(out);
    free(err);
}

Test(sched_unique, window_holds_the_key_after_the_job_ends, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int existing = -1;
    skipq_enqueue_opts o = {.unique_key = "digest", .unique_for_ms = 3600 * 1000, .existing_out = &existing};
    int64_t a = enq(db.conn, NULL, &o);
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'done', finished_at = now() WHERE id = %" PRId64, a);
    /* Finished, but within its hour: still the answer. */
    cr_expect_eq(enq(db.conn, NULL, &o), a);
    cr_expect_eq(existing, 1);
    /* Also dead or cancelled. */
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'dead' WHERE id = %" PRId64, a);
    cr_expect_eq(enq(db.conn, NULL, &o), a);
    /* The hour has passed: a new job, which holds the key for its own hour. */
    th_execf(db.conn, "UPDATE skipq.jobs SET unique_until = now() - interval '1 second' WHERE id = %" PRId64, a);
    int64_t b = enq(db.conn, NULL, &o);
    cr_expect_neq(b, a);
    cr_expect_eq(existing, 0);
    cr_expect_eq(enq(db.conn, NULL, &o), b);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND unique_until IS NULL",
                            a),
                 1, "the expired holder still holds the key");
    /* A key without a window ignores finished jobs at once. */
    skipq_enqueue_opts plain = {.unique_key = "digest2", .existing_out = &existing};
    int64_t c = enq(db.conn, NULL, &plain);
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'cancelled', finished_at = now() WHERE id = %" PRId64, c);
    cr_expect_neq(enq(db.conn, NULL, &plain), c);
    /* CLI window. */
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "enqueue", "test", "-u", "cli", "--unique-for", "1h", "--db", db.conninfo, NULL),
                 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_key = 'cli'"
                                    " AND unique_until BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'"),
                 1);
    free(out);
}

struct racer {
    const struct th_db *db;
    int thread, rounds, keys;
    int64_t *ids;   /* rounds entries: the id each call got */
    int *key_of;    /* rounds entries: the key index used */
    int added;      /* calls that reported a new job */
};

static void *race_enqueue(void *arg)
{
    struct racer *r = arg;
    PGconn *conn = th_connect(r->db);
    for (int i = 0; i < r->rounds; i++) {
        char key[32];
        r->key_of[i] = (i * 7 + r->thread) % r->keys;
        snprintf(key, sizeof key, "k%d", r->key_of[i]);
        int existing = -1;
        skipq_enqueue_opts o = {.unique_key = key, .existing_out = &existing};
        char err[SKIPQ_ERRBUF_SIZE];
        /* Half of the calls inside a transaction that does more work. */
        bool txn = i % 2;
        if (txn)
            PQclear(PQexec(conn, "BEGIN"));
        if (skipq_enqueue(conn, "test", NULL, &o, &r->ids[i], err, sizeof err) != SKIPQ_OK) {
            fprintf(stderr, "enqueue failed: %s\n", err);
            r->ids[i] = -1;
        }
        if (txn)
            PQclear(PQexec(conn, "SELECT pg_sleep(0.001); COMMIT"));
        r->added += existing == 0;
    }
    PQfinish(conn);
    return NULL;
}

Test(sched_unique, concurrent_enqueuers_make_one_job_per_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    enum { THREADS = 8, KEYS = 20 };
    const int rounds = th_scaled(200, 40);
    struct racer r[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (struct racer){.db = &db, .thread = i, .rounds = rounds, .keys = KEYS};
        r[i].ids = calloc((size_t)rounds, sizeof *r[i].ids);
        r[i].key_of = calloc((size_t)rounds, sizeof *r[i].key_of);
        cr_assert_eq(pthread_create(&t[i], NULL, race_enqueue, &r[i]), 0);
    }
    int added = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        added += r[i].added;
    }
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), KEYS);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(DISTINCT unique_key) FROM skipq.jobs"), KEYS);
    cr_expect_eq(added, KEYS, "%d callers were told they added a job", added);
    /* Every caller got the one job of its key. */
    for (int i = 0; i < THREADS; i++) {
        for (int k = 0; k < rounds; k++) {
            cr_assert_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64
                                             " AND unique_key = 'k%d'",
                                    r[i].ids[k], r[i].key_of[k]),
                         1, "thread %d call %d got id %" PRId64 " for key k%d", i, k, r[i].ids[k], r[i].key_of[k]);
        }
        free(r[i].ids);
        free(r[i].key_of);
    }
}

/* ---- bad input ---------------------------------------------------------------------------- */

Test(sched_input, refused_with_a_reason_and_nothing_written, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char long_key[300];
    memset(long_key, 'x', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    struct {
        const char *args[6];
        const char *says;
    } cases[] = {
        {{"--unique-key", long_key}, "unique_key must be 1-256 characters"},
        {{"--ordering-key", long_key}, "ordering_key must be 1-256 characters"},
        {{"--unique-key", ""}, "unique_key must be 1-256 characters"},
        {{"--depends-on", "424242"}, "no job with id 424242"},
        {{"--depends-on", "1,x"}, "\"x\" is not a job id"},
        {{"--depends-on", ","}, "names no job id"},
        {{"--unique-for", "1h"}, "--unique-for goes with --unique-key"},
        {{"--unique-key", "a", "--unique-for", "-5s"}, "--unique-for"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        const char **a = cases[i].args;
        int st = a[2] ? th_cli(NULL, &err, "enqueue", "test", a[0], a[1], a[2], a[3], "--db", db.conninfo, NULL)
                      : th_cli(NULL, &err, "enqueue", "test", a[0], a[1], "--db", db.conninfo, NULL);
        cr_expect_eq(st, 2, "case %zu: exit %d: %s", i, st, err);
        cr_expect(strstr(err, cases[i].says) != NULL, "case %zu: %s", i, err);
        free(err);
    }
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);

    /* SQL and C: SQLSTATE 22023 / SKIPQ_EINVAL, naming the bad value. */
    PGresult *res = PQexec(db.conn, "SELECT skipq.enqueue('test', depends_on => ARRAY[1, 99])");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    cr_expect(strstr(PQresultErrorMessage(res), "no job with id 1") != NULL, "%s", PQresultErrorMessage(res));
    PQclear(res);
    res = PQexec(db.conn, "SELECT skipq.enqueue('test', unique_for => interval '1 hour')");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    PQclear(res);
    res = PQexec(db.conn, "SELECT skipq.enqueue_many('[{\"kind\": \"test\"}, {\"kind\": \"test\", \"depends_on\": [7]}]')");
    cr_expect_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22023");
    cr_expect(strstr(PQresultErrorMessage(res), "job 1: depends_on: no job with id 7") != NULL, "%s",
              PQresultErrorMessage(res));
    PQclear(res);
    int64_t parents[] = {5};
    skipq_enqueue_opts o = {.depends_on = parents, .depends_on_count = 1};
    char err[SKIPQ_ERRBUF_SIZE];
    cr_expect_eq(skipq_enqueue(db.conn, "test", NULL, &o, NULL, err, sizeof err), SKIPQ_EINVAL);
    cr_expect(strstr(err, "no job with id 5") != NULL, "%s", err);
    skipq_enqueue_opts w = {.unique_for_ms = 1000};
    cr_expect_eq(skipq_enqueue(db.conn, "test", NULL, &w, NULL, err, sizeof err), SKIPQ_EINVAL);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
}

Test(sched_input, enqueue_many_and_file_take_the_new_keys, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t p = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char json[512];
    snprintf(json, sizeof json,
             "[{\"kind\": \"test\", \"unique_key\": \"u\"}, {\"kind\": \"test\", \"unique_key\": \"u\"},"
             " {\"kind\": \"test\", \"ordering_key\": \"o\", \"depends_on\": [%" PRId64 "]},"
             " {\"kind\": \"test\", \"unique_key\": \"w\", \"unique_for_ms\": 60000}]",
             p);
    PGresult *res = PQexecParams(db.conn, "SELECT * FROM skipq.enqueue_many($1::jsonb)", 1, NULL,
                                 (const char *const[]){json}, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_assert_eq(PQntuples(res), 4);
    cr_expect_str_eq(PQgetvalue(res, 0, 0), PQgetvalue(res, 1, 0), "a repeated unique key made two jobs");
    PQclear(res);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 4);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'blocked' AND ordering_key = 'o'"),
                 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_until IS NOT NULL"), 1);

    char *file = th_write_file("jobs.ndjson", "{\"kind\": \"test\", \"ordering_key\": \"f\"}\n"
                                              "{\"kind\": \"test\", \"ordering_key\": 5}\n");
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "enqueue", "--file", file, "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, ":2: ") && strstr(err, "ordering_key must be a string"), "%s", err);
    free(err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 4);
}

/* ---- per-key serial order ---------------------------------------------------------------- */

Test(sched_order, hammer_one_at_a_time_per_key_in_enqueue_order, .timeout = 300)
{
    struct th_db db;
    th_db_new(&db);
    const int keys = 50, per_key = th_scaled(40, 8);
    /* Interleaved over keys, as a busy application would enqueue them.
     * Every 7th job fails once: its retry must still come before the
     * next job of its key. Sleeps of 0-3 ms shuffle the timing. */
    th_execf(db.conn,
             "SELECT count(skipq.enqueue('test',"
             "   jsonb_build_object('sleep_ms', (i * 37 + k * 11) %% 4, 'fail_times', CASE WHEN (i * %d + k) %% 7 = 0"
             "                      THEN 1 ELSE 0 END),"
             "   ordering_key => 'key' || k))"
             " FROM generate_series(1, %d) AS i, generate_series(1, %d) AS k",
             keys, per_key, keys);
    /* And plain jobs around them, which must not wait for the keys. */
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 200)");
    const char *extra_a = "[queue default]\nthreads = 6\n\n[kind test]\nbackoff_base = 10ms\nbackoff_cap = 20ms\n";
    const char *extra_b =
        "[queue default]\nthreads = 6\nbatch = 4\n\n[kind test]\nbackoff_base = 10ms\nbackoff_cap = 20ms\n";
    struct host h[3] = {{"order-a", th_host_ini(&db, "order-a", NULL, NULL, extra_a), 0},
                        {"order-b", th_host_ini(&db, "order-b", NULL, NULL, extra_b), 0},
                        {"order-c", th_host_ini(&db, "order-c", NULL, NULL, extra_a), 0}};
    for (int i = 0; i < 3; i++)
        host_start(&h[i]);
    long long total = (long long)keys * per_key + 200;
    cr_assert_eq(th_wait_scalar(db.conn, total, 240000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"),
                 total, "not every job finished");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(host_stop(&h[i], 15000), 0);
        th_assert_clean_log(h[i].ini);
    }
    th_check_invariants(db.conn);
    cr_expect(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE status = 'retry'") > 0,
              "no job failed: the retry path went untested");
    /* Per key, attempts in start order belong to jobs in id order: a job
     * and all its retries, then the next job. */
    cr_expect_eq(th_scalar(db.conn,
                           "SELECT count(*) FROM ("
                           "  SELECT e.job_id, lag(e.job_id) OVER w AS prev_job,"
                           "         e.started_at, lag(e.finished_at) OVER w AS prev_finished"
                           "    FROM skipq.job_executions e JOIN skipq.jobs j ON j.id = e.job_id"
                           "   WHERE j.ordering_key IS NOT NULL"
                           "  WINDOW w AS (PARTITION BY j.ordering_key ORDER BY e.started_at, e.id)) x"
                           " WHERE x.job_id < x.prev_job"),
                 0, "a job of a key ran before an earlier one");
    /* No two attempts of one key overlap. */
    cr_expect_eq(th_scalar(db.conn,
                           "SELECT count(*) FROM ("
                           "  SELECT e.started_at, lag(e.finished_at) OVER w AS prev_finished"
                           "    FROM skipq.job_executions e JOIN skipq.jobs j ON j.id = e.job_id"
                           "   WHERE j.ordering_key IS NOT NULL"
                           "  WINDOW w AS (PARTITION BY j.ordering_key ORDER BY e.started_at, e.id)) x"
                           " WHERE x.started_at < x.prev_finished"),
                 0, "two jobs of one key ran at once");
    /* Distinct keys did run in parallel. */
    cr_expect(th_scalar(db.conn,
                        "SELECT EXISTS (SELECT 1 FROM skipq.job_executions a JOIN skipq.jobs ja ON ja.id = a.job_id,"
                        " skipq.job_executions b JOIN skipq.jobs jb ON jb.id = b.job_id"
                        " WHERE ja.ordering_key < jb.ordering_key AND a.started_at < b.finished_at"
                        "   AND b.started_at < a.finished_at)::int") > 0,
              "keys never ran in parallel");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.ordering_keys"), 0, "a key is still held");
}

Test(sched_order, a_retrying_job_holds_its_key, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    /* The first fails twice with a 1 s backoff; the second, though ready,
     * must wait for it. */
    skipq_enqueue_opts o = {.ordering_key = "acct:7"};
    int64_t a = enq(db.conn, "{\"fail_times\": 2}", &o);
    int64_t b = enq(db.conn, "{}", &o);
    int64_t plain = enq(db.conn, "{}", NULL);
    char *ini = th_host_ini(&db, "hold", NULL, NULL,
                            "[queue default]\nthreads = 4\n\n[kind test]\nbackoff_base = 1s\nbackoff_cap = 1s\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 3, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 3);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, a), 3);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions eb, skipq.job_executions ea"
                            " WHERE eb.job_id = %" PRId64 " AND ea.job_id = %" PRId64 " AND ea.status = 'done'"
                            "   AND eb.started_at >= ea.finished_at",
                            b, a),
                 1, "the second job did not wait for the first one's retries");
    /* A plain job is not held up by a key. */
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions ep, skipq.job_executions ea"
                            " WHERE ep.job_id = %" PRId64 " AND ea.job_id = %" PRId64 " AND ea.status = 'done'"
                            "   AND ep.started_at < ea.finished_at",
                            plain, a),
                 1);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* ---- dependencies ------------------------------------------------------------------------- */

Test(sched_depends, diamond_dead_and_cancelled_parents, .timeout = 90)
{
    struct th_db db;
    th_db_new(&db);
    /* Diamond: a -> (b, c) -> d; b is slow so d must wait for it. */
    int64_t a = enq(db.conn, "{\"sleep_ms\": 50}", NULL);
    skipq_enqueue_opts on_a = {.depends_on = &a, .depends_on_count = 1};
    int64_t b = enq(db.conn, "{\"sleep_ms\": 300}", &on_a);
    int64_t c = enq(db.conn, "{}", &on_a);
    int64_t bc[] = {b, c, b};
    skipq_enqueue_opts on_bc = {.depends_on = bc, .depends_on_count = 3};
    int64_t d = enq(db.conn, "{}", &on_bc);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'blocked'"), 3);

    /* A parent that dies takes its descendants with it, naming it. */
    int64_t bad = enq(db.conn, "{\"permanent\": \"broken\"}", NULL);
    skipq_enqueue_opts on_bad = {.depends_on = &bad, .depends_on_count = 1};
    int64_t orphan = enq(db.conn, "{}", &on_bad);
    skipq_enqueue_opts on_orphan = {.depends_on = &orphan, .depends_on_count = 1};
    int64_t grandchild = enq(db.conn, "{}", &on_orphan);

    /* A cancelled parent: it waits in a queue no host serves. */
    skipq_enqueue_opts parked = {.queue = "parked"};
    int64_t p = enq(db.conn, "{}", &parked);
    skipq_enqueue_opts on_p = {.depends_on = &p, .depends_on_count = 1};
    int64_t cchild = enq(db.conn, "{}", &on_p);

    char *ini = th_host_ini(&db, "dag", NULL, NULL, "[queue default]\nthreads = 4\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 4, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 4);
    cr_assert_eq(th_wait_scalar(db.conn, 3, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'dead'"), 3);
    cr_expect_eq(th_cli(NULL, NULL, "cancel", th_id_text(p), "--db", db.conninfo, NULL), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'dead'"
                                     " AND last_error = 'parent job %" PRId64 " was cancelled'",
                            cchild, p),
                 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);

    /* d started only after both b and c were done. */
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions ed, skipq.job_executions e"
                            " WHERE ed.job_id = %" PRId64 " AND e.job_id IN (%" PRId64 ", %" PRId64 ")"
                            "   AND e.status = 'done' AND ed.started_at >= e.finished_at",
                            d, b, c),
                 2);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions eb, skipq.job_executions ea"
                            " WHERE eb.job_id = %" PRId64 " AND ea.job_id = %" PRId64 " AND eb.started_at >= ea.finished_at",
                            b, a),
                 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'dead'"
                                     " AND attempts = 0 AND last_error = 'parent job %" PRId64 " is dead'",
                            orphan, bad),
                 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'dead'"
                                     " AND last_error = 'parent job %" PRId64 " is dead'",
                            grandchild, orphan),
                 1);

    /* Enqueued after the fact: a done parent runs now, a dead one is dead at once. */
    skipq_enqueue_opts late_done = {.depends_on = &d, .depends_on_count = 1};
    enq(db.conn, "{}", &late_done);
    cr_expect_eq(th_scalar(db.conn, "SELECT (status = 'pending')::int FROM skipq.jobs ORDER BY id DESC LIMIT 1"), 1);
    enq(db.conn, "{}", &on_bad);
    cr_expect_eq(th_scalar(db.conn, "SELECT (status = 'dead')::int FROM skipq.jobs ORDER BY id DESC LIMIT 1"), 1);

    /* Redriving a child whose parent is still dead puts it back to blocked. */
    cr_expect_eq(th_cli(NULL, NULL, "retry", th_id_text(orphan), "--db", db.conninfo, NULL), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT (status = 'blocked')::int FROM skipq.jobs WHERE id = %" PRId64, orphan), 1);
    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect(strstr(out, "blocked") != NULL, "%s", out);
    free(out);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

Test(sched_depends, many_parents_finishing_at_once_release_the_child, .timeout = 90)
{
    struct th_db db;
    th_db_new(&db);
    /* 20 children each waiting on the same 30 parents, which 8 threads on
     * two hosts finish concurrently: every child must be released. */
    const int parents = 30, children = 20;
    int64_t ids[30];
    for (int i = 0; i < parents; i++)
        ids[i] = enq(db.conn, "{\"sleep_ms\": 5}", NULL);
    skipq_enqueue_opts o = {.depends_on = ids, .depends_on_count = (size_t)parents};
    for (int i = 0; i < children; i++)
        enq(db.conn, "{}", &o);
    struct host h[2] = {{"fan-a", th_host_ini(&db, "fan-a", NULL, NULL, "[queue default]\nthreads = 4\n"), 0},
                        {"fan-b", th_host_ini(&db, "fan-b", NULL, NULL, "[queue default]\nthreads = 4\n"), 0}};
    host_start(&h[0]);
    host_start(&h[1]);
    cr_expect_eq(th_wait_scalar(db.conn, parents + children, 60000,
                                "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"),
                 parents + children, "a child stayed blocked");
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(host_stop(&h[i], 15000), 0);
        th_assert_clean_log(h[i].ini);
    }
    cr_expect_eq(th_scalar(db.conn,
                           "SELECT count(*) FROM skipq.job_executions c JOIN skipq.jobs cj ON cj.id = c.job_id,"
                           " skipq.job_executions p WHERE cj.depends_on IS NOT NULL AND p.job_id = ANY(cj.depends_on)"
                           "   AND c.started_at < p.finished_at"),
                 0, "a child started before a parent finished");
    th_check_invariants(db.conn);
}
