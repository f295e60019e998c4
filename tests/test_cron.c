/*
 * test_cron.c -- [cron NAME]: the expression parser and next-tick search
 * (no database), then real hosts: every tick enqueued exactly once across
 * several hosts, the catch_up policies, and bad sections refused with
 * FILE:LINE. Missed ticks are made by seeding skipq.cron_state.last_tick in
 * the past (a fake clock through data), so nothing waits for a minute.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cron.h"
#include "harness.h"

static struct sq_cron parse_ok(const char *expr)
{
    struct sq_cron c;
    char err[256];
    cr_assert(sq_cron_parse(expr, &c, err, sizeof err), "\"%s\" refused: %s", expr, err);
    return c;
}

static void parse_bad(const char *expr, const char *needle)
{
    struct sq_cron c;
    char err[256] = "";
    cr_assert_not(sq_cron_parse(expr, &c, err, sizeof err), "\"%s\" accepted", expr);
    cr_assert_not_null(strstr(err, needle), "\"%s\": error \"%s\" does not mention \"%s\"", expr, err, needle);
}

/* The next tick after `from` ("YYYY-MM-DD HH:MM") as text. */
static char *next_of(const char *expr, const char *from)
{
    struct sq_cron c = parse_ok(expr);
    struct sq_civil t, n;
    cr_assert(sq_civil_parse(from, &t));
    cr_assert(sq_cron_next(&c, &t, &n), "%s: no next tick after %s", expr, from);
    char *buf = malloc(24);
    sq_civil_format(&n, buf, 24);
    buf[16] = '\0'; /* drop ":00" */
    return buf;
}

#define expect_next(expr, from, want)                                                                 \
    do {                                                                                              \
        char *got_ = next_of(expr, from);                                                             \
        cr_expect_str_eq(got_, want, "%s after %s", expr, from);                                      \
        free(got_);                                                                                   \
    } while (0)

Test(cron, fields_ranges_steps_lists_names)
{
    struct sq_cron c = parse_ok("*/15 9-17 * * MON-FRI");
    cr_expect_eq(c.minutes, (1ull << 0) | (1ull << 15) | (1ull << 30) | (1ull << 45));
    cr_expect_eq(c.hours, 0x3fe00u); /* 9..17 */
    cr_expect_eq(c.weekdays, 0x3eu); /* 1..5 */
    c = parse_ok("5,10-12,50-59/5 0 1 jan,Jul *");
    cr_expect_eq(c.minutes, (1ull << 5) | (1ull << 10) | (1ull << 11) | (1ull << 12) | (1ull << 50) | (1ull << 55));
    cr_expect_eq(c.months, (1u << 1) | (1u << 7));
    c = parse_ok("0 0 * * 7"); /* 7 is Sunday, like 0 */
    cr_expect_eq(c.weekdays, 1u);
    c = parse_ok("10/20 * * * *"); /* N/STEP: from N to the end */
    cr_expect_eq(c.minutes, (1ull << 10) | (1ull << 30) | (1ull << 50));
    expect_next("*/15 9-17 * * MON-FRI", "2026-11-20 17:45", "2026-11-23 09:00"); /* Friday evening -> Monday */
    expect_next("0 12 * * *", "2026-12-31 12:00", "2027-01-01 12:00");
    expect_next("30 * * * *", "2026-03-01 23:30", "2026-03-02 00:30");
}

Test(cron, aliases)
{
    expect_next("@hourly", "2026-05-05 10:00", "2026-05-05 11:00");
    expect_next("@daily", "2026-05-05 10:00", "2026-05-06 00:00");
    expect_next("@midnight", "2026-05-05 00:00", "2026-05-06 00:00");
    expect_next("@weekly", "2026-11-22 00:00", "2026-11-29 00:00"); /* Sundays */
    expect_next("@monthly", "2026-01-31 10:00", "2026-02-01 00:00");
    expect_next("@yearly", "2026-01-01 00:00", "2027-01-01 00:00");
    expect_next("@annually", "2026-06-01 00:00", "2027-01-01 00:00");
    parse_bad("@reboot", "unknown alias");
}

/* Vixie cron: both day fields restricted -> either matches; one of them
 * starting with '*' -> only the other counts. */
Test(cron, day_of_month_or_day_of_week)
{
    expect_next("0 0 13 * FRI", "2026-11-01 00:00", "2026-11-06 00:00");  /* a Friday before the 13th */
    expect_next("0 0 13 * FRI", "2026-11-06 00:00", "2026-11-13 00:00");  /* the 13th (also a Friday) */
    expect_next("0 0 1 * MON", "2026-11-02 00:00", "2026-11-09 00:00");   /* next Monday before Dec 1 */
    /* '*' first in one field: both must match (an odd day AND a Tuesday) */
    expect_next("0 0 */2 * TUE", "2026-11-02 00:00", "2026-11-03 00:00");
    expect_next("0 0 */2 * TUE", "2026-11-03 00:00", "2026-11-17 00:00");
    expect_next("0 0 * * MON", "2026-11-02 00:00", "2026-11-09 00:00");
}

Test(cron, calendar_edges)
{
    expect_next("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00");
    expect_next("0 0 31 * *", "2026-04-01 00:00", "2026-05-31 00:00");
    expect_next("59 23 31 12 *", "2026-12-31 23:58", "2026-12-31 23:59");
    expect_next("0 0 1 1 *", "2099-06-01 00:00", "2100-01-01 00:00");
    expect_next("0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"); /* 2100 is not a leap year */
}

Test(cron, bad_expressions)
{
    parse_bad("* * * *", "5 fields");
    parse_bad("* * * * * *", "5 fields");
    parse_bad("60 * * * *", "minute");
    parse_bad("* 24 * * *", "hour");
    parse_bad("* * 0 * *", "day of month");
    parse_bad("* * * 13 *", "month");
    parse_bad("* * * * 8", "day of week");
    parse_bad("5-1 * * * *", "backwards");
    parse_bad("*/0 * * * *", "step");
    parse_bad("a * * * *", "not valid");
    parse_bad("1,,2 * * * *", "not valid");
    parse_bad("* * * FOO *", "JAN-DEC");
    parse_bad("0 0 30 2 *", "never matches");
    parse_bad("0 0 31 4,6,9,11 *", "never matches");
}

/* ---- with hosts --------------------------------------------------------------------- */

static const char *CRON_HOST = "[queue default]\nthreads = 1\n";

/* Ticks in (seed, last_tick] of `name` -- what must have been enqueued. */
static long long minutes_between(PGconn *c, const char *name, const char *seed)
{
    return th_scalarf(c,
                      "SELECT count(*) FROM generate_series(timestamptz '%s' + interval '1 minute',"
                      " (SELECT last_tick FROM skipq.cron_state WHERE name = '%s'), interval '1 minute')",
                      seed, name);
}

Test(cron, every_tick_once_across_hosts, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    /* Five every-minute schedules, each 150 minutes behind, caught up by
     * three hosts racing on their heartbeat rounds. */
    PGresult *r = th_query(db.conn, "SELECT (date_trunc('minute', now()) - interval '150 minutes')::text");
    char seed[64];
    snprintf(seed, sizeof seed, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    char extra[2048] = "";
    size_t o = 0;
    for (int i = 0; i < 5; i++) {
        th_execf(db.conn,
                 "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick)"
                 " VALUES ('c%d', '* * * * *', 'UTC', '%s')",
                 i, seed);
        o += (size_t)snprintf(extra + o, sizeof extra - o,
                              "[cron c%d]\nschedule = * * * * *\nkind = tick%d\nqueue = cron\ncatch_up = all\n"
                              "payload = {\"n\": %d}\n",
                              i, i, i);
    }
    strcat(extra, CRON_HOST);
    struct host hosts[3] = {{.name = "cron1"}, {.name = "cron2"}, {.name = "cron3"}};
    for (int i = 0; i < 3; i++) {
        hosts[i].ini = th_host_ini(&db, hosts[i].name, NULL, NULL, extra);
        host_start(&hosts[i]);
    }
    cr_assert_eq(th_wait_scalar(db.conn, 5, 60000,
                                "SELECT count(*) FROM skipq.cron_state"
                                " WHERE last_tick >= date_trunc('minute', now()) - interval '1 minute'"),
                 5, "the schedules did not catch up");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(host_stop(&hosts[i], 15000), 0);
    for (int i = 0; i < 5; i++) {
        char name[8], kind[8];
        snprintf(name, sizeof name, "c%d", i);
        snprintf(kind, sizeof kind, "tick%d", i);
        long long want = minutes_between(db.conn, name, seed);
        cr_expect_geq(want, 149);
        cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = '%s'", kind), want, "%s", name);
        cr_expect_eq(th_scalarf(db.conn, "SELECT count(DISTINCT run_at) FROM skipq.jobs WHERE kind = '%s'", kind),
                     want, "%s: a tick was enqueued twice", name);
        cr_expect_eq(th_scalarf(db.conn,
                                "SELECT count(*) FROM skipq.jobs WHERE kind = '%s' AND queue = 'cron'"
                                " AND payload = '{\"n\": %d}' AND status = 'pending' AND run_at > '%s'"
                                " AND date_trunc('minute', run_at) = run_at",
                                kind, i, seed),
                     want);
    }
    for (int i = 0; i < 3; i++)
        th_assert_clean_log(hosts[i].ini);
}

Test(cron, catch_up_latest_and_none, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* An hourly schedule whose latest tick was 5 minutes ago; last run 3 hours ago. */
    int minute = (int)th_scalar(db.conn, "SELECT extract(minute FROM now() - interval '5 minutes')::int");
    PGresult *r = th_query(db.conn, "SELECT (now() - interval '3 hours')::text,"
                                    " (date_trunc('minute', now() - interval '5 minutes'))::text");
    char seed[64], latest[64];
    snprintf(seed, sizeof seed, "%s", PQgetvalue(r, 0, 0));
    snprintf(latest, sizeof latest, "%s", PQgetvalue(r, 0, 1));
    PQclear(r);
    char extra[1024];
    snprintf(extra, sizeof extra,
             "[cron late]\nschedule = %d * * * *\nkind = late\nqueue = cron\n"
             "[cron never]\nschedule = %d * * * *\nkind = never\nqueue = cron\ncatch_up = none\n"
             "[cron fresh]\nschedule = %d * * * *\nkind = fresh\nqueue = cron\ncatch_up = all\n%s",
             minute, minute, minute, CRON_HOST);
    th_execf(db.conn,
             "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick) VALUES"
             " ('late', 'x', 'UTC', '%s'), ('never', 'x', 'UTC', '%s')",
             seed, seed);
    char *ini = th_host_ini(&db, "catchup", NULL, NULL, extra);
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 2, 30000,
                                "SELECT count(*) FROM skipq.cron_state WHERE name IN ('late', 'never')"
                                " AND last_tick > now() - interval '1 hour'"),
                 2);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    /* latest: only the most recent of the three missed ticks. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'late'"), 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'late' AND run_at = '%s'", latest),
                 1);
    /* none: the tick was 5 minutes late, so skipped -- but consumed. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'never'"), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.cron_state WHERE name = 'never' AND last_tick = '%s'",
                            latest),
                 1);
    /* A schedule seen for the first time starts from now: nothing from before. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'fresh'"), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.cron_state WHERE name = 'fresh'"
                                    " AND schedule LIKE '% * * * *' AND timezone = 'UTC'"),
                 1);
    /* The host registered the real schedule over the seeded 'x'. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.cron_state WHERE schedule = 'x'"), 0);
    th_assert_clean_log(ini);

    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "cron", "--db", db.conninfo, NULL), 0);
    cr_expect(out && strstr(out, "late") && strstr(out, "never") && strstr(out, "fresh"), "%s", out);
    free(out);
}

/* A time zone is where the schedule's wall clock is read. */
Test(cron, time_zone, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* A daily tick at the local minute that was 5 minutes ago in Asia/Kolkata (UTC+05:30). */
    PGresult *r = th_query(db.conn, "SELECT extract(hour FROM l)::int, extract(minute FROM l)::int,"
                                    " (date_trunc('minute', now() - interval '5 minutes'))::text"
                                    " FROM (SELECT (now() - interval '5 minutes') AT TIME ZONE 'Asia/Kolkata' AS l) s");
    char extra[512];
    snprintf(extra, sizeof extra,
             "[cron india]\nschedule = %s %s * * *\ntimezone = Asia/Kolkata\nkind = india\nqueue = cron\n%s",
             PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 0), CRON_HOST);
    char want[64];
    snprintf(want, sizeof want, "%s", PQgetvalue(r, 0, 2));
    PQclear(r);
    th_execf(db.conn, "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick)"
                      " VALUES ('india', 'x', 'x', now() - interval '1 hour')");
    char *ini = th_host_ini(&db, "tz", NULL, NULL, extra);
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE kind = 'india'"), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE kind = 'india' AND run_at = '%s'", want),
                 1);
}

/* `skipq run` must exit 2 with "INI:LINE: ...needle", LINE being that of
 * the first line starting with `at`. */
/*
 * DST, caught up from March 2026 (fake clock: last_tick seeded in the past).
 * New York, 01:30 and 02:30 daily. 2026-03-08: 02:30 does not exist (clocks
 * jump 02:00 -> 03:00 EDT), so it runs at 03:30 EDT (07:30 UTC).
 * 2026-11-01: 01:30 happens twice; it runs once, at the second (EST, 06:30
 * UTC).
 */
Test(cron, daylight_saving_time, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick)"
                      " VALUES ('ny', 'x', 'x', '2026-03-07 00:00:00+00')");
    char *ini = th_host_ini(&db, "dst", NULL, NULL,
                            "[cron ny]\nschedule = 30 1,2 * * *\ntimezone = America/New_York\nkind = ny\n"
                            "queue = cron\ncatch_up = all\n[queue default]\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000,
                                "SELECT count(*) FROM skipq.cron_state WHERE name = 'ny'"
                                " AND last_tick > now() - interval '1 day'"),
                 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) - count(DISTINCT run_at) FROM skipq.jobs"), 0);
    /* Spring forward: 01:30 EST and the shifted 02:30. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE run_at IN"
                                    " ('2026-03-08 06:30:00+00', '2026-03-08 07:30:00+00')"),
                 2);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"
                                    " WHERE run_at >= '2026-03-08 05:00+00' AND run_at < '2026-03-09 05:00+00'"),
                 2);
    /* Fall back: 01:30 once (the later one), 02:30 EST. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE run_at IN"
                                    " ('2026-11-01 06:30:00+00', '2026-11-01 07:30:00+00')"),
                 2);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"
                                    " WHERE run_at >= '2026-11-01 04:00+00' AND run_at < '2026-11-02 05:00+00'"),
                 2);
    /* Every day in between (today may be partly done): two ticks. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM (SELECT (run_at AT TIME ZONE 'America/New_York')::date AS d"
                                    " FROM skipq.jobs GROUP BY 1 HAVING count(*) <> 2) d"
                                    " WHERE d.d < (now() AT TIME ZONE 'America/New_York')::date"),
                 0);
    cr_expect_geq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 2 * 250);
}

static void run_refused(const struct th_db *db, const char *name, const char *section, const char *at_line,
                        const char *needle)
{
    char extra[512];
    snprintf(extra, sizeof extra, "%s%s", CRON_HOST, section);
    char *ini = th_host_ini(db, name, NULL, NULL, extra);
    FILE *f = fopen(ini, "r");
    cr_assert_not_null(f);
    char line[512];
    int n = 0, at = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        if (!at && strncmp(line, at_line, strlen(at_line)) == 0)
            at = n;
    }
    fclose(f);
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "run", "-c", ini, NULL), 2, "%s", name);
    char where[700];
    snprintf(where, sizeof where, "%s:%d: ", ini, at);
    cr_expect(err && strstr(err, where) && strstr(err, needle), "%s: \"%s\" lacks \"%s\" or \"%s\"", name, err, where,
              needle);
    free(err);
}

Test(cron, bad_sections_refused, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    run_refused(&db, "badsched", "[cron a]\nschedule = 61 * * * *\nkind = k\n", "schedule", "schedule: minute");
    run_refused(&db, "nokind", "[cron a]\nschedule = @daily\n", "[cron", "has no kind");
    run_refused(&db, "badtz", "[cron a]\nschedule = @daily\nkind = k\ntimezone = Mars/Olympus\n", "[cron",
                "timezone");
    run_refused(&db, "badjson", "[cron a]\nschedule = @daily\nkind = k\npayload = {\"a\": }\n", "[cron", "payload");
    run_refused(&db, "badcatch", "[cron a]\nschedule = @daily\nkind = k\ncatch_up = some\n", "catch_up", "catch_up");
    run_refused(&db, "badkey", "[cron a]\nschedule = @daily\nkind = k\nevery = 5m\n", "every", "unknown key");
}
