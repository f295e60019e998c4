/*
 * test_security.c -- least-privilege roles (sql/roles.sql), plugin file
 * permissions, and secrets kept out of logs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "skipq/skipq.h"

#ifndef SKIPQ_SOURCE_DIR
#error "SKIPQ_SOURCE_DIR must be defined"
#endif

static PGconn *connect_as(const struct th_db *db, const char *user)
{
    char ci[700];
    snprintf(ci, sizeof ci, "%s user=%s", db->conninfo, user);
    PGconn *c = PQconnectdb(ci);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect as %s: %s", user, PQerrorMessage(c));
    return c;
}

Test(security, privilege_matrix, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    char role[96];

    snprintf(role, sizeof role, "%s_e", db.name);
    PGconn *e = connect_as(&db, role);
    cr_expect_str_eq(th_sqlstate(e, "SELECT skipq.enqueue('test', '{\"n\": 1}')"), "", "enqueuer can enqueue");
    const char *enqueuer_forbidden[] = {
        "SELECT * FROM skipq.jobs",
        "SELECT * FROM skipq.job_executions",
        "INSERT INTO skipq.jobs (queue, kind) VALUES ('default', 'test')",
        "UPDATE skipq.jobs SET status = 'done'",
        "DELETE FROM skipq.jobs",
        "TRUNCATE skipq.jobs",
        "CREATE TABLE skipq.evil (x int)",
        "DROP TABLE skipq.jobs",
        "ALTER TABLE skipq.jobs ADD COLUMN evil int",
        "UPDATE skipq.settings SET value = '999999999'",
        "SELECT skipq.waiter_set('h:1:w0', 'h:1', 'default', '{test}', '{30000}', 5000)",
        "SELECT skipq.waiter_unset('h:1:w0', false)",
        "SELECT skipq.waiter_gone('h:1:w0')",
        "SELECT * FROM skipq.waiting",
    };
    for (size_t i = 0; i < sizeof enqueuer_forbidden / sizeof *enqueuer_forbidden; i++)
        cr_expect_str_eq(th_sqlstate(e, enqueuer_forbidden[i]), "42501", "enqueuer must not: %s",
                         enqueuer_forbidden[i]);
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_copy *cp = NULL;
    cr_expect_neq(skipq_copy_begin(e, &cp, err, sizeof err), SKIPQ_OK, "the enqueuer must not COPY into skipq.jobs");
    PQfinish(e);

    /* The bulk role COPYs through libskipq, and can do nothing else. */
    snprintf(role, sizeof role, "%s_b", db.name);
    PGconn *b = connect_as(&db, role);
    cr_assert_eq(skipq_copy_begin(b, &cp, err, sizeof err), SKIPQ_OK, "bulk role: %s", err);
    cr_assert_eq(skipq_copy_add(cp, "test", "{\"n\": 2}", NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    int64_t copied = 0;
    cr_expect_eq(skipq_copy_end(cp, &copied, err, sizeof err), SKIPQ_OK, "bulk role: %s", err);
    cr_expect_eq(copied, 1);
    const char *bulk_forbidden[] = {
        "SELECT * FROM skipq.jobs",
        "UPDATE skipq.jobs SET status = 'done'",
        "DELETE FROM skipq.jobs",
        "INSERT INTO skipq.jobs (queue, kind, status) VALUES ('default', 'test', 'done')",
        "INSERT INTO skipq.job_executions (job_id, attempt, worker) VALUES (1, 1, 'x')",
        "UPDATE skipq.settings SET value = '999999999'",
    };
    for (size_t i = 0; i < sizeof bulk_forbidden / sizeof *bulk_forbidden; i++)
        cr_expect_str_eq(th_sqlstate(b, bulk_forbidden[i]), "42501", "bulk must not: %s", bulk_forbidden[i]);
    PQfinish(b);

    snprintf(role, sizeof role, "%s_w", db.name);
    PGconn *w = connect_as(&db, role);
    const char *worker_forbidden[] = {
        "DELETE FROM skipq.jobs",
        "DELETE FROM skipq.job_executions",
        "TRUNCATE skipq.jobs",
        "UPDATE skipq.jobs SET payload = '{}'",
        "UPDATE skipq.jobs SET kind = 'other'",
        "INSERT INTO skipq.jobs (queue, kind) VALUES ('default', 'test')",
        "CREATE TABLE skipq.evil (x int)",
        "DROP TABLE skipq.job_executions",
        "ALTER TABLE skipq.jobs ADD COLUMN evil int",
        "UPDATE skipq.settings SET value = '1'",
        "CREATE INDEX evil ON skipq.jobs (kind)",
    };
    for (size_t i = 0; i < sizeof worker_forbidden / sizeof *worker_forbidden; i++)
        cr_expect_str_eq(th_sqlstate(w, worker_forbidden[i]), "42501", "worker must not: %s", worker_forbidden[i]);
    PQfinish(w);

    /* ...and a host running as the worker role does its whole job. */
    int64_t retried = th_enqueue(db.conn, "test", "{\"fail_times\": 1, \"retry_in_ms\": 10}", NULL, 0, 3);
    struct th_db as_worker = db;
    int n = snprintf(as_worker.conninfo, sizeof as_worker.conninfo, "%s user=%s", db.conninfo, role);
    cr_assert_lt(n, (int)sizeof as_worker.conninfo);
    char *ini = th_host_ini(&as_worker, "roles", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = th_host_start(ini);
    /* Three jobs: the enqueuer's, the bulk role's, and one that fails once. */
    cr_expect_eq(th_wait_scalar(db.conn, 3, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 3,
                 "the worker role could not run the jobs");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    long long attempts =
        th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld", (long long)retried);
    cr_expect_eq(attempts, 2, "the worker role could not record the failed attempt and its retry");
    th_assert_clean_log(ini);
}

static char *plugin_ini(const struct th_db *db, const char *name, const char *plugin_path)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin other]\npath = %s\n\n[queue default]\nthreads = 1\n", plugin_path);
    return th_host_ini(db, name, NULL, NULL, extra);
}

static char *copy_plugin(const char *dir, mode_t mode)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/noop.so %s/noop.so", dir, SKIPQ_PLUGIN_DIR, dir);
    cr_assert_eq(system(cmd), 0);
    char *path = malloc(600);
    snprintf(path, 600, "%s/noop.so", dir);
    cr_assert_eq(chmod(path, mode), 0);
    return path;
}

static void expect_refused(const struct th_db *db, const char *name, const char *plugin, const char *needle)
{
    char *ini = plugin_ini(db, name, plugin);
    char *err = NULL;
    int rc = th_cli(NULL, &err, "run", "-c", ini, NULL);
    cr_expect_eq(rc, 2, "%s: exit %d, stderr: %s", name, rc, err);
    cr_expect(strstr(err, needle) != NULL, "%s: stderr lacks \"%s\": %s", name, needle, err);
    cr_expect(strstr(err, "refusing to load plugin") != NULL, "%s: %s", name, err);
    cr_expect_eq(th_scalar(db->conn, "SELECT count(*) FROM skipq.job_executions"), 0);
    free(err);
    free(ini);
}

Test(security, unsafe_plugin_files_are_refused, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "noop", "{}", NULL, 0, 0);
    char dir[600];

    snprintf(dir, sizeof dir, "%s/world-writable-file", th_tmpdir());
    expect_refused(&db, "ww-file", copy_plugin(dir, 0666), "writable by group or others");

    snprintf(dir, sizeof dir, "%s/group-writable-file", th_tmpdir());
    expect_refused(&db, "gw-file", copy_plugin(dir, 0664), "writable by group or others");

    snprintf(dir, sizeof dir, "%s/open-dir", th_tmpdir());
    char *p = copy_plugin(dir, 0755);
    cr_assert_eq(chmod(dir, 0777), 0);
    expect_refused(&db, "ww-dir", p, "is a directory writable by group or others");

    snprintf(dir, sizeof dir, "%s/foreign-owner", th_tmpdir());
    p = copy_plugin(dir, 0755);
    cr_assert_eq(chown(p, 4242, 4242), 0);
    expect_refused(&db, "owner", p, "owned by another user");

    /* The same file, safely placed, loads and runs. */
    snprintf(dir, sizeof dir, "%s/safe", th_tmpdir());
    p = copy_plugin(dir, 0755);
    char *ini = plugin_ini(&db, "safe", p);
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
}

Test(security, passwords_stay_out_of_logs, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    /* A password the server never asks for (trust auth) still must not be
     * echoed anywhere; and the file is readable by others, so skipq warns. */
    const char *secret = "S3cr3t-Pa55w0rd-do-not-log";
    char extra[512];
    snprintf(extra, sizeof extra, "[queue default]\nthreads = 1\n");
    char *ini = th_host_ini(&db, "secret", NULL, NULL, extra);
    /* Rewrite [database] with an explicit password key. */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "sed -i 's/^\\[database\\]$/[database]\\npassword = %s/' %s && chmod 644 %s", secret,
             ini, ini);
    cr_assert_eq(system(cmd), 0);
    pid_t pid = th_host_start(ini);
    th_enqueue(db.conn, "test", "{\"fail\": \"boom\"}", NULL, 0, 1);
    th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'dead'");
    cr_expect_eq(th_host_stop(pid, 10000), 0);

    /* A connection failure message must not carry it either. */
    char bad[1400];
    snprintf(bad, sizeof bad, "host=/nonexistent-socket-dir port=1 user=x password=%s dbname=x", secret);
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "stats", "--db", bad, NULL), 1);
    cr_expect_null(strstr(err, secret), "password in CLI error: %s", err);

    char log[700];
    snprintf(log, sizeof log, "%s.log", ini);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    char line[4096];
    bool warned = false;
    while (fgets(line, sizeof line, f)) {
        cr_expect_null(strstr(line, secret), "password in host log: %s", line);
        if (strstr(line, "holds a database password") && strstr(line, "readable by group or others"))
            warned = true;
    }
    fclose(f);
    cr_expect(warned, "no warning about a password in a world-readable INI");
}
