/*
 * stats.c -- `skipq stats` and `skipq top`: what the queue holds, what it
 * did lately, and who serves it.
 *
 * Every query here must stay cheap on a table with millions of finished
 * jobs, because operators run it while something is already wrong:
 *  - pending, blocked and running jobs are read through their partial
 *    indexes (jobs_ready, jobs_blocked, jobs_lease), never by a scan of
 *    history;
 *  - finished jobs are read only from the last hour, or from the totals
 *    watermark if that is older, through the BRIN index on finished_at;
 *  - "total" is skipq.job_totals (advanced by the hosts, sql/008_hosts.sql)
 *    plus what finished after its watermark;
 *  - percentiles, throughput and crashes (attempts whose worker process
 *    died, [queue] isolation = process: status 'crashed', sql/055) read
 *    executions started in the last hour through the BRIN index on
 *    started_at.
 * Both also list what is paused (skipq.paused, sql/054_pause.sql).
 * The fetch functions return the results (skipq web reads them too); the
 * print functions format them. Each command reads in one REPEATABLE READ READ ONLY transaction, so its
 * numbers are of one moment.
 */
#include "cli/stats.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/db.h"
#include "host/hosts.h"
#include "common/util.h"

#define OID_BOOL 16
#define OID_INT8 20
#define OID_INT4 23
#define OID_JSON 114
#define OID_FLOAT8 701
#define OID_NUMERIC 1700

static bool is_number(Oid t)
{
    return t == OID_INT8 || t == OID_INT4 || t == OID_FLOAT8 || t == OID_NUMERIC;
}

/* Rows as JSON objects named by column; NULL -> null, numbers and json
 * unquoted, booleans true/false. */
static void json_rows(FILE *out, const PGresult *res)
{
    int rows = PQntuples(res), cols = PQnfields(res);
    fputc('[', out);
    for (int r = 0; r < rows; r++) {
        fputs(r ? ",{" : "{", out);
        for (int c = 0; c < cols; c++) {
            fprintf(out, "%s\"%s\":", c ? "," : "", PQfname(res, c));
            Oid t = PQftype(res, c);
            const char *v = PQgetvalue(res, r, c);
            if (PQgetisnull(res, r, c))
                fputs("null", out);
            else if (t == OID_BOOL)
                fputs(*v == 't' ? "true" : "false", out);
            else if (is_number(t))
                fputs(v, out);
            else if (t == OID_JSON)
                sq_json_raw(out, v);
            else
                sq_json_string(out, v);
        }
        fputc('}', out);
    }
    fputc(']', out);
}

/* Rows as an aligned table: text left, numbers right, NULL as "-". The
 * first `skip` columns are left out. */
static void table_rows(FILE *out, const PGresult *res, int skip)
{
    int rows = PQntuples(res), cols = PQnfields(res);
    int w[64];
    if (cols > 64)
        cols = 64;
    for (int c = skip; c < cols; c++) {
        w[c] = (int)sq_text_width(PQfname(res, c));
        for (int r = 0; r < rows; r++) {
            int l = PQgetisnull(res, r, c) ? 1 : (int)sq_text_width(PQgetvalue(res, r, c));
            w[c] = l > w[c] ? l : w[c];
        }
    }
    /* Host names, versions, queue lists: database text, made visible
     * (util.h) so no value can drive the terminal. */
    for (int r = -1; r < rows; r++) {
        for (int c = skip; c < cols; c++) {
            const char *v = r < 0 ? PQfname(res, c) : PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
            if (r >= 0 && PQftype(res, c) == OID_BOOL && !PQgetisnull(res, r, c))
                v = *v == 't' ? "yes" : "no";
            fputs(c > skip ? "  " : "", out);
            if (is_number(PQftype(res, c)))
                for (size_t i = sq_text_width(v); i < (size_t)w[c]; i++)
                    fputc(' ', out);
            sq_fput_text(out, v, SIZE_MAX, is_number(PQftype(res, c)) || c + 1 == cols ? 0 : (size_t)w[c]);
        }
        fputc('\n', out);
    }
}

/* ---- stats ------------------------------------------------------------------------ */

/* Built-ins are named by schema: see "SCHEMA-QUALIFIED SQL" in queue.c. */
#define LAST_HOUR "(pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.interval '1 hour')"

/* The queue or kind of an execution's job: written on the execution when
 * the job left skipq.jobs as it finished ([kind] keep_done = off, sql/058),
 * else looked up by primary key per execution (a plain join lets the
 * planner hash-join recent executions against a scan of every job ever
 * kept). */
#define JOB_OF_EXECUTION(col) \
    "coalesce(e." col ", (SELECT j." col " FROM skipq.jobs j WHERE j.id OPERATOR(pg_catalog.=) e.job_id))"
#define QUEUE_KIND_OF_EXECUTION \
    JOB_OF_EXECUTION("queue") " OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) " JOB_OF_EXECUTION("kind")

/* $1: the totals watermark; $2: where the scan of finished jobs starts
 * (the earlier of the watermark and an hour ago). */
static const char STATS_SQL[] =
    "WITH cur AS ("
    "  SELECT queue, kind, pg_catalog.sum(ready) AS ready, pg_catalog.sum(scheduled) AS scheduled,"
    "         pg_catalog.sum(blocked) AS blocked, pg_catalog.sum(running) AS running,"
    "         pg_catalog.sum(expired) AS expired, pg_catalog.min(oldest) AS oldest FROM ("
    "    SELECT queue, kind,"
    "           pg_catalog.count(*) FILTER (WHERE run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS ready,"
    "           pg_catalog.count(*) FILTER (WHERE run_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS scheduled,"
    "           0 AS blocked, 0 AS running, 0 AS expired,"
    "           pg_catalog.min(run_at) FILTER (WHERE run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest"
    "      FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'pending' GROUP BY queue, kind"
    "    UNION ALL"
    "    SELECT queue, kind, 0, 0, pg_catalog.count(*), 0, 0, NULL"
    "      FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'blocked' GROUP BY queue, kind"
    "    UNION ALL"
    "    SELECT queue, kind, 0, 0, 0, pg_catalog.count(*),"
    "           pg_catalog.count(*) FILTER (WHERE lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now()), NULL"
    "      FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'running' GROUP BY queue, kind) l"
    "   GROUP BY queue, kind"
    /* Done jobs that left skipq.jobs (sql/058) are counted in done_counts. */
    "), fin AS ("
    "  SELECT queue, kind, pg_catalog.sum(done_1h)::pg_catalog.int8 AS done_1h,"
    "         pg_catalog.sum(dead_1h)::pg_catalog.int8 AS dead_1h, pg_catalog.sum(done)::pg_catalog.int8 AS done,"
    "         pg_catalog.sum(dead)::pg_catalog.int8 AS dead, pg_catalog.sum(cancelled)::pg_catalog.int8 AS cancelled"
    "    FROM ("
    "  SELECT queue, kind,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'done'"
    "                                     AND finished_at OPERATOR(pg_catalog.>=) " LAST_HOUR ") AS done_1h,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'dead'"
    "                                     AND finished_at OPERATOR(pg_catalog.>=) " LAST_HOUR ") AS dead_1h,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'done'"
    "                                     AND finished_at OPERATOR(pg_catalog.>=) $1::pg_catalog.timestamptz) AS done,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'dead'"
    "                                     AND finished_at OPERATOR(pg_catalog.>=) $1::pg_catalog.timestamptz) AS dead,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'cancelled'"
    "                                     AND finished_at OPERATOR(pg_catalog.>=) $1::pg_catalog.timestamptz)"
    "           AS cancelled"
    "    FROM skipq.jobs WHERE finished_at OPERATOR(pg_catalog.>=) $2::pg_catalog.timestamptz GROUP BY queue, kind"
    "  UNION ALL"
    "  SELECT queue, kind,"
    "         pg_catalog.sum(n) FILTER (WHERE at OPERATOR(pg_catalog.>=) " LAST_HOUR ")::pg_catalog.int8, 0,"
    "         pg_catalog.sum(n) FILTER (WHERE at OPERATOR(pg_catalog.>=) $1::pg_catalog.timestamptz)::pg_catalog.int8,"
    "         0, 0"
    "    FROM skipq.done_counts WHERE at OPERATOR(pg_catalog.>=) $2::pg_catalog.timestamptz GROUP BY queue, kind"
    "  ) u GROUP BY queue, kind"
    "), pct AS ("
    "  SELECT pg_catalog.split_part(qk, '/', 1) AS queue, pg_catalog.split_part(qk, '/', 2) AS kind, p FROM ("
    "    SELECT qk, pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ms) AS p FROM ("
    "      SELECT " QUEUE_KIND_OF_EXECUTION " AS qk,"
    "             extract(epoch FROM e.finished_at OPERATOR(pg_catalog.-) e.started_at) OPERATOR(pg_catalog.*) 1000"
    "               AS ms"
    "        FROM skipq.job_executions e"
    "       WHERE e.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR
    "         AND e.status OPERATOR(pg_catalog.=) ANY (ARRAY['done', 'retry', 'dead'])"
    "         AND e.finished_at IS NOT NULL) x"
    "     GROUP BY qk) y"
    "), cr AS ("
    "  SELECT pg_catalog.split_part(qk, '/', 1) AS queue, pg_catalog.split_part(qk, '/', 2) AS kind,"
    "         pg_catalog.count(*) AS crashed_1h FROM ("
    "    SELECT " QUEUE_KIND_OF_EXECUTION " AS qk"
    "      FROM skipq.job_executions e"
    "     WHERE e.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR " AND e.status OPERATOR(pg_catalog.=) 'crashed') x"
    "   GROUP BY qk"
    "), k AS ("
    "  SELECT queue, kind FROM cur UNION SELECT queue, kind FROM fin"
    "  UNION SELECT queue, kind FROM skipq.job_totals UNION SELECT queue, kind FROM pct"
    "  UNION SELECT queue, kind FROM cr"
    ")"
    " SELECT k.queue, k.kind, coalesce(c.ready, 0) AS ready, coalesce(c.scheduled, 0) AS scheduled,"
    "        coalesce(c.blocked, 0) AS blocked, coalesce(c.running, 0) AS running, coalesce(c.expired, 0) AS expired,"
    "        pg_catalog.round(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) c.oldest))::pg_catalog.int8"
    "          AS oldest_ready_s,"
    "        coalesce(f.done_1h, 0) AS done_1h, coalesce(f.dead_1h, 0) AS dead_1h,"
    "        coalesce(x.crashed_1h, 0) AS crashed_1h,"
    "        coalesce(t.done, 0) OPERATOR(pg_catalog.+) coalesce(f.done, 0) AS done,"
    "        coalesce(t.dead, 0) OPERATOR(pg_catalog.+) coalesce(f.dead, 0) AS dead,"
    "        coalesce(t.cancelled, 0) OPERATOR(pg_catalog.+) coalesce(f.cancelled, 0) AS cancelled,"
    "        pg_catalog.round(p.p[1]::pg_catalog.numeric, 1) AS p50_ms,"
    "        pg_catalog.round(p.p[2]::pg_catalog.numeric, 1) AS p95_ms,"
    "        pg_catalog.round(p.p[3]::pg_catalog.numeric, 1) AS p99_ms,"
    "        EXISTS (SELECT 1 FROM skipq.hosts h WHERE skipq.host_alive(h.heartbeat_at, h.heartbeat_ms)"
    "                  AND (k.queue OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) k.kind)"
    "                      OPERATOR(pg_catalog.=) ANY (h.serves)) AS served,"
    "        EXISTS (SELECT 1 FROM skipq.paused z"
    "                 WHERE (z.scope OPERATOR(pg_catalog.=) 'queue' AND z.name OPERATOR(pg_catalog.=) k.queue)"
    "                    OR (z.scope OPERATOR(pg_catalog.=) 'kind' AND z.name OPERATOR(pg_catalog.=) k.kind))"
    "          AS paused"
    "   FROM k"
    "   LEFT JOIN cur c ON c.queue OPERATOR(pg_catalog.=) k.queue AND c.kind OPERATOR(pg_catalog.=) k.kind"
    "   LEFT JOIN fin f ON f.queue OPERATOR(pg_catalog.=) k.queue AND f.kind OPERATOR(pg_catalog.=) k.kind"
    "   LEFT JOIN skipq.job_totals t ON t.queue OPERATOR(pg_catalog.=) k.queue AND t.kind OPERATOR(pg_catalog.=) k.kind"
    "   LEFT JOIN pct p ON p.queue OPERATOR(pg_catalog.=) k.queue AND p.kind OPERATOR(pg_catalog.=) k.kind"
    "   LEFT JOIN cr x ON x.queue OPERATOR(pg_catalog.=) k.queue AND x.kind OPERATOR(pg_catalog.=) k.kind"
    "  ORDER BY k.queue, k.kind";

static const char HOSTS_SQL[] =
    "SELECT h.id, h.hostname, h.version, h.threads, skipq.host_alive(h.heartbeat_at, h.heartbeat_ms) AS alive,"
    "       pg_catalog.round(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) h.heartbeat_at)"
    "                          ::pg_catalog.numeric, 1) AS heartbeat_age_s,"
    "       (SELECT pg_catalog.count(*) FROM skipq.jobs j WHERE j.status OPERATOR(pg_catalog.=) 'running'"
    "           AND pg_catalog.left(j.locked_by, pg_catalog.length(h.id) OPERATOR(pg_catalog.+) 1)"
    "               OPERATOR(pg_catalog.=) (h.id OPERATOR(pg_catalog.||) ':')) AS running,"
    "       pg_catalog.to_char(h.started_at, 'YYYY-MM-DD HH24:MI:SSOF') AS started_at,"
    "       %s AS queues, %s AS kinds, h.name, h.pid, h.heartbeat_ms"
    "  FROM skipq.hosts h ORDER BY h.name, h.id";

/* What operators paused (skipq pause, sql/054_pause.sql). */
static const char PAUSED_SQL[] =
    "SELECT scope, name, pg_catalog.to_char(paused_at, 'YYYY-MM-DD HH24:MI:SSOF') AS paused_at, paused_by"
    "  FROM skipq.paused ORDER BY scope DESC, name";

/* The watermark, and where to start reading finished jobs. */
static const char MARK_SQL[] =
    "SELECT through, least(through, " LAST_HOUR "),"
    "       pg_catalog.to_char(began_at, 'YYYY-MM-DD HH24:MI:SSOF') FROM skipq.job_totals_mark";

static bool begin_snapshot(PGconn *conn, char *err, size_t errlen)
{
    return sq_db_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen);
}

static void print_unserved(FILE *out, const PGresult *res, bool json)
{
    int n = 0, served = PQfnumber(res, "served");
    for (int r = 0; r < PQntuples(res); r++) {
        if (served < 0 || *PQgetvalue(res, r, served) == 't' || strcmp(PQgetvalue(res, r, 2), "0") == 0)
            continue;
        if (json) {
            fputs(n ? ",{\"queue\":" : "{\"queue\":", out);
            sq_json_string(out, PQgetvalue(res, r, 0));
            fputs(",\"kind\":", out);
            sq_json_string(out, PQgetvalue(res, r, 1));
            fprintf(out, ",\"ready\":%s}", PQgetvalue(res, r, 2));
        } else {
            fprintf(out, "%sno live host serves kind \"", n ? "" : "\n");
            sq_fput_text(out, PQgetvalue(res, r, 1), SIZE_MAX, 0);
            fputs("\" on queue \"", out);
            sq_fput_text(out, PQgetvalue(res, r, 0), SIZE_MAX, 0);
            fprintf(out, "\": %s job(s) ready\n", PQgetvalue(res, r, 2));
        }
        n++;
    }
}

/* "paused (no new claims): queue reports, kind email.send", or nothing. */
static void print_paused(FILE *out, const PGresult *paused, bool json)
{
    if (json) {
        json_rows(out, paused);
        return;
    }
    for (int r = 0; r < PQntuples(paused); r++) {
        fputs(r ? ", " : "\npaused (no new claims): ", out);
        sq_fput_text(out, PQgetvalue(paused, r, 0), SIZE_MAX, 0);
        fputc(' ', out);
        sq_fput_text(out, PQgetvalue(paused, r, 1), SIZE_MAX, 0);
    }
    if (PQntuples(paused) > 0)
        fputc('\n', out);
}

void sq_stats_clear(struct sq_stats_data *d)
{
    PQclear(d->mark);
    PQclear(d->rows);
    PQclear(d->hosts);
    PQclear(d->paused);
    memset(d, 0, sizeof *d);
}

bool sq_stats_fetch(PGconn *conn, bool json_arrays, struct sq_stats_data *d, char *err, size_t errlen)
{
    bool ok = false;
    char hosts_sql[2048];
    memset(d, 0, sizeof *d);
    if (!begin_snapshot(conn, err, errlen))
        return false;
    if (!(d->mark = sq_db_query(conn, MARK_SQL, 0, NULL, err, errlen)))
        goto done;
    if (PQntuples(d->mark) != 1) {
        snprintf(err, errlen, "skipq.job_totals_mark is empty: run `skipq migrate`");
        goto done;
    }
    const char *params[2] = {PQgetvalue(d->mark, 0, 0), PQgetvalue(d->mark, 0, 1)};
    if (!(d->rows = sq_db_query(conn, STATS_SQL, 2, params, err, errlen)))
        goto done;
    snprintf(hosts_sql, sizeof hosts_sql, HOSTS_SQL,
             json_arrays ? "pg_catalog.array_to_json(h.queues)" : "pg_catalog.array_to_string(h.queues, ',')",
             json_arrays ? "pg_catalog.array_to_json(h.kinds)" : "pg_catalog.array_to_string(h.kinds, ',')");
    if (!(d->hosts = sq_db_query(conn, hosts_sql, 0, NULL, err, errlen)) ||
        !(d->paused = sq_db_query(conn, PAUSED_SQL, 0, NULL, err, errlen)))
        goto done;
    ok = true;
done:
    PQclear(PQexec(conn, "ROLLBACK"));
    if (!ok)
        sq_stats_clear(d);
    return ok;
}

bool sq_stats_print(PGconn *conn, FILE *out, bool json, char *err, size_t errlen)
{
    struct sq_stats_data d;
    if (!sq_stats_fetch(conn, json, &d, err, errlen))
        return false;
    if (json) {
        fputs("{\"queues\":", out);
        json_rows(out, d.rows);
        fputs(",\"unserved\":[", out);
        print_unserved(out, d.rows, true);
        fputs("],\"paused\":", out);
        print_paused(out, d.paused, true);
        fputs(",\"hosts\":", out);
        json_rows(out, d.hosts);
        fputs(",\"totals_since\":", out);
        sq_json_string(out, PQgetvalue(d.mark, 0, 2));
        fputs("}\n", out);
    } else {
        if (PQntuples(d.rows) == 0)
            fputs("(no jobs)\n", out);
        else
            table_rows(out, d.rows, 0);
        print_unserved(out, d.rows, false);
        print_paused(out, d.paused, false);
        fputs("\nhosts:\n", out);
        if (PQntuples(d.hosts) == 0)
            fputs("(none registered)\n", out);
        else
            table_rows(out, d.hosts, 0);
        fprintf(out,
                "\nready: runnable now; blocked: waiting for their parents (depends_on); oldest_ready_s: the longest a ready job has waited; expired: running past\n"
                "its lease. *_1h and p50-p99 (handler milliseconds): the last hour. crashed_1h: attempts whose\n"
                "worker process died under them (isolation = process). done, dead, cancelled: since\n"
                "%s, kept when retention deletes jobs. alive: heartbeat within %d heartbeat intervals.\n",
                PQgetvalue(d.mark, 0, 2), SQ_HOST_ALIVE_BEATS);
    }
    sq_stats_clear(&d);
    return true;
}

/* ---- top ------------------------------------------------------------------------- */

/* The attempts top counts as failed: a crash ('crashed', the worker
 * process died) fails an attempt as surely as an error does. */
#define FAILED_STATUSES "ANY (ARRAY['retry', 'dead', 'lost', 'crashed'])"

/* $1: the throughput window in ms. */
static const char TOP_QUEUES_SQL[] =
    "WITH cur AS ("
    "  SELECT queue, pg_catalog.count(*) FILTER (WHERE run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS ready,"
    "         pg_catalog.count(*) FILTER (WHERE run_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS scheduled,"
    "         0 AS running, 0 AS expired"
    "    FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'pending' GROUP BY queue"
    "  UNION ALL"
    "  SELECT queue, 0, 0, pg_catalog.count(*),"
    "         pg_catalog.count(*) FILTER (WHERE lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now())"
    "    FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'running' GROUP BY queue"
    "), ex AS ("
    "  SELECT queue, pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'done') AS done,"
    "         pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) " FAILED_STATUSES ")"
    "           AS failed FROM ("
    "    SELECT " JOB_OF_EXECUTION("queue") " AS queue, e.status"
    "      FROM skipq.job_executions e"
    "     WHERE e.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR
    "       AND e.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-)"
    "             ($1::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond'))) x"
    "   GROUP BY queue"
    "), dead AS ("
    "  SELECT queue, pg_catalog.count(*) AS dead_1h FROM skipq.jobs"
    "   WHERE finished_at OPERATOR(pg_catalog.>=) " LAST_HOUR " AND status OPERATOR(pg_catalog.=) 'dead'"
    "   GROUP BY queue"
    "), cr AS ("
    "  SELECT " JOB_OF_EXECUTION("queue") " AS queue, pg_catalog.count(*) AS crashed_1h"
    "    FROM skipq.job_executions e"
    "   WHERE e.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR " AND e.status OPERATOR(pg_catalog.=) 'crashed'"
    "   GROUP BY 1"
    "), k AS (SELECT queue FROM cur UNION SELECT queue FROM ex UNION SELECT queue FROM dead UNION SELECT queue FROM cr)"
    " SELECT k.queue, coalesce(pg_catalog.sum(c.ready), 0)::pg_catalog.int8 AS ready,"
    "        coalesce(pg_catalog.sum(c.scheduled), 0)::pg_catalog.int8 AS scheduled,"
    "        coalesce(pg_catalog.sum(c.running), 0)::pg_catalog.int8 AS running,"
    "        coalesce(pg_catalog.sum(c.expired), 0)::pg_catalog.int8 AS expired,"
    "        pg_catalog.round(coalesce(pg_catalog.min(x.done), 0) OPERATOR(pg_catalog.*) 1000.0"
    "                         OPERATOR(pg_catalog./) $1::pg_catalog.int8, 1) AS done_per_s,"
    "        pg_catalog.round(coalesce(pg_catalog.min(x.failed), 0) OPERATOR(pg_catalog.*) 1000.0"
    "                         OPERATOR(pg_catalog./) $1::pg_catalog.int8, 1) AS failed_per_s,"
    "        coalesce(pg_catalog.min(d.dead_1h), 0) AS dead_1h,"
    "        coalesce(pg_catalog.min(r.crashed_1h), 0) AS crashed_1h,"
    "        EXISTS (SELECT 1 FROM skipq.paused z WHERE z.scope OPERATOR(pg_catalog.=) 'queue'"
    "                   AND z.name OPERATOR(pg_catalog.=) k.queue) AS paused"
    "   FROM k LEFT JOIN cur c ON c.queue OPERATOR(pg_catalog.=) k.queue"
    "   LEFT JOIN ex x ON x.queue OPERATOR(pg_catalog.=) k.queue"
    "   LEFT JOIN dead d ON d.queue OPERATOR(pg_catalog.=) k.queue"
    "   LEFT JOIN cr r ON r.queue OPERATOR(pg_catalog.=) k.queue"
    "  GROUP BY k.queue ORDER BY k.queue";

/* Crashes per kind in the last hour, with the latest cause. */
static const char TOP_CRASHED_SQL[] =
    "SELECT kind, pg_catalog.count(*) AS crashed_1h,"
    "       pg_catalog.max(CASE WHEN rn OPERATOR(pg_catalog.=) 1 THEN error END) AS last_cause FROM ("
    "  SELECT kind, error, pg_catalog.row_number() OVER (PARTITION BY kind ORDER BY finished_at DESC NULLS LAST) AS rn"
    "    FROM (SELECT " JOB_OF_EXECUTION("kind") " AS kind, e.error, e.finished_at FROM skipq.job_executions e"
    "          WHERE e.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR
    "            AND e.status OPERATOR(pg_catalog.=) 'crashed') y) x"
    " GROUP BY kind ORDER BY crashed_1h DESC, kind";

static const char TOP_HEAD_SQL[] =
    "SELECT pg_catalog.to_char(pg_catalog.now(), 'YYYY-MM-DD HH24:MI:SSOF') AS at,"
    "       (SELECT pg_catalog.count(*) FROM skipq.hosts h WHERE skipq.host_alive(h.heartbeat_at, h.heartbeat_ms))"
    "         AS hosts,"
    "       (SELECT coalesce(pg_catalog.sum(threads), 0) FROM skipq.hosts h"
    "         WHERE skipq.host_alive(h.heartbeat_at, h.heartbeat_ms)) AS threads,"
    "       e.job_id AS last_error_job, e.error AS last_error,"
    "       pg_catalog.to_char(e.finished_at, 'HH24:MI:SS') AS last_error_at"
    "  FROM (SELECT 1) one LEFT JOIN LATERAL ("
    "    SELECT x.job_id, x.error, x.finished_at FROM skipq.job_executions x"
    "     WHERE x.started_at OPERATOR(pg_catalog.>=) " LAST_HOUR " AND x.error IS NOT NULL"
    "       AND x.status OPERATOR(pg_catalog.=) " FAILED_STATUSES
    "     ORDER BY x.finished_at DESC NULLS LAST LIMIT 1) e ON true";

/* Sum a numeric column over the rows, as printed text. */
static double column_sum(const PGresult *res, int c)
{
    double s = 0;
    for (int r = 0; r < PQntuples(res); r++)
        s += strtod(PQgetvalue(res, r, c), NULL);
    return s;
}

void sq_top_clear(struct sq_top_data *d)
{
    PQclear(d->head);
    PQclear(d->rows);
    PQclear(d->paused);
    PQclear(d->crashed);
    memset(d, 0, sizeof *d);
}

bool sq_top_fetch(PGconn *conn, int64_t window_ms, struct sq_top_data *d, char *err, size_t errlen)
{
    char window[24];
    snprintf(window, sizeof window, "%lld", (long long)window_ms);
    const char *params[1] = {window};
    bool ok = false;
    memset(d, 0, sizeof *d);
    if (!begin_snapshot(conn, err, errlen))
        return false;
    if ((d->head = sq_db_query(conn, TOP_HEAD_SQL, 0, NULL, err, errlen)) &&
        (d->rows = sq_db_query(conn, TOP_QUEUES_SQL, 1, params, err, errlen)) &&
        (d->paused = sq_db_query(conn, PAUSED_SQL, 0, NULL, err, errlen)) &&
        (d->crashed = sq_db_query(conn, TOP_CRASHED_SQL, 0, NULL, err, errlen)))
        ok = true;
    PQclear(PQexec(conn, "ROLLBACK"));
    if (!ok)
        sq_top_clear(d);
    return ok;
}

/* "crashed in the last hour: kind test 3 (last: killed by SIGSEGV), ...",
 * or nothing. */
static void print_crashed(FILE *out, const PGresult *crashed)
{
    for (int r = 0; r < PQntuples(crashed); r++) {
        fputs(r ? ", kind " : "\ncrashed in the last hour: kind ", out);
        sq_fput_text(out, PQgetvalue(crashed, r, 0), SIZE_MAX, 0);
        fprintf(out, " %s (last: ", PQgetvalue(crashed, r, 1));
        sq_fput_text(out, PQgetisnull(crashed, r, 2) ? "-" : PQgetvalue(crashed, r, 2), 80, 0);
        fputc(')', out);
    }
    if (PQntuples(crashed) > 0)
        fputc('\n', out);
}

static bool top_refresh(PGconn *conn, FILE *out, const struct sq_top_opts *o, char *err, size_t errlen)
{
    struct sq_top_data d;
    if (!sq_top_fetch(conn, o->window_ms, &d, err, errlen))
        return false;
    PGresult *head = d.head, *rows = d.rows;
    double done_s = column_sum(rows, 5), failed_s = column_sum(rows, 6);
    if (o->json) {
        fputs("{\"at\":", out);
        sq_json_string(out, PQgetvalue(head, 0, 0));
        fprintf(out, ",\"window_ms\":%lld,\"done_per_s\":%.1f,\"failed_per_s\":%.1f,\"hosts_alive\":%s,\"threads\":%s",
                (long long)o->window_ms, done_s, failed_s, PQgetvalue(head, 0, 1), PQgetvalue(head, 0, 2));
        fputs(",\"last_error\":", out);
        if (PQgetisnull(head, 0, 4)) {
            fputs("null", out);
        } else {
            fprintf(out, "{\"job\":%s,\"at\":", PQgetvalue(head, 0, 3));
            sq_json_string(out, PQgetvalue(head, 0, 5));
            fputs(",\"error\":", out);
            sq_json_string(out, PQgetvalue(head, 0, 4));
            fputc('}', out);
        }
        fputs(",\"paused\":", out);
        print_paused(out, d.paused, true);
        fputs(",\"crashed\":", out);
        json_rows(out, d.crashed);
        fputs(",\"queues\":", out);
        json_rows(out, rows);
        fputs("}\n", out);
    } else {
        if (o->clear)
            fputs("\033[H\033[2J", out);
        fprintf(out, "skipq top  %s  every %lldms; rates over the last %llds\n", PQgetvalue(head, 0, 0),
                (long long)o->interval_ms, (long long)(o->window_ms / 1000));
        fprintf(out, "throughput %.1f done/s, %.1f failed/s   live hosts %s (%s threads)\n\n", done_s, failed_s,
                PQgetvalue(head, 0, 1), PQgetvalue(head, 0, 2));
        if (PQntuples(rows) == 0)
            fputs("(no jobs)\n", out);
        else
            table_rows(out, rows, 0);
        print_paused(out, d.paused, false);
        print_crashed(out, d.crashed);
        if (!PQgetisnull(head, 0, 4)) {
            fprintf(out, "\nlast error %s, job %s: ", PQgetvalue(head, 0, 5), PQgetvalue(head, 0, 3));
            sq_fput_text(out, PQgetvalue(head, 0, 4), 200, 0);
            fputc('\n', out);
        }
        else if (!o->clear)
            fputc('\n', out);
    }
    fflush(out);
    sq_top_clear(&d);
    return true;
}

int sq_top_run(PGconn *conn, FILE *out, const struct sq_top_opts *o, char *err, size_t errlen)
{
    /* Signals are taken synchronously, as the host does: SIGINT or SIGTERM
     * ends the loop between refreshes. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (long i = 0; o->iterations <= 0 || i < o->iterations; i++) {
        if (!top_refresh(conn, out, o, err, errlen))
            return -1;
        if (o->iterations > 0 && i + 1 >= o->iterations)
            break;
        struct timespec ts = {o->interval_ms / 1000, (long)(o->interval_ms % 1000) * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM)
            return 0;
    }
    return 0;
}
