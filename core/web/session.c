/*
 * session.c -- the dashboard's database session.
 *
 * `skipq web` is one thread serving one request at a time, so it keeps one
 * session, connected at the first request that needs it and again after
 * it breaks (a request then gets 503 and the next reconnects). Each
 * session is set up once: ISO dates in UTC for the JSON, a statement
 * timeout under the request deadline, and read-only when --read-only says
 * so; and it reads what its role may do, so actions are hidden before
 * they would be refused.
 */
#include "web/session.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

/* ---- the database ------------------------------------------------------------------------ */

static bool session_setup(struct sq_web *w, PGconn *conn, char *err, size_t errlen)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres'; SET jit = off;"
             " SET statement_timeout = %d; SET default_transaction_read_only = %s",
             STATEMENT_TIMEOUT_MS, w->read_only ? "on" : "off");
    return sq_db_exec(conn, sql, err, errlen);
}

/* Who we are and whether we may act: UPDATE on the job tables (retry,
 * cancel), EXECUTE on pause and resume, a primary that takes writes. */
static const char CAPS_SQL[] =
    "SELECT current_user::pg_catalog.text,"
    "       pg_catalog.has_table_privilege('skipq.jobs', 'UPDATE')"
    "         AND pg_catalog.has_table_privilege('skipq.job_executions', 'UPDATE'),"
    "       pg_catalog.has_function_privilege('skipq.pause(text, text)', 'EXECUTE')"
    "         AND pg_catalog.has_function_privilege('skipq.resume(text, text)', 'EXECUTE'),"
    "       pg_catalog.pg_is_in_recovery()";

bool web_read_caps(struct sq_web *w, PGconn *conn, char *err, size_t errlen)
{
    PGresult *r = PQexec(conn, CAPS_SQL);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        sq_db_error(conn, r, err, errlen);
        PQclear(r);
        return false;
    }
    sq_strlcpy(w->role, PQgetvalue(r, 0, 0), sizeof w->role);
    bool jobs = *PQgetvalue(r, 0, 1) == 't', pause = *PQgetvalue(r, 0, 2) == 't', standby = *PQgetvalue(r, 0, 3) == 't';
    w->can_act = jobs && pause && !standby;
    snprintf(w->cannot_act, sizeof w->cannot_act, "%s",
             standby ? "the server is a standby (read-only)"
             : !jobs ? "the role may not update skipq.jobs and skipq.job_executions"
             : !pause ? "the role may not execute skipq.pause and skipq.resume"
                      : "");
    PQclear(r);
    return true;
}

PGconn *web_connect(struct sq_web *w, char *err, size_t errlen)
{
    PGconn *conn = sq_db_connect(&w->params, err, errlen);
    if (conn && (!session_setup(w, conn, err, errlen) || !web_read_caps(w, conn, err, errlen))) {
        PQfinish(conn);
        conn = NULL;
    }
    return conn;
}

PGconn *web_db(struct web_call *c)
{
    struct sq_web *w = c->w;
    if (w->conn && PQstatus(w->conn) != CONNECTION_OK) {
        PQfinish(w->conn);
        w->conn = NULL;
    }
    if (!w->conn) {
        char err[400];
        w->conn = web_connect(w, err, sizeof err);
        if (!w->conn) {
            snprintf(c->err, sizeof c->err, "cannot reach the database: %s", err);
            return NULL;
        }
        log_info("connected to the database again");
    }
    return w->conn;
}

unsigned web_db_failed(struct web_call *c)
{
    const char *st = sq_db_last_sqlstate();
    if (c->w->conn && (PQstatus(c->w->conn) != CONNECTION_OK || sq_db_conn_lost(c->w->conn, NULL))) {
        PQfinish(c->w->conn);
        c->w->conn = NULL;
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    if (strncmp(st, "22", 2) == 0)
        return MHD_HTTP_BAD_REQUEST;
    if (strcmp(st, "42501") == 0)
        return MHD_HTTP_FORBIDDEN;
    if (strcmp(st, "57014") == 0) {
        snprintf(c->err, sizeof c->err, "the query took longer than %d ms; narrow the filters",
                 STATEMENT_TIMEOUT_MS);
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

PGresult *web_query(struct web_call *c, const char *sql, int n, const char *const *params)
{
    PGconn *conn = web_db(c);
    if (!conn)
        return NULL;
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        sq_db_error(conn, res, c->err, sizeof c->err);
        PQclear(res);
        return NULL;
    }
    return res;
}

bool web_begin_read(struct web_call *c)
{
    PGconn *conn = web_db(c);
    return conn && sq_db_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", c->err, sizeof c->err);
}

void web_end(struct web_call *c)
{
    if (c->w->conn && PQtransactionStatus(c->w->conn) != PQTRANS_IDLE)
        PQclear(PQexec(c->w->conn, "ROLLBACK"));
}

