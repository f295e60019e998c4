/*
 * jobapi.c -- what a handler can ask of the host about the job it runs.
 *
 * A handler gets a skipq_job whose api table (sq_host_api, plugin.c) leads
 * here: set the error message, choose the retry delay, take the worker's
 * connection (in a transaction opened for it, which commits with the done
 * marker: complete.c), ask whether to stop, log with the job's id. The
 * job's context (struct sq_job_ctx) lives on the worker's stack for the
 * handler's call and holds skipq_job first, so a handler's pointer leads
 * back to it.
 *
 * ABI 1.1 adds the deadline (the kind's timeout or the end of the shutdown
 * grace, from the job's slot) and the output: JSON checked with json-c
 * when the handler hands it over, kept here, and written to the execution
 * row after the outcome (sq_job_output_save), so a failed attempt keeps
 * its output too.
 */
#include "host/jobapi.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/log.h"
#include "common/util.h"
#include "host/state.h"

static struct sq_job_ctx *ctx_of(const skipq_job *job)
{
    return (struct sq_job_ctx *)job;
}

void sq_job_verror(skipq_job *job, const char *fmt, va_list ap)
{
    vsnprintf(ctx_of(job)->error, sizeof ctx_of(job)->error, fmt, ap);
    sq_utf8_sanitize(ctx_of(job)->error);
}

void sq_job_retry_in(skipq_job *job, int64_t delay_ms)
{
    ctx_of(job)->retry_ms = delay_ms < 0 ? 0 : delay_ms;
}

struct pg_conn *sq_job_conn(skipq_job *job)
{
    struct sq_job_ctx *c = ctx_of(job);
    if (c->in_txn)
        return c->conn;
    if (!c->conn && c->lazy && !c->conn_broken && !(c->conn = sq_job_session(c)))
        return NULL;
    if (c->conn_broken || !c->conn)
        return NULL;
    /* The session runs skipq's statements with enable_seqscan and jit off
     * and generic plans only (see sq_session_open); the handler's
     * statements are planned as usual.
     * Its search_path stays skipq's (pg_catalog, pg_temp: db.c) unless
     * pooler = transaction: a handler names its tables by schema, or sets
     * its own path with SET LOCAL. */
    PGresult *res = PQexec(c->conn, "BEGIN ISOLATION LEVEL READ COMMITTED;"
                                    " SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL jit TO DEFAULT;"
                                    " SET LOCAL plan_cache_mode TO DEFAULT");
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        log_warn("job %" PRId64 ": could not open a transaction for the handler: %s", job->id,
                 PQerrorMessage(c->conn));
        c->conn_broken = true;
        return NULL;
    }
    c->in_txn = true;
    return c->conn;
}

int sq_job_should_stop(const skipq_job *job)
{
    return atomic_load(&ctx_of(job)->slot->stop) != 0;
}

void sq_job_vlog(skipq_job *job, int level, const char *fmt, va_list ap)
{
    if (level > sq_log_threshold && !sq_log_tapped())
        return;
    char prefix[192];
    snprintf(prefix, sizeof prefix, "job %" PRId64 " (%s): ", job->id, job->kind);
    sq_log_vwrite(level, prefix, fmt, ap);
}

int64_t sq_job_deadline_ms(const skipq_job *job)
{
    const struct sq_slot *sl = ctx_of(job)->slot;
    int64_t at = sl->timeout_at, stop = atomic_load(&sl->stop_at);
    if (stop && (!at || stop < at))
        at = stop;
    if (!at)
        return -1;
    int64_t left = at - sq_now_ms();
    return left > 0 ? left : 0;
}

/* One JSON value and nothing after it (json-c alone accepts trailing text). */
bool sq_job_json_valid(const char *s, size_t len)
{
    struct json_tokener *t = json_tokener_new();
    if (!t)
        return false;
    json_tokener_set_flags(t, JSON_TOKENER_STRICT);
    struct json_object *o = json_tokener_parse_ex(t, s, (int)len);
    bool ok = o && json_tokener_get_error(t) == json_tokener_success;
    size_t used = ok ? json_tokener_get_parse_end(t) : 0;
    for (; ok && used < len; used++)
        ok = s[used] == ' ' || s[used] == '\t' || s[used] == '\n' || s[used] == '\r';
    json_object_put(o);
    json_tokener_free(t);
    return ok;
}

int sq_job_output(skipq_job *job, const char *json, size_t len)
{
    struct sq_job_ctx *c = ctx_of(job);
    if (!json)
        return SKIPQ_PLUGIN_EINVAL;
    if (len > SKIPQ_OUTPUT_SIZE)
        return SKIPQ_PLUGIN_ETOOBIG;
    if (memchr(json, '\0', len) || !sq_job_json_valid(json, len))
        return SKIPQ_PLUGIN_EINVAL;
    char *copy = malloc(len + 1);
    if (!copy)
        return SKIPQ_PLUGIN_ENOMEM;
    memcpy(copy, json, len);
    copy[len] = '\0';
    free(c->output);
    c->output = copy;
    return SKIPQ_PLUGIN_OK;
}

static const char OUTPUT_SQL[] =
    "UPDATE skipq.job_executions SET output = $3::pg_catalog.jsonb"
    " WHERE job_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 AND id OPERATOR(pg_catalog.=) $2::pg_catalog.int8";

PGconn *sq_job_session(struct sq_job_ctx *c)
{
    if (c->conn || !c->lazy)
        return c->conn;
    char err[512];
    struct sq_worker *w = c->lazy_owner;
    c->conn = *c->lazy = c->open(w, err, sizeof err);
    if (!c->conn)
        log_warn("job %" PRId64 ": cannot open a session for its handler thread: %s", c->pub.id, err);
    return c->conn;
}

void sq_job_output_save(struct sq_job_ctx *c, PGconn *conn)
{
    if (!c->output)
        return;
    if (!conn && c->lazy)
        conn = sq_job_session(c);
    char id[24], eid[24], err[512] = "the connection was lost";
    snprintf(id, sizeof id, "%" PRId64, c->pub.id);
    snprintf(eid, sizeof eid, "%" PRId64, c->pub.execution_id);
    const char *params[3] = {id, eid, c->output};
    PGresult *res = conn && PQtransactionStatus(conn) == PQTRANS_IDLE
                        ? sq_db_query(conn, OUTPUT_SQL, 3, params, err, sizeof err)
                        : NULL;
    if (!res)
        log_warn("job %" PRId64 ": could not record the handler's output: %s", c->pub.id, err);
    PQclear(res);
    free(c->output);
    c->output = NULL;
}
