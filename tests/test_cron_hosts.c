/*
 * test_cron_hosts.c -- [cron NAME] with real hosts: every tick enqueued
 * exactly once across several hosts, the catch_up policies, time zones and
 * daylight saving time, and bad sections refused with FILE:LINE. Missed
 * ticks are made by seeding skipq.cron_state.last_tick in the past (a fake
 * clock through data), so nothing waits for a minute. The parser alone is
 * in test_cron.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

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
