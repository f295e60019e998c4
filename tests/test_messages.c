/*
 * test_messages.c -- messages that say what to do (issue 19, item 7): `skipq
 * run` on a database never migrated says to run `skipq migrate`; `enqueue`
 * keeps PostgreSQL's DETAIL and the place in the JSON where it failed;
 * `jobs show` prints long errors in full and `jobs list` says it cut them;
 * a plugin that needs a symbol no library provides is named by its path,
 * with a hint; the descriptor's name appears in the load line. (The idle
 * host's stop line and `jobs show --json`'s payload as JSON are in
 * test_plugin_api.)
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"

static void expect_has(const char *text, const char *needle)
{
    cr_expect(strstr(text, needle) != NULL, "wanted \"%s\" in:\n%s", needle, text);
}

Test(messages, run_on_a_database_never_migrated_says_to_run_skipq_migrate, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct th_db raw = db;
    cr_assert_lt(strlen(db.name) + 4, sizeof raw.name);
    memcpy(raw.name + strlen(db.name), "_raw", 5);
    th_execf(db.conn, "CREATE DATABASE %s", raw.name);
    char *at = strstr(raw.conninfo, db.name);
    cr_assert(at);
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo, "%.*s%s%s", (int)(at - raw.conninfo), raw.conninfo, raw.name,
             at + strlen(db.name));
    snprintf(raw.conninfo, sizeof raw.conninfo, "%s", conninfo);
    char *ini = th_host_ini(&raw, "unmigrated", NULL, NULL, "[queue default]\n");
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 20000);
    char *log = th_host_log(ini);
    cr_expect_eq(st, 1, "%s", log);
    expect_has(log, "has no skipq schema: run `skipq migrate`");
    cr_expect(strstr(log, "does not exist") == NULL, "%s", log);
    free(log);
    th_execf(db.conn, "DROP DATABASE %s", raw.name);
}

Test(messages, enqueue_keeps_postgresqls_detail_for_bad_json, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "enqueue", "--db", db.conninfo, "test", "{\"a\": 1,, \"b\": 2}", NULL);
    cr_expect_eq(st, 2, "%s", err);
    expect_has(err, "invalid JSON payload: invalid input syntax for type json (Expected string, but found \",\". "
                    "JSON data, line 1: {\"a\": 1,,");
    free(out), free(err);
}

Test(messages, jobs_show_prints_long_errors_in_full_and_jobs_list_says_it_cut_them, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char long_error[200];
    memset(long_error, 'x', sizeof long_error - 4);
    memcpy(long_error + sizeof long_error - 4, "END", 4);
    th_execf(db.conn, "UPDATE skipq.jobs SET last_error = '%s' WHERE id = %lld", long_error, (long long)id);
    th_execf(db.conn, "INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at, status, finished_at, error)"
                      " VALUES (%lld, 1, 'w', now(), 'retry', now(), '%s')",
             (long long)id, long_error);
    char *ids = th_id_text(id);
    char *out = NULL, *err = NULL;
    cr_assert_eq(th_cli(&out, &err, "jobs", "show", "--db", db.conninfo, ids, NULL), 0, "%s", err);
    char want[256];
    snprintf(want, sizeof want, " error:\n  %s\n", long_error);
    expect_has(out, want);
    free(out), free(err);
    cr_assert_eq(th_cli(&out, &err, "jobs", "list", "--db", db.conninfo, NULL), 0, "%s", err);
    expect_has(err, "values longer than 60 characters are cut in this table; --json shows them in full");
    cr_expect(strstr(out, "END") == NULL, "the table was not cut:\n%s", out);
    free(out), free(err), free(ids);
}

Test(messages, a_plugin_missing_a_symbol_is_named_by_its_path_with_a_hint)
{
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", FIXTURE("undef_sym"), "undef", NULL);
    cr_expect_eq(st, 2, "%s", err);
    char *real = realpath(FIXTURE("undef_sym"), NULL);
    char want[1024];
    snprintf(want, sizeof want, "cannot load plugin \"undef_sym\" from %s: undefined symbol: sq_fixture_nowhere", real);
    expect_has(err, want);
    expect_has(err, "link it with the library that defines it");
    cr_expect(strstr(err, "/proc/self/fd") == NULL, "%s", err);
    free(real), free(out), free(err);
}

Test(messages, the_load_line_names_the_plugin_as_its_descriptor_does)
{
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "exec", FIXTURE("abi10"), "abi10", NULL), 0, "%s", err);
    expect_has(err, "loaded plugin \"abi10\" (abi10 1.0.0) from ");
    free(out), free(err);
}
