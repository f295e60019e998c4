/*
 * hosts.c -- a running host says who it is and what it serves.
 *
 * The heartbeat thread calls these on its normal rounds, so the registry
 * costs one short statement per heartbeat and says "alive" only while the
 * host can still renew leases. The row's id is NAME:PID, the prefix of the
 * `locked_by` of every job the host holds, so an operator can match the
 * two. The SQL lives in functions (sql/008_hosts.sql) so skipq_worker needs
 * no rights on the tables themselves.
 */
#include "host/hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/db.h"
#include "common/util.h"
#include "host/queue.h"
#include "host/state.h"
#include "skipq/skipq.h"

static void host_id(const struct sq_host *h, char *id, size_t len)
{
    snprintf(id, len, "%s:%d", sq_host_name(h), (int)getpid());
}

/* "queue/kind" for every kind of every group, as a text[] literal. */
static char *serves_array(const struct sq_host *h)
{
    const char *const *kinds;
    size_t n = 0;
    for (size_t i = 0; i < sq_host_ngroups(h); i++)
        n += sq_host_group_kinds(h, i, &kinds);
    char **pairs = calloc(n ? n : 1, sizeof *pairs);
    char *arr = NULL;
    size_t k = 0;
    if (!pairs)
        return NULL;
    for (size_t i = 0; i < sq_host_ngroups(h); i++) {
        const char *queue = sq_host_group_queue(h, i);
        size_t nk = sq_host_group_kinds(h, i, &kinds);
        for (size_t j = 0; j < nk; j++) {
            size_t len = strlen(queue) + strlen(kinds[j]) + 2;
            if (!(pairs[k] = malloc(len)))
                goto out;
            snprintf(pairs[k++], len, "%s/%s", queue, kinds[j]);
        }
    }
    arr = sq_text_array((const char *const *)pairs, n);
out:
    for (size_t i = 0; i < k; i++)
        free(pairs[i]);
    free(pairs);
    return arr;
}

static bool exec_params(PGconn *conn, const char *sql, int n, const char *const *params, char *err, size_t errlen)
{
    PGresult *res = sq_db_query(conn, sql, n, params, err, errlen);
    PQclear(res);
    return res != NULL;
}

bool sq_hosts_beat(PGconn *conn, const struct sq_host *h, bool first, char *err, size_t errlen)
{
    char id[128], hostname[256] = "", pid[16], threads[16], hb[24];
    host_id(h, id, sizeof id);
    if (gethostname(hostname, sizeof hostname - 1) != 0)
        sq_strlcpy(hostname, "unknown", sizeof hostname);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(threads, sizeof threads, "%d", sq_host_nthreads(h));
    snprintf(hb, sizeof hb, "%lld", (long long)sq_host_config(h)->heartbeat_ms);
    char *serves = serves_array(h);
    if (!serves) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    const char *params[9] = {id, sq_host_name(h), hostname, pid, SKIPQ_VERSION, threads, serves, hb, first ? "t" : "f"};
    bool ok = exec_params(conn,
                          "SELECT skipq.host_beat($1, $2, $3, $4::pg_catalog.int4, $5, $6::pg_catalog.int4,"
                          " $7::pg_catalog.text[], $8::pg_catalog.int8, $9::pg_catalog.bool)",
                          9, params, err, errlen);
    free(serves);
    return ok;
}

bool sq_hosts_gone(PGconn *conn, const struct sq_host *h, char *err, size_t errlen)
{
    char id[128];
    host_id(h, id, sizeof id);
    const char *params[1] = {id};
    return exec_params(conn, "SELECT skipq.host_gone($1)", 1, params, err, errlen);
}

long sq_hosts_advance_totals(PGconn *conn, int64_t lag_ms, char *err, size_t errlen)
{
    char lag[24];
    snprintf(lag, sizeof lag, "%lld", (long long)lag_ms);
    const char *params[1] = {lag};
    PGresult *res = sq_db_query(conn, "SELECT skipq.advance_totals($1::pg_catalog.int8)", 1, params, err, errlen);
    if (!res)
        return -2;
    long n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}
