/*
 * test_reload.c -- SIGHUP: a running host re-reads its INI file. Live
 * settings change behaviour at once, the rest is logged as needing a
 * restart, and a broken file leaves everything as it was.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* Wait until the host's log holds `needle` `count` times (or 20 s). */
static char *wait_log(const char *ini, const char *needle, int count)
{
    int64_t end = th_now_ms() + 20000;
    for (;;) {
        char *log = th_host_log(ini);
        int n = 0;
        for (const char *p = strstr(log, needle); p; p = strstr(p + 1, needle))
            n++;
        if (n >= count || th_now_ms() > end)
            return log;
        free(log);
        usleep(50 * 1000);
    }
}

static const char *QUEUE = "[queue default]\nthreads = %d\n\n[kind test]\nbackoff_base = %s\nbackoff_cap = 1h\n%s";

static char *write_ini(const struct th_db *db, const char *host_extra, int threads, const char *base,
                       const char *kind_extra)
{
    char extra[512];
    snprintf(extra, sizeof extra, QUEUE, threads, base, kind_extra);
    return th_host_ini(db, "reload", host_extra, NULL, extra);
}

Test(reload, live_settings_change_and_the_rest_needs_a_restart, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = write_ini(&db, NULL, 2, "1h", "");
    pid_t pid = th_host_start(ini);

    /* Before: a failed attempt waits the 1h backoff (30 to 60 minutes). */
    int64_t a = th_enqueue(db.conn, "test", "{\"fail_times\": 1}", NULL, 0, 0);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'pending' AND attempts = 1"
             " AND run_at > now() + interval '20 minutes'",
             (long long)a);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1);
    char *log = th_host_log(ini);
    cr_expect_null(strstr(log, "done on attempt"), "debug lines at log_level info: %s", log);
    free(log);

    /* Edit the file: live keys, and threads (restart only). */
    write_ini(&db, NULL, 3, "0", "max_attempts = 4\ntimeout = 30s\n");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -i -e 's/^log_level = info$/log_level = debug/' -e 's/^poll_interval = 50ms$/poll_interval = 100ms/' '%s'", ini);
    cr_assert_eq(system(cmd), 0);
    kill(pid, SIGHUP);
    log = wait_log(ini, "SIGHUP: configuration reloaded", 1);
    const char *want[] = {
        "SIGHUP: [host] poll_interval: 50ms -> 100ms",
        "SIGHUP: [kind test] backoff_base: 3600000ms -> 0ms",
        "SIGHUP: [kind test] timeout: 0ms -> 30000ms",
        "SIGHUP: [kind test] max_attempts: 0 -> 4",
        "SIGHUP: [host] log_level: INFO -> DEBUG",
        "SIGHUP: [queue default] threads changed: needs a restart to take effect",
        "SIGHUP: configuration reloaded: 5 change(s) applied, 1 need a restart",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(log, want[i]) != NULL, "no \"%s\" in:\n%s", want[i], log);
    free(log);

    /* After: a failure is retried at once (backoff 0) and the debug lines
     * show up. */
    int64_t b = th_enqueue(db.conn, "test", "{\"fail_times\": 1}", NULL, 0, 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", (long long)b);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1, "the new backoff did not apply");
    char needle[64];
    snprintf(needle, sizeof needle, "job %lld (test) done on attempt 2", (long long)b);
    log = wait_log(ini, needle, 1);
    cr_expect(strstr(log, needle) != NULL, "log_level debug did not apply:\n%s", log);
    free(log);

    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

Test(reload, a_broken_file_keeps_the_running_settings, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = write_ini(&db, NULL, 1, "0", "");
    pid_t pid = th_host_start(ini);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);

    /* A bad value (line 5, in [host])... */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -i 's/^poll_interval = 50ms$/poll_interval = fast/' '%s'", ini);
    cr_assert_eq(system(cmd), 0);
    kill(pid, SIGHUP);
    char want[700];
    snprintf(want, sizeof want, "SIGHUP: %s:5: [host] poll_interval: \"fast\" is not a duration", ini);
    char *log = wait_log(ini, "keeping the running configuration", 1);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in:\n%s", want, log);
    cr_expect_null(strstr(log, "configuration reloaded"), "%s", log);
    free(log);
    /* ...and an unknown key: both refused, the host goes on as before. */
    write_ini(&db, NULL, 1, "0", "retries = 3\n");
    kill(pid, SIGHUP);
    log = wait_log(ini, "keeping the running configuration", 2);
    cr_expect(strstr(log, "unknown key \"retries\" in [kind test]; keeping the running configuration") != NULL,
              "%s", log);
    free(log);
    /* Still working, with the old backoff (0: immediate retry). */
    th_enqueue(db.conn, "test", "{\"fail_times\": 1}", NULL, 0, 0);
    cr_expect_eq(th_wait_scalar(db.conn, 2, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 2);
    /* A reload with nothing changed says so. */
    write_ini(&db, NULL, 1, "0", "");
    kill(pid, SIGHUP);
    log = wait_log(ini, "0 change(s) applied, 0 need a restart", 1);
    cr_expect(strstr(log, "0 change(s) applied, 0 need a restart") != NULL, "%s", log);
    free(log);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* The most jobs any one claim took among jobs with id > after. */
static long long biggest_claim(PGconn *c, long long after)
{
    return th_scalarf(c,
                      "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM skipq.job_executions"
                      " WHERE job_id > %lld GROUP BY worker, started_at) c",
                      after);
}

Test(reload, claim_bytes_applies_at_once, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "reload-bytes", "claim_bytes = 1MiB\n", NULL,
                            "[queue default]\nthreads = 1\nbatch = 100\n");
    pid_t pid = th_host_start(ini);
    const char *big = "SELECT count(skipq.enqueue('test', jsonb_build_object('blob', repeat('x', 300000))))"
                      " FROM generate_series(1, 12)";
    th_scalar(db.conn, big);
    cr_assert_eq(th_wait_scalar(db.conn, 12, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 12);
    cr_expect_eq(biggest_claim(db.conn, 0), 3, "a 1 MiB budget took more (or fewer) than three 300 kB jobs at once");
    long long last = th_scalar(db.conn, "SELECT max(id) FROM skipq.jobs");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -i -e 's/^claim_bytes = 1MiB$/claim_bytes = 32MiB/' '%s'", ini);
    cr_assert_eq(system(cmd), 0);
    kill(pid, SIGHUP);
    char *log = wait_log(ini, "SIGHUP: configuration reloaded", 1);
    cr_expect(strstr(log, "SIGHUP: [host] claim_bytes: 1048576 -> 33554432 bytes") != NULL, "%s", log);
    cr_expect(strstr(log, "0 need a restart") != NULL, "%s", log);
    free(log);
    th_scalar(db.conn, big);
    cr_assert_eq(th_wait_scalar(db.conn, 24, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 24);
    cr_expect_gt(biggest_claim(db.conn, last), 3, "the new budget did not apply");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_assert_clean_log(ini);
}

/* Keys a host reads only when it starts -- a queue's aging, a kind's
 * global limits, a schedule -- are named as needing a restart like every
 * other key, and a schedule that comes or goes as added or removed. */
Test(reload, keys_read_only_at_start_are_named_as_needing_a_restart, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    static const char before[] = "[queue default]\nthreads = 1\npriority_aging = 30s\n\n"
                                 "[kind test]\nmax_running = 4\nrate = 10/s\n\n"
                                 "[cron nightly]\nschedule = 30 2 * * *\nkind = test\n\n"
                                 "[cron weekly]\nschedule = @weekly\nkind = test\n";
    char *ini = th_host_ini(&db, "reload-start", NULL, NULL, before);
    pid_t pid = th_host_start(ini);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);

    static const char after[] = "[queue default]\nthreads = 1\npriority_aging = 1m\n\n"
                                "[kind test]\nmax_running = 4\nrate = 10/min\n\n"
                                "[cron nightly]\nschedule = 45 2 * * *\nkind = test\n\n"
                                "[cron hourly]\nschedule = @hourly\nkind = test\n";
    th_host_ini(&db, "reload-start", NULL, NULL, after);
    kill(pid, SIGHUP);
    char *log = wait_log(ini, "SIGHUP: configuration reloaded", 1);
    const char *want[] = {
        "SIGHUP: [queue default] priority_aging changed: needs a restart to take effect",
        "SIGHUP: [kind test] rate changed: needs a restart to take effect",
        "SIGHUP: [cron nightly] schedule changed: needs a restart to take effect",
        "SIGHUP: [cron weekly] (removed) changed: needs a restart to take effect",
        "SIGHUP: [cron hourly] (added) changed: needs a restart to take effect",
        "SIGHUP: configuration reloaded: 0 change(s) applied, 5 need a restart",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(log, want[i]) != NULL, "no \"%s\" in:\n%s", want[i], log);
    cr_expect_null(strstr(log, "max_running changed"), "max_running did not change:\n%s", log);
    free(log);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}
