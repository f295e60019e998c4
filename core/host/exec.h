/* exec.h -- one plugin, one handler call, in this process: `skipq exec` and the plugin test kit. */
#ifndef SQ_EXEC_H
#define SQ_EXEC_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skipq/plugin.h"

struct sq_exec;

/*
 * The [plugin NAME] keys from an INI text (`file` names it in FILE:LINE
 * messages): the one [plugin ...] section, or the one called `name` (NULL:
 * there must be exactly one), or -- a text with no section at all -- its
 * bare "key = value" lines. NULL text: no keys. false with the reason.
 */
struct sq_exec *sq_exec_new(const char *text, const char *file, const char *name, char *err, size_t errlen);

/* Load the plugin at `path` with every check the host makes, or (path NULL)
 * the one whose descriptor is `info`; init runs. false with the reason. */
bool sq_exec_load(struct sq_exec *x, const char *path, const skipq_plugin_info *info, char *err, size_t errlen);

/* The loaded plugin's descriptor (NULL before a load). */
const skipq_plugin_info *sq_exec_info(const struct sq_exec *x);

struct sq_exec_opts {
    int attempt;          /* 0: 1 */
    int max_attempts;     /* 0: 5 */
    const char *queue;    /* NULL: "default" */
    int64_t timeout_ms;   /* the kind's timeout (deadline, should-stop); 0: none */
    int64_t stop_after_ms; /* should-stop turns true after this long; 0: never (but see stop_now) */
    bool stop_now;        /* should-stop is true from the start */
    PGconn *conn;         /* NULL: skipq_job_conn() returns NULL */
    bool commit;          /* commit the handler's transaction if it returns DONE (else roll back) */
};

struct sq_exec_result {
    skipq_outcome outcome;
    char error[SKIPQ_ERROR_SIZE];
    int64_t retry_in_ms; /* -1: none asked for */
    char *output;        /* skipq_job_output's JSON, or NULL */
    char *logs;          /* the handler's log lines, each ending in '\n' ("" if none) */
    int64_t duration_us;
    bool used_conn;      /* the handler took the connection */
    bool committed;      /* and its transaction was committed */
};

/*
 * Run the handler of `kind` once on `payload` (checked as JSON; with a
 * connection, handed over as jsonb renders it, as a host would). *usage
 * is set when the fault is the caller's (no such kind, invalid JSON).
 * false with the reason; else r holds what the handler did (free with
 * sq_exec_result_free).
 */
bool sq_exec_run(struct sq_exec *x, const char *kind, const char *payload, const struct sq_exec_opts *o,
                 struct sq_exec_result *r, bool *usage, char *err, size_t errlen);
void sq_exec_result_free(struct sq_exec_result *r);

/* While a handler runs (from another thread): make should-stop true. */
void sq_exec_stop(struct sq_exec *x);

/* shutdown() and unload; NULL-safe. */
void sq_exec_free(struct sq_exec *x);

#endif
