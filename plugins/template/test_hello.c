/*
 * test_hello.c -- the template's own tests: hello.so loaded by the
 * installed test kit (<skipq/plugin_test.h>, libskipq_plugin_test), which
 * uses the host's own loader and services, so what passes here behaves the
 * same under `skipq run`. No database, no INI file, no host.
 *
 *     make check                      (pkg-config skipq-plugin-test)
 *     ctest --test-dir build          (find_package(skipq): skipq::plugin_test)
 *     ./test_hello [PATH/hello.so]    (default ./hello.so)
 *
 * Plain C and exit status (0: every test passed), so it needs no test
 * framework; keep the pattern, or use the framework of your choice.
 */
#include <skipq/plugin_test.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *plugin = "./hello.so";
static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* Load hello.so with `ini` as its section, or say why not and return NULL. */
static skipq_test_plugin *load(const char *ini)
{
    char err[1024];
    skipq_test_plugin *tp = skipq_test_load(plugin, ini, err, sizeof err);
    CHECK(tp != NULL, "%s", err);
    return tp;
}

/* Run kind hello on `payload`; 0, or -1 with the reason reported. */
static int run(skipq_test_plugin *tp, const char *payload, const skipq_test_opts *o, skipq_test_result *r)
{
    char err[1024];
    int rc = skipq_test_run(tp, "hello", payload, o, r, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    return rc;
}

static void greets_with_the_configured_greeting_and_records_its_output(void)
{
    skipq_test_plugin *tp = load("greeting = bonjour\ntimes = 2\n");
    skipq_test_result r;
    skipq_test_opts o = {.attempt = 3, .max_attempts = 7};
    if (!tp || run(tp, "{\"name\": \"ada\"}", &o, &r) != 0)
        goto done;
    CHECK(r.outcome == SKIPQ_DONE, "outcome %d, error %s", r.outcome, r.error);
    const char *line = "bonjour: job 1, attempt 3 of 7, payload {\"name\": \"ada\"}\n";
    const char *first = strstr(r.logs, line);
    CHECK(first && strstr(first + 1, line), "two greetings wanted in:\n%s", r.logs);
    CHECK(r.output && strcmp(r.output, "{\"greeted\": 2}") == 0, "output %s", r.output ? r.output : "(none)");
    skipq_test_result_free(&r);
done:
    skipq_test_unload(tp);
}

static void a_typo_or_a_bad_value_in_its_section_is_refused_with_its_line(void)
{
    char err[1024];
    CHECK(!skipq_test_load(plugin, "greeting = hi\ntimez = 2\n", err, sizeof err), "a typo was accepted");
    CHECK(strstr(err, "(test):2: unknown key \"timez\" in [plugin hello]"), "%s", err);
    CHECK(!skipq_test_load(plugin, "times = 11\n", err, sizeof err), "times = 11 was accepted");
    CHECK(strstr(err, "(test):1:") && strstr(err, "times"), "%s", err);
    char ini[512];
    snprintf(ini, sizeof ini, "greeting = %0100d\n", 0);
    CHECK(!skipq_test_load(plugin, ini, err, sizeof err), "a 100-byte greeting was accepted");
    CHECK(strstr(err, "(test):1: [plugin hello] greeting: is 100 bytes; at most 64"), "%s", err);
}

static void work_that_cannot_finish_before_the_deadline_is_not_started(void)
{
    skipq_test_plugin *tp = load("work = 2s\n");
    skipq_test_result r;
    skipq_test_opts o = {.timeout_ms = 500}; /* the kind's timeout */
    if (!tp || run(tp, "{}", &o, &r) != 0)
        goto done;
    CHECK(r.outcome == SKIPQ_RETRY, "outcome %d", r.outcome);
    CHECK(strstr(r.error, "needs 2000 ms of work, only "), "error %s", r.error);
    CHECK(strstr(r.logs, "hello: job") == NULL, "it greeted anyway:\n%s", r.logs);
    skipq_test_result_free(&r);
done:
    skipq_test_unload(tp);
}

static void told_to_stop_it_returns_retry_with_a_reason(void)
{
    skipq_test_plugin *tp = load("work = 10s\n");
    skipq_test_result r;
    skipq_test_opts o = {.stop_after_ms = 50};
    if (!tp || run(tp, "{}", &o, &r) != 0)
        goto done;
    CHECK(r.outcome == SKIPQ_RETRY, "outcome %d", r.outcome);
    CHECK(strcmp(r.error, "stopped on request before the work was done") == 0, "error %s", r.error);
    CHECK(r.duration_us < 5 * 1000000, "it took %lld us to stop", (long long)r.duration_us);
    skipq_test_result_free(&r);
done:
    skipq_test_unload(tp);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        plugin = argv[1];
    greets_with_the_configured_greeting_and_records_its_output();
    a_typo_or_a_bad_value_in_its_section_is_refused_with_its_line();
    work_that_cannot_finish_before_the_deadline_is_not_started();
    told_to_stop_it_returns_retry_with_a_reason();
    if (failures) {
        fprintf(stderr, "test_hello: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_hello: all passed (%s)\n", plugin);
    return 0;
}
