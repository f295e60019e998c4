/*
 * txn_note.c -- a handler whose database write commits with the job.
 *
 * Kind "note.write" inserts one row into a table of the application's (by
 * default public.skipq_notes: job_id bigint, execution_id bigint, note text)
 * on the worker's connection, inside the transaction skipq opened for the
 * attempt. The row and the job's done marker commit together; if the handler
 * fails, or the attempt lost its lease to another worker, both roll back.
 *
 * Shows: skipq_job_conn(), parameterised SQL in a handler, and plugin state
 * read once in init. The SQL names its table and every built-in by schema:
 * the job's connection has skipq's search_path (pg_catalog, pg_temp), or,
 * behind a pooler in transaction mode, whatever the server's settings give.
 *
 * INI:
 *     [plugin notes]
 *     path = txn_note.so
 *     table = public.skipq_notes   ; optional; an existing table
 *
 * Payload: {"note": "any text"}; the whole payload is stored if it has no
 * "note" key.
 */
#include <inttypes.h>
#include <libpq-fe.h>
#include <skipq/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct notes {
    char insert_sql[512];
};

/* Why the insert failed: the server's message, or -- when there is none
 * (no result, the connection lost mid-statement, as under a failover) --
 * libpq's, without its trailing newline. */
static void insert_failed(skipq_job *job, PGconn *conn, const PGresult *res)
{
    const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!msg || !*msg)
        msg = PQerrorMessage(conn);
    size_t len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        len--;
    if (len == 0)
        skipq_job_error(job, "insert failed (no message from the server or libpq)");
    else
        skipq_job_error(job, "insert failed: %.*s", (int)len, msg);
}

static skipq_outcome write_note(skipq_job *job, void *userdata)
{
    struct notes *n = userdata;
    PGconn *conn = skipq_job_conn(job);
    if (!conn) {
        skipq_job_error(job, "no database connection");
        return SKIPQ_RETRY;
    }
    char jid[24], eid[24];
    snprintf(jid, sizeof jid, "%" PRId64, job->id);
    snprintf(eid, sizeof eid, "%" PRId64, job->execution_id);
    const char *params[3] = {jid, eid, job->payload};
    PGresult *res = PQexecParams(conn, n->insert_sql, 3, NULL, params, NULL, NULL, 0);
    skipq_outcome out = SKIPQ_DONE;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        insert_failed(job, conn, res);
        out = SKIPQ_RETRY;
    }
    PQclear(res);
    return out;
}

static int notes_init(skipq_plugin *p)
{
    const char *table = skipq_config(p, "table");
    if (!table)
        table = "public.skipq_notes";
    /* The table name comes from the operator's INI, not from job payloads;
     * still, accept only a plain [schema.]identifier. */
    for (const char *c = table; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.')) {
            skipq_plugin_log(p, SKIPQ_LOG_ERROR, "table \"%s\": use lower-case letters, digits, _ and one .", table);
            return 1;
        }
    }
    struct notes *n = calloc(1, sizeof *n);
    if (!n)
        return 1;
    snprintf(n->insert_sql, sizeof n->insert_sql,
             "INSERT INTO %s (job_id, execution_id, note) "
             "VALUES ($1::pg_catalog.int8, $2::pg_catalog.int8,"
             " coalesce($3::pg_catalog.jsonb OPERATOR(pg_catalog.->>) 'note', $3::pg_catalog.text))",
             table);
    skipq_set_state(p, n);
    int rc = skipq_register(p, "note.write", write_note, n);
    if (rc != SKIPQ_PLUGIN_OK)
        free(n);
    return rc;
}

static void notes_shutdown(skipq_plugin *p)
{
    free(skipq_state(p));
}

SKIPQ_PLUGIN("txn_note", "1.0.0", notes_init, notes_shutdown)
