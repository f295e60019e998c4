/*
 * test_plugin_api.c -- what plugin ABI 1.1 adds, through a real host: a
 * plugin's declared keys are checked like every other section (FILE:LINE,
 * exit 2; on SIGHUP logged and the running configuration kept), a plugin
 * reports its own config error with FILE:LINE, typed getters read what the
 * file says, the deadline and the output reach the execution row, a 1.0
 * plugin still loads with its keys passed through, and the stop contract
 * at shutdown: a handler that returns in the window after should-stop has
 * its outcome recorded and shutdown() runs; one that does not is released
 * and shutdown() does not run under it. Fixtures: tests/fixtures/typed.c
 * and abi10.c.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"

/* The line of `needle` in the file at path (1-based), 0 if absent. */
static int line_of(const char *path, const char *needle)
{
    char *text = th_read_file(path);
    char *at = strstr(text, needle);
    int line = 0;
    if (at) {
        line = 1;
        for (char *p = text; p < at; p++)
            line += *p == '\n';
    }
    free(text);
    return line;
}

static char *typed_ini(const struct th_db *db, const char *name, const char *host_extra, const char *keys)
{
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin typed]\npath = %s\n%s[queue default]\nthreads = 2\n[kind typed]\n"
                                  "timeout = 20s\n",
             FIXTURE("typed"), keys);
    return th_host_ini(db, name, host_extra, NULL, extra);
}

/* Run a host that must refuse to start; its log. */
static char *refused(const char *ini)
{
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 20000);
    char *log = th_host_log(ini);
    cr_expect_eq(st, 2, "the host exited %d, not 2:\n%s", st, log);
    return log;
}

Test(plugin_api, a_typo_in_a_declared_plugin_key_stops_the_host_with_file_and_line, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = typed_ini(&db, "typo", NULL, "timout = 3s\n");
    char *log = refused(ini);
    char want[1024];
    snprintf(want, sizeof want, "%s:%d: unknown key \"timout\" in [plugin typed] (plugin \"typed\" declares: ", ini,
             line_of(ini, "timout"));
    cr_expect(strstr(log, want) != NULL, "wanted \"%s\" in:\n%s", want, log);
    free(log);
}

Test(plugin_api, a_declared_key_out_of_its_range_or_type_stops_the_host, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = typed_ini(&db, "range", NULL, "count = 11\n");
    char *log = refused(ini);
    char want[1024];
    snprintf(want, sizeof want, "%s:%d: [plugin typed] count: \"11\" is out of range (from 1 to 10)", ini,
             line_of(ini, "count = 11"));
    cr_expect(strstr(log, want) != NULL, "wanted \"%s\" in:\n%s", want, log);
    free(log);
    ini = typed_ini(&db, "type", NULL, "io_timeout = soon\n");
    log = refused(ini);
    cr_expect(strstr(log, "[plugin typed] io_timeout: \"soon\" is not a duration") != NULL, "%s", log);
    free(log);
}

Test(plugin_api, a_plugin_reports_its_own_config_error_with_file_and_line, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = typed_ini(&db, "own", NULL, "url = ftp://example.com\n");
    char *log = refused(ini);
    char want[1024];
    snprintf(want, sizeof want, "%s:%d: [plugin typed] url: \"ftp://example.com\" must start with http:// or https://",
             ini, line_of(ini, "url = ftp"));
    cr_expect(strstr(log, want) != NULL, "wanted \"%s\" in:\n%s", want, log);
    free(log);
}

Test(plugin_api, a_plugin_built_for_abi_1_0_still_loads_with_its_keys_passed_through, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "abi10", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "abi10", NULL, NULL,
                            "[plugin abi10]\npath = " FIXTURE("abi10") "\nanything_goes = yes\n[queue default]\n");
    pid_t pid = th_host_start(ini);
    long long done = th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    char *log = th_host_log(ini);
    cr_expect_eq(done, 1, "job %lld did not run:\n%s", (long long)id, log);
    cr_expect(strstr(log, "(ABI 1.0, keys passed through unchecked)") != NULL, "%s", log);
    cr_expect(strstr(log, "abi10: anything_goes = yes") != NULL, "%s", log);
    free(log);
}

Test(plugin_api, typed_keys_the_deadline_and_the_output_reach_the_execution_row, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "typed", "{\"n\": 1}", NULL, 0, 0);
    char *ini = typed_ini(&db, "typed", NULL, "count = 7\nverbose = yes\nio_timeout = 2s\n");
    pid_t pid = th_host_start(ini);
    long long done = th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    char *log = th_host_log(ini);
    cr_assert_eq(done, 1, "%s", log);
    th_expect_text(db.conn, "hi 7 1 2000 65536 1 6",
                   "SELECT concat_ws(' ', output->>'greeting', output->>'count', output->>'verbose',"
                   " output->>'io_timeout_ms', output->>'max_body', output->>'rc_invalid', output->>'rc_big')"
                   " FROM skipq.job_executions WHERE job_id = %lld",
                   (long long)id);
    long long deadline = th_scalarf(db.conn, "SELECT (output->>'deadline_ms')::bigint FROM skipq.job_executions"
                                             " WHERE job_id = %lld", (long long)id);
    cr_expect(deadline > 10000 && deadline <= 20000, "deadline_ms %lld is not under the kind's 20s timeout",
              deadline);
    /* jobs show: the payload and the output as JSON, not strings */
    char *out = NULL, *err = NULL;
    char *ids = th_id_text(id);
    cr_assert_eq(th_cli(&out, &err, "jobs", "show", "--db", db.conninfo, "--json", ids, NULL), 0, "%s", err);
    cr_expect(strstr(out, "\"payload\":{\"n\": 1}") != NULL, "%s", out);
    cr_expect(strstr(out, "\"output\":{\"count\": 7") != NULL, "%s", out);
    free(out), free(err);
    cr_assert_eq(th_cli(&out, &err, "jobs", "show", "--db", db.conninfo, ids, NULL), 0, "%s", err);
    cr_expect(strstr(out, " output:\n  {\"count\": 7") != NULL, "%s", out);
    free(out), free(err), free(ids), free(log);
    th_assert_clean_log(ini);
}

Test(plugin_api, sighup_with_a_typo_in_a_declared_section_keeps_the_running_configuration, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = typed_ini(&db, "hup", NULL, "count = 2\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.hosts"), 1);
    char *text = th_read_file(ini);
    char *at = strstr(text, "count = 2");
    cr_assert(at);
    memcpy(at, "cuont = 2", 9);
    FILE *f = fopen(ini, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    free(text);
    kill(pid, SIGHUP);
    char want[1024];
    snprintf(want, sizeof want, "SIGHUP: %s:%d: unknown key \"cuont\" in [plugin typed]", ini, line_of(ini, "cuont"));
    char *log = NULL;
    for (int64_t end = th_now_ms() + 10000; th_now_ms() < end;) {
        free(log);
        log = th_host_log(ini);
        if (strstr(log, "keeping the running configuration"))
            break;
    }
    cr_expect(strstr(log, want) != NULL, "wanted \"%s\" in:\n%s", want, log);
    cr_expect_eq(th_host_exited(pid), -1, "the host stopped on a bad reload");
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    free(log);
}

/* The handler waits for should-stop (until_stop) or ignores it. */
static void stop_scenario(bool ignore, long long *status_out, char **log_out, char **error_out)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "typed", ignore ? "{\"ignore_stop\": 1}" : "{\"until_stop\": 1}", NULL, 0, 0);
    char *ini = typed_ini(&db, ignore ? "ignores" : "stops", "shutdown_grace = 500ms\n", "");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1);
    /* Claimed is not started (a job not yet handed to its handler is given
     * back at SIGTERM): wait for the handler's own line. */
    cr_assert(th_wait_log(ini, "handler started", 10000), "the handler never started:\n%s", th_host_log(ini));
    int64_t t0 = th_now_ms();
    *status_out = th_host_stop(pid, 15000);
    cr_expect_lt(th_now_ms() - t0, 8000, "shutdown took %lldms", (long long)(th_now_ms() - t0));
    *log_out = th_host_log(ini);
    *error_out = th_textf(db.conn, "SELECT status || ': ' || coalesce(error, '') FROM skipq.job_executions"
                                   " WHERE job_id = %lld", (long long)id);
}

Test(plugin_api, a_handler_that_returns_after_should_stop_at_shutdown_has_its_outcome_recorded, .timeout = 60)
{
    long long st;
    char *log, *ex;
    stop_scenario(false, &st, &log, &ex);
    cr_expect_eq(st, 0, "%s", log);
    cr_expect(strncmp(ex, "retry: stopped on request after ", 32) == 0, "the execution is \"%s\"; log:\n%s", ex, log);
    cr_expect(strstr(log, "1 handler(s) told to stop; waiting up to 2000ms") != NULL, "%s", log);
    cr_expect(strstr(log, "typed: shutdown called") != NULL, "shutdown() did not run:\n%s", log);
    free(log);
    free(ex);
}

Test(plugin_api, a_handler_that_ignores_should_stop_is_released_and_shutdown_does_not_run_under_it, .timeout = 60)
{
    long long st;
    char *log, *ex;
    stop_scenario(true, &st, &log, &ex);
    cr_expect_eq(st, 0, "%s", log);
    cr_expect(strncmp(ex, "interrupted: ", 13) == 0, "the execution is \"%s\"; log:\n%s", ex, log);
    cr_expect(strstr(log, "without calling the plugins' shutdown()") != NULL, "%s", log);
    cr_expect(strstr(log, "typed: shutdown called") == NULL, "shutdown() ran under a running handler:\n%s", log);
    free(log);
    free(ex);
}

Test(plugin_api, an_idle_host_says_no_handler_is_running_when_it_stops, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = typed_ini(&db, "idle", NULL, "");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.hosts"), 1);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    char *log = th_host_log(ini);
    cr_expect(strstr(log, "SIGTERM received: no new claims; no handler is running") != NULL, "%s", log);
    cr_expect(strstr(log, "running handler(s)") == NULL, "%s", log);
    free(log);
}
