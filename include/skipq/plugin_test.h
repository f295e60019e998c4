/*
 * skipq/plugin_test.h -- the test kit for plugin authors: run your handler
 * from a C test, without a database, an INI file or a host.
 *
 * Link with -lskipq_plugin_test (the CMake target skipq_plugin_test). The
 * plugin is loaded by the host's own loader -- the same path and
 * permission checks, ABI check, declared-key checks and init -- and its
 * handler gets the host's own services, so what passes here behaves the
 * same under `skipq run`. Nothing here touches skipq's tables.
 *
 *     char err[1024];
 *     skipq_test_plugin *tp = skipq_test_load("./webhook.so", "timeout = 2s\n", err, sizeof err);
 *     skipq_test_result r;
 *     skipq_test_opts o = {0};
 *     if (!tp || skipq_test_run(tp, "webhook", "{\"url\": \"...\"}", &o, &r, err, sizeof err) != 0) ...
 *     assert(r.outcome == SKIPQ_RETRY && strstr(r.error, "503"));
 *     skipq_test_result_free(&r);
 *     skipq_test_unload(tp);            (runs shutdown())
 *
 * A test that links the plugin's code into the test program itself (no .so)
 * loads it by descriptor: skipq_test_load_descriptor(skipq_plugin_describe(),
 * ...). Every call is for one thread at a time, but skipq_test_stop(), which
 * another thread may call while a handler runs.
 */
#ifndef SKIPQ_PLUGIN_TEST_H
#define SKIPQ_PLUGIN_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "skipq/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKIPQ_TEST_API __attribute__((visibility("default")))

typedef struct skipq_test_plugin skipq_test_plugin;

/*
 * Load the plugin at `path` (relative paths from the working directory).
 * `ini` is its configuration as INI text: either bare "key = value" lines or
 * a whole file holding a [plugin NAME] section (NULL: no keys). Returns NULL
 * with the reason in err -- the host's own message, FILE:LINE included for
 * a bad key (the file is called "(test)").
 */
SKIPQ_TEST_API skipq_test_plugin *skipq_test_load(const char *path, const char *ini, char *err, size_t errlen);
/* The same for a plugin linked into the test program: its descriptor. */
SKIPQ_TEST_API skipq_test_plugin *skipq_test_load_descriptor(const skipq_plugin_info *info, const char *ini,
                                                             char *err, size_t errlen);
/* shutdown(), unload, free. NULL-safe. */
SKIPQ_TEST_API void skipq_test_unload(skipq_test_plugin *tp);

typedef struct skipq_test_opts {
    int attempt;            /* what job->attempt says; 0: 1 */
    int max_attempts;       /* 0: 5 */
    const char *queue;      /* NULL: "default" */
    int64_t timeout_ms;     /* the kind's timeout: should-stop and skipq_job_deadline_ms(); 0: none */
    int stop;               /* non-zero: skipq_job_should_stop() is true from the start */
    int64_t stop_after_ms;  /* should-stop turns true after this long; 0: never */
    /* With a connection string, skipq_job_conn() gives a connection to that
     * database inside a transaction, rolled back after the handler (NULL:
     * skipq_job_conn() returns NULL, as when a host cannot reach the
     * database). The payload is then handed over as jsonb renders it. */
    const char *conninfo;
} skipq_test_opts;

typedef struct skipq_test_result {
    skipq_outcome outcome;
    char error[SKIPQ_ERROR_SIZE]; /* skipq_job_error()'s message, "" if none */
    int64_t retry_in_ms;          /* skipq_job_retry_in(), -1 if not called */
    char *output;                 /* skipq_job_output()'s JSON, NULL if none */
    char *logs;                   /* every line the handler logged, each ending in '\n' */
    int64_t duration_us;
    int used_conn;                /* the handler called skipq_job_conn() */
} skipq_test_result;

/*
 * Run the handler of `kind` once on `payload` (JSON text). Returns 0 and
 * fills *res (free it with skipq_test_result_free), or -1 with the reason
 * in err: no such kind, a payload that is not JSON, a database that cannot
 * be reached. opts may be NULL.
 */
SKIPQ_TEST_API int skipq_test_run(skipq_test_plugin *tp, const char *kind, const char *payload,
                                  const skipq_test_opts *opts, skipq_test_result *res, char *err, size_t errlen);
SKIPQ_TEST_API void skipq_test_result_free(skipq_test_result *res);

/* From another thread while a handler runs: skipq_job_should_stop() turns true. */
SKIPQ_TEST_API void skipq_test_stop(skipq_test_plugin *tp);

#ifdef __cplusplus
}
#endif
#endif /* SKIPQ_PLUGIN_TEST_H */
