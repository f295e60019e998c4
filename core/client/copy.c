/*
 * copy.c -- libskipq's bulk path: stream jobs into skipq.jobs with COPY.
 *
 * Why a second path next to skipq_enqueue_many(): COPY skips building and
 * parsing one big JSON array and runs no PL/pgSQL per job, so it is the
 * fastest way in (see bench/). The price is that rows go straight into the
 * table, so the rules skipq.enqueue() enforces in SQL are enforced twice
 * here: by this file before a row is sent (names, priority, attempts, delay,
 * payload size against skipq.settings), and by the table's CHECK constraints
 * and jsonb input on the server (malformed JSON, NUL bytes, bad UTF-8),
 * whose error names the row. The role needs INSERT on the six columns
 * written (sql/roles.sql: skipq_bulk).
 *
 * run_at is written as the server's now() at skipq_copy_begin() plus each
 * job's delay, so delays are measured on the database clock, as everywhere
 * else in skipq. All rows travel in one COPY statement: all or nothing.
 *
 * A job without max_attempts takes its kind's default (skipq.kind_defaults,
 * else 5), as every way in does. The schema's trigger would fill a NULL in
 * (sql/056), but it runs per row: the defaults are read once at begin,
 * like now(), and each row carries its number, so the trigger never fires
 * for a COPY from here.
 */
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/db.h"
#include "skipq/skipq.h"

#define COPY_FLUSH_BYTES (256 * 1024)
#define MAX_DELAY_MS (10LL * 366 * 24 * 3600 * 1000)

struct skipq_copy {
    PGconn *conn;
    char *buf;
    size_t len, cap;
    int64_t rows;
    int64_t now_us;     /* server now() at begin, microseconds since the epoch */
    int64_t max_payload;
    bool failed;        /* the COPY can no longer succeed; end() reports why */
    char why[SKIPQ_ERRBUF_SIZE];
    PGresult *defaults; /* kind, max_attempts of skipq.kind_defaults, sorted by kind */
};

/* The kind's default max_attempts as read at begin, else 5. */
static int default_attempts(const struct skipq_copy *c, const char *kind)
{
    int lo = 0, hi = c->defaults ? PQntuples(c->defaults) : 0;
    while (lo < hi) { /* ORDER BY kind COLLATE "C": byte order, as strcmp */
        int mid = (lo + hi) / 2, cmp = strcmp(PQgetvalue(c->defaults, mid, 0), kind);
        if (cmp == 0)
            return atoi(PQgetvalue(c->defaults, mid, 1));
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 5;
}

static const char COPY_SQL[] =
    "COPY skipq.jobs (queue, kind, payload, priority, run_at, max_attempts) FROM STDIN";

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '.' || ch == ':' || ch == '-';
        if (!ok)
            return false;
    }
    return true;
}

static bool reserve(struct skipq_copy *c, size_t more)
{
    if (c->len + more <= c->cap)
        return true;
    size_t cap = c->cap ? c->cap : COPY_FLUSH_BYTES * 2;
    while (cap < c->len + more)
        cap *= 2;
    char *p = realloc(c->buf, cap);
    if (!p)
        return false;
    c->buf = p;
    c->cap = cap;
    return true;
}

/* Append s in COPY text format: backslash, tab, newline and CR escaped. */
static void put_escaped(struct skipq_copy *c, const char *s)
{
    for (; *s; s++) {
        char e = 0;
        switch (*s) {
        case '\\': e = '\\'; break;
        case '\t': e = 't'; break;
        case '\n': e = 'n'; break;
        case '\r': e = 'r'; break;
        }
        if (e) {
            c->buf[c->len++] = '\\';
            c->buf[c->len++] = e;
        } else {
            c->buf[c->len++] = *s;
        }
    }
}

static void put_timestamp(struct skipq_copy *c, int64_t us)
{
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    c->len += (size_t)snprintf(c->buf + c->len, 40, "%04d-%02d-%02d %02d:%02d:%02d.%06d+00", tm.tm_year + 1900,
                               tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
}

static bool flush(struct skipq_copy *c)
{
    if (c->len == 0)
        return true;
    if (PQputCopyData(c->conn, c->buf, (int)c->len) != 1) {
        snprintf(c->why, sizeof c->why, "COPY failed: %s", PQerrorMessage(c->conn));
        c->failed = true;
        return false;
    }
    c->len = 0;
    return true;
}

skipq_rc skipq_copy_begin(PGconn *conn, skipq_copy **out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    if (!conn || !out) {
        snprintf(errbuf, errlen, "skipq_copy_begin: %s is NULL", conn ? "out" : "conn");
        return SKIPQ_EINVAL;
    }
    *out = NULL;
    struct skipq_copy *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(errbuf, errlen, "skipq_copy_begin: out of memory");
        return SKIPQ_ENOMEM;
    }
    c->conn = conn;
    skipq_rc rc = SKIPQ_EDB;
    char msg[SKIPQ_ERRBUF_SIZE];
    PGresult *res = sq_db_query(conn,
                                "SELECT (extract(epoch FROM pg_catalog.now()) OPERATOR(pg_catalog.*) 1000000)"
                                "         ::pg_catalog.int8,"
                                " coalesce((SELECT value::pg_catalog.int8 FROM skipq.settings"
                                "            WHERE key OPERATOR(pg_catalog.=) 'max_payload_bytes'),"
                                "          1048576)",
                                0, NULL, msg, sizeof msg);
    if (!res) {
        const char *st = sq_db_last_sqlstate();
        bool schema = strcmp(st, "42P01") == 0 || strcmp(st, "3F000") == 0;
        snprintf(errbuf, errlen, "%s%s", schema ? "the skipq schema is missing (run `skipq migrate`): " : "", msg);
        rc = schema ? SKIPQ_ESCHEMA : SKIPQ_EDB;
        goto fail;
    }
    c->now_us = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    c->max_payload = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    PQclear(res);
    res = NULL;
    c->defaults = sq_db_query(conn,
                              "SELECT kind, max_attempts FROM skipq.kind_defaults"
                              " ORDER BY kind COLLATE \"C\"",
                              0, NULL, msg, sizeof msg);
    if (!c->defaults) {
        snprintf(errbuf, errlen, "cannot read the kinds' defaults (skipq.kind_defaults): %s", msg);
        goto fail;
    }
    res = PQexec(conn, COPY_SQL);
    if (PQresultStatus(res) != PGRES_COPY_IN) {
        sq_db_error(conn, res, msg, sizeof msg);
        snprintf(errbuf, errlen, "could not start COPY into skipq.jobs: %s", msg);
        goto fail;
    }
    PQclear(res);
    *out = c;
    return SKIPQ_OK;
fail:
    PQclear(res);
    PQclear(c->defaults);
    free(c);
    return rc;
}

/* Check one job against skipq.enqueue()'s rules; "" when it passes. */
static bool check_job(const struct skipq_copy *c, const char *kind, const char *payload, const char *queue,
                      const skipq_enqueue_opts *o, char *errbuf, size_t errlen)
{
    if (!kind || !valid_name(kind))
        snprintf(errbuf, errlen, "job %" PRId64 ": kind \"%.200s\" is not 1-128 characters of letters, digits and _.:-",
                 c->rows, kind ? kind : "(null)");
    else if (!valid_name(queue))
        snprintf(errbuf, errlen, "job %" PRId64 ": queue \"%.200s\" is not 1-128 characters of letters, digits and _.:-",
                 c->rows, queue);
    else if (o->priority < -1000000 || o->priority > 1000000)
        snprintf(errbuf, errlen, "job %" PRId64 ": priority must be from -1000000 to 1000000 (got %d)", c->rows,
                 o->priority);
    else if (o->max_attempts < 0 || o->max_attempts > 100000)
        snprintf(errbuf, errlen, "job %" PRId64 ": max_attempts must be from 1 to 100000 (got %d)", c->rows,
                 o->max_attempts);
    else if (o->delay_ms < 0 || o->delay_ms > MAX_DELAY_MS)
        snprintf(errbuf, errlen, "job %" PRId64 ": delay must be from 0 to 10 years (got %" PRId64 "ms)", c->rows,
                 o->delay_ms);
    else if (o->unique_key || o->ordering_key || o->depends_on_count)
        snprintf(errbuf, errlen,
                 "job %" PRId64 ": unique_key, ordering_key and depends_on are settled by skipq.enqueue(), "
                 "not by COPY: enqueue this job with skipq_enqueue() or skipq_enqueue_many()",
                 c->rows);
    else if ((int64_t)strlen(payload) > c->max_payload)
        snprintf(errbuf, errlen, "job %" PRId64 ": payload is %zu bytes, more than the %" PRId64 "-byte limit",
                 c->rows, strlen(payload), c->max_payload);
    else
        return true;
    return false;
}

skipq_rc skipq_copy_add(skipq_copy *c, const char *kind, const char *payload, const skipq_enqueue_opts *opts,
                        char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    if (!c) {
        snprintf(errbuf, errlen, "skipq_copy_add: the copy handle is NULL");
        return SKIPQ_EINVAL;
    }
    if (c->failed) {
        snprintf(errbuf, errlen, "%s", c->why);
        return SKIPQ_EDB;
    }
    skipq_enqueue_opts defaults = {0};
    const skipq_enqueue_opts *o = opts ? opts : &defaults;
    const char *queue = o->queue ? o->queue : "default";
    if (!payload)
        payload = "{}";
    if (!check_job(c, kind, payload, queue, o, errbuf, errlen))
        return SKIPQ_EINVAL;
    /* Worst case every payload byte doubles when escaped. */
    if (!reserve(c, strlen(kind) + strlen(queue) + 2 * strlen(payload) + 96)) {
        snprintf(errbuf, errlen, "skipq_copy_add: out of memory");
        return SKIPQ_ENOMEM;
    }
    put_escaped(c, queue);
    c->buf[c->len++] = '\t';
    put_escaped(c, kind);
    c->buf[c->len++] = '\t';
    put_escaped(c, payload);
    c->len += (size_t)snprintf(c->buf + c->len, 16, "\t%d\t", o->priority);
    put_timestamp(c, c->now_us + o->delay_ms * 1000);
    c->len += (size_t)snprintf(c->buf + c->len, 16, "\t%d\n",
                               o->max_attempts ? o->max_attempts : default_attempts(c, kind));
    c->rows++;
    if (c->len >= COPY_FLUSH_BYTES && !flush(c)) {
        snprintf(errbuf, errlen, "%s", c->why);
        return SKIPQ_EDB;
    }
    return SKIPQ_OK;
}

/* "...COPY jobs, line 7, column payload: ..." -> 6 (0-based job), or -1.
 * (A JSON error's context first names a line of the JSON text.) */
static long failed_row(const PGresult *res)
{
    static const char tag[] = "COPY jobs, line ";
    const char *ctx = PQresultErrorField(res, PG_DIAG_CONTEXT);
    const char *p = ctx ? strstr(ctx, tag) : NULL;
    return p ? strtol(p + sizeof tag - 1, NULL, 10) - 1 : -1;
}

static skipq_rc finish(skipq_copy *c, const char *abort_msg, int64_t *count_out, char *errbuf, size_t errlen)
{
    skipq_rc rc = SKIPQ_OK;
    if (!abort_msg && !flush(c)) {
        snprintf(errbuf, errlen, "%s", c->why);
        rc = SKIPQ_EDB;
        abort_msg = "the client gave up";
    }
    if (PQputCopyEnd(c->conn, abort_msg) != 1 && rc == SKIPQ_OK) {
        snprintf(errbuf, errlen, "COPY failed: %s", PQerrorMessage(c->conn));
        rc = SKIPQ_EDB;
    }
    PGresult *res;
    while ((res = PQgetResult(c->conn)) != NULL) {
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            if (count_out)
                *count_out = strtoll(PQcmdTuples(res), NULL, 10);
        } else if (rc == SKIPQ_OK && !abort_msg) {
            char msg[SKIPQ_ERRBUF_SIZE];
            sq_db_error(c->conn, res, msg, sizeof msg);
            long row = failed_row(res);
            bool data = strncmp(sq_db_sqlstate(res), "22", 2) == 0 || strncmp(sq_db_sqlstate(res), "23", 2) == 0;
            if (row >= 0)
                snprintf(errbuf, errlen, "job %ld: %s; nothing was written", row, msg);
            else
                snprintf(errbuf, errlen, "%s; nothing was written", msg);
            rc = data ? SKIPQ_EINVAL : SKIPQ_EDB;
        }
        PQclear(res);
    }
    free(c->buf);
    PQclear(c->defaults);
    free(c);
    return rc;
}

skipq_rc skipq_copy_end(skipq_copy *c, int64_t *count_out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    if (count_out)
        *count_out = 0;
    if (!c) {
        snprintf(errbuf, errlen, "skipq_copy_end: the copy handle is NULL");
        return SKIPQ_EINVAL;
    }
    return finish(c, NULL, count_out, errbuf, errlen);
}

void skipq_copy_abort(skipq_copy *c)
{
    if (c) {
        char ignored[SKIPQ_ERRBUF_SIZE];
        finish(c, "skipq_copy_abort", NULL, ignored, sizeof ignored);
    }
}
