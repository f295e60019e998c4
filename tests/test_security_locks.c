/*
 * test_security_locks.c -- no role that can merely connect can stall the
 * hosts' claims, their housekeeping or `skipq migrate` by holding a lock.
 *
 * Why it matters: hosts used advisory lock keys to serialise the claims of a
 * limited kind and to let one host at a time run retention, the totals and
 * priority aging, and migrate took one too. Advisory locks need no
 * privilege: an application role with only skipq_enqueuer took a key and
 * held it, and every claim of that kind waited, every host skipped that
 * housekeeping for good, or migrate hung. Now those are row locks on rows
 * of skipq's own (sql/053), which need UPDATE on the table or a column of
 * it, and migrate locks skipq.schema_migrations once it exists and
 * otherwise waits for the advisory key only until a deadline, naming the
 * holder (core/client/migrate.c).
 *
 * Each test has an enqueuer-only role hold the key it used to take, in a
 * session of its own, and shows that the work is done anyway; and that the
 * same role cannot lock the rows that replaced the key.
 *
 * Roles are cluster-wide, so each test names its login roles after its own
 * database.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#ifndef SKIPQ_SOURCE_DIR
#error "SKIPQ_SOURCE_DIR must be defined"
#endif

/* The keys hosts and migrate took before sql/053. */
#define KEY_LIMITED_KIND "495946, pg_catalog.hashtext('test')"
#define KEY_RETENTION "495946797170"
#define KEY_TOTALS "495946797171"
#define KEY_AGING "495947, pg_catalog.hashtext('aged')"
#define KEY_MIGRATE "495946797169"

/* ---- helpers ---------------------------------------------------------------------------- */

static char cleanup_roles[200], cleanup_db[80];

/* At exit: the database made here (th_db_new's own go by themselves), then
 * the login roles. */
static void cleanup(void)
{
    PGconn *a = PQconnectdb(th_admin_conninfo());
    char sql[400];
    if (cleanup_db[0]) {
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", cleanup_db);
        PQclear(PQexec(a, sql));
    }
    if (cleanup_roles[0]) {
        snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s", cleanup_roles);
        PQclear(PQexec(a, sql));
    }
    PQfinish(a);
}

/* sql/roles.sql, then login roles <db>_e (enqueuer) and <db>_w (worker). */
static void apply_roles(const struct th_db *db)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "psql -qX -v ON_ERROR_STOP=1 \"%s\" -f %s/sql/roles.sql >/dev/null 2>&1",
             db->conninfo, SKIPQ_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0, "roles.sql failed");
    th_execf(db->conn,
             "DROP ROLE IF EXISTS %s_e; CREATE ROLE %s_e LOGIN IN ROLE skipq_enqueuer;"
             "DROP ROLE IF EXISTS %s_w; CREATE ROLE %s_w LOGIN IN ROLE skipq_worker",
             db->name, db->name, db->name, db->name);
    snprintf(cleanup_roles, sizeof cleanup_roles, "%s_e, %s_w", db->name, db->name);
    atexit(cleanup);
}

/* A session as <db>_<suffix>, to database dbname (NULL: db's own). */
static PGconn *connect_as(const struct th_db *db, const char *suffix, const char *dbname)
{
    char ci[900];
    snprintf(ci, sizeof ci, "%s user=%s_%s application_name=squatter%s%s", db->conninfo, db->name, suffix,
             dbname ? " dbname=" : "", dbname ? dbname : "");
    PGconn *c = PQconnectdb(ci);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect as %s_%s: %s", db->name, suffix, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}



/* The attacker takes a key for the life of its session (no transaction
 * stays open). */
static void hold_key(PGconn *attacker, const char *key)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT pg_catalog.pg_advisory_lock(%s)", key);
    cr_assert_str_eq(th_sqlstate(attacker, sql), "", "%s: %s", sql, PQerrorMessage(attacker));
}

/* Every way to lock rows of `table` (and the table itself) is refused. */
static void cannot_lock(PGconn *attacker, const char *table)
{
    static const char *const modes[] = {"UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE"};
    char sql[300];
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        snprintf(sql, sizeof sql, "SELECT 1 FROM skipq.%s FOR %s", table, modes[i]);
        PQclear(PQexec(attacker, "BEGIN"));
        cr_expect_str_eq(th_sqlstate(attacker, sql), "42501", "an enqueuer may: %s", sql);
        PQclear(PQexec(attacker, "ROLLBACK"));
    }
    snprintf(sql, sizeof sql, "LOCK TABLE skipq.%s IN ROW SHARE MODE", table);
    PQclear(PQexec(attacker, "BEGIN"));
    cr_expect_str_eq(th_sqlstate(attacker, sql), "42501", "an enqueuer may: %s", sql);
    PQclear(PQexec(attacker, "ROLLBACK"));
}

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

/* ---- hosts' work ------------------------------------------------------------------------- */

Test(security_locks, a_limited_kind_is_claimed_within_its_limit_while_an_enqueuer_holds_its_old_key,
     .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *attacker = connect_as(&db, "e", NULL);
    hold_key(attacker, KEY_LIMITED_KIND);
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 50}')) FROM generate_series(1, 40)");
    struct th_db worker = th_db_as_role(&db, "w");
    char *ini = th_host_ini(&worker, "limited", NULL, NULL,
                            "kinds = test\n[queue default]\nthreads = 4\n[kind test]\nmax_running = 2\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 40, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 40,
                 "the claims of a limited kind waited for an enqueuer's advisory lock");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    long long most = max_overlap(db.conn, "test");
    cr_expect_leq(most, 2, "%lld jobs of a kind with max_running = 2 ran at once", most);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.kind_limits WHERE kind = 'test'"), 1);
    cannot_lock(attacker, "kind_limits");
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
    PQfinish(attacker);
}

Test(security_locks, retention_deletes_while_an_enqueuer_holds_its_old_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *attacker = connect_as(&db, "e", NULL);
    hold_key(attacker, KEY_RETENTION);
    th_execf(db.conn, "WITH j AS (INSERT INTO skipq.jobs (queue, kind, status, attempts, finished_at)"
                      " SELECT 'default', 'old', 'done', 1, now() - interval '2 hours'"
                      "   FROM generate_series(1, 50) RETURNING id)"
                      " INSERT INTO skipq.job_executions (job_id, attempt, worker, status, finished_at)"
                      " SELECT id, 1, 'old', 'done', now() - interval '2 hours' FROM j");
    th_execf(db.conn, "UPDATE skipq.jobs j SET current_execution_id = e.id FROM skipq.job_executions e"
                      " WHERE e.job_id = j.id");
    /* Retention deletes jobs: the schema owner's work (the worker may not). */
    char *ini = th_host_ini(&db, "retain", NULL, NULL,
                            "[queue default]\nthreads = 1\nkinds = test\n\n"
                            "[retention]\ndone = 1h\ninterval = 200ms\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 0, 20000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'old'"), 0,
                 "retention skipped every round while an enqueuer held its advisory key");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cannot_lock(attacker, "housekeeping");
    th_assert_clean_log(ini);
    PQfinish(attacker);
}

Test(security_locks, totals_advance_while_an_enqueuer_holds_their_old_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *attacker = connect_as(&db, "e", NULL);
    hold_key(attacker, KEY_TOTALS);
    /* Start the totals an hour ago; seven jobs finished since. */
    th_execf(db.conn, "UPDATE skipq.job_totals_mark SET through = now() - interval '1 hour', began_at = through");
    th_execf(db.conn, "INSERT INTO skipq.jobs (queue, kind, status, attempts, finished_at)"
                      " SELECT 'default', 'counted', 'done', 1, now() - interval '50 minutes'"
                      "   FROM generate_series(1, 7)");
    struct th_db worker = th_db_as_role(&db, "w");
    char *ini = th_host_ini(&worker, "totals", NULL, NULL, "kinds = test\n[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 7, 20000,
                                "SELECT coalesce(sum(done), 0) FROM skipq.job_totals WHERE kind = 'counted'"),
                 7, "the totals did not advance while an enqueuer held their advisory key");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cannot_lock(attacker, "housekeeping");
    cannot_lock(attacker, "job_totals_mark");
    th_assert_clean_log(ini);
    PQfinish(attacker);
}

Test(security_locks, aging_raises_priorities_while_an_enqueuer_holds_the_queues_old_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *attacker = connect_as(&db, "e", NULL);
    hold_key(attacker, KEY_AGING);
    int64_t id = th_enqueue(db.conn, "test", "{}", "aged", 0, 0);
    th_execf(db.conn, "UPDATE skipq.jobs SET run_at = now() - interval '10.5 seconds' WHERE id = %" PRId64, id);
    /* The host ages queue "aged" but claims nothing there (it handles only
     * test.other); as the worker role, which adds the queue's row. */
    struct th_db worker = th_db_as_role(&db, "w");
    char *ini = th_host_ini(&worker, "ager", NULL, NULL,
                            "kinds = test.other\n[queue aged]\npriority_aging = 1s\npriority_aging_cap = 5\n");
    pid_t pid = th_host_start(ini);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND priority = 5", id);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1,
                 "aging skipped the queue while an enqueuer held its advisory key");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.housekeeping WHERE task = 'aging/aged'"), 1);
    cannot_lock(attacker, "housekeeping");
    th_assert_clean_log(ini);
    PQfinish(attacker);
}

/* The worker's rights on the new rows are as narrow as on the other
 * scheduling tables: lock a row, add a queue's row, nothing more. */
Test(security_locks, a_worker_may_lock_housekeeping_rows_but_not_the_table_nor_rename_a_task, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *w = connect_as(&db, "w", NULL);
    static const char *const allowed[] = {
        "SELECT 1 FROM skipq.housekeeping WHERE task = 'retention' FOR NO KEY UPDATE SKIP LOCKED",
        "INSERT INTO skipq.housekeeping (task) VALUES ('aging/q') ON CONFLICT (task) DO NOTHING",
        "SELECT 1 FROM skipq.kind_limits FOR NO KEY UPDATE"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_expect_str_eq(th_sqlstate(w, allowed[i]), "", "the worker may not: %s: %s", allowed[i],
                         PQerrorMessage(w));
    static const char *const forbidden[] = {
        "UPDATE skipq.housekeeping SET task = 'aging/x' WHERE task = 'retention'",
        "DELETE FROM skipq.housekeeping",
        "INSERT INTO skipq.housekeeping (task, lockable) VALUES ('aging/y', false)",
        "LOCK TABLE skipq.housekeeping IN SHARE ROW EXCLUSIVE MODE",
        "LOCK TABLE skipq.housekeeping IN ACCESS EXCLUSIVE MODE"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
        PQclear(PQexec(w, "BEGIN"));
        cr_expect_str_eq(th_sqlstate(w, forbidden[i]), "42501", "the worker may: %s", forbidden[i]);
        PQclear(PQexec(w, "ROLLBACK"));
    }
    cr_expect_str_eq(th_sqlstate(w, "INSERT INTO skipq.housekeeping (task) VALUES ('other')"), "23514",
                     "a task that is not retention, totals or aging/QUEUE");
    PQfinish(w);
}

/* ---- migrate ------------------------------------------------------------------------------ */

Test(security_locks, migrate_proceeds_while_an_enqueuer_holds_its_old_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    PGconn *attacker = connect_as(&db, "e", NULL);
    hold_key(attacker, KEY_MIGRATE);
    int64_t start = th_now_ms();
    char *out = NULL, *err = NULL;
    /* No --wait: the default deadline is a minute, and th_cli gives up on
     * a command that runs a minute. */
    int rc = th_cli(&out, &err, "migrate", "--db", db.conninfo, NULL);
    cr_expect_eq(rc, 0, "migrate: %s", err);
    cr_expect(out && strstr(out, "0 migrations applied"), "%s", out);
    cr_expect_lt(th_now_ms() - start, 10000, "migrate waited for an enqueuer's advisory lock");
    free(out);
    free(err);
    cannot_lock(attacker, "schema_migrations");
    PQfinish(attacker);
}

/*
 * Before the first migration there is no table of skipq's to lock, so the
 * advisory key stays: migrate waits for it until its deadline, says who
 * holds it, and fails naming them; once they let go, it migrates.
 */
Test(security_locks, migrate_of_a_new_database_names_whoever_holds_its_key_and_gives_up_in_time,
     .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    snprintf(cleanup_db, sizeof cleanup_db, "%s_new", db.name);
    th_execf(db.conn, "CREATE DATABASE %s", cleanup_db);
    char fresh[700];
    snprintf(fresh, sizeof fresh, "%s dbname=%s", th_admin_conninfo(), cleanup_db);
    PGconn *attacker = connect_as(&db, "e", cleanup_db);
    hold_key(attacker, KEY_MIGRATE);
    char pid[32], role[96];
    snprintf(pid, sizeof pid, "pid %d", PQbackendPID(attacker));
    snprintf(role, sizeof role, "role \"%s_e\"", db.name);

    int64_t start = th_now_ms();
    char *out = NULL, *err = NULL;
    int rc = th_cli(&out, &err, "migrate", "--db", fresh, "--wait", "3s", NULL);
    int64_t took = th_now_ms() - start;
    cr_expect_eq(rc, 1, "migrate: exit %d: %s%s", rc, out, err);
    cr_expect_geq(took, 3000, "migrate gave up before its deadline (%" PRId64 " ms)", took);
    cr_expect_lt(took, 10000, "migrate waited past its deadline (%" PRId64 " ms)", took);
    cr_expect(err && strstr(err, "waiting up to 3 s for advisory lock " KEY_MIGRATE), "%s", err);
    cr_expect(err && strstr(err, "gave up after 3 s"), "%s", err);
    cr_expect(err && strstr(err, pid) && strstr(err, role), "the holder (%s, %s) is not named: %s", pid, role, err);
    free(out);
    free(err);

    PGconn *chk = PQconnectdb(fresh);
    cr_assert_eq(PQstatus(chk), CONNECTION_OK);
    cr_expect_eq(th_scalar(chk, "SELECT count(*) FROM pg_namespace WHERE nspname = 'skipq'"), 0,
                 "migrate changed something before it had the lock");
    PQfinish(attacker);
    rc = th_cli(&out, &err, "migrate", "--db", fresh, "--wait", "3s", NULL);
    cr_expect_eq(rc, 0, "migrate after the holder left: %s", err);
    cr_expect_gt(th_scalar(chk, "SELECT count(*) FROM skipq.schema_migrations"), 0);
    PQfinish(chk);
    free(out);
    free(err);
}

/* Two migrations at once still serialise on the table: the second waits
 * for the first, names it if it must give up, and after it applies
 * nothing. */
Test(security_locks, a_migration_waits_for_another_and_names_it_at_its_deadline, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *other = th_connect(&db);
    /* Another migrate, mid-way: holds the table lock. */
    PQclear(th_query(other, "BEGIN"));
    PQclear(th_query(other, "LOCK TABLE skipq.schema_migrations IN SHARE ROW EXCLUSIVE MODE"));
    char *out = NULL, *err = NULL;
    int rc = th_cli(&out, &err, "migrate", "--db", db.conninfo, "--wait", "1500ms", NULL);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(err && strstr(err, "gave up after 1500 ms waiting for the lock on skipq.schema_migrations"), "%s",
              err);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", PQbackendPID(other));
    cr_expect(err && strstr(err, pid), "the holder (%s) is not named: %s", pid, err);
    free(out);
    free(err);
    PQclear(th_query(other, "COMMIT"));
    rc = th_cli(&out, &err, "migrate", "--db", db.conninfo, NULL);
    cr_expect_eq(rc, 0, "%s", err);
    cr_expect(out && strstr(out, "0 migrations applied"), "%s", out);
    free(out);
    free(err);
    PQfinish(other);
}

/*
 * A role that squatted schema skipq owns its skipq.schema_migrations and
 * may lock it: migrate still refuses at once, naming the owner, instead of
 * waiting for the lock until its deadline.
 */
Test(security_locks, a_squatter_holding_its_own_migrations_table_is_refused_at_once, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    snprintf(cleanup_db, sizeof cleanup_db, "%s_sq", db.name);
    th_execf(db.conn, "CREATE DATABASE %s", cleanup_db);
    th_execf(db.conn, "GRANT CREATE ON DATABASE %s TO %s_e", cleanup_db, db.name);
    char fresh[700];
    snprintf(fresh, sizeof fresh, "%s dbname=%s", th_admin_conninfo(), cleanup_db);
    PGconn *squatter = connect_as(&db, "e", cleanup_db);
    PQclear(th_query(squatter, "CREATE SCHEMA skipq; CREATE TABLE skipq.schema_migrations (version int PRIMARY KEY,"
                               " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"));
    PQclear(th_query(squatter, "BEGIN"));
    PQclear(th_query(squatter, "LOCK TABLE skipq.schema_migrations IN ACCESS EXCLUSIVE MODE"));
    int64_t start = th_now_ms();
    char *out = NULL, *err = NULL;
    int rc = th_cli(&out, &err, "migrate", "--db", fresh, "--wait", "30s", NULL);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect_lt(th_now_ms() - start, 10000, "migrate waited for the squatter's lock: %s", err);
    char owner[96];
    snprintf(owner, sizeof owner, "owned by role \"%s_e\"", db.name);
    cr_expect(err && strstr(err, "refusing to migrate") && strstr(err, owner), "%s", err);
    free(out);
    free(err);
    PQclear(th_query(squatter, "ROLLBACK"));
    th_execf(squatter, "DROP SCHEMA skipq CASCADE");
    PQfinish(squatter);
}
