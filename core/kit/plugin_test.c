/*
 * plugin_test.c -- libskipq_plugin_test, the test kit of
 * include/skipq/plugin_test.h: a thin public face over host/exec.c, the
 * engine `skipq exec` uses, so a plugin's own tests run its handler
 * exactly as a host would (the host's loader and service table), without
 * a host. Built as a shared library of its own that exports only the
 * skipq_test_* calls; everything else in it is hidden.
 */
#include "skipq/plugin_test.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "host/exec.h"

struct skipq_test_plugin {
    struct sq_exec *x;
};

static skipq_test_plugin *load(const char *path, const skipq_plugin_info *info, const char *ini, char *err,
                               size_t errlen)
{
    skipq_test_plugin *tp = calloc(1, sizeof *tp);
    if (!tp) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sq_log_set_level(SQ_LOG_WARN); /* the loader's "loaded plugin" lines are no test's business */
    if (!(tp->x = sq_exec_new(ini, "(test)", NULL, err, errlen)) || !sq_exec_load(tp->x, path, info, err, errlen)) {
        skipq_test_unload(tp);
        return NULL;
    }
    return tp;
}

skipq_test_plugin *skipq_test_load(const char *path, const char *ini, char *err, size_t errlen)
{
    if (!path) {
        snprintf(err, errlen, "skipq_test_load: path is NULL");
        return NULL;
    }
    return load(path, NULL, ini, err, errlen);
}

skipq_test_plugin *skipq_test_load_descriptor(const skipq_plugin_info *info, const char *ini, char *err,
                                              size_t errlen)
{
    if (!info) {
        snprintf(err, errlen, "skipq_test_load_descriptor: info is NULL");
        return NULL;
    }
    return load(NULL, info, ini, err, errlen);
}

void skipq_test_unload(skipq_test_plugin *tp)
{
    if (!tp)
        return;
    sq_exec_free(tp->x);
    free(tp);
}

int skipq_test_run(skipq_test_plugin *tp, const char *kind, const char *payload, const skipq_test_opts *opts,
                   skipq_test_result *res, char *err, size_t errlen)
{
    static const skipq_test_opts none;
    const skipq_test_opts *o = opts ? opts : &none;
    memset(res, 0, sizeof *res);
    if (!tp || !kind || !payload) {
        snprintf(err, errlen, "skipq_test_run: %s is NULL", !tp ? "the plugin" : !kind ? "kind" : "payload");
        return -1;
    }
    PGconn *conn = NULL;
    if (o->conninfo && (conn = PQconnectdb(o->conninfo), PQstatus(conn) != CONNECTION_OK)) {
        snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return -1;
    }
    struct sq_exec_opts eo = {.attempt = o->attempt, .max_attempts = o->max_attempts, .queue = o->queue,
                              .timeout_ms = o->timeout_ms, .stop_after_ms = o->stop_after_ms,
                              .stop_now = o->stop != 0, .conn = conn};
    struct sq_exec_result r;
    bool usage;
    bool ok = sq_exec_run(tp->x, kind, payload, &eo, &r, &usage, err, errlen);
    PQfinish(conn);
    if (!ok)
        return -1;
    res->outcome = r.outcome;
    memcpy(res->error, r.error, sizeof res->error);
    res->retry_in_ms = r.retry_in_ms;
    res->output = r.output;
    res->logs = r.logs;
    res->duration_us = r.duration_us;
    res->used_conn = r.used_conn;
    return 0;
}

void skipq_test_result_free(skipq_test_result *res)
{
    free(res->output);
    free(res->logs);
    res->output = res->logs = NULL;
}

void skipq_test_stop(skipq_test_plugin *tp)
{
    if (tp)
        sq_exec_stop(tp->x);
}
