/*
 * test_plugin_run.c -- the plugin loader end to end, through `skipq run`:
 * every kind of bad plugin makes the host exit 2, naming the plugin, the
 * path and the reason, without touching a single job; good plugins run
 * their jobs. Also the host-level cases of plugin_safety: a FIFO at the
 * plugin path stops the host at once, and an unsafe RUNPATH is refused
 * while a safe one runs. In-process checks are in test_plugin.c and
 * test_plugin_safety.c.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define PLUGIN(name) SKIPQ_PLUGIN_DIR "/" name ".so"
#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"
#define RPATH_DIR SKIPQ_FIXTURE_DIR "/rpath"

/* ---- end to end: skipq run -------------------------------------------------------- */

/* Run `skipq run -c ini` to completion (killing it after 20 s); returns the
 * exit status and the host's log in *log. */
static int run_host(const char *ini, char **log)
{
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 20000);
    if (st == -1)
        th_host_stop(pid, 5000);
    char path[700];
    snprintf(path, sizeof path, "%s.log", ini);
    *log = th_read_file(path);
    return st;
}

/*
 * A host with testkit plus `extra` (more plugins) and a [queue default]
 * must exit 2 with every needle in its log, and must not have touched the
 * job enqueued before it started.
 */
static void expect_run_refused(const char *name, const char *extra, const char *const *needles)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char text[4096];
    snprintf(text, sizeof text, "%s\n[queue default]\nthreads = 1\n", extra);
    char *ini = th_host_ini(&db, name, NULL, NULL, text);
    char *log = NULL;
    int st = run_host(ini, &log);
    cr_expect_eq(st, 2, "skipq run exited %d, not 2; log:\n%s", st, log);
    for (; *needles; needles++)
        cr_expect_not_null(strstr(log, *needles), "log does not mention \"%s\":\n%s", *needles, log);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'pending' "
                                     "AND attempts = 0",
                            (long long)id),
                 1, "the pending job was touched");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 0);
    th_assert_clean_log(ini);
    free(log);
    free(ini);
}

Test(plugin_run, good_plugins_run_their_jobs, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t t = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    int64_t n = th_enqueue(db.conn, "noop", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "good", NULL, NULL,
                            "[plugin noop]\npath = " PLUGIN("noop") "\n[queue default]\nthreads = 2\n");
    pid_t pid = th_host_start(ini);
    long long done = th_wait_scalar(db.conn, 2, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");
    int st = th_host_stop(pid, 10000);
    char path[700];
    snprintf(path, sizeof path, "%s.log", ini);
    char *log = th_read_file(path);
    cr_expect_eq(done, 2, "jobs %lld (test) and %lld (noop) not both done; log:\n%s", (long long)t, (long long)n,
                 log);
    cr_expect_eq(st, 0, "host exited %d; log:\n%s", st, log);
    cr_expect_not_null(strstr(log, "loaded plugin \"testkit\""), "%s", log);
    cr_expect_not_null(strstr(log, "loaded plugin \"noop\""), "%s", log);
    th_assert_clean_log(ini);
    free(log);
    free(ini);
}

Test(plugin_run, bad_abi, .timeout = 60)
{
    const char *needles[] = {"\"future\"", "2.3", "1.0", NULL};
    expect_run_refused("abi", "[plugin future]\npath = " FIXTURE("bad_abi") "\n", needles);
}

Test(plugin_run, no_symbol, .timeout = 60)
{
    const char *needles[] = {"\"nosym\"", "no_symbol.so", "skipq_plugin_describe", NULL};
    expect_run_refused("nosym", "[plugin nosym]\npath = " FIXTURE("no_symbol") "\n", needles);
}

Test(plugin_run, text_file_named_so, .timeout = 60)
{
    char *fake = th_write_file("fake.so", "not an ELF file\n");
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin fake]\npath = %s\n", fake);
    const char *needles[] = {"\"fake\"", fake, NULL};
    expect_run_refused("fake", extra, needles);
    free(fake);
}

Test(plugin_run, truncated_plugin, .timeout = 60)
{
    char *whole = th_read_file(PLUGIN("testkit"));
    char path[600];
    snprintf(path, sizeof path, "%s/truncated.so", th_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(whole, 1, 1000, f), 1000);
    fclose(f);
    free(whole);
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin cut]\npath = %s\n", path);
    const char *needles[] = {"\"cut\"", path, NULL};
    expect_run_refused("cut", extra, needles);
}

Test(plugin_run, missing_plugin_file, .timeout = 60)
{
    char path[600];
    snprintf(path, sizeof path, "%s/gone.so", th_tmpdir());
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin gone]\npath = %s\n", path);
    const char *needles[] = {"\"gone\"", path, NULL};
    expect_run_refused("gone", extra, needles);
}

Test(plugin_run, kind_registered_by_two_plugins, .timeout = 60)
{
    const char *needles[] = {"\"test\"", "\"testkit\"", "\"dupper\"", NULL};
    expect_run_refused("dupkind", "[plugin dupper]\npath = " FIXTURE("dup_kind") "\n", needles);
}

Test(plugin_run, kind_registered_twice_by_one_plugin, .timeout = 60)
{
    const char *needles[] = {"\"dup.self\"", "\"selfish\"", NULL};
    expect_run_refused("dupself", "[plugin selfish]\npath = " FIXTURE("dup_self") "\n", needles);
}

Test(plugin_run, init_failure, .timeout = 60)
{
    /* the plugin's own log line (through the host, prefixed with its name)
     * and the host's refusal naming it */
    const char *needles[] = {"plugin broken: init_fails fixture: refusing to start on purpose", "\"broken\"",
                             "failed to initialise", NULL};
    expect_run_refused("initfail", "[plugin broken]\npath = " FIXTURE("init_fails") "\n", needles);
}

/* ---- plugin_safety through skipq run ---------------------------------------------------------- */

Test(plugin_safety, a_fifo_at_the_plugin_path_stops_the_host_at_once, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "noop", "{}", NULL, 0, 0);
    const char *fifo = th_tmp_path("fifo.so");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    char extra[1024];
    snprintf(extra, sizeof extra, "[plugin fifo]\npath = %s\n\n[queue default]\nthreads = 1\n", fifo);
    char *ini = th_host_ini(&db, "fifo", NULL, NULL, extra);
    int64_t start = th_now_ms();
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 10000);
    int64_t took = th_now_ms() - start;
    if (st == -1)
        kill(pid, SIGKILL); /* SIGTERM is blocked by then: only this ends it */
    char *log = th_host_log(ini);
    cr_expect_eq(st, 2, "skipq run exited %d after %lld ms (-1: still running); log:\n%s", st, (long long)took, log);
    cr_expect_lt(took, 5000, "took %lld ms", (long long)took);
    cr_expect_not_null(strstr(log, fifo), "%s", log);
    cr_expect_not_null(strstr(log, "not a regular file (it is a FIFO)"), "%s", log);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND attempts = 0",
                            (long long)id),
                 1);
    th_assert_clean_log(ini);
    free(log);
    free(ini);
}

Test(plugin_safety, skipq_run_refuses_a_world_writable_runpath_and_warns_about_the_loader_environment,
     .timeout = 60)
{
    th_rpath_dirs();
    struct th_db db;
    th_db_new(&db);
    int64_t id = th_enqueue(db.conn, "rpath", "{}", NULL, 0, 0);
    char *ini = th_host_ini(&db, "open", NULL, NULL,
                            "[plugin open]\npath = " FIXTURE("rpath_open") "\n\n[queue default]\nthreads = 1\n");
    pid_t pid = th_host_start(ini);
    int st = th_wait_exit(pid, 20000);
    char *log = th_host_log(ini);
    cr_expect_eq(st, 2, "exit %d; log:\n%s", st, log);
    cr_expect_not_null(strstr(log, "RUNPATH entry \"" RPATH_DIR "/open\""), "%s", log);
    free(log);

    /* the safe one runs its job; LD_LIBRARY_PATH set as root is worth a warning */
    setenv("LD_LIBRARY_PATH", RPATH_DIR "/safe", 1);
    ini = th_host_ini(&db, "safe", NULL, NULL,
                      "[plugin safe]\npath = " FIXTURE("rpath_safe") "\n\n[queue default]\nthreads = 1\n");
    pid = th_host_start(ini);
    unsetenv("LD_LIBRARY_PATH");
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", (long long)id);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, sql), 1);
    cr_expect_eq(th_host_stop(pid, 10000), 0);
    log = th_host_log(ini);
    if (geteuid() == 0)
        cr_expect_not_null(strstr(log, "LD_LIBRARY_PATH is set (" RPATH_DIR "/safe) and skipq runs as root"), "%s",
                           log);
    th_assert_clean_log(ini);
    free(log);
}
