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
 */
#include "host/jobapi.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

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
    if (c->conn_broken || !c->conn)
        return NULL;
    /* The session runs skipq's statements with enable_seqscan and jit off
     * (see sq_session_open); the handler's statements are planned as usual.
     * Its search_path stays skipq's (pg_catalog, pg_temp: db.c) unless
     * pooler = transaction: a handler names its tables by schema, or sets
     * its own path with SET LOCAL. */
    PGresult *res = PQexec(c->conn, "BEGIN ISOLATION LEVEL READ COMMITTED;"
                                    " SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL jit TO DEFAULT");
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
    if (level > sq_log_threshold)
        return;
    char prefix[192];
    snprintf(prefix, sizeof prefix, "job %" PRId64 " (%s): ", job->id, job->kind);
    sq_log_vwrite(level, prefix, fmt, ap);
}
