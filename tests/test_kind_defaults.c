/*
 * test_kind_defaults.c -- a host's [kind NAME] max_attempts reaches every job
 * of the kind enqueued without its own, whatever way it came in: SQL
 * enqueue(), enqueue_many() (both of its paths), COPY through libskipq, the
 * CLI without -c, a plain INSERT. A call that names max_attempts keeps it.
 * Hosts that disagree: the last one to start (or reload) sets it and says
 * what it replaced. Jobs go to a queue no host serves, so they stay put.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "skipq/skipq.h"

#define ROW_SQL "SELECT coalesce((SELECT max_attempts FROM skipq.kind_defaults WHERE kind = 'test'), 0)"

static const char *host_with(const struct th_db *db, const char *name, int max_attempts)
{
    char extra[128];
    snprintf(extra, sizeof extra, "[queue default]\n[kind test]\nmax_attempts = %d\n", max_attempts);
    return th_host_ini(db, name, NULL, NULL, extra);
}

static long long attempts_of(PGconn *c, long long id)
{
    return th_scalarf(c, "SELECT max_attempts FROM skipq.jobs WHERE id = %lld", id);
}

Test(kind_defaults, a_kind_max_attempts_applies_to_a_job_enqueued_with_sql_enqueue, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct host h = {.name = "kd", .ini = (char *)host_with(&db, "kd", 3)};
    host_start(&h);
    cr_assert_eq(th_wait_scalar(db.conn, 3, 20000, ROW_SQL), 3, "the host did not register its default");
    long long id = th_scalar(db.conn, "SELECT skipq.enqueue('test', '{}', 'nobody')");
    cr_expect_eq(attempts_of(db.conn, id), 3, "skipq.enqueue() ignored [kind test] max_attempts");
    id = th_scalar(db.conn, "SELECT skipq.enqueue('test', '{}', 'nobody', max_attempts => 5)");
    cr_expect_eq(attempts_of(db.conn, id), 5, "an explicit max_attempts lost to the kind's default");
    id = th_scalar(db.conn, "SELECT skipq.enqueue('other', '{}', 'nobody')");
    cr_expect_eq(attempts_of(db.conn, id), 5, "a kind without a default did not get the schema's 5");
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_assert_clean_log(h.ini);
}

Test(kind_defaults, every_way_in_takes_the_default_unless_the_job_names_its_own, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "INSERT INTO skipq.kind_defaults (kind, max_attempts, set_by) VALUES ('test', 3, 'x')");
    /* enqueue_many, the one-INSERT path and the element-by-element one */
    th_execf(db.conn, "SELECT skipq.enqueue_many('[{\"kind\": \"test\", \"queue\": \"m1\"},"
                      " {\"kind\": \"test\", \"queue\": \"m1\", \"max_attempts\": 9}]')");
    th_execf(db.conn, "SELECT skipq.enqueue_many('[{\"kind\": \"test\", \"queue\": \"m2\", \"unique_key\": \"a\"},"
                      " {\"kind\": \"test\", \"queue\": \"m2\", \"unique_key\": \"b\", \"max_attempts\": 9}]')");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE queue IN ('m1', 'm2') AND"
                                    " max_attempts = 3"),
                 2);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE queue IN ('m1', 'm2') AND"
                                    " max_attempts = 9"),
                 2);
    /* COPY through libskipq: a row without max_attempts goes as \N */
    skipq_copy *cp;
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_enqueue_opts none = {.queue = "copy"}, own = {.queue = "copy", .max_attempts = 2};
    cr_assert_eq(skipq_copy_begin(db.conn, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_add(cp, "test", "{}", &none, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_add(cp, "test", "{}", &own, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_add(cp, "other", "{}", &none, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_end(cp, NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    th_expect_text(db.conn, "2,3,5",
                   "SELECT string_agg(max_attempts::text, ',' ORDER BY max_attempts) FROM skipq.jobs"
                   " WHERE queue = 'copy'");
    /* skipq_enqueue() and the CLI without -c */
    int64_t id;
    cr_assert_eq(skipq_enqueue(db.conn, "test", "{}", &none, &id, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_expect_eq(attempts_of(db.conn, id), 3, "skipq_enqueue() ignored the kind's default");
    char *out = NULL, *cerr = NULL;
    cr_assert_eq(th_cli(&out, &cerr, "enqueue", "--db", db.conninfo, "-q", "cli", "test", NULL), 0, "%s", cerr);
    cr_expect_eq(th_scalar(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE queue = 'cli'"), 3);
    free(out), free(cerr);
    /* a plain INSERT that leaves the column out */
    th_execf(db.conn, "INSERT INTO skipq.jobs (queue, kind) VALUES ('raw', 'test')");
    cr_expect_eq(th_scalar(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE queue = 'raw'"), 3);
}

Test(kind_defaults, the_bulk_and_enqueuer_roles_get_the_default_too, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_apply_roles(&db);
    th_execf(db.conn, "INSERT INTO skipq.kind_defaults (kind, max_attempts, set_by) VALUES ('test', 4, 'x')");
    struct th_db e = th_db_as_role(&db, "e"), b = th_db_as_role(&db, "b");
    PGconn *ec = th_connect(&e), *bc = th_connect(&b);
    long long id = th_scalar(ec, "SELECT skipq.enqueue('test', '{}', 'nobody')");
    cr_expect_eq(attempts_of(db.conn, id), 4);
    skipq_copy *cp;
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_enqueue_opts none = {.queue = "copy"};
    cr_assert_eq(skipq_copy_begin(bc, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_add(cp, "test", "{}", &none, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_end(cp, NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_expect_eq(th_scalar(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE queue = 'copy'"), 4);
    /* neither may change the defaults */
    cr_expect_str_eq(th_sqlstate(ec, "UPDATE skipq.kind_defaults SET max_attempts = 1"), "42501");
    cr_expect_str_eq(th_sqlstate(bc, "INSERT INTO skipq.kind_defaults VALUES ('x', 1, 'me')"), "42501");
    PQfinish(ec);
    PQfinish(bc);
}

Test(kind_defaults, the_last_host_to_start_sets_the_default_and_logs_what_it_replaced, .timeout = 90)
{
    struct th_db db;
    th_db_new(&db);
    struct host a = {.name = "kda", .ini = (char *)host_with(&db, "kda", 3)};
    struct host b = {.name = "kdb", .ini = (char *)host_with(&db, "kdb", 7)};
    host_start(&a);
    cr_assert_eq(th_wait_scalar(db.conn, 3, 20000, ROW_SQL), 3);
    host_start(&b);
    cr_assert_eq(th_wait_scalar(db.conn, 7, 20000, ROW_SQL), 7);
    char *log = slurp_log(&b);
    cr_expect(strstr(log, "kind \"test\": max_attempts 7 replaces 3, set by host \"kda\"") != NULL, "%s", log);
    free(log);
    log = slurp_log(&a);
    cr_expect(strstr(log, "replaces") == NULL, "the first host logged a replacement:\n%s", log);
    free(log);
    cr_expect_eq(host_stop(&a, 15000), 0);
    cr_expect_eq(host_stop(&b, 15000), 0);
}

Test(kind_defaults, sighup_registers_a_changed_default, .timeout = 90)
{
    struct th_db db;
    th_db_new(&db);
    struct host h = {.name = "kdr", .ini = (char *)host_with(&db, "kdr", 3)};
    host_start(&h);
    cr_assert_eq(th_wait_scalar(db.conn, 3, 20000, ROW_SQL), 3);
    char *ini = th_read_file(h.ini);
    char *at = strstr(ini, "max_attempts = 3");
    cr_assert(at);
    at[15] = '6';
    FILE *f = fopen(h.ini, "w");
    cr_assert(f);
    fputs(ini, f);
    fclose(f);
    free(ini);
    kill(h.pid, SIGHUP);
    cr_expect_eq(th_wait_scalar(db.conn, 6, 20000, ROW_SQL), 6, "SIGHUP did not register the new default");
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_assert_clean_log(h.ini);
}
