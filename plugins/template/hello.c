/*
 * hello.c -- the out-of-tree plugin template: copy this directory, rename
 * the plugin and its kind, and write your handler. It builds against an
 * installed skipq, never a source tree: `make` (pkg-config skipq-plugin) or
 * `cmake -S . -B build && cmake --build build` (find_package(skipq)), and
 * `make check` / `ctest --test-dir build` runs its tests (test_hello.c) with
 * the installed test kit, no database needed.
 *
 * It is written for plugin ABI 1.1 and shows what a handler author uses:
 * declared keys (the host checks the [plugin hello] section against them:
 * a typo stops it with FILE:LINE and exit status 2), typed getters, a
 * configuration error of its own, skipq_job_deadline_ms() to size its work
 * under the kind's timeout, the stop contract (poll should-stop, return
 * SKIPQ_RETRY with a reason), and the attempt's output.
 *
 * Kind "hello" (or the section's `kind` key): logs the greeting `times`
 * times with the job's payload, "works" for `work` polling should-stop,
 * and succeeds with the output {"greeted": TIMES}. The contract --
 * outcomes, errors, the job's transaction, stopping -- is skipq-plugin(7)
 * and <skipq/plugin.h>.
 *
 * INI:
 *     [plugin hello]
 *     path = /usr/lib/x86_64-linux-gnu/skipq/hello.so
 *     greeting = bonjour
 *     times = 2
 */
#include <skipq/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HELLO_GREETING_MAX 64

/* What the host checks the section against, and `skipq exec --help-plugin hello.so` lists. */
static const skipq_config_key hello_keys[] = {
    {"kind", SKIPQ_CONFIG_STRING, "hello", 0, 0, "the kind this plugin handles"},
    {"greeting", SKIPQ_CONFIG_STRING, "hello", 0, 0, "what each job's log line starts with"},
    {"times", SKIPQ_CONFIG_INT, "1", 1, 10, "how many times a job is greeted"},
    {"work", SKIPQ_CONFIG_DURATION, "0ms", 0, 60000, "how long a job pretends to work, polling should-stop"},
    {NULL, SKIPQ_CONFIG_STRING, NULL, 0, 0, NULL}};

struct hello {
    const char *greeting; /* the host's string: lives until shutdown() returns */
    int64_t times, work_ms;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Work for h->work_ms in 10 ms steps; 0, or -1 once told to stop. */
static int work(skipq_job *job, const struct hello *h)
{
    int64_t start = now_ms();
    while (now_ms() - start < h->work_ms) {
        if (skipq_job_should_stop(job)) /* one atomic load: poll it as often as you like */
            return -1;
        struct timespec step = {0, 10 * 1000000};
        nanosleep(&step, NULL);
    }
    return 0;
}

static skipq_outcome hello(skipq_job *job, void *userdata)
{
    const struct hello *h = userdata;
    /* Time left before the kind's timeout or the end of a shutdown's grace
     * (-1: neither): work that cannot finish in it is not started. */
    int64_t left = skipq_job_deadline_ms(job);
    if (left >= 0 && left < h->work_ms) {
        skipq_job_error(job, "needs %lld ms of work, only %lld ms left before the deadline", (long long)h->work_ms,
                        (long long)left);
        return SKIPQ_RETRY;
    }
    for (int64_t i = 0; i < h->times; i++)
        skipq_job_log(job, SKIPQ_LOG_INFO, "%s: job %lld, attempt %d of %d, payload %s", h->greeting,
                      (long long)job->id, job->attempt, job->max_attempts, job->payload);
    if (work(job, h) != 0) {
        /* Recorded as returned if the host is shutting down (within its stop
         * window); after a timeout the attempt is a retry anyway. */
        skipq_job_error(job, "stopped on request before the work was done");
        return SKIPQ_RETRY;
    }
    char out[64];
    int n = snprintf(out, sizeof out, "{\"greeted\": %lld}", (long long)h->times);
    skipq_job_output(job, out, (size_t)n);
    return SKIPQ_DONE;
}

static int hello_init(skipq_plugin *p)
{
    struct hello *h = calloc(1, sizeof *h);
    if (!h) {
        skipq_plugin_log(p, SKIPQ_LOG_ERROR, "out of memory");
        return 1;
    }
    /* Declared keys: the host has checked type and range, and a key the
     * section leaves out reads as its default. */
    h->greeting = skipq_config(p, "greeting");
    skipq_config_int(p, "times", &h->times);
    skipq_config_duration_ms(p, "work", &h->work_ms);
    if (strlen(h->greeting) > HELLO_GREETING_MAX) {
        /* A check of its own, reported as FILE:LINE: [plugin hello] greeting: ... */
        skipq_config_error(p, "greeting", "is %zu bytes; at most %d", strlen(h->greeting), HELLO_GREETING_MAX);
        free(h);
        return 1;
    }
    int rc = skipq_register(p, skipq_config(p, "kind"), hello, h);
    if (rc != SKIPQ_PLUGIN_OK) {
        skipq_plugin_log(p, SKIPQ_LOG_ERROR, "cannot register kind \"%s\" (%d)", skipq_config(p, "kind"), rc);
        free(h);
        return 1;
    }
    skipq_set_state(p, h);
    return 0;
}

/* Runs once, after every handler has returned. */
static void hello_shutdown(skipq_plugin *p)
{
    free(skipq_state(p));
}

SKIPQ_PLUGIN_KEYS("hello", "1.1.0", hello_init, hello_shutdown, hello_keys)
