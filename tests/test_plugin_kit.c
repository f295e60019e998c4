/*
 * test_plugin_kit.c -- the C test kit for plugin authors
 * (skipq/plugin_test.h, libskipq_plugin_test), used as a plugin's own tests
 * would use it: load from a path or by descriptor with an INI section, run
 * a handler on a payload, raise should-stop (from the start, after a
 * delay, from another thread), and read back the outcome, error, retry_in,
 * output and log lines; with a connection string, the handler's
 * transaction is rolled back. This program links the kit and the typed
 * fixture's code (for the descriptor); only one test needs a database.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "skipq/plugin_test.h"

#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"

const skipq_plugin_info *skipq_plugin_describe(void); /* tests/fixtures/typed.c, linked in */

static skipq_test_plugin *must_load(const char *path, const char *ini)
{
    char err[1024];
    skipq_test_plugin *tp = skipq_test_load(path, ini, err, sizeof err);
    cr_assert_not_null(tp, "%s", err);
    return tp;
}

Test(plugin_kit, a_handler_runs_on_a_payload_with_its_section_and_its_output_is_captured)
{
    skipq_test_plugin *tp = must_load(FIXTURE("typed"), "count = 5\nio_timeout = 250ms\n");
    skipq_test_result r;
    char err[1024];
    skipq_test_opts o = {.timeout_ms = 10000};
    cr_assert_eq(skipq_test_run(tp, "typed", "{}", &o, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_DONE);
    cr_expect_str_eq(r.error, "");
    cr_expect_eq(r.retry_in_ms, -1);
    cr_assert_not_null(r.output);
    cr_expect(strstr(r.output, "\"count\": 5") && strstr(r.output, "\"io_timeout_ms\": 250"), "%s", r.output);
    long long deadline = -2;
    const char *d = strstr(r.output, "\"deadline_ms\": ");
    if (d)
        deadline = atoll(d + 15);
    cr_expect(deadline > 9000 && deadline <= 10000, "deadline %lld under a 10s timeout", deadline);
    cr_expect_eq(r.used_conn, 0);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(plugin_kit, error_retry_in_and_log_lines_are_captured)
{
    skipq_test_plugin *tp = must_load(FIXTURE("typed"), NULL);
    skipq_test_result r;
    char err[1024];
    skipq_test_opts o = {.attempt = 2, .max_attempts = 7};
    cr_assert_eq(skipq_test_run(tp, "typed", "{\"retry\": 1}", &o, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_str_eq(r.error, "try later");
    cr_expect_eq(r.retry_in_ms, 1234);
    cr_expect_null(r.output);
    cr_expect_str_eq(r.logs, "job 1 (typed): upstream busy, attempt 2 of 7\n");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

struct stopper {
    skipq_test_plugin *tp;
};

static void *stop_soon(void *arg)
{
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    skipq_test_stop(((struct stopper *)arg)->tp);
    return NULL;
}

Test(plugin_kit, should_stop_from_the_start_after_a_delay_or_from_another_thread)
{
    skipq_test_plugin *tp = must_load(FIXTURE("typed"), NULL);
    skipq_test_result r;
    char err[1024];
    skipq_test_opts now = {.stop = 1}, later = {.stop_after_ms = 80};
    cr_assert_eq(skipq_test_run(tp, "typed", "{\"until_stop\": 1}", &now, &r, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(r.error, "stopped on request after 0ms");
    skipq_test_result_free(&r);
    cr_assert_eq(skipq_test_run(tp, "typed", "{\"until_stop\": 1}", &later, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect(r.duration_us >= 80000 && r.duration_us < 5000000, "%lld us", (long long)r.duration_us);
    skipq_test_result_free(&r);
    struct stopper s = {tp};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, stop_soon, &s), 0);
    cr_assert_eq(skipq_test_run(tp, "typed", "{\"until_stop\": 1}", NULL, &r, err, sizeof err), 0, "%s", err);
    pthread_join(th, NULL);
    cr_expect(strncmp(r.error, "stopped on request after ", 25) == 0, "%s", r.error);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(plugin_kit, a_plugin_linked_into_the_test_loads_by_its_descriptor)
{
    char err[1024];
    skipq_test_plugin *tp = skipq_test_load_descriptor(skipq_plugin_describe(), "[plugin typed]\ncount = 9\n", err,
                                                       sizeof err);
    cr_assert_not_null(tp, "%s", err);
    skipq_test_result r;
    cr_assert_eq(skipq_test_run(tp, "typed", "{}", NULL, &r, err, sizeof err), 0, "%s", err);
    cr_expect(r.output && strstr(r.output, "\"count\": 9"), "%s", r.output ? r.output : "(none)");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(plugin_kit, the_hosts_checks_apply_bad_keys_unknown_kinds_and_invalid_json_are_refused)
{
    char err[1024];
    cr_expect_null(skipq_test_load(FIXTURE("typed"), "count = 4\ntimout = 1s\n", err, sizeof err));
    cr_expect(strstr(err, "(test):2: unknown key \"timout\" in [plugin typed]"), "%s", err);
    cr_expect_null(skipq_test_load(FIXTURE("typed"), "url = gopher://x\n", err, sizeof err));
    cr_expect(strstr(err, "(test):1: [plugin typed] url: \"gopher://x\" must start with http:// or https://"), "%s",
              err);
    cr_expect_null(skipq_test_load(FIXTURE("bad_abi"), NULL, err, sizeof err));
    cr_expect(strstr(err, "ABI 2.3; this host provides ABI 1.1"), "%s", err);
    skipq_test_plugin *tp = must_load(FIXTURE("typed"), NULL);
    skipq_test_result r;
    cr_expect_eq(skipq_test_run(tp, "nope", "{}", NULL, &r, err, sizeof err), -1);
    cr_expect(strstr(err, "registers no kind \"nope\""), "%s", err);
    cr_expect_eq(skipq_test_run(tp, "typed", "{\"a\":", NULL, &r, err, sizeof err), -1);
    cr_expect(strstr(err, "not valid JSON"), "%s", err);
    skipq_test_unload(tp);
}

Test(plugin_kit, with_a_connection_string_the_handlers_writes_are_rolled_back, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "CREATE TABLE public.skipq_notes (job_id bigint, execution_id bigint, note text)");
    skipq_test_plugin *tp = must_load(SKIPQ_PLUGIN_DIR "/txn_note.so", NULL);
    skipq_test_result r;
    char err[1024];
    skipq_test_opts o = {.conninfo = db.conninfo};
    cr_assert_eq(skipq_test_run(tp, "note.write", "{\"note\": \"hi\"}", &o, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_DONE, "%s", r.error);
    cr_expect_eq(r.used_conn, 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM public.skipq_notes"), 0, "the handler's write was kept");
    skipq_test_result_free(&r);
    /* without one, skipq_job_conn() is NULL, as on a host cut off from its database */
    cr_assert_eq(skipq_test_run(tp, "note.write", "{}", NULL, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_str_eq(r.error, "no database connection");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}
