/*
 * stats.c -- one grouped query over skipq.jobs, printed as a table or JSON.
 * "blocked" counts jobs waiting for their parents (depends_on).
 * "expired" counts running jobs whose lease is already past: their worker is
 * gone or stuck, and a live host's sweep will hand them out again.
 */
#include "stats.h"

#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "util.h"

static const char STATS_SQL[] =
    "SELECT queue, kind,"
    " count(*) FILTER (WHERE status = 'pending' AND run_at <= now()),"
    " count(*) FILTER (WHERE status = 'pending' AND run_at > now()),"
    " count(*) FILTER (WHERE status = 'blocked'),"
    " count(*) FILTER (WHERE status = 'running'),"
    " count(*) FILTER (WHERE status = 'done'),"
    " count(*) FILTER (WHERE status = 'dead'),"
    " count(*) FILTER (WHERE status = 'cancelled'),"
    " count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now())"
    " FROM skipq.jobs GROUP BY queue, kind ORDER BY queue, kind";

static const char *const columns[] = {"queue", "kind",      "ready",    "scheduled", "blocked",
                                      "running", "done", "dead", "cancelled", "expired"};
#define NCOL 10

bool sq_stats_print(PGconn *conn, FILE *out, bool json, char *err, size_t errlen)
{
    PGresult *res = PQexec(conn, STATS_SQL);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        sq_db_error(conn, res, err, errlen);
        PQclear(res);
        return false;
    }
    int n = PQntuples(res);
    if (json) {
        fputs("{\"queues\":[", out);
        for (int r = 0; r < n; r++) {
            fputs(r ? ",{" : "{", out);
            for (int c = 0; c < NCOL; c++) {
                fprintf(out, "%s\"%s\":", c ? "," : "", columns[c]);
                if (c < 2)
                    sq_json_string(out, PQgetvalue(res, r, c));
                else
                    fputs(PQgetvalue(res, r, c), out);
            }
            fputc('}', out);
        }
        fputs("]}\n", out);
    } else {
        int w0 = 5, w1 = 4;
        for (int r = 0; r < n; r++) {
            int a = (int)strlen(PQgetvalue(res, r, 0)), b = (int)strlen(PQgetvalue(res, r, 1));
            w0 = a > w0 ? a : w0;
            w1 = b > w1 ? b : w1;
        }
        fprintf(out, "%-*s  %-*s", w0, columns[0], w1, columns[1]);
        for (int c = 2; c < NCOL; c++)
            fprintf(out, "  %9s", columns[c]);
        fputc('\n', out);
        for (int r = 0; r < n; r++) {
            fprintf(out, "%-*s  %-*s", w0, PQgetvalue(res, r, 0), w1, PQgetvalue(res, r, 1));
            for (int c = 2; c < NCOL; c++)
                fprintf(out, "  %9s", PQgetvalue(res, r, c));
            fputc('\n', out);
        }
        if (n == 0)
            fputs("(no jobs)\n", out);
    }
    PQclear(res);
    return true;
}
