/*
 * test_pooler.c -- skipq through pgbouncer 1.18 in pool_mode = transaction.
 *
 * What users rely on with [database] pooler = transaction: hosts sharing a
 * few server sessions run every job exactly once; skipq leaves nothing in a
 * server session (no named prepared statements) for the next borrower to
 * trip over; LISTEN on listen_conninfo still wakes idle hosts; the CLI works
 * through the pooler; and hosts ride out a pooler restart and a server
 * restart behind it. One test shows, deterministically, the failure the
 * setting avoids: a named statement prepared on one server session and
 * executed on another.
 *
 * Each test starts its own pgbouncer (th_pgbouncer_start) with a pool far
 * smaller than the number of client sessions, so sessions really are shared.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "harness.h"
#include "host/queue.h"
#include "skipq/skipq.h"

static const char DONE_SQL[] = "SELECT count(*) FROM skipq.jobs WHERE status = 'done'";

/* A host INI whose [database] goes through the pooler (`via`), with
 * pooler = transaction unless `pooler` says otherwise, and listen_conninfo
 * when `listen` is not NULL. */
static char *pooled_ini(const struct th_db *via, const char *name, const char *pooler, const char *listen,
                        const char *host_extra, const char *ledger, const char *extra)
{
    char *buf = malloc(16384);
    int n = snprintf(buf, 16384,
                     "[database]\nurl = %s\npooler = %s\n%s%s%s\n"
                     "[host]\nname = %s\nlog_level = info\nlease = 3s\nheartbeat = 500ms\nshutdown_grace = 5s\n%s\n"
                     "[plugin testkit]\npath = %s/testkit.so\n%s%s%s\n%s",
                     via->conninfo, pooler ? pooler : "transaction", listen ? "listen_conninfo = " : "",
                     listen ? listen : "", listen ? "\n" : "", name, host_extra ? host_extra : "poll_interval = 50ms\n",
                     SKIPQ_PLUGIN_DIR, ledger ? "ledger = " : "", ledger ? ledger : "", ledger ? "\n" : "",
                     extra ? extra : "");
    cr_assert_lt(n, 16384);
    char file[128];
    snprintf(file, sizeof file, "%s.ini", name);
    char *path = th_write_file(file, buf);
    free(buf);
    return path;
}

static int count_in(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* ---- exactly once through the pooler ---------------------------------------------- */

Test(pooler, hammer_two_hosts_through_pgbouncer, .timeout = 300)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 4);
    th_pgbouncer_db(&pgb, &db, &via);
    long long n = (long long)(3000 * th_scale() + 0.5);
    if (n < 300)
        n = 300;
    const long long n_fail = n / 10, n_txn = n / 7;
    th_execf(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/pooler.ledger", th_tmpdir());
    const char *extra = "[queue default]\nthreads = 6\nbatch = 4\n\n[kind test]\nbackoff_base = 10ms\nbackoff_cap = 50ms\n";
    struct host h[2] = {{.name = "pooled-a"}, {.name = "pooled-b"}};
    struct host *hs[2] = {&h[0], &h[1]};
    for (int i = 0; i < 2; i++) {
        h[i].ini = pooled_ini(&via, h[i].name, NULL, db.conninfo, NULL, ledger, extra);
        host_start(&h[i]);
    }

    int64_t t0 = th_now_ms();
    /* Enqueued through the pooler too, in one transaction. */
    th_execf(via.conn,
             "SELECT count(skipq.enqueue('test', CASE"
             "  WHEN i %% 70 = 0 THEN '{\"fail_times\": 1, \"txn\": true}'"
             "  WHEN i %% 10 = 0 THEN '{\"fail_times\": 1}'"
             "  WHEN i %% 7 = 0 THEN '{\"txn\": true}'"
             "  ELSE '{}' END::jsonb)) FROM generate_series(1, %lld) i",
             n);
    /* 14 client sessions (12 workers, 2 heartbeats) share at most 4 server
     * sessions; the 2 listeners and this test connect directly. */
    long long most = 0;
    while (th_wait_at_least(db.conn, n, 100, 50, hs, 2, DONE_SQL) < n && th_now_ms() - t0 < 240000) {
        long long s = th_scalar(db.conn, "SELECT count(*) FROM pg_stat_activity"
                                          " WHERE datname = current_database() AND backend_type = 'client backend'");
        most = s > most ? s : most;
    }
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(th_scalar(db.conn, DONE_SQL), n, "only %lld of %lld jobs done", th_scalar(db.conn, DONE_SQL), n);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(host_stop(&h[i], 20000), 0, "host %s did not stop cleanly", h[i].name);
    cr_assert_leq(most, 4 + 2 + 1, "%lld server sessions on the database: the pool was not shared", most);

    PGconn *c = db.conn;
    th_check_invariants(c);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE"
                              " (SELECT count(*) FROM skipq.job_executions e"
                              "   WHERE e.job_id = j.id AND e.status = 'done') <> 1"),
                 0, "some job has no done execution or more than one");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), n + n_fail,
                 "expected one execution per job plus one per planned failure");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE attempts <> CASE WHEN payload ? 'fail_times'"
                              " THEN 2 ELSE 1 END"),
                 0, "a job ran more or fewer times than planned");
    /* The handlers' transactions: one effects row per txn job, written by
     * the execution that completed it. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects"), n_txn);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects f WHERE NOT EXISTS"
                              " (SELECT 1 FROM skipq.job_executions e"
                              "   WHERE e.id = f.execution_id AND e.job_id = f.job_id AND e.status = 'done')"),
                 0, "an effects row does not belong to its job's done execution");
    /* The ledger: one handler start per execution, none missing or extra. */
    int64_t *ids;
    size_t nl = th_read_ledger(ledger, &ids);
    cr_assert_eq((long long)nl, n + n_fail, "ledger has %zu lines, want %lld", nl, n + n_fail);
    free(ids);
    for (int i = 0; i < 2; i++) {
        cr_expect_gt(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE worker LIKE '%s:%%'", h[i].name),
                     0, "host %s claimed no job", h[i].name);
        th_assert_clean_log(h[i].ini);
        char *log = slurp_log(&h[i]);
        cr_expect_null(strstr(log, "prepared statement"), "host %s:\n%s", h[i].name, log);
        free(log);
    }
    fprintf(stderr, "[pooler] %lld jobs, 2 hosts x 6 threads through pgbouncer (pool 4, at most %lld server "
                    "sessions seen): %.2f s enqueue to all done (%.0f jobs/s)\n",
            n, most, (double)wall / 1000.0, wall > 0 ? (double)n * 1000.0 / (double)wall : 0.0);
    th_pgbouncer_stop(&pgb);
}

/* ---- no session state ---------------------------------------------------------------- */

/*
 * With a pool of one, every client shares one server session, so whatever
 * a host leaves in it is visible through the pooler. pooler = transaction
 * leaves no named statement there; pooler = none prepares its statements,
 * and a second session of the same host then collides with them.
 */
Test(pooler, no_named_statements_on_a_shared_session, .timeout = 120)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 1);
    th_pgbouncer_db(&pgb, &db, &via);
    struct host h = {.name = "pool-of-one"};
    h.ini = pooled_ini(&via, h.name, NULL, NULL, NULL, NULL, "[queue default]\nthreads = 3\n");
    struct host *hs[] = {&h};
    host_start(&h);
    th_execf(via.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 200)");
    cr_assert_eq(th_wait_at_least(db.conn, 200, 60000, 50, hs, 1, DONE_SQL), 200);
    cr_assert_eq(th_scalar(via.conn, "SELECT count(*) FROM pg_prepared_statements"), 0,
                 "pooler = transaction left named statements in the shared server session");
    cr_assert_eq(host_stop(&h, 20000), 0);
    char *log = slurp_log(&h);
    cr_assert_eq(count_in(log, "without listen_conninfo: no LISTEN"), 1, "want the polling-only notice once:\n%s",
                 log);
    cr_assert_null(strstr(log, "listener:"), "a listener ran through the pooler:\n%s", log);
    cr_assert_null(strstr(log, "cannot reach"), "%s", log);
    free(log);
    th_check_invariants(db.conn);
    th_assert_clean_log(h.ini);

    /* The same host with pooler = none: its statements stay in the shared
     * session, and its other sessions cannot prepare theirs. */
    struct host n = {.name = "pool-of-one-none"};
    n.ini = pooled_ini(&via, n.name, "none", NULL, NULL, NULL, "[queue default]\nthreads = 3\n");
    host_start(&n);
    int64_t end = th_now_ms() + 30000;
    while (th_now_ms() < end && th_scalar(via.conn, "SELECT count(*) FROM pg_prepared_statements") == 0)
        usleep(50000);
    cr_assert_gt(th_scalar(via.conn, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sq\\_%'"), 0);
    end = th_now_ms() + 30000;
    for (;;) {
        log = slurp_log(&n);
        if (strstr(log, "already exists") || th_now_ms() > end)
            break;
        free(log);
        usleep(50000);
    }
    cr_assert_not_null(strstr(log, "already exists"), "pooler = none did not collide in a pool of one:\n%s", log);
    free(log);
    host_stop(&n, 20000);
    th_pgbouncer_stop(&pgb);
}

struct commit_later {
    PGconn *conn;
};

static void *commit_later(void *arg)
{
    struct commit_later *a = arg;
    usleep(200000);
    PQclear(PQexec(a->conn, "COMMIT"));
    return NULL;
}

static PGconn *raw_connect(const struct th_db *via)
{
    PGconn *c = PQconnectdb(via->conninfo);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    return c;
}

/*
 * The failure pooler = transaction avoids, made deterministic with a pool of
 * two server sessions S1, S2: A holds S1 in a transaction, so B prepares its
 * statements on S2; C then holds S2, so B's next statement can only run on
 * S1 once A commits -- where the named statement does not exist. The same
 * claim sent unnamed works on any session.
 */
Test(pooler, named_statement_on_another_session_fails, .timeout = 60)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 2);
    th_pgbouncer_db(&pgb, &db, &via);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    PGconn *a = raw_connect(&via), *b = raw_connect(&via), *c = raw_connect(&via);
    PQfinish(via.conn); /* hold no pooled session of our own */
    char err[512];

    PQclear(th_query(a, "BEGIN; SELECT 1"));
    sq_queue_use_unnamed(false);
    cr_assert(sq_queue_prepare(b, err, sizeof err), "%s", err);
    PQclear(th_query(c, "BEGIN; SELECT 1"));
    struct commit_later cl = {a};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, commit_later, &cl), 0);
    struct sq_claimed out[1];
    /* Room for two: a batch claim, statement sq_claim (one job goes as sq_claim_one). */
    struct sq_claimed two[2];
    int r = sq_queue_claim(b, "default", "{test}", "{30000}", "demo", 2, two, err, sizeof err);
    pthread_join(t, NULL);
    cr_assert_eq(r, -1, "the claim ran on a session without the prepared statement");
    cr_assert_not_null(strstr(err, "prepared statement \"sq_claim\" does not exist"), "got: %s", err);

    sq_queue_use_unnamed(true);
    r = sq_queue_claim(b, "default", "{test}", "{30000}", "demo", 1, out, err, sizeof err);
    cr_assert_eq(r, 1, "unnamed claim: %s", err);
    cr_assert_eq(sq_queue_done(b, out[0].id, out[0].execution_id, err, sizeof err), SQ_COMPLETE_DONE, "%s", err);
    sq_claimed_clear(&out[0]);
    PQclear(th_query(c, "ROLLBACK"));
    cr_assert_eq(th_scalar(db.conn, DONE_SQL), 1);
    PQfinish(a);
    PQfinish(b);
    PQfinish(c);
    th_pgbouncer_stop(&pgb);
}

/* skipq cannot set READ COMMITTED on pooled sessions, so a host refuses to
 * start when the database's default is anything else. */
Test(pooler, refuses_a_stricter_default_isolation, .timeout = 60)
{
    struct th_db db, via;
    th_db_new(&db);
    th_execf(db.conn, "ALTER DATABASE %s SET default_transaction_isolation = 'repeatable read'", db.name);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 2);
    th_pgbouncer_db(&pgb, &db, &via);
    struct host h = {.name = "strict"};
    h.ini = pooled_ini(&via, h.name, NULL, NULL, NULL, NULL, "[queue default]\n");
    host_start(&h);
    cr_assert_eq(host_wait_exit(&h, 30000), 1, "the host should refuse to start");
    char *log = slurp_log(&h);
    cr_assert_not_null(strstr(log, "default_transaction_isolation is 'repeatable read'"), "%s", log);
    cr_assert_not_null(strstr(log, "needs 'read committed'"), "%s", log);
    free(log);

    /* Without a pooler skipq sets it per session and runs. */
    struct host d = {.name = "strict-direct"};
    d.ini = th_host_ini(&db, d.name, NULL, NULL, "[queue default]\n");
    struct host *hs[] = {&d};
    host_start(&d);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_at_least(db.conn, 1, 30000, 50, hs, 1, DONE_SQL), 1);
    cr_assert_eq(host_stop(&d, 20000), 0);
    th_pgbouncer_stop(&pgb);
}

/* ---- LISTEN on a direct connection ---------------------------------------------------- */

static void wait_log(const struct host *h, const char *needle, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        char *log = slurp_log(h);
        bool found = strstr(log, needle) != NULL;
        cr_assert(found || th_now_ms() < end, "no \"%s\" in the log of %s:\n%s", needle, h->name, log);
        free(log);
        if (found)
            return;
        cr_assert_lt(host_exited(h), 0, "host %s exited", h->name);
        usleep(20000);
    }
}

Test(pooler, listen_conninfo_wakes_an_idle_host, .timeout = 120)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 2);
    th_pgbouncer_db(&pgb, &db, &via);
    struct host h = {.name = "pooled-listen"};
    /* Idle threads poll only every 60 s: a job done within 10 s was woken
     * (typically within a few tens of ms). */
    h.ini = pooled_ini(&via, h.name, NULL, db.conninfo, "poll_interval = 60s\n", NULL,
                       "[queue default]\nthreads = 2\n");
    struct host *hs[] = {&h};
    host_start(&h);
    wait_log(&h, "listener: listening for new jobs on", 30000);
    /* Let the start-up claim pass (the wake after LISTEN) find nothing. */
    usleep(300000);
    for (int i = 0; i < 2; i++) {
        int64_t t0 = th_now_ms();
        th_enqueue(via.conn, "test", "{}", NULL, 0, 0);
        long long done = th_wait_at_least(db.conn, i + 1, 10000, 50, hs, 1, DONE_SQL);
        cr_assert_eq(done, i + 1, "job %d not done within 10 s of its enqueue (poll interval 60 s)", i + 1);
        fprintf(stderr, "[pooler] listen_conninfo: job %d done %lld ms after its enqueue\n", i + 1,
                (long long)(th_now_ms() - t0));
    }
    cr_assert_eq(host_stop(&h, 20000), 0);
    char *log = slurp_log(&h);
    cr_assert_null(strstr(log, "no LISTEN"), "%s", log);
    free(log);
    th_assert_clean_log(h.ini);
    th_pgbouncer_stop(&pgb);
}

/* ---- the CLI ---------------------------------------------------------------------------- */

Test(pooler, cli_through_pgbouncer, .timeout = 120)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 1);
    th_pgbouncer_db(&pgb, &db, &via);
    th_execf(db.conn, "DROP SCHEMA skipq CASCADE");
    char *ini = pooled_ini(&via, "cli", NULL, NULL, NULL, NULL, "[queue default]\n");
    char *out = NULL, *err = NULL;

    cr_assert_eq(th_cli(&out, &err, "migrate", "-c", ini, NULL), 0, "migrate: %s%s", out, err);
    cr_assert_eq(th_scalar(db.conn, "SELECT max(version) FROM skipq.schema_migrations"),
                 skipq_schema_version_required());
    free(out);
    free(err);
    cr_assert_eq(th_cli(&out, &err, "migrate", "-c", ini, NULL), 0, "second migrate: %s", err);
    free(out);
    free(err);

    cr_assert_eq(th_cli(&out, &err, "enqueue", "test", "{\"n\": 1}", "-c", ini, NULL), 0, "enqueue: %s", err);
    long long id = strtoll(out, NULL, 10);
    cr_assert_gt(id, 0, "enqueue printed \"%s\"", out);
    free(out);
    free(err);
    char *file = th_write_file("jobs.jsonl", "{\"kind\": \"test\"}\n{\"kind\": \"test\", \"queue\": \"q2\"}\n");
    cr_assert_eq(th_cli(&out, &err, "enqueue", "--file", file, "-c", ini, NULL), 0, "enqueue --file: %s", err);
    free(out);
    free(err);
    cr_assert_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 3);

    cr_assert_eq(th_cli(&out, &err, "stats", "-c", ini, NULL), 0, "stats: %s", err);
    cr_assert_not_null(strstr(out, "q2"), "stats:\n%s", out);
    free(out);
    free(err);
    cr_assert_eq(th_cli(&out, &err, "jobs", "list", "-c", ini, NULL), 0, "jobs list: %s", err);
    cr_assert_not_null(strstr(out, "q2"), "jobs list:\n%s", out);
    free(out);
    free(err);
    char ids[32];
    snprintf(ids, sizeof ids, "%lld", id);
    cr_assert_eq(th_cli(&out, &err, "jobs", "show", ids, "-c", ini, NULL), 0, "jobs show: %s", err);
    cr_assert_not_null(strstr(out, "{\"n\": 1}"), "jobs show:\n%s", out);
    free(out);
    free(err);
    cr_assert_eq(th_cli(&out, &err, "cancel", ids, "-c", ini, NULL), 0, "cancel: %s", err);
    free(out);
    free(err);
    cr_assert_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'cancelled'", id),
                 1);
    cr_assert_eq(th_scalar(via.conn, "SELECT count(*) FROM pg_prepared_statements"), 0);
    th_pgbouncer_stop(&pgb);
}

/* ---- restarts behind and of the pooler --------------------------------------------------- */

/* The server restart must not disturb other suites: a cluster of our own. */
static struct th_cluster private_cluster;

Test(pooler, hosts_survive_pooler_and_server_restarts, .timeout = 300)
{
    th_cluster_start(&private_cluster, "pooler");
    th_cluster_use(&private_cluster);
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 2);
    th_pgbouncer_db(&pgb, &db, &via);
    PQfinish(via.conn);
    const int jobs = 900;
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 5}')) FROM generate_series(1, %d)", jobs);
    struct host h = {.name = "restarts"};
    h.ini = pooled_ini(&via, h.name, NULL, db.conninfo, NULL, NULL, "[queue default]\nthreads = 4\n");
    host_start(&h);

    cr_assert_geq(th_wait_robust_at_least(&db, 100, 60000, DONE_SQL), 100, "no progress through the pooler");
    th_pgbouncer_restart(&pgb);
    cr_assert_geq(th_wait_robust_at_least(&db, 400, 60000, DONE_SQL), 400, "no progress after the pooler restarted");
    th_cluster_restart(&private_cluster, "fast");
    long long done = th_wait_robust_at_least(&db, jobs, 120000, DONE_SQL);
    cr_assert_eq(done, jobs, "only %lld of %d jobs done after the restarts", done, jobs);
    /* The last jobs may be done before an idle thread or the heartbeat
     * meets its broken session: wait for the reconnect, not for the drain. */
    wait_log(&h, "connected to the database again", 30000);
    cr_assert_lt(host_exited(&h), 0, "the host exited");
    cr_assert_eq(host_stop(&h, 20000), 0);
    th_check_invariants(db.conn);
    char *log = slurp_log(&h);
    cr_assert_not_null(strstr(log, "connected to the database again"), "no reconnect logged:\n%s", log);
    cr_assert_null(strstr(log, "prepared statement"), "%s", log);
    free(log);
    th_assert_clean_log(h.ini);
    th_pgbouncer_stop(&pgb);
}

/* ---- configuration ------------------------------------------------------------------------ */

static void expect_config_error(const char *file, const char *text, int line, const char *needle)
{
    char *path = th_write_file(file, text);
    char err[1024], prefix[700];
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_null(cfg, "%s loaded but should have been refused", file);
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    cr_assert(strncmp(err, prefix, strlen(prefix)) == 0, "error \"%s\" does not start with \"%s\"", err, prefix);
    cr_assert_not_null(strstr(err, needle), "error \"%s\" does not mention \"%s\"", err, needle);
    free(path);
}

Test(pooler, config_keys)
{
    char *path = th_write_file("ok.ini", "[database]\nurl = host=127.0.0.1 port=6432 dbname=app\n"
                                         "pooler = transaction\n"
                                         "listen_conninfo = postgresql://skipq@db.internal:5432/app\n");
    char err[1024];
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_not_null(cfg, "%s", err);
    cr_assert(cfg->database.pooled);
    cr_assert_str_eq(cfg->database.listen_conninfo, "postgresql://skipq@db.internal:5432/app");
    cr_assert_eq(cfg->database.ndb, 1, "pooler and listen_conninfo must not reach libpq as keywords");
    cr_assert(!cfg->database.db_has_password);
    sq_config_free(cfg);
    free(path);

    path = th_write_file("default.ini", "[database]\ndbname = app\n");
    cfg = sq_config_load(path, err, sizeof err);
    cr_assert_not_null(cfg, "%s", err);
    cr_assert(!cfg->database.pooled);
    cr_assert_null(cfg->database.listen_conninfo);
    sq_config_free(cfg);
    free(path);

    path = th_write_file("pw.ini", "[database]\npooler = none\nlisten_conninfo = host=db password=s3\n");
    chmod(path, 0600);
    cfg = sq_config_load(path, err, sizeof err);
    cr_assert_not_null(cfg, "%s", err);
    cr_assert(cfg->database.db_has_password, "a password in listen_conninfo counts as a password in the file");
    sq_config_free(cfg);
    free(path);

    expect_config_error("bad-pooler.ini", "[database]\ndbname = app\npooler = session\n", 3,
                        "pooler: \"session\" is not none or transaction");
    expect_config_error("bad-listen.ini", "[database]\ndbname = app\n\nlisten_conninfo = host=db port\n", 4,
                        "listen_conninfo:");
    expect_config_error("empty-listen.ini", "[database]\nlisten_conninfo =\n", 2, "listen_conninfo must not be empty");
    expect_config_error("sync.ini", "[database]\npooler = transaction\n\n[host]\nsynchronous_commit = off\n", 4,
                        "synchronous_commit = off cannot be used with [database] pooler = transaction");
}
