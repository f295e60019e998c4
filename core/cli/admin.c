/*
 * admin.c -- what an operator does to jobs from the shell: list them, look
 * at one with every attempt, redrive dead ones, cancel.
 *
 * Cancelling a running job needs no message to its host: the job stops
 * being `running` under the current execution, so the host's next
 * heartbeat finds the lease gone and asks the handler to stop, and the
 * handler's completion is fenced. A cancelled job never ends `done`.
 */
#include "cli/admin.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/util.h"
#include "host/queue.h"

/* Built-ins are named by schema in every statement: see "SCHEMA-QUALIFIED
 * SQL" in queue.c. */

/* Print a result as a table, or as a JSON array of objects (NULL -> null;
 * columns named in `numeric` unquoted). */
#define JSONB_OID 3802 /* pg_type.oid of jsonb: fixed since PostgreSQL 9.4 */

/*
 * jsonb's text as JSON, with nothing a terminal would obey: jsonb escapes
 * what JSON requires (below 0x20, '"', '\\') but leaves DEL and the C1
 * controls (U+0080-U+009F) raw. They can only stand inside strings (the
 * structure is ASCII), where \u00XX means the same character.
 */
static void put_json_inert(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == 0x7f)
            fputs("\\u007f", out);
        else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fprintf(out, "\\u00%02x", p[1]), p++;
        else
            fputc(*p, out);
    }
}

static void print_rows(FILE *out, const PGresult *res, bool json, const char *numeric)
{
    int rows = PQntuples(res), cols = PQnfields(res);
    if (json) {
        fputc('[', out);
        for (int r = 0; r < rows; r++) {
            fputs(r ? ",{" : "{", out);
            for (int c = 0; c < cols; c++) {
                fprintf(out, "%s\"%s\":", c ? "," : "", PQfname(res, c));
                if (PQgetisnull(res, r, c))
                    fputs("null", out);
                else if (PQftype(res, c) == JSONB_OID)
                    put_json_inert(out, PQgetvalue(res, r, c)); /* payload, output: JSON, not strings */
                else if (strstr(numeric, PQfname(res, c)))
                    fputs(PQgetvalue(res, r, c), out);
                else
                    sq_json_string(out, PQgetvalue(res, r, c));
            }
            fputc('}', out);
        }
        fputs("]\n", out);
        return;
    }
    /* Database text is made visible (util.h): a value holding ESC or a
     * newline must not drive the terminal or fake a row. */
    int *w = calloc((size_t)cols, sizeof *w);
    if (!w)
        return;
    bool cut = false;
    for (int c = 0; c < cols; c++) {
        w[c] = (int)sq_text_width(PQfname(res, c));
        for (int r = 0; r < rows; r++) {
            int l = (int)sq_text_width(PQgetvalue(res, r, c));
            w[c] = l > w[c] ? (l > 60 ? 60 : l) : w[c];
            cut |= l > 60;
        }
    }
    if (cut) /* on stderr: stdout stays the table alone */
        fputs("skipq: values longer than 60 characters are cut in this table; --json shows them in full "
              "(and `skipq jobs show ID` a job's errors and output)\n", stderr);
    for (int c = 0; c < cols; c++) {
        fputs(c ? "  " : "", out);
        sq_fput_text(out, PQfname(res, c), SIZE_MAX, (size_t)w[c]);
    }
    fputc('\n', out);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            fputs(c ? "  " : "", out);
            sq_fput_text(out, PQgetisnull(res, r, c) ? "" : PQgetvalue(res, r, c), (size_t)w[c], (size_t)w[c]);
        }
        fputc('\n', out);
    }
    free(w);
}

static const char JOB_COLUMNS[] =
    "id, queue, kind, status, attempts, max_attempts, priority, run_at, created_at, finished_at, "
    "lease_expires_at, locked_by, last_error";
/* Shown by `jobs show` only: the list stays narrow. */
static const char SCHED_COLUMNS[] = "unique_key, unique_until, ordering_key, depends_on::pg_catalog.text AS depends_on";

/* Every filter is a parameter; one left NULL drops out when the statement
 * is planned (PQexecParams plans with the values), so each combination
 * gets its own plan. Keyset paging: newest first, below f->before_id. */
PGresult *sq_admin_list_fetch(PGconn *conn, const struct sq_job_filter *f, char *err, size_t errlen)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", f->limit > 0 ? f->limit : 50);
    const char *params[10] = {f->status,       f->queue,      f->kind,         lim,           f->before_id,
                              f->created_from, f->created_to, f->unique_key,   f->ordering_key, f->error_text};
    char sql[2048];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM skipq.jobs"
             " WHERE ($1::pg_catalog.text IS NULL OR status OPERATOR(pg_catalog.=) $1)"
             "   AND ($2::pg_catalog.text IS NULL OR queue OPERATOR(pg_catalog.=) $2)"
             "   AND ($3::pg_catalog.text IS NULL OR kind OPERATOR(pg_catalog.=) $3)"
             "   AND ($5::pg_catalog.int8 IS NULL OR id OPERATOR(pg_catalog.<) $5::pg_catalog.int8)"
             "   AND ($6::pg_catalog.timestamptz IS NULL"
             "        OR created_at OPERATOR(pg_catalog.>=) $6::pg_catalog.timestamptz)"
             "   AND ($7::pg_catalog.timestamptz IS NULL"
             "        OR created_at OPERATOR(pg_catalog.<) $7::pg_catalog.timestamptz)"
             "   AND ($8::pg_catalog.text IS NULL OR unique_key OPERATOR(pg_catalog.=) $8)"
             "   AND ($9::pg_catalog.text IS NULL OR ordering_key OPERATOR(pg_catalog.=) $9)"
             "   AND ($10::pg_catalog.text IS NULL OR pg_catalog.strpos(pg_catalog.lower(last_error),"
             "                                        pg_catalog.lower($10)) OPERATOR(pg_catalog.>) 0)"
             " ORDER BY id DESC LIMIT $4::pg_catalog.int4",
             JOB_COLUMNS);
    return sq_db_query(conn, sql, 10, params, err, errlen);
}

bool sq_admin_list(PGconn *conn, FILE *out, const struct sq_job_filter *f, bool json, char *err, size_t errlen)
{
    PGresult *res = sq_admin_list_fetch(conn, f, err, errlen);
    if (!res)
        return false;
    print_rows(out, res, json, "id,attempts,max_attempts,priority");
    PQclear(res);
    return true;
}

int sq_admin_show_fetch(PGconn *conn, int64_t id, PGresult **job_out, PGresult **ex_out, char *err, size_t errlen)
{
    char a[24];
    snprintf(a, sizeof a, "%" PRId64, id);
    const char *params[1] = {a};
    /* A done job whose kind does not keep done jobs ([kind] keep_done =
     * off, sql/058) left skipq.jobs: what is left of it is read from its
     * executions, the last of which carries its queue and kind. */
    char sql[2048];
    snprintf(sql, sizeof sql,
             "SELECT %s, %s, payload FROM skipq.jobs"
             " WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int8"
             " UNION ALL"
             " SELECT e.job_id, e.queue, e.kind, 'done', e.attempt, NULL::pg_catalog.int4, NULL::pg_catalog.int4,"
             "        NULL::pg_catalog.timestamptz, NULL::pg_catalog.timestamptz, e.finished_at,"
             "        NULL::pg_catalog.timestamptz, NULL, NULL,"
             "        NULL, NULL::pg_catalog.timestamptz, NULL, NULL, NULL::pg_catalog.jsonb"
             "   FROM skipq.job_executions e"
             "  WHERE e.job_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 AND e.queue IS NOT NULL"
             "    AND e.status OPERATOR(pg_catalog.=) 'done'"
             "    AND NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id OPERATOR(pg_catalog.=) $1::pg_catalog.int8)",
             JOB_COLUMNS, SCHED_COLUMNS);
    PGresult *job = sq_db_query(conn, sql, 1, params, err, errlen);
    if (!job)
        return -1;
    if (PQntuples(job) == 0) {
        PQclear(job);
        snprintf(err, errlen, "no job with id %" PRId64, id);
        return 0;
    }
    PGresult *ex = sq_db_query(conn,
                               "SELECT id AS execution, attempt, worker, status, started_at, finished_at,"
                               " pg_catalog.round(extract(epoch FROM finished_at OPERATOR(pg_catalog.-) started_at)"
                               "                  OPERATOR(pg_catalog.*) 1000) AS ms, error, output"
                               " FROM skipq.job_executions WHERE job_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8"
                               " ORDER BY id",
                               1, params, err, errlen);
    if (!ex) {
        PQclear(job);
        return -1;
    }
    *job_out = job;
    *ex_out = ex;
    return 1;
}

/* The table cuts long values: each execution's error and output in full
 * after it (made visible like the table's text). */
static void print_in_full(FILE *out, const PGresult *ex)
{
    int e = PQfnumber(ex, "error"), o = PQfnumber(ex, "output"), id = PQfnumber(ex, "execution");
    for (int r = 0; r < PQntuples(ex); r++) {
        for (int c = 0; c < 2; c++) {
            int col = c ? o : e;
            if (col < 0 || PQgetisnull(ex, r, col))
                continue;
            fprintf(out, "\nexecution %s %s:\n  ", PQgetvalue(ex, r, id), c ? "output" : "error");
            sq_fput_text(out, PQgetvalue(ex, r, col), SIZE_MAX, 0);
            fputc('\n', out);
        }
    }
}

int sq_admin_show(PGconn *conn, FILE *out, int64_t id, bool json, char *err, size_t errlen)
{
    PGresult *job = NULL, *ex = NULL;
    int found = sq_admin_show_fetch(conn, id, &job, &ex, err, errlen);
    if (found != 1)
        return found;
    if (json) {
        fputs("{\"job\":", out);
        print_rows(out, job, true, "id,attempts,max_attempts,priority");
        fputs(",\"executions\":", out);
        print_rows(out, ex, true, "execution,attempt,ms");
        fputs("}\n", out);
    } else {
        for (int c = 0; c < PQnfields(job); c++) {
            fprintf(out, "%-17s ", PQfname(job, c));
            sq_fput_text(out, PQgetisnull(job, 0, c) ? "" : PQgetvalue(job, 0, c), SIZE_MAX, 0);
            fputc('\n', out);
        }
        fputs("\nexecutions:\n", out);
        print_rows(out, ex, false, "");
        print_in_full(out, ex);
    }
    PQclear(job);
    PQclear(ex);
    return 1;
}

/* The jobs a retry redrives (alias j): by id, dead or cancelled; or dead
 * ones by filter. */
#define RETRY_TARGETS \
    " (($1::pg_catalog.int8[] IS NOT NULL AND j.id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.int8[])" \
    "   AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['dead', 'cancelled']))" \
    "  OR ($1::pg_catalog.int8[] IS NULL AND j.status OPERATOR(pg_catalog.=) 'dead'" \
    "      AND ($2::pg_catalog.text IS NULL OR j.kind OPERATOR(pg_catalog.=) $2)" \
    "      AND ($3::pg_catalog.text IS NULL OR j.queue OPERATOR(pg_catalog.=) $3)" \
    "      AND ($4::pg_catalog.timestamptz IS NULL" \
    "           OR j.finished_at OPERATOR(pg_catalog.>=) $4::pg_catalog.timestamptz)))"

/*
 * A redriven child goes back to blocked while a parent is not done, and
 * the parent's end must then find it: the parents are locked and flagged
 * has_dependents first, in the same transaction, so each either ended
 * before (and the redrive sees that) or ends after it commits (and its
 * trigger finds the child). An enqueue no longer flags parents (it must
 * lock no other job, sql/050), so a child created dead has unflagged ones.
 */
static const char RETRY_FLAG_PARENTS_SQL[] =
    "WITH lk AS MATERIALIZED ("
    "  SELECT p.id FROM skipq.jobs p"
    "   WHERE p.id OPERATOR(pg_catalog.=) ANY (ARRAY("
    "           SELECT DISTINCT d FROM skipq.jobs j, pg_catalog.unnest(j.depends_on) AS d"
    "            WHERE j.depends_on IS NOT NULL AND" RETRY_TARGETS "))"
    "   ORDER BY p.id FOR NO KEY UPDATE"
    ") UPDATE skipq.jobs p SET has_dependents = true FROM lk"
    "   WHERE p.id OPERATOR(pg_catalog.=) lk.id AND NOT p.has_dependents"
    " RETURNING 1";

/*
 * Redrive: dead (or cancelled) jobs go back to pending now, with `extra`
 * more attempts: max_attempts = attempts + extra. Attempts are extended,
 * not reset, so the audit trail (one execution per attempt) stays whole.
 */
static const char RETRY_SQL[] =
    "WITH r AS (UPDATE skipq.jobs j SET"
    "   status = CASE WHEN EXISTS (SELECT 1 FROM skipq.jobs p"
    "                               WHERE p.id OPERATOR(pg_catalog.=) ANY (j.depends_on)"
    "                                 AND p.status OPERATOR(pg_catalog.<>) 'done')"
    "            THEN 'blocked' ELSE 'pending' END,"
    "   run_at = pg_catalog.now(), finished_at = NULL,"
    "   max_attempts = attempts OPERATOR(pg_catalog.+) $5::pg_catalog.int4, lease_expires_at = NULL"
    " WHERE" RETRY_TARGETS
    /* A job whose unique key another job of its kind holds now stays as
     * it is (keys are per kind: sql/050). */
    "   AND (j.unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM skipq.jobs h"
    "         WHERE h.kind OPERATOR(pg_catalog.=) j.kind"
    "           AND h.unique_key OPERATOR(pg_catalog.=) j.unique_key"
    "           AND h.id OPERATOR(pg_catalog.<>) j.id"
    "           AND (h.status OPERATOR(pg_catalog.=) ANY (ARRAY['blocked', 'pending', 'running'])"
    "                OR h.unique_until IS NOT NULL)))"
    " RETURNING 1) SELECT pg_catalog.count(*) FROM r";

long sq_admin_retry(PGconn *conn, const int64_t *ids, size_t n, const struct sq_job_filter *f, int extra,
                    char *err, size_t errlen)
{
    char x[16];
    snprintf(x, sizeof x, "%d", extra);
    char *idarr = ids ? sq_int8_array(ids, n) : NULL;
    if (ids && !idarr) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *params[5] = {idarr, f ? f->kind : NULL, f ? f->queue : NULL, f ? f->since : NULL, x};
    long count = -1;
    bool own_txn = PQtransactionStatus(conn) == PQTRANS_IDLE;
    PGresult *res = NULL;
    if (own_txn && !sq_db_exec(conn, "BEGIN", err, errlen))
        goto out;
    res = sq_db_query(conn, RETRY_FLAG_PARENTS_SQL, 4, params, err, errlen);
    bool flagged = res != NULL;
    PQclear(res);
    res = flagged ? sq_db_query(conn, RETRY_SQL, 5, params, err, errlen) : NULL;
    if (res)
        count = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    if (own_txn && !sq_db_exec(conn, count >= 0 ? "COMMIT" : "ROLLBACK", count >= 0 ? err : NULL, errlen))
        count = -1;
out:
    free(idarr);
    return count;
}

long sq_admin_cancel(PGconn *conn, const int64_t *ids, size_t n, char *err, size_t errlen)
{
    char *idarr = sq_int8_array(ids, n);
    if (!idarr) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *params[1] = {idarr};
    PGresult *res =
        sq_db_query(conn,
                    "WITH lk AS MATERIALIZED ("
                    "  SELECT id FROM skipq.jobs WHERE id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.int8[])"
                    "     AND status OPERATOR(pg_catalog.=) ANY (ARRAY['blocked', 'pending', 'running'])"
                    "   ORDER BY id FOR NO KEY UPDATE"
                    "), c AS ("
                    "  UPDATE skipq.jobs j SET status = 'cancelled', finished_at = pg_catalog.now(),"
                    "         lease_expires_at = NULL, last_error = 'cancelled by an operator'"
                    "    FROM lk WHERE j.id OPERATOR(pg_catalog.=) lk.id"
                    "     AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['blocked', 'pending', 'running'])"
                    "  RETURNING j.id, j.current_execution_id"
                    "), e AS ("
                    "  UPDATE skipq.job_executions x SET status = 'cancelled', finished_at = pg_catalog.now(),"
                    "         error = 'cancelled by an operator'"
                    "    FROM c WHERE x.job_id OPERATOR(pg_catalog.=) c.id AND x.id OPERATOR(pg_catalog.=) c.current_execution_id"
                    "     AND x.status OPERATOR(pg_catalog.=) 'running'"
                    "  RETURNING x.id"
                    ") SELECT (SELECT pg_catalog.count(*) FROM c), (SELECT pg_catalog.count(*) FROM e)",
                    1, params, err, errlen);
    free(idarr);
    if (!res)
        return -1;
    long count = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return count;
}

/* ---- schedules and limits ------------------------------------------------------------ */

PGresult *sq_admin_cron_fetch(PGconn *conn, char *err, size_t errlen)
{
    return sq_db_query(conn,
                       "SELECT name, schedule, timezone, last_tick, updated_at FROM skipq.cron_state ORDER BY name", 0,
                       NULL, err, errlen);
}

bool sq_admin_cron(PGconn *conn, FILE *out, bool json, char *err, size_t errlen)
{
    PGresult *res = sq_admin_cron_fetch(conn, err, errlen);
    if (!res)
        return false;
    print_rows(out, res, json, "");
    PQclear(res);
    return true;
}

PGresult *sq_admin_limits_fetch(PGconn *conn, char *err, size_t errlen)
{
    return sq_db_query(conn,
                       "SELECT l.kind, l.max_running,"
                       "       (SELECT pg_catalog.count(*) FROM skipq.jobs j"
                       "         WHERE j.status OPERATOR(pg_catalog.=) 'running'"
                       "           AND j.kind OPERATOR(pg_catalog.=) l.kind) AS running,"
                       "       l.rate, l.rate_unit,"
                       "       CASE WHEN l.window_start OPERATOR(pg_catalog.=)"
                       "                 pg_catalog.date_trunc(l.rate_unit, pg_catalog.now())"
                       "            THEN l.window_count ELSE 0 END AS claimed_this_window,"
                       "       l.updated_at"
                       "  FROM skipq.kind_limits l ORDER BY l.kind",
                       0, NULL, err, errlen);
}

bool sq_admin_limits(PGconn *conn, FILE *out, bool json, char *err, size_t errlen)
{
    PGresult *res = sq_admin_limits_fetch(conn, err, errlen);
    if (!res)
        return false;
    print_rows(out, res, json, "max_running running rate claimed_this_window");
    PQclear(res);
    return true;
}

long sq_admin_limits_clear(PGconn *conn, const char *kind, char *err, size_t errlen)
{
    const char *params[1] = {kind};
    PGresult *res =
        sq_db_query(conn,
                    "WITH d AS (DELETE FROM skipq.kind_limits WHERE kind OPERATOR(pg_catalog.=) $1 RETURNING 1)"
                    " SELECT pg_catalog.count(*) FROM d",
                    1, params, err, errlen);
    if (!res)
        return -1;
    long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}

/* ---- pause and resume ------------------------------------------------------------------ */

long sq_admin_pause(PGconn *conn, const char *scope, const char *name, bool pause, char *err, size_t errlen)
{
    const char *params[2] = {scope, name};
    PGresult *res = sq_db_query(conn,
                        pause ? "SELECT skipq.pause($1, $2)::pg_catalog.int4"
                              : "SELECT skipq.resume($1, $2)::pg_catalog.int4",
                        2, params, err, errlen);
    if (!res)
        return -1;
    long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}
