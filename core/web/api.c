/*
 * api.c -- the dashboard's read endpoints: GET /api/..., each answering one
 * JSON object built with json-c from database rows.
 *
 * The rows come from the functions `skipq stats`, `top`, `jobs`, `cron` and
 * `limits` print from (cli/stats.c, cli/admin.c), so the dashboard and the
 * CLI show the same numbers; what only the dashboard shows (charts, dead
 * groups, a job's dependencies and ordering key, next cron ticks) is read
 * here. Every statement is parameterised and names built-ins by schema.
 * What each costs on a large table:
 *  - the job list pages by keyset (id below the last one shown, newest
 *    first), never OFFSET: a page reads its rows through the primary key;
 *  - charts count executions through the BRIN index on started_at: those
 *    started within an hour before a bucket (an attempt longer than an
 *    hour is left out), bucketed by when they finished; closed buckets are
 *    kept in memory, so a refresh reads only the last hour or so;
 *  - dead groups read the dead jobs through their partial index
 *    (sql/054_pause.sql), whatever the done ones number;
 *  - a job's page reads it, its executions and its parents by key, and the
 *    children still waiting on it through the blocked-children GIN index.
 * Arguments are checked before any statement: an unknown one, one given
 * twice, text that is not UTF-8 or a value out of form is a 400 naming it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/admin.h"
#include "cli/stats.h"
#include "common/cron.h"
#include "common/util.h"
#include "skipq/skipq.h"
#include "web/api.h"

#define OID_BOOL 16
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_JSON 114
#define OID_FLOAT8 701
#define OID_NUMERIC 1700
#define OID_TIMESTAMPTZ 1184

#define PAGE_DEFAULT 50
#define PAGE_MAX 500
#define KEY_MAX_CHARS 256  /* unique and ordering keys (sql/009) */
#define SEARCH_MAX_CHARS 200

/* Dead jobs group by kind and this fold of their error: digits become N,
 * the first 300 characters count ("timeout after 30012 ms" and "... 30200
 * ms" are one group). A group's retry selects by the same expression. */
#define FOLDED_ERROR "pg_catalog.regexp_replace(pg_catalog.left(coalesce(last_error, ''), 300), '[0-9]+', 'N', 'g')"

/* ---- arguments ------------------------------------------------------------------------------ */

const char *web_arg(struct web_call *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

unsigned web_bad(struct web_call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return MHD_HTTP_BAD_REQUEST;
}

struct arg_scan {
    const char *const *names;
    int seen[16];
    char problem[300];
};

static enum MHD_Result scan_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct arg_scan *s = cls;
    if (s->problem[0])
        return MHD_NO;
    int i = 0;
    while (s->names[i] && strcmp(s->names[i], key) != 0)
        i++;
    if (!s->names[i] || i >= 16)
        snprintf(s->problem, sizeof s->problem, "unknown parameter \"%.60s\"", key);
    else if (s->seen[i]++)
        snprintf(s->problem, sizeof s->problem, "parameter \"%s\" given twice", key);
    else if (value && sq_utf8_invalid(value))
        snprintf(s->problem, sizeof s->problem, "parameter \"%s\" is not UTF-8 text", key);
    return s->problem[0] ? MHD_NO : MHD_YES;
}

bool web_args_check(struct web_call *c, const char *const *names)
{
    struct arg_scan s = {.names = names};
    MHD_get_connection_values(c->conn, MHD_GET_ARGUMENT_KIND, scan_arg, &s);
    if (!s.problem[0])
        return true;
    size_t n = (size_t)snprintf(c->err, sizeof c->err, "%s; this route takes", s.problem);
    for (int i = 0; names[i] && n < sizeof c->err; i++)
        n += (size_t)snprintf(c->err + n, sizeof c->err - n, "%s%s", i ? ", " : " ", names[i]);
    if (!names[0])
        snprintf(c->err + n, sizeof c->err - n, " none");
    return false;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* A name argument (queue, kind): NULL if fine (or absent), else 400. */
static bool bad_name(struct web_call *c, const char *what, const char *v)
{
    if (!v || sq_valid_name(v))
        return false;
    web_bad(c, "%s: \"%.140s\" is not a %s name (1 to 128 of A-Z a-z 0-9 _ . : -)", what, v, what);
    return true;
}

static bool bad_int(struct web_call *c, const char *what, const char *v, int64_t min, int64_t max, int64_t *out)
{
    const char *why = v ? sq_parse_int_why(v, min, max, out) : NULL;
    if (why)
        web_bad(c, "%s: \"%.60s\" %s; it must be a whole number from %" PRId64 " to %" PRId64, what, v, why, min,
                max);
    return why != NULL;
}

/* A timestamp argument, parsed by the server as the query will parse it:
 * 0 when fine or absent, else the status (400, or the database's). */
static unsigned check_time(struct web_call *c, const char *what, const char *v)
{
    if (!v)
        return 0;
    const char *params[1] = {v};
    PGresult *r = web_query(c, "SELECT $1::pg_catalog.timestamptz", 1, params);
    if (r) {
        PQclear(r);
        return 0;
    }
    if (strncmp(sq_db_last_sqlstate(), "22", 2) != 0)
        return web_db_failed(c);
    char msg[400];
    sq_strlcpy(msg, c->err, sizeof msg);
    return web_bad(c, "%s: %s (give e.g. 2026-03-01T12:00:00Z)", what, msg);
}

/* ---- values ---------------------------------------------------------------------------------- */

/* "2026-11-22 05:23:15.3742+00" (DateStyle ISO) as ISO 8601,
 * "2026-11-22T05:23:15.374Z"; anything else as it is. */
static json_object *iso_time(const char *v)
{
    size_t n = strlen(v);
    char out[40];
    if (n < 22 || n > 40 || v[4] != '-' || v[10] != ' ' || v[13] != ':' || v[16] != ':')
        return json_object_new_string(v);
    memcpy(out, v, 10);
    out[10] = 'T';
    memcpy(out + 11, v + 11, 8);
    size_t o = 19, i = 19;
    if (v[i] == '.') {
        out[o++] = '.';
        for (i++; v[i] >= '0' && v[i] <= '9'; i++)
            if (o < 23)
                out[o++] = v[i];
    }
    if ((v[i] != '+' && v[i] != '-') || !(v[i + 1] >= '0' && v[i + 1] <= '9') || !(v[i + 2] >= '0' && v[i + 2] <= '9'))
        return json_object_new_string(v);
    if (strncmp(v + i + 1, "00", 2) == 0 && (v[i + 3] == '\0' || strcmp(v + i + 3, ":00") == 0)) {
        out[o++] = 'Z';
    } else {
        out[o++] = v[i];
        out[o++] = v[i + 1];
        out[o++] = v[i + 2];
        out[o++] = ':';
        out[o++] = v[i + 3] == ':' ? v[i + 4] : '0';
        out[o++] = v[i + 3] == ':' ? v[i + 5] : '0';
    }
    out[o] = '\0';
    return json_object_new_string(out);
}

json_object *web_value(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return NULL; /* json-c's null */
    const char *v = PQgetvalue(res, row, col);
    switch (PQftype(res, col)) {
    case OID_BOOL:
        return json_object_new_boolean(*v == 't');
    case OID_INT2:
    case OID_INT4:
    case OID_INT8:
        return json_object_new_int64(strtoll(v, NULL, 10));
    case OID_FLOAT8:
    case OID_NUMERIC:
        return json_object_new_double_s(strtod(v, NULL), v);
    case OID_JSON: {
        json_object *o = json_tokener_parse(v);
        return o ? o : json_object_new_string(v);
    }
    case OID_TIMESTAMPTZ:
        return iso_time(v);
    default:
        return json_object_new_string_len(v, PQgetlength(res, row, col));
    }
}

json_object *web_row(const PGresult *res, int row)
{
    json_object *o = json_object_new_object();
    for (int c = 0; c < PQnfields(res); c++)
        json_object_object_add(o, PQfname(res, c), web_value(res, row, c));
    return o;
}

json_object *web_rows(const PGresult *res)
{
    json_object *a = json_object_new_array_ext(PQntuples(res));
    for (int r = 0; r < PQntuples(res); r++)
        json_object_array_add(a, web_row(res, r));
    return a;
}

static int64_t int_at(const PGresult *res, int row, const char *col)
{
    int c = PQfnumber(res, col);
    return c < 0 || PQgetisnull(res, row, c) ? 0 : strtoll(PQgetvalue(res, row, c), NULL, 10);
}

/* ---- session ------------------------------------------------------------------------------- */

unsigned web_api_session(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const none[] = {NULL};
    if (!web_args_check(c, none))
        return MHD_HTTP_BAD_REQUEST;
    if (!web_db(c))
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    struct sq_web *w = c->w;
    if (!web_read_caps(w, w->conn, c->err, sizeof c->err))
        return web_db_failed(c);
    json_object *o = c->out = json_object_new_object();
    json_object_object_add(o, "version", json_object_new_string(SKIPQ_VERSION));
    json_object_object_add(o, "role", json_object_new_string(w->role));
    json_object_object_add(o, "read_only", json_object_new_boolean(w->read_only));
    json_object_object_add(o, "can_act", json_object_new_boolean(w->can_act));
    json_object_object_add(o, "actions", json_object_new_boolean(w->can_act && !w->read_only));
    json_object_object_add(o, "why_no_actions",
                           json_object_new_string(w->read_only ? "skipq web runs with --read-only" : w->cannot_act));
    json_object_object_add(o, "csrf", json_object_new_string(w->csrf));
    json_object_object_add(o, "token", json_object_new_boolean(w->token != NULL));
    return MHD_HTTP_OK;
}

/* ---- overview ------------------------------------------------------------------------------- */

static const char DEAD_NOW_SQL[] =
    "SELECT queue, kind, pg_catalog.count(*) AS dead FROM skipq.jobs"
    " WHERE status OPERATOR(pg_catalog.=) 'dead' GROUP BY queue, kind ORDER BY queue, kind";

/* Kinds with jobs waiting (ready, scheduled, blocked) or running on a
 * queue no live host serves for that kind. */
static json_object *unserved(const PGresult *rows)
{
    json_object *a = json_object_new_array();
    for (int r = 0; r < PQntuples(rows); r++) {
        int64_t waiting = int_at(rows, r, "ready") + int_at(rows, r, "scheduled") + int_at(rows, r, "blocked") +
                          int_at(rows, r, "running");
        int served = PQfnumber(rows, "served");
        if (waiting == 0 || served < 0 || *PQgetvalue(rows, r, served) == 't')
            continue;
        json_object *o = json_object_new_object();
        static const char *const cols[] = {"queue", "kind", "ready", "scheduled", "blocked", "running"};
        for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
            json_object_object_add(o, cols[i], web_value(rows, r, PQfnumber(rows, cols[i])));
        json_object_array_add(a, o);
    }
    return a;
}

static void sum_rates(json_object *o, const PGresult *rows)
{
    double done = 0, failed = 0;
    for (int r = 0; r < PQntuples(rows); r++) {
        done += strtod(PQgetvalue(rows, r, PQfnumber(rows, "done_per_s")), NULL);
        failed += strtod(PQgetvalue(rows, r, PQfnumber(rows, "failed_per_s")), NULL);
    }
    json_object_object_add(o, "done_per_s", json_object_new_double(done));
    json_object_object_add(o, "failed_per_s", json_object_new_double(failed));
}

unsigned web_api_overview(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const none[] = {NULL};
    if (!web_args_check(c, none))
        return MHD_HTTP_BAD_REQUEST;
    PGconn *conn = web_db(c);
    struct sq_stats_data d;
    struct sq_top_data t;
    if (!conn)
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!sq_stats_fetch(conn, true, &d, c->err, sizeof c->err))
        return web_db_failed(c);
    if (!sq_top_fetch(conn, 10000, &t, c->err, sizeof c->err)) {
        sq_stats_clear(&d);
        return web_db_failed(c);
    }
    PGresult *dead = web_query(c, DEAD_NOW_SQL, 0, NULL);
    if (dead) {
        json_object *o = c->out = json_object_new_object();
        json_object_object_add(o, "at", web_value(t.head, 0, 0));
        json_object_object_add(o, "totals_since", web_value(d.mark, 0, 2));
        json_object_object_add(o, "queues", web_rows(d.rows));
        json_object_object_add(o, "dead_now", web_rows(dead));
        json_object_object_add(o, "unserved", unserved(d.rows));
        json_object_object_add(o, "paused", web_rows(d.paused));
        json_object_object_add(o, "hosts_alive", web_value(t.head, 0, 1));
        json_object_object_add(o, "threads", web_value(t.head, 0, 2));
        sum_rates(o, t.rows);
        json_object_object_add(o, "per_queue", web_rows(t.rows));
        json_object *e = NULL;
        if (!PQgetisnull(t.head, 0, 4)) {
            e = json_object_new_object();
            json_object_object_add(e, "job", web_value(t.head, 0, 3));
            json_object_object_add(e, "at", web_value(t.head, 0, 5));
            json_object_object_add(e, "error", web_value(t.head, 0, 4));
        }
        json_object_object_add(o, "last_error", e);
    }
    PQclear(dead);
    sq_stats_clear(&d);
    sq_top_clear(&t);
    return dead ? MHD_HTTP_OK : web_db_failed(c);
}

/* ---- charts ---------------------------------------------------------------------------------- */

/* Attempts that ended per bucket since $2 (epoch s, the first bucket's
 * start), of those started at most an hour before it ($3): done ones, and
 * failed ones (retry, dead, lost, crashed), as `skipq top` counts them. */
static const char THROUGHPUT_SQL[] =
    "SELECT pg_catalog.floor(extract(epoch FROM e.finished_at) OPERATOR(pg_catalog./) $1::pg_catalog.int8)"
    "         ::pg_catalog.int8 AS b,"
    "       pg_catalog.count(*) FILTER (WHERE e.status OPERATOR(pg_catalog.=) 'done') AS done,"
    "       pg_catalog.count(*) FILTER (WHERE e.status OPERATOR(pg_catalog.=) ANY (ARRAY['retry', 'dead', 'lost', 'crashed']))"
    "         AS failed"
    "  FROM skipq.job_executions e"
    " WHERE e.started_at OPERATOR(pg_catalog.>=) pg_catalog.to_timestamp($3::pg_catalog.float8)"
    "   AND e.finished_at OPERATOR(pg_catalog.>=) pg_catalog.to_timestamp($2::pg_catalog.float8)"
    " GROUP BY 1 ORDER BY 1";

/*
 * Buckets that ended more than CLOSED_S ago no longer change (an attempt's
 * end is stamped by the short statement that records it), so each chart
 * keeps them between requests and asks the database only for the rest:
 * after its first load, the day chart costs what the hour chart costs.
 * (One process, one thread: plain statics.)
 */
#define CLOSED_S 60
#define MAX_BUCKETS 96
struct chart {
    int64_t bucket_s, n;
    int64_t first, last; /* bucket numbers kept; last < first: none */
    int64_t done[MAX_BUCKETS], failed[MAX_BUCKETS];
};
static struct chart charts[2] = {{60, 60, 0, -1, {0}, {0}}, {900, 96, 0, -1, {0}, {0}}};

/* Counts of buckets [from, to] into d/f (indexed from `first`). */
static bool count_buckets(struct web_call *c, const struct chart *ch, int64_t first, int64_t from, int64_t *d,
                          int64_t *f)
{
    char bs[24], start[32], started[32];
    snprintf(bs, sizeof bs, "%" PRId64, ch->bucket_s);
    snprintf(start, sizeof start, "%" PRId64, from * ch->bucket_s);
    snprintf(started, sizeof started, "%" PRId64, from * ch->bucket_s - 3600);
    const char *params[3] = {bs, start, started};
    PGresult *res = web_query(c, THROUGHPUT_SQL, 3, params);
    if (!res)
        return false;
    for (int r = 0; r < PQntuples(res); r++) {
        int64_t b = strtoll(PQgetvalue(res, r, 0), NULL, 10) - first;
        if (b >= 0 && b < ch->n) {
            d[b] = strtoll(PQgetvalue(res, r, 1), NULL, 10);
            f[b] = strtoll(PQgetvalue(res, r, 2), NULL, 10);
        }
    }
    PQclear(res);
    return true;
}

unsigned web_api_throughput(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const names[] = {"range", NULL};
    if (!web_args_check(c, names))
        return MHD_HTTP_BAD_REQUEST;
    const char *range = web_arg(c, "range");
    bool day = range && strcmp(range, "day") == 0;
    if (range && !day && strcmp(range, "hour") != 0)
        return web_bad(c, "range: \"%.40s\" is not hour or day", range);
    struct chart *ch = &charts[day];
    PGresult *now = web_query(c, "SELECT extract(epoch FROM pg_catalog.now())::pg_catalog.float8", 0, NULL);
    if (!now)
        return web_db_failed(c);
    double now_s = strtod(PQgetvalue(now, 0, 0), NULL);
    PQclear(now);
    int64_t last = (int64_t)(now_s / (double)ch->bucket_s), first = last - ch->n + 1;
    int64_t closed = (int64_t)((now_s - CLOSED_S) / (double)ch->bucket_s) - 1;
    int64_t d[MAX_BUCKETS] = {0}, f[MAX_BUCKETS] = {0};
    int64_t from = ch->first <= first && ch->last >= first ? ch->last + 1 : first;
    for (int64_t b = first; b < from; b++) {
        d[b - first] = ch->done[b - ch->first];
        f[b - first] = ch->failed[b - ch->first];
    }
    if (!count_buckets(c, ch, first, from, d, f))
        return web_db_failed(c);
    ch->first = first;
    ch->last = closed < first ? first - 1 : closed;
    memcpy(ch->done, d, sizeof d);
    memcpy(ch->failed, f, sizeof f);
    json_object *o = c->out = json_object_new_object(), *a = json_object_new_array_ext((int)ch->n);
    json_object_object_add(o, "range", json_object_new_string(day ? "day" : "hour"));
    json_object_object_add(o, "bucket_s", json_object_new_int64(ch->bucket_s));
    json_object_object_add(o, "counted_from", json_object_new_int64(from * ch->bucket_s * 1000));
    for (int64_t i = 0; i < ch->n; i++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "t", json_object_new_int64((first + i) * ch->bucket_s * 1000));
        json_object_object_add(e, "done", json_object_new_int64(d[i]));
        json_object_object_add(e, "failed", json_object_new_int64(f[i]));
        json_object_array_add(a, e);
    }
    json_object_object_add(o, "buckets", a);
    return MHD_HTTP_OK;
}

/* ---- jobs ------------------------------------------------------------------------------------- */

static bool bad_status(struct web_call *c, const char *v)
{
    static const char *const ok[] = {"blocked", "pending", "running", "done", "dead", "cancelled"};
    for (size_t i = 0; v && i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(v, ok[i]) == 0)
            return false;
    if (v)
        web_bad(c, "status: \"%.40s\" is not blocked, pending, running, done, dead or cancelled", v);
    return v != NULL;
}

static bool bad_text(struct web_call *c, const char *what, const char *v, size_t max_chars)
{
    if (!v || utf8_chars(v) <= max_chars)
        return false;
    web_bad(c, "%s: at most %zu characters", what, max_chars);
    return true;
}

/* A page of jobs from rows fetched with a limit one over the page's: the
 * extra row only says that there is a next page, which starts below the
 * last id shown ({"jobs": [...], "next_before": ID or null}). Takes res. */
static unsigned keyset_page(struct web_call *c, PGresult *res, long limit)
{
    int n = PQntuples(res) > limit ? (int)limit : PQntuples(res);
    json_object *o = c->out = json_object_new_object(), *a = json_object_new_array_ext(n);
    for (int r = 0; r < n; r++)
        json_object_array_add(a, web_row(res, r));
    json_object_object_add(o, "jobs", a);
    json_object_object_add(o, "next_before",
                           PQntuples(res) > limit ? json_object_new_int64(int_at(res, n - 1, "id")) : NULL);
    PQclear(res);
    return MHD_HTTP_OK;
}

unsigned web_api_jobs(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const names[] = {"status", "queue", "kind",  "from",   "to",
                                        "unique_key", "ordering_key", "error", "before", "limit", NULL};
    if (!web_args_check(c, names))
        return MHD_HTTP_BAD_REQUEST;
    struct sq_job_filter f = {.status = web_arg(c, "status"),
                              .queue = web_arg(c, "queue"),
                              .kind = web_arg(c, "kind"),
                              .before_id = web_arg(c, "before"),
                              .created_from = web_arg(c, "from"),
                              .created_to = web_arg(c, "to"),
                              .unique_key = web_arg(c, "unique_key"),
                              .ordering_key = web_arg(c, "ordering_key"),
                              .error_text = web_arg(c, "error")};
    int64_t limit = PAGE_DEFAULT, before;
    if (bad_status(c, f.status) || bad_name(c, "queue", f.queue) || bad_name(c, "kind", f.kind) ||
        bad_int(c, "before", f.before_id, 1, INT64_MAX, &before) ||
        bad_int(c, "limit", web_arg(c, "limit"), 1, PAGE_MAX, &limit) ||
        bad_text(c, "unique_key", f.unique_key, KEY_MAX_CHARS) ||
        bad_text(c, "ordering_key", f.ordering_key, KEY_MAX_CHARS) ||
        bad_text(c, "error", f.error_text, SEARCH_MAX_CHARS))
        return MHD_HTTP_BAD_REQUEST;
    unsigned st = check_time(c, "from", f.created_from);
    if (st || (st = check_time(c, "to", f.created_to)))
        return st;
    f.limit = (int)limit + 1; /* one more tells whether there is a next page */
    PGconn *conn = web_db(c);
    PGresult *res = conn ? sq_admin_list_fetch(conn, &f, c->err, sizeof c->err) : NULL;
    if (!res)
        return conn ? web_db_failed(c) : MHD_HTTP_SERVICE_UNAVAILABLE;
    return keyset_page(c, res, limit);
}

/* ---- one job ------------------------------------------------------------------------------------ */

static const char PAYLOAD_SQL[] =
    "SELECT pg_catalog.jsonb_pretty(payload) AS payload, pg_catalog.octet_length(payload::pg_catalog.text) AS bytes"
    "  FROM skipq.jobs WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int8";

/* Its parents in depends_on order; a parent retention deleted has no row. */
static const char PARENTS_SQL[] =
    "SELECT d.id, p.kind, p.status, p.finished_at"
    "  FROM skipq.jobs j CROSS JOIN LATERAL pg_catalog.unnest(j.depends_on) WITH ORDINALITY AS d(id, n)"
    "  LEFT JOIN skipq.jobs p ON p.id OPERATOR(pg_catalog.=) d.id"
    " WHERE j.id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 ORDER BY d.n";

/* Children still blocked on it (the GIN index holds only blocked rows). */
static const char CHILDREN_SQL[] =
    "SELECT id, kind, status FROM skipq.jobs"
    " WHERE status OPERATOR(pg_catalog.=) 'blocked'"
    "   AND depends_on OPERATOR(pg_catalog.@>) ARRAY[$1::pg_catalog.int8]"
    " ORDER BY id LIMIT 101";

/* Who holds its ordering key, and the key's unfinished jobs ($3: this one). */
static const char ORDERING_SQL[] =
    "SELECT (SELECT k.job_id FROM skipq.ordering_keys k"
    "         WHERE k.queue OPERATOR(pg_catalog.=) $1 AND k.ordering_key OPERATOR(pg_catalog.=) $2) AS holder,"
    "       pg_catalog.count(*) FILTER (WHERE j.id OPERATOR(pg_catalog.<) $3::pg_catalog.int8) AS ahead,"
    "       pg_catalog.count(*) AS unfinished"
    "  FROM skipq.jobs j"
    " WHERE j.queue OPERATOR(pg_catalog.=) $1 AND j.ordering_key OPERATOR(pg_catalog.=) $2"
    "   AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['blocked', 'pending', 'running'])";

static bool add_job_extras(struct web_call *c, json_object *o, const PGresult *job, const char *id)
{
    const char *p1[1] = {id};
    PGresult *pay = web_query(c, PAYLOAD_SQL, 1, p1), *par = pay ? web_query(c, PARENTS_SQL, 1, p1) : NULL,
             *kids = par ? web_query(c, CHILDREN_SQL, 1, p1) : NULL, *ord = NULL;
    int qc = PQfnumber(job, "queue"), kc = PQfnumber(job, "ordering_key");
    bool ordered = kids && !PQgetisnull(job, 0, kc);
    if (ordered) {
        const char *p3[3] = {PQgetvalue(job, 0, qc), PQgetvalue(job, 0, kc), id};
        ord = web_query(c, ORDERING_SQL, 3, p3);
    }
    bool ok = kids && (!ordered || ord);
    if (ok) {
        json_object *j = NULL;
        json_object_object_get_ex(o, "job", &j);
        json_object_object_del(j, "payload");
        json_object_object_add(j, "payload_pretty", web_value(pay, 0, 0));
        json_object_object_add(j, "payload_bytes", web_value(pay, 0, 1));
        json_object_object_add(o, "parents", web_rows(par));
        int nk = PQntuples(kids) > 100 ? 100 : PQntuples(kids);
        json_object *a = json_object_new_array_ext(nk);
        for (int r = 0; r < nk; r++)
            json_object_array_add(a, web_row(kids, r));
        json_object_object_add(o, "waiting_children", a);
        json_object_object_add(o, "more_waiting_children", json_object_new_boolean(PQntuples(kids) > 100));
        json_object_object_add(o, "ordering", ord ? web_row(ord, 0) : NULL);
    }
    PQclear(pay);
    PQclear(par);
    PQclear(kids);
    PQclear(ord);
    return ok;
}

unsigned web_api_job(struct web_call *c, const char *tail)
{
    static const char *const none[] = {NULL};
    int64_t id;
    if (!web_args_check(c, none))
        return MHD_HTTP_BAD_REQUEST;
    if (bad_int(c, "job id", tail, 1, INT64_MAX, &id))
        return MHD_HTTP_BAD_REQUEST;
    if (!web_begin_read(c))
        return web_db_failed(c);
    PGresult *job = NULL, *ex = NULL;
    int found = sq_admin_show_fetch(c->w->conn, id, &job, &ex, c->err, sizeof c->err);
    if (found <= 0)
        return found == 0 ? MHD_HTTP_NOT_FOUND : web_db_failed(c);
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%" PRId64, id);
    json_object *o = c->out = json_object_new_object();
    json_object_object_add(o, "job", web_row(job, 0));
    json_object_object_add(o, "executions", web_rows(ex));
    PGresult *now = web_query(c, "SELECT pg_catalog.now()", 0, NULL);
    bool ok = now && add_job_extras(c, o, job, idtext);
    if (ok)
        json_object_object_add(o, "now", web_value(now, 0, 0));
    PQclear(now);
    PQclear(job);
    PQclear(ex);
    return ok ? MHD_HTTP_OK : web_db_failed(c);
}

/* ---- dead jobs --------------------------------------------------------------------------------- */

static const char DEAD_GROUPS_SQL[] =
    "SELECT g.kind, g.error_group, g.jobs, g.newest_id, g.first_died, g.last_died,"
    "       (SELECT j.last_error FROM skipq.jobs j WHERE j.id OPERATOR(pg_catalog.=) g.newest_id) AS example"
    "  FROM (SELECT kind, " FOLDED_ERROR " AS error_group, pg_catalog.count(*) AS jobs,"
    "               pg_catalog.max(id) AS newest_id, pg_catalog.min(finished_at) AS first_died,"
    "               pg_catalog.max(finished_at) AS last_died"
    "          FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'dead' GROUP BY 1, 2) g"
    " ORDER BY g.jobs DESC, g.kind, g.error_group LIMIT 501";

unsigned web_api_dead(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const none[] = {NULL};
    if (!web_args_check(c, none))
        return MHD_HTTP_BAD_REQUEST;
    PGresult *res = web_query(c, DEAD_GROUPS_SQL, 0, NULL);
    if (!res)
        return web_db_failed(c);
    int n = PQntuples(res) > 500 ? 500 : PQntuples(res);
    json_object *o = c->out = json_object_new_object(), *a = json_object_new_array_ext(n);
    int64_t total = 0;
    for (int r = 0; r < n; r++) {
        json_object_array_add(a, web_row(res, r));
        total += int_at(res, r, "jobs");
    }
    json_object_object_add(o, "groups", a);
    json_object_object_add(o, "more_groups", json_object_new_boolean(PQntuples(res) > 500));
    json_object_object_add(o, "dead", json_object_new_int64(total));
    PQclear(res);
    return MHD_HTTP_OK;
}

static const char DEAD_JOBS_SQL[] =
    "SELECT id, queue, kind, attempts, max_attempts, finished_at, last_error FROM skipq.jobs"
    " WHERE status OPERATOR(pg_catalog.=) 'dead' AND kind OPERATOR(pg_catalog.=) $1"
    "   AND " FOLDED_ERROR " OPERATOR(pg_catalog.=) $2"
    "   AND ($3::pg_catalog.int8 IS NULL OR id OPERATOR(pg_catalog.<) $3::pg_catalog.int8)"
    " ORDER BY id DESC LIMIT $4::pg_catalog.int4";

unsigned web_api_dead_jobs(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const names[] = {"kind", "group", "before", "limit", NULL};
    int64_t limit = PAGE_DEFAULT, before;
    if (!web_args_check(c, names))
        return MHD_HTTP_BAD_REQUEST;
    const char *kind = web_arg(c, "kind");
    const char *group = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "group");
    if (!kind || !group)
        return web_bad(c, "give kind and group (as /api/dead lists them)");
    if (bad_name(c, "kind", kind) || bad_text(c, "group", group, 300) ||
        bad_int(c, "before", web_arg(c, "before"), 1, INT64_MAX, &before) ||
        bad_int(c, "limit", web_arg(c, "limit"), 1, PAGE_MAX, &limit))
        return MHD_HTTP_BAD_REQUEST;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", (int)limit + 1);
    const char *params[4] = {kind, group, web_arg(c, "before"), lim};
    PGresult *res = web_query(c, DEAD_JOBS_SQL, 4, params);
    if (!res)
        return web_db_failed(c);
    return keyset_page(c, res, limit);
}

PGresult *web_dead_group_ids(struct web_call *c, const char *kind, const char *group)
{
    const char *params[2] = {kind, group};
    return web_query(c,
                     "SELECT id FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'dead'"
                     "   AND kind OPERATOR(pg_catalog.=) $1 AND " FOLDED_ERROR " OPERATOR(pg_catalog.=) $2"
                     " ORDER BY id",
                     2, params);
}

/* ---- hosts, cron, limits ---------------------------------------------------------------------- */

static int civil_cmp(const struct sq_civil *a, const struct sq_civil *b)
{
    const int x[5] = {a->year, a->month, a->day, a->hour, a->minute};
    const int y[5] = {b->year, b->month, b->day, b->hour, b->minute};
    for (int i = 0; i < 5; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* The schedule's next tick after now (or after its last tick, if later),
 * computed as the hosts compute ticks: local minutes in its zone (cron.c),
 * made an instant by the server. NULL when it cannot be worked out. */
static json_object *next_tick(struct web_call *c, const char *schedule, const char *zone, const char *last_tick)
{
    struct sq_cron cron;
    char why[200];
    if (!sq_cron_parse(schedule, &cron, why, sizeof why))
        return NULL;
    const char *p[2] = {zone, last_tick};
    PGresult *r = web_query(c,
                            "SELECT (pg_catalog.now() AT TIME ZONE $1)::pg_catalog.text,"
                            "       ($2::pg_catalog.timestamptz AT TIME ZONE $1)::pg_catalog.text",
                            2, p);
    struct sq_civil now, last, next;
    bool ok = r && sq_civil_parse(PQgetvalue(r, 0, 0), &now) && sq_civil_parse(PQgetvalue(r, 0, 1), &last) &&
              sq_cron_next(&cron, civil_cmp(&last, &now) > 0 ? &last : &now, &next);
    PQclear(r);
    if (!ok)
        return NULL;
    char local[24];
    sq_civil_format(&next, local, sizeof local);
    const char *q[2] = {local, zone};
    r = web_query(c, "SELECT $1::pg_catalog.timestamp AT TIME ZONE $2", 2, q);
    json_object *o = r ? web_value(r, 0, 0) : NULL;
    PQclear(r);
    return o;
}

static json_object *cron_rows(struct web_call *c, const PGresult *cron)
{
    json_object *a = web_rows(cron);
    for (int r = 0; r < PQntuples(cron); r++)
        json_object_object_add(json_object_array_get_idx(a, (size_t)r), "next_tick",
                               next_tick(c, PQgetvalue(cron, r, 1), PQgetvalue(cron, r, 2), PQgetvalue(cron, r, 3)));
    return a;
}

/* The distinct values of a text column, in order of first appearance. */
static json_object *distinct(const PGresult *rows, int col)
{
    json_object *a = json_object_new_array();
    for (int r = 0; r < PQntuples(rows); r++) {
        bool seen = false;
        for (int k = 0; k < r && !seen; k++)
            seen = strcmp(PQgetvalue(rows, k, col), PQgetvalue(rows, r, col)) == 0;
        if (!seen)
            json_object_array_add(a, web_value(rows, r, col));
    }
    return a;
}

unsigned web_api_hosts(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const none[] = {NULL};
    if (!web_args_check(c, none))
        return MHD_HTTP_BAD_REQUEST;
    PGconn *conn = web_db(c);
    struct sq_stats_data d;
    if (!conn)
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!sq_stats_fetch(conn, true, &d, c->err, sizeof c->err))
        return web_db_failed(c);
    PGresult *cron = sq_admin_cron_fetch(conn, c->err, sizeof c->err);
    PGresult *limits = cron ? sq_admin_limits_fetch(conn, c->err, sizeof c->err) : NULL;
    if (limits) {
        json_object *o = c->out = json_object_new_object();
        json_object_object_add(o, "hosts", web_rows(d.hosts));
        json_object_object_add(o, "unserved", unserved(d.rows));
        json_object_object_add(o, "paused", web_rows(d.paused));
        json_object_object_add(o, "cron", cron_rows(c, cron));
        json_object_object_add(o, "limits", web_rows(limits));
        json_object_object_add(o, "queues", distinct(d.rows, 0));
        json_object_object_add(o, "kinds", distinct(d.rows, 1));
    }
    PQclear(cron);
    PQclear(limits);
    sq_stats_clear(&d);
    return limits ? MHD_HTTP_OK : web_db_failed(c);
}
