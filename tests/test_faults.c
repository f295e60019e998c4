/*
 * test_faults.c -- faults with real host processes: kill -9, a host frozen
 * past its lease (SIGSTOP), graceful and impatient shutdowns, and database
 * connections cut under a working host.
 *
 * Times that matter are read on the database clock (started_at, now()).
 * Only the bounded-time properties users rely on are asserted: orphans come
 * back within lease + a few seconds, a SIGTERMed host exits within its grace (and the stop window after it)
 * (+ a margin), a second signal exits at once.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "skipq/plugin.h"

/* ---- hosts ----------------------------------------------------------------------- */

#define MAX_HOSTS 8

static bool log_has(const struct host *h, const char *needle)
{
    char *log = slurp_log(h);
    bool found = strstr(log, needle) != NULL;
    free(log);
    return found;
}

/* Like th_host_ini, with the [host] timings chosen by the test. */
static char *host_ini_timed(const struct th_db *db, const char *name, const char *lease, const char *grace,
                            const char *extra)
{
    char buf[8192];
    int n = snprintf(buf, sizeof buf,
                     "[database]\nurl = %s\n\n"
                     "[host]\npoll_interval = 50ms\nlease = %s\nheartbeat = 500ms\nshutdown_grace = %s\n"
                     "log_level = info\nname = %s\n\n"
                     "[plugin testkit]\npath = %s/testkit.so\n\n%s",
                     db->conninfo, lease, grace, name, SKIPQ_PLUGIN_DIR, extra ? extra : "");
    cr_assert_lt(n, (int)sizeof buf);
    char file[128];
    snprintf(file, sizeof file, "%s.ini", name);
    return th_write_file(file, buf);
}

/*
 * ThreadSanitizer sleeps atexit_sleep_ms (1 s by default) in every exit of an
 * instrumented process, _exit included. That second is the sanitizer's, not
 * skipq's: hosts started after this call skip it, so the exit-time bounds
 * measure skipq in every build.
 */
static void no_tsan_exit_sleep(void)
{
    const char *o = getenv("TSAN_OPTIONS");
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%satexit_sleep_ms=0", o && *o ? o : "", o && *o ? ":" : "");
    setenv("TSAN_OPTIONS", buf, 1);
}

static const char CONNECTED_SQL[] = "SELECT count(*) FROM pg_stat_activity"
                                    " WHERE application_name = 'skipq' AND datname = current_database()";
static const char DONE_SQL[] = "SELECT count(*) FROM skipq.jobs WHERE status = 'done'";
static const char RUNNING_SQL[] = "SELECT count(*) FROM skipq.job_executions WHERE status = 'running'";

/* Every job has exactly one 'done' execution and none is left running. */
static void assert_each_done_once(PGconn *c)
{
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'"), 0, "a job is not done");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE"
                              " (SELECT count(*) FROM skipq.job_executions e"
                              "   WHERE e.job_id = j.id AND e.status = 'done') <> 1"),
                 0, "some job has no done execution, or more than one");
    cr_assert_eq(th_scalar(c, RUNNING_SQL), 0, "an execution was left 'running'");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e"
                              " ON e.id = j.current_execution_id AND e.job_id = j.id AND e.status = 'done'"),
                 th_scalar(c, "SELECT count(*) FROM skipq.jobs"), "a job's current execution is not its done one");
}

/* ---- 1. kill -9 ------------------------------------------------------------------ */

Test(faults, crash_kill9_orphans_recovered_after_lease, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 4000}')) FROM generate_series(1, 20)");
    struct host a = {.name = "crashA"}, b = {.name = "crashB"};
    a.ini = th_host_ini(&db, a.name, NULL, NULL, "[queue default]\nthreads = 4\n");
    struct host *as[] = {&a}, *bs[] = {&b};
    host_start(&a);
    cr_assert_eq(th_wait_at_least(c, 4, 30000, 20, as, 1, RUNNING_SQL), 4, "host A never ran 4 jobs at once");

    th_host_signal_all(a.pid, SIGKILL); /* with its worker processes, if any: the machine is lost */
    th_execf(c, "CREATE TEMP TABLE kill_time AS SELECT now() AS t");
    cr_assert_eq(host_wait_exit(&a, 10000), 128 + SIGKILL);
    /* A's sessions end once the server sees the sockets close; after that
     * nothing A sent can still change a row. */
    cr_assert_eq(th_wait_scalar(c, 0, 10000, CONNECTED_SQL), 0, "host A's sessions did not go away");
    th_execf(c, "CREATE TEMP TABLE orphans AS SELECT job_id, id AS eid FROM skipq.job_executions"
                " WHERE status = 'running'");
    long long norphans = th_scalar(c, "SELECT count(*) FROM orphans");
    cr_assert_gt(norphans, 0, "no job was running in A when it was killed");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j JOIN orphans o ON o.job_id = j.id"
                              " WHERE j.status <> 'running' OR j.current_execution_id <> o.eid"),
                 0, "the killed host's jobs should still be running (leased) right after the kill");

    b.ini = th_host_ini(&db, b.name, NULL, NULL, "[queue default]\nthreads = 20\n");
    host_start(&b);
    cr_assert_eq(th_wait_at_least(c, 20, 60000, 20, bs, 1, DONE_SQL), 20, "not all jobs done after the crash");
    cr_assert_eq(host_stop(&b, 15000), 0, "host B did not stop cleanly");

    assert_each_done_once(c);
    /* The orphans: A's attempt 'lost', then B's 'done'; attempts = 2. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j JOIN orphans o ON o.job_id = j.id"
                              " WHERE j.attempts = 2 AND (SELECT string_agg(e.status || '@' ||"
                              "   split_part(e.worker, ':', 1), ',' ORDER BY e.attempt)"
                              "   FROM skipq.job_executions e WHERE e.job_id = j.id) = 'lost@crashA,done@crashB'"),
                 norphans, "an orphaned job does not show lost (A) then done (B) with attempts = 2");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions e JOIN orphans o ON o.eid = e.id"
                              " WHERE e.error LIKE '%lease%' AND e.finished_at IS NOT NULL"),
                 norphans, "a lost execution does not say its lease expired");
    /* Everything else ran once. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.id NOT IN (SELECT job_id FROM orphans)"
                              " AND (j.attempts <> 1 OR (SELECT count(*) FROM skipq.job_executions e"
                              "   WHERE e.job_id = j.id) <> 1)"),
                 0);
    /* Recovered within lease (3 s) + 5 s of the kill, on the database clock. */
    long long worst_ms = th_scalar(c, "SELECT (extract(epoch FROM max(e.started_at) - (SELECT t FROM kill_time))"
                                      " * 1000)::bigint FROM skipq.job_executions e JOIN orphans o"
                                      " ON o.job_id = e.job_id AND e.id <> o.eid");
    fprintf(stderr, "[faults] crash: %lld orphan(s) re-claimed at most %lld ms after the kill\n", norphans, worst_ms);
    cr_assert_lt(worst_ms, 3000 + 5000, "orphans re-claimed %lld ms after the kill (lease is 3 s)", worst_ms);
    th_assert_clean_log(a.ini);
    th_assert_clean_log(b.ini);
}

/* ---- 2. zombie fencing ------------------------------------------------------------ */

Test(faults, sigstop_zombie_is_fenced, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    /* ignore_stop: once thawed, A goes on to write its effect and try to
     * complete, instead of noticing the lost lease and giving up early. */
    int64_t id = th_enqueue(c, "test", "{\"txn\": true, \"sleep_ms\": 1500, \"ignore_stop\": true}", NULL, 0, 0);
    struct host a = {.name = "zombieA"}, b = {.name = "zombieB"};
    a.ini = th_host_ini(&db, a.name, NULL, NULL, "[queue default]\nthreads = 1\n");
    b.ini = th_host_ini(&db, b.name, NULL, NULL, "[queue default]\nthreads = 1\n");
    struct host *as[] = {&a}, *bs[] = {&b};
    host_start(&a);
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, as, 1, RUNNING_SQL), 1, "host A never claimed the job");
    th_host_signal_all(a.pid, SIGSTOP); /* and its worker processes, if any */
    int64_t stopped_at = th_now_ms();
    int64_t a_exec = th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, id);
    cr_assert_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64
                            " AND status = 'running' AND locked_by LIKE 'zombieA:%%'",
                            id),
                 1, "test setup: the job was no longer running in A when A was stopped");

    host_start(&b);
    /* B can only take the job once A's lease (3 s) has run out. */
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, bs, 1, DONE_SQL), 1, "host B did not complete the job");
    int64_t frozen = th_now_ms() - stopped_at;
    cr_assert_gt(frozen, 3000, "B completed the job %lld ms after A froze, before A's 3 s lease ran out",
                 (long long)frozen);

    th_host_signal_all(a.pid, SIGCONT);
    /* A's handler wakes, writes its effect in its transaction, and tries to
     * mark the job done: fenced, so its transaction rolls back. */
    cr_assert(th_wait_log(a.ini, "discarded", 30000), "host A never reported its result as discarded:\n%s", slurp_log(&a));
    cr_assert(log_has(&a, "lease"), "A's log does not mention the lease");
    cr_assert(log_has(&a, "rolled back"), "A's log does not say its transaction was rolled back");

    int64_t b_exec = th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, id);
    cr_assert_neq(a_exec, b_exec);
    cr_assert_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.job_executions WHERE id = %" PRId64
                            " AND status = 'done' AND worker LIKE 'zombieB:%%'",
                            b_exec),
                 1, "the done execution is not B's");
    cr_assert_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE id = %" PRId64 " AND status = 'lost'",
                            a_exec),
                 1, "A's execution is not 'lost'");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 2);
    assert_each_done_once(c);
    cr_assert_eq(th_scalarf(c, "SELECT attempts FROM skipq.jobs WHERE id = %" PRId64, id), 2);
    /* Exactly one effect, B's: A's write rolled back with its fenced completion. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects"), 1,
                 "effects rows: %lld (A's transactional write must roll back)",
                 th_scalar(c, "SELECT count(*) FROM public.testkit_effects"));
    cr_assert_eq(th_scalarf(c,
                            "SELECT count(*) FROM public.testkit_effects WHERE job_id = %" PRId64
                            " AND execution_id = %" PRId64,
                            id, b_exec),
                 1, "the effect does not carry B's execution id");

    cr_assert_eq(host_stop(&a, 15000), 0, "host A did not stop cleanly");
    cr_assert_eq(host_stop(&b, 15000), 0, "host B did not stop cleanly");
    /* Still exactly one done execution after both hosts are gone. */
    assert_each_done_once(c);
    th_assert_clean_log(a.ini);
    th_assert_clean_log(b.ini);
}

/* ---- 3. graceful shutdown, short jobs ---------------------------------------------- */

Test(faults, sigterm_lets_short_jobs_finish, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 200}')) FROM generate_series(1, 50)");
    struct host h = {.name = "graceful"};
    char ledger[512];
    snprintf(ledger, sizeof ledger, "%s/graceful.ledger", th_tmpdir());
    h.ini = th_host_ini(&db, h.name, NULL, ledger, "[queue default]\nthreads = 4\n"); /* grace 5 s */
    struct host *hs[] = {&h};
    host_start(&h);
    cr_assert_geq(th_wait_at_least(c, 8, 30000, 20, hs, 1, DONE_SQL), 8);
    cr_assert_geq(th_wait_at_least(c, 1, 30000, 20, hs, 1, RUNNING_SQL), 1);
    kill(h.pid, SIGTERM);
    int64_t t0 = th_now_ms();
    int st = host_wait_exit(&h, 15000);
    int64_t took = th_now_ms() - t0;
    cr_assert_eq(st, 0, "host exit status %d after SIGTERM", st);
    cr_assert_lt(took, 5000, "host took %lld ms to exit; its grace is 5 s and jobs take 200 ms", (long long)took);

    /* The handlers that started, from testkit's ledger. A job can also be
     * claimed in the instant before the signal and not yet handed to its
     * handler: that one is given back, not run. */
    int64_t *ids = NULL;
    size_t nstarted = th_read_ledger(ledger, &ids);
    th_execf(c, "CREATE TEMP TABLE started (job_id bigint)");
    for (size_t i = 0; i < nstarted; i++)
        th_execf(c, "INSERT INTO started VALUES (%" PRId64 ")", ids[i]);
    free(ids);

    long long done = th_scalar(c, DONE_SQL);
    long long pending = th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending'");
    long long back = th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'interrupted'");
    fprintf(stderr, "[faults] graceful: exited in %lld ms, %lld done, %lld pending (%lld given back unstarted)\n",
            (long long)took, done, pending, back);
    cr_assert_eq(done + pending, 50, "every job must be done or pending after a graceful stop");
    cr_assert_gt(pending, 0, "the SIGTERM came after the queue drained: not a mid-run stop");
    cr_assert_eq(th_scalar(c, RUNNING_SQL), 0, "an execution was left 'running'");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM started s JOIN skipq.jobs j ON j.id = s.job_id"
                              " WHERE j.status <> 'done'"),
                 0, "a handler that started before the SIGTERM did not finish");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions e WHERE e.status <> 'done'"
                              " AND NOT (e.status = 'interrupted'"
                              "          AND NOT EXISTS (SELECT 1 FROM started s WHERE s.job_id = e.job_id))"),
                 0, "a graceful stop must not leave lost or failed attempts, nor cut a started handler");
    /* Untouched, or given back unstarted: pending at once, attempt refunded. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE status = 'pending' AND NOT ("
                              " (attempts = 0 AND NOT EXISTS (SELECT 1 FROM skipq.job_executions e"
                              "                               WHERE e.job_id = j.id))"
                              " OR (attempts = 1 AND max_attempts = 6 AND run_at <= now()"
                              "     AND (SELECT pg_catalog.array_agg(e.status) FROM skipq.job_executions e"
                              "          WHERE e.job_id = j.id) = '{interrupted}'))"),
                 0, "a pending job was touched other than by being given back unstarted");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'done' AND attempts <> 1"), 0);

    /* Nothing was lost: a new host finishes the rest, each job once. */
    struct host h2 = {.name = "graceful2"};
    h2.ini = th_host_ini(&db, h2.name, NULL, NULL, "[queue default]\nthreads = 4\n");
    struct host *h2s[] = {&h2};
    host_start(&h2);
    cr_assert_eq(th_wait_at_least(c, 50, 60000, 20, h2s, 1, DONE_SQL), 50);
    cr_assert_eq(host_stop(&h2, 15000), 0);
    assert_each_done_once(c);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 50 + back);
    th_assert_clean_log(h.ini);
    th_assert_clean_log(h2.ini);
}

/* ---- 4. shutdown with long jobs: release after the grace --------------------------- */

Test(faults, sigterm_releases_long_jobs_after_grace, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 20000, \"ignore_stop\": true}'))"
                " FROM generate_series(1, 3)");
    no_tsan_exit_sleep();
    /* A 30 s lease: anything that comes back sooner was released, not reaped. */
    struct host h = {.name = "longA"}, b = {.name = "longB"};
    char ledger[512], a_extra[1024];
    snprintf(ledger, sizeof ledger, "%s/longA.ledger", th_tmpdir());
    /* Still in host_ini_timed's [plugin testkit] section: A's handlers log their starts. */
    snprintf(a_extra, sizeof a_extra, "ledger = %s\n\n[queue default]\nthreads = 3\n", ledger);
    h.ini = host_ini_timed(&db, h.name, "30s", "1s", a_extra);
    b.ini = host_ini_timed(&db, b.name, "30s", "1s", "[queue default]\nthreads = 3\n");
    struct host *hs[] = {&h}, *bs[] = {&b};
    host_start(&h);
    cr_assert_eq(th_wait_at_least(c, 3, 30000, 20, hs, 1, RUNNING_SQL), 3);
    cr_assert(th_wait_ledger(ledger, 3, 10000), "three handlers never ran at once:\n%s", slurp_log(&h));
    th_execf(c, "CREATE TEMP TABLE a_execs AS SELECT id, job_id FROM skipq.job_executions");

    kill(h.pid, SIGTERM);
    int64_t t0 = th_now_ms();
    int st = host_wait_exit(&h, 15000);
    int64_t took = th_now_ms() - t0;
    cr_assert_eq(st, 0, "host exit status %d after SIGTERM", st);
    fprintf(stderr, "[faults] long jobs: exited %lld ms after SIGTERM (grace 1 s)\n", (long long)took);
    /* Handlers deaf to the stop request: the grace, then the stop window
     * (plugin.h's stop contract), then the release. */
    cr_assert_lt(took, 1000 + SKIPQ_STOP_WINDOW_MS + 2000, "host took %lld ms to exit with a 1 s grace and a %d ms window",
                 (long long)took, SKIPQ_STOP_WINDOW_MS);

    /* Released at once: pending again, attempt recorded as interrupted, and
     * the budget not spent (max_attempts grew by one). */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending' AND attempts = 1"
                              " AND max_attempts = 6 AND run_at <= now() AND lease_expires_at IS NULL"
                              " AND last_error LIKE 'interrupted%'"),
                 3, "the jobs were not released back to pending at shutdown");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions e JOIN a_execs a ON a.id = e.id"
                              " WHERE e.status = 'interrupted' AND e.finished_at IS NOT NULL"),
                 3, "the cut-short executions are not 'interrupted'");
    cr_assert_eq(th_scalar(c, RUNNING_SQL), 0);
    cr_assert(log_has(&h, "released 3"), "the host's log does not report the release:\n%s", slurp_log(&h));

    /* Another host takes them at once, long before the 30 s lease. */
    th_execf(c, "UPDATE skipq.jobs SET payload = '{}'");
    int64_t t1 = th_now_ms();
    host_start(&b);
    cr_assert_eq(th_wait_at_least(c, 3, 20000, 20, bs, 1, DONE_SQL), 3, "released jobs were not picked up by host B");
    fprintf(stderr, "[faults] long jobs: host B finished them %lld ms after it started\n",
            (long long)(th_now_ms() - t1));
    cr_assert_eq(host_stop(&b, 15000), 0);
    assert_each_done_once(c);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.attempts = 2 AND"
                              " (SELECT string_agg(e.status || '@' || split_part(e.worker, ':', 1), ','"
                              "   ORDER BY e.attempt) FROM skipq.job_executions e WHERE e.job_id = j.id)"
                              " = 'interrupted@longA,done@longB'"),
                 3);
    th_assert_clean_log(h.ini);
    th_assert_clean_log(b.ini);
}

/*
 * Threads sharing one session, a long job running: a job enqueued now
 * starts on a free thread at once, not when the long one ends, and its
 * outcome is recorded while the long one still runs.
 */
Test(faults, a_new_job_starts_at_once_beside_a_long_one_on_a_shared_session, .timeout = 120)
{
    if (th_process_mode())
        cr_skip_test("sessions are shared by threads, not by worker processes");
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    struct host h = {.name = "beside"};
    h.ini = host_ini_timed(&db, h.name, "30s", "1s",
                           "[queue default]\nthreads = 4\nconnections = 1\nisolation = thread\n");
    struct host *hs[] = {&h};
    host_start(&h);
    th_execf(c, "SELECT skipq.enqueue('test', '{\"sleep_ms\": 8000}')");
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, hs, 1, RUNNING_SQL), 1, "the long job never started");
    usleep(300 * 1000); /* past its claim: the session now waits on its thread */
    int64_t t0 = th_now_ms();
    th_execf(c, "SELECT skipq.enqueue('test', '{}')");
    cr_assert_eq(th_wait_at_least(c, 1, 6000, 10, hs, 1, DONE_SQL), 1,
                 "the new job was not done within 6 s while the long one ran");
    int64_t took = th_now_ms() - t0;
    fprintf(stderr, "[faults] beside a long job: a new job done %lld ms after its enqueue\n", (long long)took);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1,
                 "the long job should still be running");
    cr_assert_eq(host_stop(&h, 15000), 0);
    th_assert_clean_log(h.ini);
}

/*
 * Threads sharing one session: at SIGTERM the handlers that started finish
 * within the grace and their outcomes are recorded; the jobs claimed ahead
 * for them and not started go back to pending at once, uncharged. Nothing is
 * lost or run twice, and another host finishes the rest.
 */
Test(faults, sigterm_on_a_shared_session_finishes_started_jobs_and_gives_back_the_rest, .timeout = 120)
{
    if (th_process_mode())
        cr_skip_test("sessions are shared by threads, not by worker processes");
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    const int jobs = 40;
    th_execf(c, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 400}')) FROM generate_series(1, %d)", jobs);
    no_tsan_exit_sleep();
    struct host h = {.name = "sharedA"}, b = {.name = "sharedB"};
    h.ini = host_ini_timed(&db, h.name, "30s", "10s",
                           "[queue default]\nthreads = 4\nconnections = 1\nisolation = thread\n");
    b.ini = host_ini_timed(&db, b.name, "30s", "1s", "[queue default]\nthreads = 4\n");
    struct host *hs[] = {&h}, *bs[] = {&b};
    host_start(&h);
    /* Four running and up to four claimed ahead: wait for the claims to
     * grow past what the four threads can run at once. */
    cr_assert_geq(th_wait_at_least(c, 6, 30000, 20, hs, 1, RUNNING_SQL), 6, "the host never claimed ahead");

    kill(h.pid, SIGTERM);
    int st = host_wait_exit(&h, 15000);
    cr_assert_eq(st, 0, "host exit status %d after SIGTERM", st);
    cr_assert_eq(th_scalar(c, RUNNING_SQL), 0, "an execution was left running");
    long long done = th_scalar(c, DONE_SQL);
    long long back = th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'interrupted'");
    cr_assert_geq(done, 4, "the started jobs did not finish within the grace");
    cr_assert_gt(back, 0, "no job claimed ahead was given back");
    /* Given back uncharged: pending at once, its budget one larger. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e ON e.job_id = j.id"
                              " WHERE e.status = 'interrupted' AND (j.status <> 'pending' OR j.max_attempts <> 6"
                              "   OR j.lease_expires_at IS NOT NULL OR j.run_at > now())"),
                 0, "a job given back is not pending at once with its attempt refunded");

    host_start(&b);
    cr_assert_eq(th_wait_at_least(c, jobs, 60000, 20, bs, 1, DONE_SQL), jobs, "host B did not finish the rest");
    cr_assert_eq(host_stop(&b, 15000), 0);
    assert_each_done_once(c);
    th_assert_clean_log(h.ini);
    th_assert_clean_log(b.ini);
}

/* ---- 5. a second signal ---------------------------------------------------------------- */

Test(faults, second_sigterm_exits_at_once, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    no_tsan_exit_sleep();
    int64_t id = th_enqueue(c, "test", "{\"sleep_ms\": 20000}", NULL, 0, 0);
    struct host h = {.name = "impatient"}, b = {.name = "impatient2"};
    char ledger[512];
    snprintf(ledger, sizeof ledger, "%s/impatient.ledger", th_tmpdir());
    h.ini = th_host_ini(&db, h.name, NULL, ledger, "[queue default]\nthreads = 1\n"); /* grace 5 s */
    b.ini = th_host_ini(&db, b.name, NULL, NULL, "[queue default]\nthreads = 1\n");
    struct host *hs[] = {&h}, *bs[] = {&b};
    host_start(&h);
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, hs, 1, RUNNING_SQL), 1);
    /* Claimed is not started: a job claimed but not yet handed to its
     * handler would be given back at the first SIGTERM. Wait for the
     * handler itself (its ledger line). */
    cr_assert(th_wait_ledger(ledger, 1, 10000), "the handler never started:\n%s", slurp_log(&h));
    int64_t a_exec = th_scalarf(c, "SELECT current_execution_id FROM skipq.jobs WHERE id = %" PRId64, id);

    kill(h.pid, SIGTERM);
    /* Two SIGTERMs pending at once would merge into one: let the first land. */
    cr_assert(th_wait_log(h.ini, "SIGTERM received", 10000), "the first SIGTERM was not logged:\n%s", slurp_log(&h));
    kill(h.pid, SIGTERM);
    int64_t t0 = th_now_ms();
    int st = host_wait_exit(&h, 10000);
    int64_t took = th_now_ms() - t0;
    cr_assert_eq(st, 1, "exit status after a second SIGTERM: %d (want 1)", st);
    cr_assert_lt(took, 1000, "host took %lld ms to exit after the second SIGTERM", (long long)took);
    cr_assert(log_has(&h, "second SIGTERM"), "the log does not mention the second signal");

    /* Not released: the lease brings the job back to another host. */
    cr_assert_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE id = %" PRId64
                               " AND status = 'running'", a_exec),
                 1);
    th_execf(c, "UPDATE skipq.jobs SET payload = '{}'");
    host_start(&b);
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, bs, 1, DONE_SQL), 1, "the job did not come back after the lease");
    cr_assert_eq(host_stop(&b, 15000), 0);
    assert_each_done_once(c);
    cr_assert_eq(th_scalarf(c,
                            "SELECT count(*) FROM skipq.jobs j WHERE j.id = %" PRId64 " AND j.attempts = 2 AND"
                            " (SELECT string_agg(e.status || '@' || split_part(e.worker, ':', 1), ','"
                            "   ORDER BY e.attempt) FROM skipq.job_executions e WHERE e.job_id = j.id)"
                            " = 'lost@impatient,done@impatient2'",
                            id),
                 1);
    th_assert_clean_log(h.ini);
    th_assert_clean_log(b.ini);
}

/* ---- 6. database connections cut under a working host ------------------------------- */

Test(faults, connection_loss_is_survived, .timeout = 180)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "SELECT count(skipq.enqueue('test', '{\"sleep_ms\": 5}')) FROM generate_series(1, 500)");
    struct host h = {.name = "cutoff"};
    h.ini = th_host_ini(&db, h.name, NULL, NULL, "[queue default]\nthreads = 4\n");
    struct host *hs[] = {&h};
    host_start(&h);
    cr_assert_geq(th_wait_at_least(c, 1, 30000, 20, hs, 1, DONE_SQL), 1);

    long long terminated = 0, first_hit = 0;
    for (int i = 0; i < 5; i++) {
        long long pending = th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'");
        long long t = th_scalar(c, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) AS ok"
                                   " FROM pg_stat_activity WHERE application_name = 'skipq'"
                                   " AND datname = current_database()) x WHERE ok");
        if (i == 0)
            first_hit = t;
        terminated += t;
        fprintf(stderr, "[faults] connection loss: cut %lld session(s), %lld job(s) not done yet\n", t, pending);
        usleep(300000);
    }
    cr_expect_gt(first_hit, 0, "the first pg_terminate_backend round found no host session");

    cr_assert_eq(th_wait_at_least(c, 500, 120000, 20, hs, 1, DONE_SQL), 500,
                 "not every job finished after the outages");
    cr_assert_eq(kill(h.pid, 0), 0);
    cr_assert_eq(host_exited(&h), -1, "the host exited after losing its connections");
    assert_each_done_once(c);
    fprintf(stderr, "[faults] connection loss: %lld sessions cut; %lld executions for 500 jobs\n", terminated,
            th_scalar(c, "SELECT count(*) FROM skipq.job_executions"));
    /* Still working: a job enqueued now is run. */
    th_enqueue(c, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_at_least(c, 501, 30000, 20, hs, 1, DONE_SQL), 501,
                 "the host stopped working after the outages");
    cr_assert_eq(host_stop(&h, 15000), 0, "host did not stop cleanly");
    assert_each_done_once(c);
    th_assert_clean_log(h.ini);
}

/*
 * A session that answers but cannot write -- a standby reached through an
 * address that moved, or a primary turned read-only -- is as lost as a
 * closed one: every thread of the host drops it and makes another, the
 * heartbeat included, so once the database takes writes again the leases of
 * running jobs are renewed and nothing waits for a restart. Here the
 * database is made read-only for new sessions and the host's sessions are
 * cut, so that every one it makes is read-only until the test lifts it.
 */
Test(faults, sessions_that_cannot_write_are_made_again, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    struct host h = {.name = "readonly"};
    h.ini = th_host_ini(&db, h.name, NULL, NULL, "[queue default]\nthreads = 2\n");
    struct host *hs[] = {&h};
    host_start(&h);
    th_enqueue(c, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, hs, 1, DONE_SQL), 1);

    th_execf(c, "ALTER DATABASE %s SET default_transaction_read_only = on", db.name);
    th_execf(c, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'skipq' AND datname = current_database()");
    cr_assert(th_wait_log(h.ini, "heartbeat: the database session cannot write", 20000),
              "the heartbeat never said its session could not write:\n%s", th_host_log(h.ini));
    th_execf(c, "ALTER DATABASE %s RESET default_transaction_read_only", db.name);

    /* A job longer than its 3 s lease: it runs once only if the heartbeat
     * renews its lease from a session that can write. */
    int64_t id = th_enqueue(c, "test", "{\"sleep_ms\": 5000}", NULL, 0, 0);
    char running[160];
    snprintf(running, sizeof running, "SELECT count(*) FROM skipq.jobs WHERE id = %" PRId64 " AND status = 'running'",
             id);
    cr_assert_eq(th_wait_scalar(c, 1, 30000, running), 1,
                 "the job never started after the database took writes again:\n%s", th_host_log(h.ini));
    usleep(4000000);
    cr_expect_eq(th_scalarf(c, "%s AND lease_expires_at > now()", running), 1,
                 "the running job's lease was not renewed past its first 3 s:\n%s", th_host_log(h.ini));
    cr_assert_eq(th_wait_at_least(c, 2, 30000, 20, hs, 1, DONE_SQL), 2, "the long job did not finish");
    cr_expect(log_has(&h, "heartbeat: the database session can write again"), "%s", th_host_log(h.ini));
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'lost'"), 0,
                 "an execution was left to its lease ('lost')");
    cr_assert_eq(host_exited(&h), -1, "the host exited");
    cr_assert_eq(host_stop(&h, 15000), 0, "host did not stop cleanly");
    assert_each_done_once(c);
    th_assert_clean_log(h.ini);
}

/*
 * A database call that never gets its reply -- here the host's backends are
 * frozen with SIGSTOP, which leaves their sockets open and the kernel still
 * answering keepalives, as a middlebox that swallows bytes would -- is given
 * up after [host] reply_timeout: a worker thread drops the connection and
 * reconnects, a worker process is replaced, and the host goes on without a
 * restart. Every job then runs exactly once.
 *
 * A backend stopped inside a statement may hold a lock the whole cluster
 * needs: one stopped in a commit's WAL flush holds the WAL write lock, and
 * every commit on the server, the test's own included, waits for it. So
 * they are frozen only when all of them are between statements (freeze_idle
 * stops them and lets them go again until they are). thaw_backends (the
 * test's .fini) lets them go on when the test ends, and a timer started
 * with the freeze does so 60 s later even when the test is killed on its
 * timeout, which skips .fini and would leave every later test waiting.
 */
static char frozen[1024];

static void thaw_backends(void)
{
    if (frozen[0])
        th_sh("kill -CONT %s 2>/dev/null; kill -TERM %s 2>/dev/null; true", frozen, frozen);
    frozen[0] = '\0';
}

static void freeze_idle(PGconn *c)
{
    th_sh("(sleep 60; kill -CONT %s) >/dev/null 2>&1 &", frozen);
    for (int tries = 0;; tries++) {
        th_sh("kill -STOP %s", frozen);
        long long busy = th_scalarf(c, "SELECT count(*) FROM pg_stat_activity"
                                       " WHERE pid = ANY (string_to_array('%s', ' ')::int[])"
                                       "   AND state NOT IN ('idle', 'idle in transaction')", frozen);
        if (busy == 0)
            return;
        th_sh("kill -CONT %s", frozen);
        cr_assert_lt(tries, 500, "the host's backends were never all between statements at once");
        usleep(10000);
    }
}

Test(faults, a_database_call_with_no_reply_is_cut_after_reply_timeout, .timeout = 120, .fini = thaw_backends)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    struct host h = {.name = "noreply"};
    char ini[4096];
    snprintf(ini, sizeof ini,
             "[database]\nurl = %s\n\n[host]\npoll_interval = 50ms\nlease = 30s\nheartbeat = 500ms\n"
             "shutdown_grace = 5s\nreply_timeout = 2s\nname = noreply\n\n[plugin testkit]\npath = %s/testkit.so\n\n"
             "[queue default]\nthreads = 2\n",
             db.conninfo, SKIPQ_PLUGIN_DIR);
    h.ini = th_write_file("noreply.ini", ini);
    host_start(&h);
    cr_assert(th_wait_log(h.ini, "ready: every thread is connected", 30000), "the host never connected:\n%s",
              slurp_log(&h));

    /* Freeze every backend of the host: its next calls get no reply. */
    char *pids = th_textf(c, "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity"
                             " WHERE application_name = 'skipq' AND datname = current_database()");
    snprintf(frozen, sizeof frozen, "%s", pids);
    free(pids);
    freeze_idle(c);
    th_execf(c, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 20)");
    long long done = th_wait_scalar(c, 20, 40000, DONE_SQL);
    thaw_backends();
    cr_expect_eq(done, 20, "only %lld of 20 jobs done with the host's first sessions frozen:\n%s", done,
                 slurp_log(&h));
    cr_expect(log_has(&h, th_process_mode() ? "no reply from the database for" : "dropping the connection and reconnecting"),
              "the stuck calls were not cut:\n%s", slurp_log(&h));
    cr_expect_eq(host_stop(&h, 20000), 0);
    assert_each_done_once(c);
    th_check_invariants(c);
}

/* ---- 7. a host list whose first node refuses at start-up -------------------------- */

/*
 * A node that answers every connection's start-up with an error, as a
 * standby out of connection slots does ("sorry, too many clients already",
 * 53300): it accepts, declines SSL and GSS encryption, reads the start-up
 * packet and sends one ErrorResponse. `refusals` counts the answers.
 */
struct full_node {
    int fd, port;
    pthread_t thread;
    _Atomic int refusals;
};

static bool read_full(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static void refuse_one(struct full_node *s, int fd)
{
    for (;;) {
        uint32_t len, code;
        if (!read_full(fd, &len, 4) || !read_full(fd, &code, 4))
            return;
        len = ntohl(len);
        code = ntohl(code);
        if (len == 8 && (code == 80877103 || code == 80877104)) { /* SSLRequest, GSSENCRequest */
            if (write(fd, "N", 1) != 1)
                return;
            continue;
        }
        char rest[4096];
        if (len < 8 || len - 8 > sizeof rest || !read_full(fd, rest, len - 8))
            return;
        break;
    }
    static const char fields[] = "SFATAL\0VFATAL\0C53300\0Msorry, too many clients already\0";
    char msg[1 + 4 + sizeof fields];
    uint32_t n = htonl((uint32_t)(4 + sizeof fields)); /* the fields and their final \0 */
    msg[0] = 'E';
    memcpy(msg + 1, &n, 4);
    memcpy(msg + 5, fields, sizeof fields);
    if (write(fd, msg, sizeof msg) == (ssize_t)sizeof msg)
        atomic_fetch_add(&s->refusals, 1);
}

static void *full_node_main(void *arg)
{
    struct full_node *s = arg;
    for (int fd; (fd = accept(s->fd, NULL, NULL)) >= 0; close(fd))
        refuse_one(s, fd);
    return NULL;
}

static void full_node_start(struct full_node *s)
{
    memset(s, 0, sizeof *s);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    cr_assert(s->fd >= 0 && bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->fd, 16) == 0 &&
                  getsockname(s->fd, (struct sockaddr *)&a, &alen) == 0,
              "cannot listen on 127.0.0.1: %s", strerror(errno));
    s->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&s->thread, NULL, full_node_main, s), 0);
}

static void full_node_stop(struct full_node *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

/*
 * libpq gives up on a host list at the first node that answers with an
 * error other than "starting up", so a standby out of connection slots at
 * the head of the list would hide the primary after it. skipq goes on to
 * the nodes after it: the command line and a host both reach the database
 * through a list whose first node is full.
 */
Test(faults, a_host_list_goes_past_a_node_that_refuses_connections, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    struct full_node s;
    full_node_start(&s);
    struct th_db listed = db;
    snprintf(listed.conninfo, sizeof listed.conninfo, "host=127.0.0.1,%s port=%d,%s user=%s dbname=%s", PQhost(c),
             s.port, PQport(c), PQuser(c), PQdb(c));

    char *out = NULL, *err = NULL;
    int rc = th_cli(&out, &err, "stats", "--db", listed.conninfo, NULL);
    cr_expect_eq(rc, 0, "skipq stats did not get past the full node (exit %d): %s", rc, err);
    cr_expect_geq(atomic_load(&s.refusals), 1, "the first node was never asked");
    free(out);
    free(err);

    struct host h = {.name = "pastfirst"};
    h.ini = th_host_ini(&listed, h.name, NULL, NULL, "[queue default]\nthreads = 2\n");
    struct host *hs[] = {&h};
    th_execf(c, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 20)");
    host_start(&h);
    cr_expect_eq(th_wait_at_least(c, 20, 30000, 20, hs, 1, DONE_SQL), 20,
                 "the host did not drain through the list:\n%s", slurp_log(&h));
    cr_expect_eq(host_stop(&h, 15000), 0);
    full_node_stop(&s);
    assert_each_done_once(c);
    th_assert_clean_log(h.ini);
}
