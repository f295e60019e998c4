/*
 * test_security_schema.c -- what the schema lets one role do to another's
 * jobs, and the input it refuses: an enqueue that locks no other job
 * (depends_on), keys scoped per kind (unique) and per queue (ordering),
 * run_at bounded whoever writes it, a byte budget per claim, nothing in
 * schema skipq for PUBLIC and worker rights narrowed, enqueue_many bounded,
 * and a host that shrugs off hostile notifications.
 *
 * Roles are cluster-wide, so each test names its login roles after its own
 * database.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "client/migrate.h"
#include "common/config.h"
#include "host/queue.h"
#include "skipq/skipq.h"

#ifndef SKIPQ_SOURCE_DIR
#error "SKIPQ_SOURCE_DIR must be defined"
#endif

/* ---- helpers ---------------------------------------------------------------------------- */

static PGconn *connect_as(const struct th_db *db, const char *suffix)
{
    char ci[700];
    snprintf(ci, sizeof ci, "%s user=%s_%s", db->conninfo, db->name, suffix);
    PGconn *c = PQconnectdb(ci);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect as %s_%s: %s", db->name, suffix, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}


/* A host INI with a 20 s heartbeat (and a 60 s lease): anything that
 * happens within a few seconds happened without waiting for a round. */
static char *slow_beat_ini(const struct th_db *db, const char *name, const char *host_extra, const char *extra)
{
    char buf[4096];
    int n = snprintf(buf, sizeof buf,
                     "[database]\nurl = %s\n\n[host]\nname = %s\npoll_interval = 50ms\nlease = 60s\n"
                     "heartbeat = 20s\nshutdown_grace = 5s\n%s\n[plugin testkit]\npath = %s/testkit.so\n"
                     "kinds = test, test.other\n\n%s",
                     db->conninfo, name, host_extra ? host_extra : "", SKIPQ_PLUGIN_DIR, extra);
    cr_assert_lt(n, (int)sizeof buf);
    char file[128];
    snprintf(file, sizeof file, "%s.ini", name);
    return th_write_file(file, buf);
}

static int64_t enqueue_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    int64_t id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return id;
}

static long long status_is(PGconn *c, int64_t id, const char *status, int timeout_ms)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = '%s'", id,
             status);
    return th_wait_scalar(c, 1, timeout_ms, sql);
}

/* ---- 3: an enqueue locks no job but its own ------------------------------------------- */

Test(security_schema, a_job_named_in_depends_on_is_claimed_and_finished_while_the_enqueuer_is_open,
     .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    /* Another producer's jobs: one waiting, one that will be running. */
    int64_t waiting = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    PGconn *e1 = connect_as(&db, "e"), *e2 = connect_as(&db, "e");
    PQclear(th_query(e1, "BEGIN"));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT skipq.enqueue('test', depends_on => ARRAY[%" PRId64 "])", waiting);
    int64_t child1 = enqueue_sql(e1, sql);

    struct th_db worker = th_db_as_role(&db, "w");
    char *ini = slow_beat_ini(&worker, "deps-open", NULL,
                              "[queue default]\nthreads = 2\n\n[kind test]\nmax_running = 100\nrate = 1000/s\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(status_is(db.conn, waiting, "done", 20000), 1,
                 "the job named in an open enqueue's depends_on was not claimed");

    int64_t running = th_enqueue(db.conn, "test", "{\"sleep_ms\": 1500}", NULL, 0, 0);
    cr_assert_eq(status_is(db.conn, running, "running", 20000), 1);
    PQclear(th_query(e2, "BEGIN"));
    snprintf(sql, sizeof sql, "SELECT skipq.enqueue('test', depends_on => ARRAY[%" PRId64 "])", running);
    int64_t child2 = enqueue_sql(e2, sql);
    cr_assert_eq(status_is(db.conn, running, "done", 20000), 1,
                 "the outcome of a job named in an open enqueue's depends_on waited for the enqueuer");
    cr_expect_eq(th_scalarf(db.conn, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, running), 1);

    /* Both parents ended while their children were uncommitted: the
     * enqueue's notification has a host settle them at once, long before
     * its next 20 s round. */
    PQclear(th_query(e1, "COMMIT"));
    PQclear(th_query(e2, "COMMIT"));
    cr_expect_eq(status_is(db.conn, child1, "done", 8000), 1, "a child whose parent ended first did not run");
    cr_expect_eq(status_is(db.conn, child2, "done", 8000), 1, "a child whose parent ended first did not run");

    /* Committed while its parent runs: registered, then released by the
     * parent's own end, after it. */
    int64_t slow = th_enqueue(db.conn, "test", "{\"sleep_ms\": 3000}", NULL, 0, 0);
    cr_assert_eq(status_is(db.conn, slow, "running", 20000), 1);
    snprintf(sql, sizeof sql, "SELECT skipq.enqueue('test', depends_on => ARRAY[%" PRId64 "])", slow);
    int64_t child3 = enqueue_sql(e1, sql);
    cr_expect_eq(status_is(db.conn, child3, "done", 20000), 1);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.job_executions c, skipq.job_executions p"
                            " WHERE c.job_id = %" PRId64 " AND p.job_id = %" PRId64
                            "   AND c.started_at >= p.finished_at",
                            child3, slow),
                 1, "the child started before its parent finished");
    cr_expect_eq(th_scalarf(db.conn, "SELECT has_dependents::int FROM skipq.jobs WHERE id = %" PRId64, slow), 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.dependency_inbox"), 0);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
    PQfinish(e1);
    PQfinish(e2);
}

Test(security_schema, a_child_of_a_parent_that_ends_dead_while_the_enqueuer_is_open_dies, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t parent = th_enqueue(db.conn, "test", "{\"permanent\": \"broken\"}", NULL, 0, 0);
    PGconn *e = th_connect(&db);
    PQclear(th_query(e, "BEGIN"));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT skipq.enqueue('test', depends_on => ARRAY[%" PRId64 "])", parent);
    int64_t child = enqueue_sql(e, sql);
    char *ini = slow_beat_ini(&db, "deps-dead", NULL, "[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(status_is(db.conn, parent, "dead", 20000), 1);
    PQclear(th_query(e, "COMMIT"));
    cr_expect_eq(status_is(db.conn, child, "dead", 8000), 1);
    cr_expect_eq(th_scalarf(db.conn,
                            "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND attempts = 0"
                            " AND last_error = 'parent job %" PRId64 " is dead'",
                            child, parent),
                 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
    PQfinish(e);
}

/* ---- 4: scoped keys ------------------------------------------------------------------- */

static int64_t enqueue_kind(PGconn *c, const char *kind, const skipq_enqueue_opts *o)
{
    int64_t id = 0;
    char err[SKIPQ_ERRBUF_SIZE];
    cr_assert_eq(skipq_enqueue(c, kind, NULL, o, &id, err, sizeof err), SKIPQ_OK, "enqueue %s: %s", kind, err);
    return id;
}

Test(security_schema, a_unique_key_taken_under_one_kind_does_not_suppress_another_kind, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int existing = -1;
    /* A squatter takes the key for ten years on a kind nobody serves. */
    skipq_enqueue_opts squat = {.unique_key = "invoice:42", .unique_for_ms = 9LL * 365 * 86400000,
                                .existing_out = &existing};
    int64_t a = enqueue_kind(db.conn, "squatter", &squat);
    skipq_enqueue_opts o = {.unique_key = "invoice:42", .existing_out = &existing};
    int64_t b = enqueue_kind(db.conn, "invoice.render", &o);
    cr_expect_neq(b, a, "another kind's key suppressed the enqueue");
    cr_expect_eq(existing, 0);
    /* The same kind still dedupes, in SQL too. */
    cr_expect_eq(enqueue_kind(db.conn, "invoice.render", &o), b);
    cr_expect_eq(existing, 1);
    cr_expect_gt(th_scalar(db.conn, "SELECT x FROM skipq.enqueue_many("
                                    "'[{\"kind\": \"invoice.mail\", \"unique_key\": \"invoice:42\"},"
                                    "  {\"kind\": \"invoice.mail\", \"unique_key\": \"invoice:42\"}]') AS x"
                                    " GROUP BY x HAVING count(*) = 2"),
                 b, "enqueue_many made no job for a third kind, or two");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_key = 'invoice:42'"), 3);

    /* retry leaves a job alone only while its own kind holds the key. */
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'dead', finished_at = now() WHERE id = %" PRId64, b);
    int64_t c = enqueue_kind(db.conn, "invoice.render", &o);
    cr_expect_eq(existing, 0);
    char id[24];
    snprintf(id, sizeof id, "%" PRId64, b);
    cr_expect_eq(th_cli(NULL, NULL, "retry", id, "--db", db.conninfo, NULL), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT (status = 'dead')::int FROM skipq.jobs WHERE id = %" PRId64, b), 1,
                 "retry redrove a job whose key its own kind holds");
    th_execf(db.conn, "UPDATE skipq.jobs SET status = 'cancelled', finished_at = now() WHERE id = %" PRId64, c);
    cr_expect_eq(th_cli(NULL, NULL, "retry", id, "--db", db.conninfo, NULL), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT (status = 'pending')::int FROM skipq.jobs WHERE id = %" PRId64, b), 1,
                 "another kind's key kept a job from being redriven");
}

Test(security_schema, an_ordering_key_held_in_one_queue_does_not_block_another_queue, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    /* Another producer's queue holds acct:7: a job due in 9 years, and a
     * job that ran and waits to retry (its key row taken). */
    skipq_enqueue_opts far = {.queue = "parked", .ordering_key = "acct:7", .delay_ms = 9LL * 365 * 86400000};
    enqueue_kind(db.conn, "test", &far);
    skipq_enqueue_opts parked = {.queue = "parked", .ordering_key = "acct:7"};
    int64_t holder = enqueue_kind(db.conn, "test", &parked);
    th_execf(db.conn, "INSERT INTO skipq.ordering_keys (queue, ordering_key, job_id) VALUES ('parked', 'acct:7', %"
                      PRId64 ")", holder);
    skipq_enqueue_opts mine = {.queue = "work", .ordering_key = "acct:7"};
    int64_t free_job = enqueue_kind(db.conn, "test", &mine);
    /* In one queue a key still serialises: acct:9's second job waits for
     * its first, which is not due for an hour. */
    skipq_enqueue_opts first = {.queue = "work", .ordering_key = "acct:9", .delay_ms = 3600000};
    enqueue_kind(db.conn, "test", &first);
    skipq_enqueue_opts second = {.queue = "work", .ordering_key = "acct:9", .priority = 10};
    int64_t held_back = enqueue_kind(db.conn, "test.other", &second);
    /* Claimed after held_back would be (lower priority, one thread, one at a time). */
    skipq_enqueue_opts marker_o = {.queue = "work", .priority = -10};
    int64_t marker = enqueue_kind(db.conn, "test", &marker_o);

    char *ini = slow_beat_ini(&db, "order-scope", NULL, "[queue work]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(status_is(db.conn, free_job, "done", 20000), 1, "a key held in another queue blocked the job");
    cr_assert_eq(status_is(db.conn, marker, "done", 20000), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, held_back),
                 0, "a job ran while an earlier job of its key in its queue was pending");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.ordering_keys WHERE queue = 'parked'"), 1,
                 "the end of a job in one queue freed another queue's key");
    th_assert_clean_log(ini);
}

/* ---- 4 and 10: existing data migrated ------------------------------------------------- */

static void warning_to_buffer(void *arg, const char *message)
{
    char *buf = arg;
    size_t len = strlen(buf);
    snprintf(buf + len, 4096 - len, "%s", message);
}

/* Rebuild db's schema as it was at version `upto`. */
static void schema_at(const struct th_db *db, int upto)
{
    PQclear(th_query(db->conn, "DROP SCHEMA skipq CASCADE"));
    PQclear(th_query(db->conn, "BEGIN; SET LOCAL search_path = pg_catalog; CREATE SCHEMA skipq;"
                               " CREATE TABLE skipq.schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
                               " applied_at timestamptz NOT NULL DEFAULT now())"));
    for (int i = 0; i < sq_migration_count && sq_migrations[i].version <= upto; i++) {
        PQclear(th_query(db->conn, sq_migrations[i].sql));
        th_execf(db->conn, "INSERT INTO skipq.schema_migrations (version, name) VALUES (%d, '%s')",
                 sq_migrations[i].version, sq_migrations[i].name);
    }
    PQclear(th_query(db->conn, "COMMIT"));
}

Test(security_schema, migration_scopes_held_keys_and_brings_run_at_into_bounds, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    schema_at(&db, 41);
    int64_t key_holder = th_scalar(db.conn, "INSERT INTO skipq.jobs (queue, kind, ordering_key, status,"
                                            " attempts, last_error) VALUES ('q1', 'k', 'acct:1', 'pending', 1, 'x')"
                                            " RETURNING id");
    th_execf(db.conn, "INSERT INTO skipq.ordering_keys (ordering_key, job_id) VALUES ('acct:1', %" PRId64 ")",
             key_holder);
    int64_t early = th_scalar(db.conn, "INSERT INTO skipq.jobs (queue, kind, run_at) VALUES ('q', 'k', '-infinity')"
                                       " RETURNING id");
    /* (An INSERT of 'infinity' fails in the delayed-job trigger; an UPDATE does not.) */
    int64_t late = th_scalar(db.conn, "INSERT INTO skipq.jobs (queue, kind) VALUES ('q', 'k') RETURNING id");
    th_execf(db.conn, "UPDATE skipq.jobs SET run_at = 'infinity' WHERE id = %" PRId64, late);
    th_scalar(db.conn, "INSERT INTO skipq.jobs (queue, kind, run_at) VALUES ('q', 'k', '20000-01-01') RETURNING id");
    th_scalar(db.conn, "INSERT INTO skipq.jobs (queue, kind, unique_key) VALUES ('q', 'a', 'u') RETURNING id");

    char warnings[4096] = "";
    PQsetNoticeProcessor(db.conn, warning_to_buffer, warnings);
    char err[SKIPQ_ERRBUF_SIZE];
    int applied = 0;
    cr_assert_eq(skipq_migrate(db.conn, &applied, err, sizeof err), SKIPQ_OK, "migrate: %s", err);
    cr_expect_gt(applied, 0);
    cr_expect(strstr(warnings, "3 job(s) had a run_at outside [1970, 2300)") != NULL, "%s", warnings);
    char ids[64];
    snprintf(ids, sizeof ids, "%" PRId64 ", %" PRId64, early, late);
    cr_expect(strstr(warnings, ids) != NULL, "the warning does not name %s: %s", ids, warnings);

    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.ordering_keys WHERE queue = 'q1'"
                                     " AND ordering_key = 'acct:1' AND job_id = %" PRId64, key_holder),
                 1, "the held key did not take its job's queue");
    cr_expect_eq(th_scalarf(db.conn, "SELECT (run_at = '1970-01-01 00:00:00+00')::int FROM skipq.jobs WHERE id = %"
                                     PRId64, early),
                 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE run_at >= '2299-12-31'"), 2);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'jobs_run_at_range'"
                                    " AND convalidated"),
                 1);
    /* Keys are scoped from now on. */
    cr_expect_neq(th_scalar(db.conn, "SELECT skipq.enqueue('b', unique_key => 'u')"),
                  th_scalar(db.conn, "SELECT id FROM skipq.jobs WHERE kind = 'a'"));
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE unique_key = 'u'"), 2);
}

/* ---- 10: run_at bounded for every writer ------------------------------------------------ */

Test(security_schema, the_bulk_role_cannot_write_an_infinite_or_absurd_run_at, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    PGconn *b = connect_as(&db, "b");
    static const char *const bad[] = {"-infinity", "infinity", "20000-01-01", "1969-12-31 23:59:59+00",
                                      "2300-01-01 00:00:00+00"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "INSERT INTO skipq.jobs (queue, kind, run_at) VALUES ('default', 'test', '%s')",
                 bad[i]);
        cr_expect_str_eq(th_sqlstate(b, sql), "23514", "the bulk role inserted run_at %s", bad[i]);
    }
    cr_expect_str_eq(th_sqlstate(b, "INSERT INTO skipq.jobs (queue, kind, run_at) VALUES ('default', 'test',"
                                    " '2001-01-01')"),
                     "");
    /* COPY, as a client writing rows itself would. */
    PGresult *r = PQexec(b, "COPY skipq.jobs (queue, kind, payload, priority, run_at, max_attempts) FROM STDIN");
    cr_assert_eq(PQresultStatus(r), PGRES_COPY_IN, "%s", PQerrorMessage(b));
    PQclear(r);
    const char row[] = "default\ttest\t{}\t0\t-infinity\t5\n";
    cr_assert_eq(PQputCopyData(b, row, (int)strlen(row)), 1);
    cr_assert_eq(PQputCopyEnd(b, NULL), 1);
    r = PQgetResult(b);
    cr_expect_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE) ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : "",
                     "23514", "COPY wrote run_at -infinity: %s", PQresultErrorMessage(r));
    PQclear(r);
    while ((r = PQgetResult(b)) != NULL)
        PQclear(r);
    PQfinish(b);
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "stats", "--db", db.conninfo, NULL), 0, "stats failed: %s", err);
    free(out);
    free(err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 1);
}

/* ---- 14: a byte budget per claim ------------------------------------------------------ */

static int claim(PGconn *c, int limit, struct sq_claimed *out, size_t *bytes)
{
    char err[512] = "";
    int n = sq_queue_claim(c, "default", "{test}", "{30000}", "budget:1:w0", limit, out, err, sizeof err);
    cr_assert_geq(n, 0, "claim: %s", err);
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        *bytes += out[i].payload_len;
        sq_claimed_clear(&out[i]);
    }
    return n;
}

Test(security_schema, a_claim_stops_adding_jobs_at_its_byte_budget, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = th_connect(&db);
    char err[512];
    cr_assert(sq_queue_prepare(c, err, sizeof err), "%s", err);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', jsonb_build_object('blob', repeat('x', 300000))))"
                      " FROM generate_series(1, 12)");
    sq_queue_set_claim_bytes(1 << 20);
    struct sq_claimed out[100];
    size_t bytes;
    int total = 0;
    for (int round = 0; round < 4; round++) {
        int n = claim(c, 100, out, &bytes);
        cr_expect_eq(n, 3, "claim %d took %d jobs of 300 kB within a 1 MiB budget", round, n);
        cr_expect_leq(bytes, (size_t)1 << 20, "claim %d carried %zu bytes", round, bytes);
        total += n;
    }
    cr_expect_eq(total, 12);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending'"), 0);
    /* A job bigger than the budget still goes, alone. */
    th_execf(db.conn, "UPDATE skipq.settings SET value = '4194304' WHERE key = 'max_payload_bytes'");
    th_execf(db.conn, "SELECT skipq.enqueue('test', jsonb_build_object('blob', repeat('y', 2000000)),"
                      " priority => 1), skipq.enqueue('test', '{}')");
    cr_expect_eq(claim(c, 100, out, &bytes), 1);
    cr_expect_gt(bytes, (size_t)2000000);
    cr_expect_eq(claim(c, 100, out, &bytes), 1);
    sq_queue_set_claim_bytes(0); /* back to the default */
    cr_expect_eq(sq_queue_claim_bytes(), SQ_CLAIM_BYTES_DEFAULT);
    PQfinish(c);
}

Test(security_schema, a_host_claims_big_payloads_in_claims_within_its_budget, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', jsonb_build_object('blob', repeat('x', 300000))))"
                      " FROM generate_series(1, 20)");
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/budget.ledger", th_tmpdir());
    char *ini = th_host_ini(&db, "budget", "claim_bytes = 1MiB\n", ledger,
                            "[queue default]\nthreads = 2\nbatch = 100\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 20, 60000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 20);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    int64_t *ids = NULL;
    cr_expect_eq(th_read_ledger(ledger, &ids), 20, "a job ran twice or not at all");
    free(ids);
    /* One claim: one worker, one transaction start. */
    cr_expect_eq(th_scalar(db.conn,
                           "SELECT count(*) FROM (SELECT e.worker, e.started_at,"
                           "       sum(octet_length(j.payload::text)) AS bytes, count(*) AS n"
                           "  FROM skipq.job_executions e JOIN skipq.jobs j ON j.id = e.job_id"
                           " GROUP BY 1, 2) c WHERE c.bytes > 1048576"),
                 0, "a claim carried more than claim_bytes");
    cr_expect_geq(th_scalar(db.conn, "SELECT count(DISTINCT (worker, started_at)) FROM skipq.job_executions"), 7);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 20);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* ---- 15: PUBLIC and the worker's rights ------------------------------------------------- */

Test(security_schema, nothing_in_schema_skipq_is_executable_by_public, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGresult *r = th_query(db.conn, "SELECT coalesce(string_agg(p.oid::regprocedure::text, ', '), '')"
                                    "  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
                                    " WHERE p.pronamespace = 'skipq'::regnamespace AND a.grantee = 0"
                                    "   AND a.privilege_type = 'EXECUTE'");
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "", "PUBLIC may execute: %s", PQgetvalue(r, 0, 0));
    PQclear(r);
    th_apply_roles(&db);
    /* Roles with USAGE on the schema call only what they were granted. */
    static const char *const helpers[] = {
        "SELECT skipq.host_alive(now(), 1000)", "SELECT skipq.valid_run_at('2020-01-01')",
        "SELECT * FROM skipq.claim_allowance('{test}', '{}')", "SELECT skipq.settle_dependencies(1)",
        "SELECT skipq.advance_totals(1000)", "SELECT skipq.host_gone('x')"};
    static const char *const outsiders[] = {"b", "e"};
    for (size_t k = 0; k < 2; k++) {
        PGconn *c = connect_as(&db, outsiders[k]);
        for (size_t i = 0; i < sizeof helpers / sizeof helpers[0]; i++)
            cr_expect_str_eq(th_sqlstate(c, helpers[i]), "42501", "role %s may: %s", outsiders[k], helpers[i]);
        PQfinish(c);
    }
    /* The worker calls what a host needs; valid_run_at is enqueue_many's alone. */
    PGconn *w = connect_as(&db, "w");
    for (size_t i = 0; i < sizeof helpers / sizeof helpers[0]; i++)
        cr_expect_str_eq(th_sqlstate(w, helpers[i]), strstr(helpers[i], "valid_run_at") ? "42501" : "",
                         "the worker's rights on: %s", helpers[i]);
    PQfinish(w);
}

static const char *lock_as(PGconn *c, const char *table, const char *mode)
{
    static char st[8];
    char sql[200];
    snprintf(sql, sizeof sql, "LOCK TABLE skipq.%s IN %s MODE", table, mode);
    PQclear(PQexec(c, "BEGIN"));
    snprintf(st, sizeof st, "%s", th_sqlstate(c, sql));
    PQclear(PQexec(c, "ROLLBACK"));
    return st;
}

Test(security_schema, a_worker_cannot_lock_skipq_tables_but_keeps_its_writes, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    PGconn *w = connect_as(&db, "w");
    static const char *const tables[] = {"ordering_keys", "kind_limits", "cron_state",   "jobs",
                                         "job_executions", "hosts",     "job_totals",   "settings",
                                         "dependency_inbox", "job_totals_mark", "waiting", "handoffs"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        cr_expect_str_eq(lock_as(w, tables[i], "ACCESS EXCLUSIVE"), "42501", "the worker locked %s exclusively",
                         tables[i]);
        cr_expect_str_eq(lock_as(w, tables[i], "SHARE ROW EXCLUSIVE"), "42501", "the worker locked %s", tables[i]);
    }
    /* What the protocol writes still works, column by column. */
    static const char *const allowed[] = {
        "INSERT INTO skipq.ordering_keys (queue, ordering_key, job_id) VALUES ('q', 'k', 1)"
        " ON CONFLICT (queue, ordering_key) DO UPDATE SET job_id = EXCLUDED.job_id",
        "INSERT INTO skipq.kind_limits (kind, max_running) VALUES ('k', 2)"
        " ON CONFLICT (kind) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now()",
        "UPDATE skipq.kind_limits SET window_count = 1, window_start = now() WHERE kind = 'k'",
        "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick) VALUES ('c', '* * * * *', 'UTC', now())"
        " ON CONFLICT (name) DO UPDATE SET schedule = EXCLUDED.schedule, updated_at = now()",
        "UPDATE skipq.cron_state SET last_tick = now(), updated_at = now() WHERE name = 'c'",
        "SELECT skipq.waiter_set('h:1:w0', 'h:1', 'default', '{test}', '{30000}', 5000)",
        "SELECT skipq.waiter_unset('h:1:w0', false)",
        "SELECT skipq.waiter_gone('h:1:w0')"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_expect_str_eq(th_sqlstate(w, allowed[i]), "", "the worker may not: %s: %s", allowed[i],
                         PQerrorMessage(w));
    static const char *const forbidden[] = {
        "DELETE FROM skipq.ordering_keys",          "DELETE FROM skipq.kind_limits",
        "DELETE FROM skipq.cron_state",             "UPDATE skipq.ordering_keys SET queue = 'x'",
        "UPDATE skipq.cron_state SET name = 'x'",   "DELETE FROM skipq.dependency_inbox",
        "INSERT INTO skipq.dependency_inbox VALUES (1)",
        /* Idle threads register only through waiter_set()/waiter_unset(). */
        "INSERT INTO skipq.waiting VALUES ('x:1:w0', 'x:1', 'default', '{test}', '{1}', now())",
        "DELETE FROM skipq.waiting",                 "UPDATE skipq.waiting SET until = now()",
        "INSERT INTO skipq.handoffs VALUES (1)",      "DELETE FROM skipq.handoffs"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
        cr_expect_str_eq(th_sqlstate(w, forbidden[i]), "42501", "the worker may: %s", forbidden[i]);
    PQfinish(w);
}

static const char *beat_as(PGconn *c, const char *id)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT skipq.host_beat('%s', 'n', 'h', 1, 'v', 1, '{default/test}', 60000, true)", id);
    return th_sqlstate(c, sql);
}

Test(security_schema, a_worker_role_cannot_remove_or_take_over_another_roles_host_row, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    PGconn *w1 = connect_as(&db, "w"), *w2 = connect_as(&db, "w2");
    cr_assert_str_eq(beat_as(w1, "one:1"), "");
    cr_expect_str_eq(th_sqlstate(w2, "SELECT skipq.host_gone('one:1')"), "");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.hosts WHERE id = 'one:1'"), 1,
                 "another worker role deleted the host's row");
    cr_expect_str_eq(beat_as(w2, "one:1"), "42501", "another worker role took over a live host's row");
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.hosts WHERE id = 'one:1' AND registered_by = '%s_w'",
                            db.name),
                 1);
    /* Its own role refreshes and removes it. */
    cr_expect_str_eq(beat_as(w1, "one:1"), "");
    cr_expect_str_eq(th_sqlstate(w1, "SELECT skipq.host_gone('one:1')"), "");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.hosts WHERE id = 'one:1'"), 0);
    /* A row whose host stopped beating may be taken over (a restart under
     * another role reusing the id). */
    cr_assert_str_eq(beat_as(w1, "two:2"), "");
    th_execf(db.conn, "UPDATE skipq.hosts SET heartbeat_at = now() - interval '1 hour' WHERE id = 'two:2'");
    cr_expect_str_eq(beat_as(w2, "two:2"), "");
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.hosts WHERE id = 'two:2' AND registered_by = '%s_w2'",
                            db.name),
                 1);
    PQfinish(w1);
    PQfinish(w2);
}

/* ---- 16: enqueue_many bounded; notifications parsed with bounds ------------------------- */

static char *array_of(int n, const char *element)
{
    size_t el = strlen(element);
    char *s = malloc((size_t)n * (el + 1) + 3);
    cr_assert_not_null(s);
    size_t o = 0;
    s[o++] = '[';
    for (int i = 0; i < n; i++) {
        if (i)
            s[o++] = ',';
        memcpy(s + o, element, el);
        o += el;
    }
    s[o++] = ']';
    s[o] = '\0';
    return s;
}

Test(security_schema, enqueue_many_refuses_a_batch_over_its_limits, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t n = 0;
    char *big = array_of(10001, "{\"kind\": \"t\"}");
    cr_expect_eq(skipq_enqueue_many(db.conn, big, &n, err, sizeof err), SKIPQ_EINVAL);
    cr_expect(strstr(err, "10001 jobs in one call; the limit is 10000 (skipq.settings max_batch_jobs)") != NULL, "%s",
              err);
    free(big);
    char *fits = array_of(10000, "{\"kind\": \"t\"}");
    cr_expect_eq(skipq_enqueue_many(db.conn, fits, &n, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_expect_eq(n, 10000);
    free(fits);
    th_execf(db.conn, "UPDATE skipq.settings SET value = '4096' WHERE key = 'max_batch_bytes'");
    char *wide =
        array_of(100, "{\"kind\": \"t\", \"payload\": {\"pad\": \"0123456789012345678901234567890123456789\"}}");
    cr_expect_eq(skipq_enqueue_many(db.conn, wide, &n, err, sizeof err), SKIPQ_EINVAL);
    cr_expect(strstr(err, "the limit is 4096 (skipq.settings max_batch_bytes)") != NULL, "%s", err);
    free(wide);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 10000);
}

Test(security_schema, a_host_ignores_due_times_it_cannot_represent, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    /* Polling every 60 s: only notifications wake the host. */
    char *ini = th_host_ini(&db, "notify-bounds", "poll_interval = 60s\n", NULL, "[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    int64_t deadline = th_now_ms() + 20000;
    char *log = th_host_log(ini);
    while (!strstr(log, "listener: listening") && th_now_ms() < deadline) {
        free(log);
        usleep(20000);
        log = th_host_log(ini);
    }
    cr_assert(strstr(log, "listener: listening") != NULL, "the host never listened: %s", log);
    free(log);
    skipq_enqueue_opts later = {.delay_ms = 3600000};
    int64_t delayed = enqueue_kind(db.conn, "test", &later);
    static const char *const hostile[] = {"default +9223372036854775807", "default +99999999999999999999",
                                          "default +315360000001", "default +-5", "default +", "default +12abc",
                                          "default 5", "!deps", "!other", "default +0 +0"};
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++)
        th_execf(db.conn, "SELECT pg_notify('skipq_jobs', '%s')", hostile[i]);
    /* Delivered after those, so taken only by a host that survived them. */
    int64_t now_job = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_expect_eq(status_is(db.conn, now_job, "done", 15000), 1, "the host stopped taking notifications");
    cr_expect_eq(th_host_exited(pid), -1, "the host exited");
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %" PRId64, delayed), 0,
                 "a delayed job ran early");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_assert_clean_log(ini);
}
