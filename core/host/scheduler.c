/*
 * scheduler.c -- the scheduling features that need no leader: cron schedules,
 * per-kind limits and priority aging. Each runs on the heartbeat rounds of
 * every host; the database decides who does what.
 *
 * - Cron: the host reads a schedule's last tick and the database's "now" in
 *   the schedule's time zone, lists the due local minutes (cron.c), and
 *   enqueues them in one statement that also advances last_tick by
 *   compare-and-set on the value it read. Of hosts racing on a schedule,
 *   one statement wins; the others change nothing. So every tick is
 *   enqueued once, whatever the number of hosts.
 * - Limits: hosts write the limits of their INI at start; every host then
 *   follows the rows of skipq.kind_limits (refreshed each round), claiming
 *   through the limit-aware statement only for groups that serve a limited
 *   kind, so other groups keep the plain claim.
 * - Per-kind defaults: hosts write the max_attempts of the kinds they run
 *   into skipq.kind_defaults at start and on SIGHUP; the schema fills in a
 *   job enqueued without one from there (sql/056). The last host to write a
 *   different value sets it, and says what it replaced.
 * - Aging: one host per queue at a time (the lock of the queue's row in
 *   skipq.housekeeping, which only skipq's own roles may take: sql/053)
 *   raises the priority of jobs that have waited, in batches.
 * - Dependencies: an enqueue only reads a child's parents (it must lock no
 *   other job), so a parent that ends before the child commits ends
 *   without finding it. Such children wait in skipq.dependency_inbox, and
 *   every host, on each round and at once when an enqueue's notification
 *   wakes it ('!deps', listen.c), settles them with
 *   skipq.settle_dependencies() (sql/050): SKIP LOCKED, so any one host
 *   takes each child and none ever waits for a job row.
 */
#include "host/scheduler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/cron.h"
#include "common/log.h"
#include "common/util.h"
#include "host/ctl.h"
#include "host/kinds.h"
#include "host/pause.h"
#include "host/queue.h"
#include "host/state.h"

#define CRON_MAX_TICKS 1000   /* most ticks one round enqueues for a schedule (catch_up = all) */
#define CRON_SCAN_DAYS 400    /* latest/none look back at most this far for the last tick */
#define CRON_NONE_WINDOW_MS 60000
#define AGING_BATCH 50       /* rows per aging statement: claims skip the rows it locks */
#define DEPS_BATCH 200       /* inbox rows one settling statement takes */

/* Every built-in is named by schema: see "SCHEMA-QUALIFIED SQL" in queue.c. */
static const char CRON_REGISTER_SQL[] =
    "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick) VALUES ($1, $2, $3, pg_catalog.now())"
    " ON CONFLICT (name) DO UPDATE SET schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone,"
    "    updated_at = pg_catalog.now()"
    "  WHERE cron_state.schedule OPERATOR(pg_catalog.<>) EXCLUDED.schedule" /* both NOT NULL */
    "     OR cron_state.timezone OPERATOR(pg_catalog.<>) EXCLUDED.timezone";

/* The last tick exactly (for the compare-and-set), and it and now as local
 * wall-clock times in the schedule's zone. */
static const char CRON_READ_SQL[] =
    "SELECT last_tick::pg_catalog.text, (last_tick AT TIME ZONE $2)::pg_catalog.text,"
    "       (pg_catalog.now() AT TIME ZONE $2)::pg_catalog.text"
    "  FROM skipq.cron_state WHERE name OPERATOR(pg_catalog.=) $1";

/*
 * $3: candidate local ticks. They become instants in zone $2 (a local time
 * in a DST gap moves forward by the gap; a repeated one takes the later
 * instant), due ones are those after the last tick $1 and not in the
 * future. last_tick moves to the latest due one only if it still is $1, and
 * only then are jobs inserted: all due ticks ($10 = 'all'), the latest
 * ('latest'), or the latest if it is at most $11 ms old ('none').
 */
static const char CRON_FIRE_SQL[] =
    "WITH due AS MATERIALIZED ("
    "  SELECT DISTINCT t.at FROM (SELECT x::pg_catalog.timestamp AT TIME ZONE $2 AS at"
    "                               FROM pg_catalog.unnest($3::pg_catalog.text[]) AS x) t"
    "   WHERE t.at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz AND t.at OPERATOR(pg_catalog.<=) pg_catalog.now()"
    "), adv AS ("
    "  UPDATE skipq.cron_state SET last_tick = (SELECT pg_catalog.max(at) FROM due), updated_at = pg_catalog.now()"
    "   WHERE name OPERATOR(pg_catalog.=) $4 AND last_tick OPERATOR(pg_catalog.=) $1::pg_catalog.timestamptz"
    "     AND EXISTS (SELECT 1 FROM due)"
    "  RETURNING 1"
    "), ins AS ("
    "  INSERT INTO skipq.jobs (queue, kind, payload, priority, run_at, max_attempts)"
    "  SELECT $5, $6, $7::pg_catalog.jsonb, $8::pg_catalog.int4, due.at, $9::pg_catalog.int4 FROM due, adv"
    "   WHERE $10::pg_catalog.text OPERATOR(pg_catalog.=) 'all'"
    "      OR (due.at OPERATOR(pg_catalog.=) (SELECT pg_catalog.max(at) FROM due)"
    "          AND ($10::pg_catalog.text OPERATOR(pg_catalog.=) 'latest'"
    "               OR due.at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-)"
    "                    ($11::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond'))))"
    "   ORDER BY due.at"
    "  RETURNING 1"
    ")"
    " SELECT (SELECT pg_catalog.count(*) FROM adv), (SELECT pg_catalog.count(*) FROM ins)";

/* Last host to start with a limit for a kind sets it (both keys at once).
 * Changed or not is compared with a stand-in for NULL (IS DISTINCT FROM
 * would look `=` up by name): 0 and '' are never stored (CHECKs in 020). */
static const char LIMIT_REGISTER_SQL[] =
    "INSERT INTO skipq.kind_limits (kind, max_running, rate, rate_unit)"
    " VALUES ($1, $2::pg_catalog.int4, $3::pg_catalog.int4, $4)"
    " ON CONFLICT (kind) DO UPDATE SET max_running = EXCLUDED.max_running, rate = EXCLUDED.rate,"
    "    rate_unit = EXCLUDED.rate_unit, updated_at = pg_catalog.now()"
    "  WHERE coalesce(kind_limits.max_running, 0) OPERATOR(pg_catalog.<>) coalesce(EXCLUDED.max_running, 0)"
    "     OR coalesce(kind_limits.rate, 0) OPERATOR(pg_catalog.<>) coalesce(EXCLUDED.rate, 0)"
    "     OR coalesce(kind_limits.rate_unit, '') OPERATOR(pg_catalog.<>) coalesce(EXCLUDED.rate_unit, '')"
    " RETURNING 1";

/* A kind's default max_attempts: written when it differs, with the row it
 * replaced (old is read in the statement's snapshot, before the upsert). */
static const char DEFAULTS_REGISTER_SQL[] =
    "WITH old AS (SELECT d.max_attempts, d.set_by FROM skipq.kind_defaults d"
    "              WHERE d.kind OPERATOR(pg_catalog.=) $1),"
    " up AS (INSERT INTO skipq.kind_defaults (kind, max_attempts, set_by) VALUES ($1, $2::pg_catalog.int4, $3)"
    "        ON CONFLICT (kind) DO UPDATE SET max_attempts = EXCLUDED.max_attempts, set_by = EXCLUDED.set_by,"
    "           updated_at = pg_catalog.now()"
    "         WHERE kind_defaults.max_attempts OPERATOR(pg_catalog.<>) EXCLUDED.max_attempts"
    "        RETURNING 1)"
    " SELECT (SELECT pg_catalog.count(*) FROM up), (SELECT max_attempts FROM old), (SELECT set_by FROM old)";

/* A kind's keep_done (058): written when it differs, with the row it
 * replaced, as for the defaults above. */
static const char KEEP_DONE_REGISTER_SQL[] =
    "WITH old AS (SELECT o.keep_done, o.set_by FROM skipq.kind_options o"
    "              WHERE o.kind OPERATOR(pg_catalog.=) $1),"
    " up AS (INSERT INTO skipq.kind_options (kind, keep_done, set_by) VALUES ($1, $2::pg_catalog.bool, $3)"
    "        ON CONFLICT (kind) DO UPDATE SET keep_done = EXCLUDED.keep_done, set_by = EXCLUDED.set_by,"
    "           updated_at = pg_catalog.now()"
    "         WHERE kind_options.keep_done OPERATOR(pg_catalog.<>) EXCLUDED.keep_done"
    "        RETURNING 1)"
    " SELECT (SELECT pg_catalog.count(*) FROM up), (SELECT keep_done FROM old), (SELECT set_by FROM old)";

/*
 * Aging: priority = least(cap $3, base + floor(waited / step $2)), where
 * waited = now() - run_at and base the priority the job was enqueued with.
 * Never lowers a priority. One host per queue at a time; -1 if another
 * holds the queue's row 'aging/QUEUE' of skipq.housekeeping (AGING_ROW_SQL
 * adds it). Claims skip the rows this locks, so it works in small batches,
 * best first: a claim meanwhile takes the next-best jobs, not the newest.
 * The rows c locked passed its test in their newest version, so u tests
 * no status: a test of status there could let a generic plan read every
 * pending job through jobs_ready for each row of c (queue.c, "How these
 * statements reach rows").
 */
#define AGED_PRIORITY \
    "least($3::pg_catalog.int8, coalesce(base_priority, priority) OPERATOR(pg_catalog.+)" \
    "      pg_catalog.floor(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) run_at)" \
    "                       OPERATOR(pg_catalog.*) 1000 OPERATOR(pg_catalog./) $2::pg_catalog.int8)::pg_catalog.int8)"
static const char AGING_SQL[] =
    "WITH l AS MATERIALIZED ("
    "  SELECT true AS got FROM skipq.housekeeping h"
    "   WHERE h.task OPERATOR(pg_catalog.=) ('aging/' OPERATOR(pg_catalog.||) $1::pg_catalog.text)"
    "     FOR NO KEY UPDATE OF h SKIP LOCKED),"
    " c AS MATERIALIZED ("
    "  SELECT id, " AGED_PRIORITY "::pg_catalog.int4 AS p"
    "    FROM skipq.jobs"
    "   WHERE status OPERATOR(pg_catalog.=) 'pending' AND queue OPERATOR(pg_catalog.=) $1"
    "     AND run_at OPERATOR(pg_catalog.<=) (pg_catalog.now() OPERATOR(pg_catalog.-)"
    "           ($2::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond'))"
    "     AND (SELECT got FROM l)"
    "     AND priority OPERATOR(pg_catalog.<) " AGED_PRIORITY
    "   ORDER BY priority DESC, run_at, id"
    "   LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED"
    "), u AS ("
    "  UPDATE skipq.jobs j SET base_priority = coalesce(j.base_priority, j.priority), priority = c.p"
    "    FROM c WHERE j.id OPERATOR(pg_catalog.=) c.id AND c.p OPERATOR(pg_catalog.>) j.priority"
    "  RETURNING 1)"
    " SELECT CASE WHEN (SELECT got FROM l) THEN (SELECT pg_catalog.count(*) FROM u) ELSE -1 END";

/* The queue's aging row, if no host has added it yet (a committed row is
 * found without waiting, even while another host holds it locked). */
static const char AGING_ROW_SQL[] =
    "INSERT INTO skipq.housekeeping (task) VALUES ('aging/' OPERATOR(pg_catalog.||) $1::pg_catalog.text)"
    " ON CONFLICT (task) DO NOTHING";

/* ---- start ---------------------------------------------------------------------- */

static bool check_cron(PGconn *conn, const struct sq_config *cfg, const struct sq_cron_conf *k, char *err,
                       size_t errlen, bool *bad_config)
{
    char why[512];
    const char *p1[1] = {k->payload};
    PGresult *res = sq_db_query(conn, "SELECT pg_catalog.jsonb_typeof($1::pg_catalog.jsonb)", 1, p1, why, sizeof why);
    if (!res || strcmp(PQgetvalue(res, 0, 0), "object") != 0) {
        *bad_config = true;
        snprintf(err, errlen, "%s:%d: [cron %s] payload: %s", cfg->path, k->line, k->name,
                 res ? "must be a JSON object" : why);
        PQclear(res);
        return false;
    }
    PQclear(res);
    const char *p2[1] = {k->timezone};
    res = sq_db_query(conn, "SELECT pg_catalog.now() AT TIME ZONE $1", 1, p2, why, sizeof why);
    if (!res) {
        *bad_config = true;
        snprintf(err, errlen, "%s:%d: [cron %s] timezone: %s", cfg->path, k->line, k->name, why);
        return false;
    }
    PQclear(res);
    const char *p3[3] = {k->name, k->schedule, k->timezone};
    res = sq_db_query(conn, CRON_REGISTER_SQL, 3, p3, why, sizeof why);
    if (!res) {
        snprintf(err, errlen, "cannot register [cron %s]: %s", k->name, why);
        return false;
    }
    PQclear(res);
    return true;
}

static bool register_limits(PGconn *conn, const struct sq_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->nkinds; i++) {
        const struct sq_kind_conf *k = &cfg->kinds[i];
        if (!k->max_running && !k->rate)
            continue;
        char mr[16], rt[16];
        snprintf(mr, sizeof mr, "%d", k->max_running);
        snprintf(rt, sizeof rt, "%d", k->rate);
        const char *params[4] = {k->name, k->max_running ? mr : NULL, k->rate ? rt : NULL,
                                 k->rate ? k->rate_unit : NULL};
        char why[512];
        PGresult *res = sq_db_query(conn, LIMIT_REGISTER_SQL, 4, params, why, sizeof why);
        if (!res) {
            snprintf(err, errlen, "cannot register the limits of [kind %s]: %s", k->name, why);
            return false;
        }
        if (PQntuples(res) > 0)
            log_info("kind \"%s\": limits set to max_running %s, rate %s%s%s", k->name, k->max_running ? mr : "none",
                     k->rate ? rt : "none", k->rate ? " per " : "", k->rate ? k->rate_unit : "");
        PQclear(res);
    }
    return true;
}

/* A kind's [kind] keep_done, when this host's file sets it. */
static bool register_keep_done(struct sq_host *h, PGconn *conn, const struct sq_kind *k, char *err, size_t errlen)
{
    int keep = atomic_load(&k->keep_done);
    if (keep < 0)
        return true; /* not set here: the row, if any, is another host's */
    char why[512];
    const char *params[3] = {k->name, keep ? "true" : "false", sq_host_name(h)};
    PGresult *res = sq_db_query(conn, KEEP_DONE_REGISTER_SQL, 3, params, why, sizeof why);
    if (!res) {
        snprintf(err, errlen, "cannot register keep_done of kind \"%s\": %s", k->name, why);
        return false;
    }
    const char *what = keep ? "done jobs stay in skipq.jobs" : "done jobs leave skipq.jobs as they finish";
    if (atoi(PQgetvalue(res, 0, 0)) == 1 && !PQgetisnull(res, 0, 1))
        log_warn("kind \"%s\": keep_done %s replaces %s, set by host \"%s\" (the last host to start or reload "
                 "with a different [kind] keep_done sets it for every host): %s",
                 k->name, keep ? "on" : "off", PQgetvalue(res, 0, 1)[0] == 't' ? "on" : "off", PQgetvalue(res, 0, 2),
                 what);
    else if (atoi(PQgetvalue(res, 0, 0)) == 1)
        log_info("kind \"%s\": %s", k->name, what);
    PQclear(res);
    return true;
}

bool sq_sched_register_defaults(struct sq_host *h, PGconn *conn, char *err, size_t errlen)
{
    struct sq_kinds *ks = sq_host_kinds(h);
    for (size_t i = 0; i < sq_kinds_count(ks); i++) {
        const struct sq_kind *k = sq_kinds_at(ks, i);
        if (!register_keep_done(h, conn, k, err, errlen))
            return false;
        int ma = atomic_load(&k->max_attempts);
        if (!ma)
            continue; /* no [kind] max_attempts here: the row, if any, is another host's */
        char v[16], why[512];
        snprintf(v, sizeof v, "%d", ma);
        const char *params[3] = {k->name, v, sq_host_name(h)};
        PGresult *res = sq_db_query(conn, DEFAULTS_REGISTER_SQL, 3, params, why, sizeof why);
        if (!res) {
            snprintf(err, errlen, "cannot register the defaults of kind \"%s\": %s", k->name, why);
            return false;
        }
        if (atoi(PQgetvalue(res, 0, 0)) == 1 && !PQgetisnull(res, 0, 1))
            log_warn("kind \"%s\": max_attempts %d replaces %s, set by host \"%s\" (the last host to start or "
                     "reload with a different [kind] max_attempts sets it for every job enqueued without one)",
                     k->name, ma, PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
        else if (atoi(PQgetvalue(res, 0, 0)) == 1)
            log_info("kind \"%s\": jobs enqueued without max_attempts get %d", k->name, ma);
        PQclear(res);
    }
    return true;
}

/* Flag the groups that serve a kind with a row in skipq.kind_limits. */
static bool refresh_limits(struct sq_host *h, PGconn *conn, char *err, size_t errlen)
{
    PGresult *res = sq_db_query(conn, "SELECT kind FROM skipq.kind_limits", 0, NULL, err, errlen);
    if (!res)
        return false;
    for (size_t g = 0; g < sq_host_ngroups(h); g++) {
        const char *const *kinds;
        size_t nk = sq_host_group_kinds(h, g, &kinds);
        bool limited = false;
        for (int r = 0; r < PQntuples(res) && !limited; r++)
            for (size_t k = 0; k < nk && !limited; k++)
                limited = strcmp(kinds[k], PQgetvalue(res, r, 0)) == 0;
        if (sq_host_group_set_limited(h, g, limited) != limited) {
            sq_ctl_send(h, g, SQ_CTL_LIMITED, limited); /* its worker processes claim as the group does */
            log_info("queue \"%s\": %s", sq_host_group_queue(h, g),
                     limited ? "serves a kind with limits; claiming through the limit check"
                             : "no kind with limits any more; plain claims");
        }
    }
    PQclear(res);
    return true;
}

bool sq_sched_start(struct sq_host *h, char *err, size_t errlen, bool *bad_config)
{
    const struct sq_config *cfg = sq_host_config(h);
    *bad_config = false;
    PGconn *conn = sq_db_connect(sq_host_dbparams(h), err, errlen);
    if (!conn)
        return false;
    bool ok = true;
    for (size_t i = 0; ok && i < cfg->ncrons; i++)
        ok = check_cron(conn, cfg, &cfg->crons[i], err, errlen, bad_config);
    ok = ok && register_limits(conn, cfg, err, errlen) && sq_sched_register_defaults(h, conn, err, errlen) &&
         refresh_limits(h, conn, err, errlen);
    /* What is paused before the first claim, not at the first heartbeat. */
    ok = ok && sq_pause_refresh(h, conn, err, errlen);
    PQfinish(conn);
    return ok;
}

/* ---- rounds --------------------------------------------------------------------- */

/* The local ticks in (last, now] a round considers: the earliest
 * CRON_MAX_TICKS for catch_up = all, else the latest two (the later may
 * fall in a DST repeat and not be due yet). Returns how many. */
static int64_t minute_index(const struct sq_civil *t)
{
    return sq_days_from_civil(t->year, t->month, t->day) * 1440 + t->hour * 60 + t->minute;
}

static int list_ticks(const struct sq_cron_conf *k, const struct sq_civil *last, const struct sq_civil *now,
                      struct sq_civil *out)
{
    struct sq_civil t = *last, n;
    if (k->catch_up != SQ_CATCH_UP_ALL) {
        struct sq_civil floor = *now;
        sq_civil_add_minutes(&floor, -(int64_t)CRON_SCAN_DAYS * 1440);
        if (minute_index(&t) < minute_index(&floor))
            t = floor;
    }
    int count = 0;
    while (sq_cron_next(&k->cron, &t, &n) && minute_index(&n) <= minute_index(now)) {
        if (k->catch_up == SQ_CATCH_UP_ALL) {
            out[count++] = n;
            if (count == CRON_MAX_TICKS)
                break;
        } else if (count < 2) {
            out[count++] = n;
        } else {
            out[0] = out[1];
            out[1] = n;
        }
        t = n;
    }
    return count;
}

static void cron_round(struct sq_host *h, PGconn *conn, const struct sq_cron_conf *k, struct sq_civil *ticks)
{
    char err[512];
    const char *rp[2] = {k->name, k->timezone};
    PGresult *res = sq_db_query(conn, CRON_READ_SQL, 2, rp, err, sizeof err);
    if (!res || PQntuples(res) != 1) {
        log_warn("cron %s: cannot read its state: %s", k->name, res ? "the row is gone (restart to register it)" : err);
        PQclear(res);
        return;
    }
    char prev[64];
    struct sq_civil last, now;
    sq_strlcpy(prev, PQgetvalue(res, 0, 0), sizeof prev);
    bool ok = sq_civil_parse(PQgetvalue(res, 0, 1), &last) && sq_civil_parse(PQgetvalue(res, 0, 2), &now);
    PQclear(res);
    if (!ok) {
        log_warn("cron %s: cannot read the database's time", k->name);
        return;
    }
    int n = list_ticks(k, &last, &now, ticks);
    if (n == 0)
        return;
    const char *txt[CRON_MAX_TICKS];
    char *buf = malloc((size_t)n * 24);
    if (!buf)
        return;
    for (int i = 0; i < n; i++) {
        sq_civil_format(&ticks[i], buf + i * 24, 24);
        txt[i] = buf + i * 24;
    }
    char *arr = sq_text_array(txt, (size_t)n);
    char prio[16], att[16], window[24];
    snprintf(prio, sizeof prio, "%d", k->priority);
    snprintf(att, sizeof att, "%d", k->max_attempts);
    int64_t hb = sq_host_config(h)->heartbeat_ms;
    int64_t w = 2 * hb > CRON_NONE_WINDOW_MS ? 2 * hb : CRON_NONE_WINDOW_MS;
    snprintf(window, sizeof window, "%" PRId64, w);
    static const char *const policy[] = {"latest", "all", "none"};
    const char *params[11] = {prev, k->timezone, arr, k->name, k->queue, k->kind, k->payload, prio,
                              k->max_attempts ? att : NULL,
                              policy[k->catch_up], window};
    res = arr ? sq_db_query(conn, CRON_FIRE_SQL, 11, params, err, sizeof err) : NULL;
    if (!res)
        log_warn("cron %s: cannot enqueue its due tick(s): %s", k->name, arr ? err : "out of memory");
    else if (atoi(PQgetvalue(res, 0, 0)) == 1)
        log_info("cron %s: enqueued %s job(s) of kind %s on queue %s", k->name, PQgetvalue(res, 0, 1), k->kind,
                 k->queue);
    PQclear(res);
    free(arr);
    free(buf);
}

/* Batches until one comes back short, another host has the queue, or a
 * second has passed. */
static void aging_round(struct sq_host *h, PGconn *conn)
{
    const struct sq_config *cfg = sq_host_config(h);
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct sq_group_conf *g = &cfg->groups[i];
        if (!g->aging_ms)
            continue;
        char step[24], cap[16], batch[16], err[512];
        snprintf(step, sizeof step, "%" PRId64, g->aging_ms);
        snprintf(cap, sizeof cap, "%d", g->aging_cap);
        snprintf(batch, sizeof batch, "%d", AGING_BATCH);
        const char *params[4] = {g->queue, step, cap, batch};
        int64_t end = sq_now_ms() + 1000;
        long n, total = 0;
        PGresult *row = sq_db_query(conn, AGING_ROW_SQL, 1, params, err, sizeof err);
        if (!row) {
            log_warn("queue \"%s\": priority aging failed: %s", g->queue, err);
            continue;
        }
        PQclear(row);
        do {
            PGresult *res = sq_db_query(conn, AGING_SQL, 4, params, err, sizeof err);
            if (!res) {
                log_warn("queue \"%s\": priority aging failed: %s", g->queue, err);
                break;
            }
            n = atol(PQgetvalue(res, 0, 0));
            PQclear(res);
            total += n > 0 ? n : 0;
        } while (n == AGING_BATCH && sq_now_ms() < end);
        if (total > 0)
            log_debug("queue \"%s\": raised the priority of %ld waiting job(s)", g->queue, total);
    }
}

/* Batches until one comes back short (nothing left, or the rest locked
 * right now: the next round retries) or a second has passed. */
void sq_deps_round(struct sq_host *h, PGconn *conn)
{
    (void)h;
    char batch[16], err[512];
    snprintf(batch, sizeof batch, "%d", DEPS_BATCH);
    const char *params[1] = {batch};
    int64_t end = sq_now_ms() + 1000;
    long n, total = 0;
    do {
        PGresult *res =
            sq_db_query(conn, "SELECT skipq.settle_dependencies($1::pg_catalog.int4)", 1, params, err, sizeof err);
        if (!res) {
            log_warn("dependencies: cannot settle newly enqueued children: %s", err);
            return;
        }
        n = atol(PQgetvalue(res, 0, 0));
        PQclear(res);
        total += n;
    } while (n == DEPS_BATCH && sq_now_ms() < end);
    if (total > 0)
        log_debug("dependencies: settled %ld newly enqueued child job(s)", total);
}

void sq_sched_round(struct sq_host *h, PGconn *conn)
{
    char err[512];
    if (!refresh_limits(h, conn, err, sizeof err))
        log_warn("cannot read the kind limits: %s", err);
    const struct sq_config *cfg = sq_host_config(h);
    if (cfg->ncrons) {
        struct sq_civil *ticks = calloc(CRON_MAX_TICKS, sizeof *ticks);
        for (size_t i = 0; ticks && i < cfg->ncrons; i++)
            cron_round(h, conn, &cfg->crons[i], ticks);
        free(ticks);
    }
    aging_round(h, conn);
    sq_host_take_deps(h);
    sq_deps_round(h, conn);
}
