/*
 * testkit.c -- a handler whose payload says what to do; for tests and demos.
 *
 * It lives under tests/ and is never installed: on request it crashes the
 * host. It is built next to the example plugins (build/plugins/testkit.so,
 * SKIPQ_PLUGIN_DIR of the harness), with the test suites.
 *
 * Payload keys (all optional; with none the job succeeds):
 *   "sleep_ms": N       work for N ms (polling skipq_job_should_stop every 5 ms)
 *   "fail_times": N     fail (retryable) while attempt <= N, then succeed
 *   "fail": "msg"       always fail, retryable
 *   "permanent": "msg"  fail permanently: the job is dead at once
 *   "retry_in_ms": N    with a failure: retry after N ms instead of the backoff
 *   "txn": true         also insert (job_id, execution_id) into the effects
 *                       table inside the job's transaction
 *   "ignore_stop": true keep sleeping even when asked to stop
 *   "spin_ms": N        burn the CPU for N ms without ever looking at
 *                       skipq_job_should_stop (a handler stuck in a loop;
 *                       runs before "sleep_ms")
 *   "leak_bytes": N     allocate N bytes, write every page of them (so they
 *                       are resident, not just reserved) and never free them
 *   "crash": how        die, taking the process that runs the handler with
 *                       it (the host in thread mode, one worker process in
 *                       process mode; poison-job tests):
 *                         "segv"   SIGSEGV
 *                         "abort"  abort(), SIGABRT
 *                         "exit3"  exit(3), atexit handlers and all
 *                         "stack"  recursion without end until the stack
 *                                  overflows (SIGSEGV on the guard page)
 *
 * Shows: payload-driven behaviour, cooperative stopping, transactional
 * writes, and plugin configuration.
 *
 * INI:
 *     [plugin testkit]
 *     path = testkit.so
 *     kinds = test, test.other        ; kinds to register (default "test")
 *     ledger = /tmp/ledger.txt        ; optional: one line per handler start
 *     effects_table = public.testkit_effects   ; for "txn": true
 *
 * The ledger is written with O_APPEND, one write(2) per line, so lines from
 * threads and processes never interleave: "job_id execution_id attempt pid".
 *
 * The JSON reader below only understands the flat objects jsonb prints
 * ({"key": value, ...}); it is a test tool, not a JSON parser.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <signal.h>
#include <skipq/plugin.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct testkit {
    int ledger_fd; /* -1: none */
    char insert_sql[256];
};

/* Pointer to the value of "key" in a flat JSON object, or NULL. */
static const char *json_value(const char *json, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = json; (p = strchr(p, '"')) != NULL; p++) {
        if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '"') {
            const char *v = p + 2 + kl;
            while (*v == ' ')
                v++;
            if (*v != ':')
                continue;
            v++;
            while (*v == ' ')
                v++;
            return v;
        }
    }
    return NULL;
}

static long long json_int(const char *json, const char *key, long long dflt)
{
    const char *v = json_value(json, key);
    return v && ((*v >= '0' && *v <= '9') || *v == '-') ? strtoll(v, NULL, 10) : dflt;
}

static bool json_true(const char *json, const char *key)
{
    const char *v = json_value(json, key);
    return v && strncmp(v, "true", 4) == 0;
}

/* Copy a string value (without unescaping) into buf. */
static bool json_str(const char *json, const char *key, char *buf, size_t len)
{
    const char *v = json_value(json, key);
    if (!v || *v != '"')
        return false;
    v++;
    size_t n = 0;
    while (v[n] && v[n] != '"' && n + 1 < len) {
        buf[n] = v[n];
        n++;
    }
    /* Cut short inside a multi-byte character? Drop its lead bytes. */
    if (v[n] && v[n] != '"')
        while (n > 0 && ((unsigned char)buf[n - 1] & 0xC0) == 0x80)
            n--;
    if (n > 0 && v[n] && v[n] != '"' && ((unsigned char)buf[n - 1] & 0xC0) == 0xC0)
        n--;
    buf[n] = '\0';
    return true;
}

/* The last leaked block ("leak_bytes"), written so the allocation and its
 * memset are observable and cannot be optimised away; atomic, because
 * handlers on several threads leak at once. */
static _Atomic(char *) leak_sink;

/* Never equal to a real depth: stops the compiler from proving the
 * recursion below endless (-Winfinite-recursion) or ending it itself. */
static volatile long never_depth = -1;

/*
 * Recurse until the stack runs out. Each frame keeps a volatile page that
 * is written before the call and read after it, so the call cannot become a
 * tail call or a loop, and every frame really uses its page of stack.
 */
__attribute__((noinline)) static long overflow_stack(long depth)
{
    volatile char frame[4096];
    frame[0] = (char)depth;
    frame[sizeof frame - 1] = (char)(depth >> 8);
    if (depth == never_depth)
        return 0;
    return overflow_stack(depth + 1) + frame[0] + frame[sizeof frame - 1];
}

static void crash(const char *how)
{
    if (strcmp(how, "abort") == 0)
        abort();
    if (strcmp(how, "exit3") == 0)
        exit(3);
    if (strcmp(how, "stack") == 0)
        never_depth = overflow_stack(0); /* never returns */
    raise(SIGSEGV);
}

/* Busy for ms milliseconds of wall time; deaf to stop requests. */
static void spin(long long ms)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile unsigned long burn = 0;
    do {
        for (int i = 0; i < 100000; i++)
            burn += (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

static void ledger(struct testkit *t, const skipq_job *job)
{
    if (t->ledger_fd < 0)
        return;
    char line[128];
    int n = snprintf(line, sizeof line, "%" PRId64 " %" PRId64 " %d %d\n", job->id, job->execution_id,
                     job->attempt, (int)getpid());
    if (write(t->ledger_fd, line, (size_t)n) != n)
        abort(); /* a lost ledger line would make a test lie */
}

static skipq_outcome run(skipq_job *job, void *userdata)
{
    struct testkit *t = userdata;
    const char *p = job->payload;
    char msg[256];
    ledger(t, job);

    if (json_str(p, "crash", msg, sizeof msg))
        crash(msg);
    long long leak = json_int(p, "leak_bytes", 0);
    if (leak > 0) {
        char *lost = malloc((size_t)leak);
        if (lost)
            memset(lost, 0xA5, (size_t)leak); /* touch it, so it is really used */
        atomic_store(&leak_sink, lost); /* escapes: the compiler may not drop the block */
    }
    long long spin_ms = json_int(p, "spin_ms", 0);
    if (spin_ms > 0)
        spin(spin_ms);
    long long sleep_ms = json_int(p, "sleep_ms", 0);
    bool ignore_stop = json_true(p, "ignore_stop");
    for (long long slept = 0; slept < sleep_ms; slept += 5) {
        if (!ignore_stop && skipq_job_should_stop(job)) {
            skipq_job_error(job, "stopped after %lld of %lld ms: the host asked the handler to stop", slept, sleep_ms);
            return SKIPQ_RETRY;
        }
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (json_true(p, "txn")) {
        PGconn *conn = skipq_job_conn(job);
        if (!conn) {
            skipq_job_error(job, "no database connection");
            return SKIPQ_RETRY;
        }
        char jid[24], eid[24];
        snprintf(jid, sizeof jid, "%" PRId64, job->id);
        snprintf(eid, sizeof eid, "%" PRId64, job->execution_id);
        const char *params[2] = {jid, eid};
        PGresult *res = PQexecParams(conn, t->insert_sql, 2, NULL, params, NULL, NULL, 0);
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            skipq_job_error(job, "effects insert failed: %s", PQresultErrorMessage(res));
        PQclear(res);
        if (!ok)
            return SKIPQ_RETRY;
    }
    long long retry_in = json_int(p, "retry_in_ms", -1);
    if (json_str(p, "permanent", msg, sizeof msg)) {
        skipq_job_error(job, "%s", msg);
        return SKIPQ_FAIL;
    }
    if (json_str(p, "fail", msg, sizeof msg)) {
        skipq_job_error(job, "%s", msg);
        if (retry_in >= 0)
            skipq_job_retry_in(job, retry_in);
        return SKIPQ_RETRY;
    }
    long long fail_times = json_int(p, "fail_times", 0);
    if (job->attempt <= fail_times) {
        skipq_job_error(job, "planned failure %d of %lld", job->attempt, fail_times);
        if (retry_in >= 0)
            skipq_job_retry_in(job, retry_in);
        return SKIPQ_RETRY;
    }
    return SKIPQ_DONE;
}

static void testkit_shutdown(skipq_plugin *p);

static int testkit_init(skipq_plugin *p)
{
    struct testkit *t = calloc(1, sizeof *t);
    if (!t)
        return 1;
    t->ledger_fd = -1;
    skipq_set_state(p, t);
    const char *path = skipq_config(p, "ledger");
    if (path) {
        t->ledger_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (t->ledger_fd < 0) {
            skipq_plugin_log(p, SKIPQ_LOG_ERROR, "cannot open ledger %s: %s", path, strerror(errno));
            testkit_shutdown(p);
            return 1;
        }
    }
    const char *table = skipq_config(p, "effects_table");
    snprintf(t->insert_sql, sizeof t->insert_sql,
             "INSERT INTO %s (job_id, execution_id) VALUES ($1::bigint, $2::bigint)",
             table ? table : "public.testkit_effects");
    const char *kinds = skipq_config(p, "kinds");
    char list[512];
    snprintf(list, sizeof list, "%s", kinds ? kinds : "test");
    char *save = NULL;
    for (char *k = strtok_r(list, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) {
        int rc = skipq_register(p, k, run, t);
        if (rc != SKIPQ_PLUGIN_OK) {
            testkit_shutdown(p);
            return rc;
        }
    }
    return 0;
}

static void testkit_shutdown(skipq_plugin *p)
{
    struct testkit *t = skipq_state(p);
    if (t && t->ledger_fd >= 0)
        close(t->ledger_fd);
    free(t);
    skipq_set_state(p, NULL);
}

SKIPQ_PLUGIN("testkit", "1.0.0", testkit_init, testkit_shutdown)
