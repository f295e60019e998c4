/*
 * test_hammer.c -- exactly-once under load.
 *
 * Thousands of jobs, many worker threads, one or several host processes
 * sharing the queue and one testkit ledger. What users rely on: every job
 * ends done, exactly one execution of it is 'done', no attempt is left
 * 'running', each handler ran once per attempt (the ledger), retries honour
 * the backoff, and a handler's transactional write lands exactly once, tied to
 * the execution that completed the job.
 *
 * Sizes scale with SKIPQ_HAMMER_SCALE (float, default 1.0) so sanitizer builds
 * can run smaller. Throughput is printed, never asserted.
 *
 * Hosts are started before the jobs are enqueued (and the test waits until
 * every worker connection is up), so several hosts compete from the first job.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MAX_HOSTS 8

/* ---- queries ----------------------------------------------------------------------- */

static double scalar_double(PGconn *conn, const char *sql)
{
    PGresult *r = th_query(conn, sql);
    cr_assert(PQntuples(r) == 1 && PQnfields(r) >= 1, "no row from: %s", sql);
    double v = PQgetisnull(r, 0, 0) ? 0.0 : strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

/* Worker connections of this test's database: hosts are up when all are. */
static const char CONNECTED_SQL[] = "SELECT count(*) FROM pg_stat_activity"
                                    " WHERE application_name = 'skipq' AND datname = current_database()";
static const char DONE_SQL[] = "SELECT count(*) FROM skipq.jobs WHERE status = 'done'";

/* ---- the ledger ---------------------------------------------------------------------- */

struct ledger_line {
    int64_t job_id, execution_id;
    int attempt, pid;
};

static size_t read_ledger(const char *path, struct ledger_line **out)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no ledger at %s: %s", path, strerror(errno));
    size_t cap = 1024, n = 0;
    struct ledger_line *v = malloc(cap * sizeof *v);
    char line[256];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        cr_assert_not_null(v);
        long long j, e;
        int a, p;
        cr_assert_eq(sscanf(line, "%lld %lld %d %d", &j, &e, &a, &p), 4, "%s:%d: malformed ledger line \"%s\"", path,
                     lineno, line);
        v[n++] = (struct ledger_line){j, e, a, p};
    }
    fclose(f);
    *out = v;
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Column 0 of every row of sql as int64, in result order. */
static size_t column_i64(PGconn *conn, const char *sql, int64_t **out)
{
    PGresult *r = th_query(conn, sql);
    size_t n = (size_t)PQntuples(r);
    int64_t *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
    PQclear(r);
    *out = v;
    return n;
}

/*
 * The ledger has one line per execution, and only those: its execution ids
 * are exactly the job_executions ids, each once, and each line names the
 * right job and attempt. Returns the number of lines.
 */
static size_t check_ledger_matches_executions(PGconn *conn, const char *path)
{
    struct ledger_line *lines;
    size_t n = read_ledger(path, &lines);
    PGresult *r = th_query(conn, "SELECT id, job_id, attempt FROM skipq.job_executions ORDER BY id");
    size_t ne = (size_t)PQntuples(r);
    cr_assert_eq(n, ne, "ledger %s has %zu lines but there are %zu executions", path, n, ne);
    int64_t *exec_ids = malloc((n ? n : 1) * sizeof *exec_ids);
    for (size_t i = 0; i < n; i++)
        exec_ids[i] = lines[i].execution_id;
    qsort(exec_ids, n, sizeof *exec_ids, cmp_i64);
    for (size_t i = 0; i < n; i++) {
        int64_t eid = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
        cr_assert_eq(exec_ids[i], eid, "ledger and executions differ at sorted position %zu: ledger %" PRId64
                     ", execution %" PRId64 " (a handler ran twice for one attempt, or never)",
                     i, exec_ids[i], eid);
    }
    /* Each line names its execution's job and attempt. */
    for (size_t i = 0; i < n; i++) {
        size_t lo = 0, hi = ne;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (strtoll(PQgetvalue(r, (int)mid, 0), NULL, 10) < lines[i].execution_id)
                lo = mid + 1;
            else
                hi = mid;
        }
        cr_assert_lt(lo, ne);
        cr_assert_eq(strtoll(PQgetvalue(r, (int)lo, 1), NULL, 10), lines[i].job_id,
                     "ledger line %zu: execution %" PRId64 " belongs to another job", i + 1, lines[i].execution_id);
        cr_assert_eq(atoi(PQgetvalue(r, (int)lo, 2)), lines[i].attempt, "ledger line %zu: wrong attempt", i + 1);
    }
    PQclear(r);
    free(exec_ids);
    free(lines);
    return n;
}

/*
 * The core exactly-once properties for n jobs that must each have run once:
 * all done, attempts = 1, one execution each and it is the done one, nothing
 * running, and the ledger holds each job id exactly once.
 */
static void check_exactly_once(PGconn *conn, long long n, const char *ledger_path)
{
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs"), n);
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'"), 0,
                 "jobs not done: %lld",
                 th_scalar(conn, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'"));
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs j WHERE"
                                 " (SELECT count(*) FROM skipq.job_executions e"
                                 "   WHERE e.job_id = j.id AND e.status = 'done') <> 1"),
                 0, "some job has no done execution or more than one");
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.job_executions WHERE status = 'running'"), 0,
                 "an execution was left 'running'");
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs WHERE attempts <> 1"), 0,
                 "%lld job(s) took more than one attempt",
                 th_scalar(conn, "SELECT count(*) FROM skipq.jobs WHERE attempts <> 1"));
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.job_executions"), n,
                 "expected one execution per job");
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e"
                                 " ON e.id = j.current_execution_id AND e.job_id = j.id AND e.status = 'done'"),
                 n, "a job's current_execution_id is not its done execution");
    cr_assert_eq(th_scalar(conn, "SELECT count(*) FROM skipq.jobs"
                                 " WHERE finished_at IS NULL OR lease_expires_at IS NOT NULL"),
                 0, "a done job without finished_at or still holding a lease");

    /* The ledger: exactly n lines, each job id exactly once. */
    struct ledger_line *lines;
    size_t nl = read_ledger(ledger_path, &lines);
    cr_assert_eq((long long)nl, n, "ledger has %zu lines, want %lld (one handler start per job)", nl, n);
    int64_t *lj = malloc(nl * sizeof *lj);
    for (size_t i = 0; i < nl; i++)
        lj[i] = lines[i].job_id;
    qsort(lj, nl, sizeof *lj, cmp_i64);
    int64_t *ids;
    size_t nid = column_i64(conn, "SELECT id FROM skipq.jobs ORDER BY id", &ids);
    cr_assert_eq(nid, nl);
    for (size_t i = 0; i < nl; i++) {
        cr_assert_neq(i > 0 ? lj[i - 1] : -1, lj[i], "job %" PRId64 " appears twice in the ledger", lj[i]);
        cr_assert_eq(lj[i], ids[i], "ledger job ids differ from the jobs at sorted position %zu (%" PRId64
                     " vs %" PRId64 ")",
                     i, lj[i], ids[i]);
    }
    free(ids);
    free(lj);
    free(lines);
    check_ledger_matches_executions(conn, ledger_path);
}

static void report(const char *what, long long jobs, int threads, int hosts, PGconn *conn, int64_t wall_ms)
{
    /* The database's view: first claim to last completion. */
    double db_s = scalar_double(conn, "SELECT extract(epoch FROM max(finished_at) - min(started_at))"
                                      " FROM skipq.job_executions");
    double wall_s = (double)wall_ms / 1000.0;
    fprintf(stderr,
            "[hammer] %s: %lld jobs, %d threads, %d host(s): %.2f s first claim to last done (%.0f jobs/s); "
            "%.2f s enqueue to all done (%.0f jobs/s)\n",
            what, jobs, threads, hosts, db_s, db_s > 0 ? (double)jobs / db_s : 0.0, wall_s,
            wall_s > 0 ? (double)jobs / wall_s : 0.0);
}

/* ---- tests ------------------------------------------------------------------------- */

Test(hammer, one_host_sixteen_threads, .timeout = 600)
{
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(10000, 100);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/hammer1.ledger", th_tmpdir());
    struct host h = {.name = "hammer1"};
    h.ini = th_host_ini(&db, h.name, NULL, ledger, "[queue default]\nthreads = 16\n");
    struct host *hs[] = {&h};
    host_start(&h);
    /* 16 threads share 2 sessions by default (connections), plus the
     * heartbeat and the listener; in process mode, one per process. */
    int sessions = th_process_mode() ? 16 + 2 : 2 + 2;
    cr_assert_geq(th_wait_at_least(db.conn, sessions, 60000, 50, hs, 1, CONNECTED_SQL), sessions,
                  "host did not connect");

    int64_t t0 = th_now_ms();
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, %lld)", n);
    long long done = th_wait_at_least(db.conn, n, 300000, 100, hs, 1, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 300 s", done, n);
    cr_assert_eq(host_stop(&h, 20000), 0, "host did not stop cleanly on SIGTERM");

    check_exactly_once(db.conn, n, ledger);
    cr_assert_eq(th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE worker NOT LIKE '%s:%%'",
                            h.name),
                 0);
    report("1 host x 16 threads", n, 16, 1, db.conn, wall);
    th_assert_clean_log(h.ini);
}

Test(hammer, three_hosts_one_ledger, .timeout = 600)
{
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(10000, 150);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/hammer2.ledger", th_tmpdir());
    struct host h[3] = {{.name = "hammer2a"}, {.name = "hammer2b"}, {.name = "hammer2c"}};
    struct host *hs[3];
    for (int i = 0; i < 3; i++) {
        h[i].ini = th_host_ini(&db, h[i].name, NULL, ledger, "[queue default]\nthreads = 6\n");
        hs[i] = &h[i];
        host_start(&h[i]);
    }
    cr_assert_geq(th_wait_at_least(db.conn, 21, 60000, 50, hs, 3, CONNECTED_SQL), 21, "hosts did not connect");

    int64_t t0 = th_now_ms();
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, %lld)", n);
    long long done = th_wait_at_least(db.conn, n, 300000, 100, hs, 3, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 300 s", done, n);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(host_stop(&h[i], 20000), 0, "host %s did not stop cleanly on SIGTERM", h[i].name);

    check_exactly_once(db.conn, n, ledger);

    /* Every host took part, and the ledger (by pid) agrees with the
     * executions (by worker name, NAME:PID:THREAD) on who ran what. The pid
     * is the host's, or in process mode that of one of its worker
     * processes. */
    struct ledger_line *lines;
    size_t nl = read_ledger(ledger, &lines);
    long long total = 0;
    fprintf(stderr, "[hammer] 3 hosts x 6 threads, per-host split:");
    for (int i = 0; i < 3; i++) {
        long long by_db = th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE worker LIKE '%s:%%'",
                                     h[i].name);
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT DISTINCT split_part(worker, ':', 2)::int FROM skipq.job_executions WHERE worker LIKE '%s:%%'",
                 h[i].name);
        PGresult *pids = th_query(db.conn, sql);
        long long by_ledger = 0;
        for (size_t k = 0; k < nl; k++)
            for (int r = 0; r < PQntuples(pids); r++)
                by_ledger += lines[k].pid == atoi(PQgetvalue(pids, r, 0));
        PQclear(pids);
        fprintf(stderr, " %s=%lld", h[i].name, by_db);
        cr_expect_gt(by_db, 0, "host %s claimed no job", h[i].name);
        cr_expect_eq(by_ledger, by_db, "host %s: %lld ledger lines but %lld executions", h[i].name, by_ledger, by_db);
        total += by_db;
    }
    fprintf(stderr, "\n");
    cr_assert_eq(total, n, "executions by the three hosts do not add up to the jobs");
    free(lines);
    report("3 hosts x 6 threads", n, 18, 3, db.conn, wall);
    for (int i = 0; i < 3; i++)
        th_assert_clean_log(h[i].ini);
}

/*
 * Two hosts with `queue` (a [queue default] body), then mixed jobs: planned
 * failures (one retry each), transactional writes, both, and plain ones.
 * `sessions`: how many sessions both hosts have once up.
 */
static void mixed(const char *queue, long long sessions, const char *what)
{
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(3000, 140);
    const long long n_fail = n / 10, n_txn = n / 7;
    th_execf(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/hammer3.ledger", th_tmpdir());
    char extra[512];
    snprintf(extra, sizeof extra, "[queue default]\n%s\n[kind test]\nbackoff_base = 10ms\nbackoff_cap = 50ms\n", queue);
    struct host h[2] = {{.name = "hammer3a"}, {.name = "hammer3b"}};
    struct host *hs[2] = {&h[0], &h[1]};
    for (int i = 0; i < 2; i++) {
        h[i].ini = th_host_ini(&db, h[i].name, NULL, ledger, extra);
        host_start(&h[i]);
    }
    cr_assert_geq(th_wait_at_least(db.conn, sessions, 60000, 50, hs, 2, CONNECTED_SQL), sessions,
                  "hosts did not connect");

    int64_t t0 = th_now_ms();
    th_execf(db.conn,
             "SELECT count(skipq.enqueue('test', CASE"
             "  WHEN i %% 70 = 0 THEN '{\"fail_times\": 1, \"txn\": true}'"
             "  WHEN i %% 10 = 0 THEN '{\"fail_times\": 1}'"
             "  WHEN i %% 7 = 0 THEN '{\"txn\": true}'"
             "  ELSE '{}' END::jsonb)) FROM generate_series(1, %lld) i",
             n);
    cr_assert_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE payload ? 'fail_times'"), n_fail);
    cr_assert_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE payload ? 'txn'"), n_txn);
    long long done = th_wait_at_least(db.conn, n, 300000, 100, hs, 2, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 300 s", done, n);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(host_stop(&h[i], 20000), 0, "host %s did not stop cleanly on SIGTERM", h[i].name);

    PGconn *c = db.conn;
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'"), 0);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE"
                              " (SELECT count(*) FROM skipq.job_executions e"
                              "   WHERE e.job_id = j.id AND e.status = 'done') <> 1"),
                 0, "some job has no done execution or more than one");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'running'"), 0);
    /* Planned failures: one retry, then done; everything else: done at once. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.payload ? 'fail_times' AND"
                              " (j.attempts <> 2 OR (SELECT string_agg(e.status, ',' ORDER BY e.attempt)"
                              "   FROM skipq.job_executions e WHERE e.job_id = j.id) IS DISTINCT FROM 'retry,done')"),
                 0, "a fail_times job did not run exactly twice (retry, then done)");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE NOT j.payload ? 'fail_times' AND"
                              " (j.attempts <> 1 OR (SELECT string_agg(e.status, ',' ORDER BY e.attempt)"
                              "   FROM skipq.job_executions e WHERE e.job_id = j.id) IS DISTINCT FROM 'done')"),
                 0, "a job without planned failures did not run exactly once");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), n + n_fail);
    /* The retry waited for its backoff (at least half of backoff_base). */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions r JOIN skipq.job_executions d"
                              "  ON d.job_id = r.job_id AND d.attempt = r.attempt + 1"
                              " WHERE r.status = 'retry' AND d.started_at < r.finished_at + interval '5 ms'"),
                 0, "a retry ran before its backoff had passed");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"
                              " WHERE status = 'retry' AND error NOT LIKE 'planned failure 1 of 1%'"),
                 0, "a retry execution does not carry the handler's error");

    /* Transactional effects: exactly one row per txn job, written by the
     * execution that completed it; the failed first attempts rolled back. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects"), n_txn,
                 "effects rows: %lld, txn jobs: %lld", th_scalar(c, "SELECT count(*) FROM public.testkit_effects"),
                 n_txn);
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.payload ? 'txn' AND"
                              " (SELECT count(*) FROM public.testkit_effects f WHERE f.job_id = j.id) <> 1"),
                 0, "a txn job does not have exactly one effects row");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects f WHERE NOT EXISTS"
                              " (SELECT 1 FROM skipq.job_executions e"
                              "   WHERE e.id = f.execution_id AND e.job_id = f.job_id AND e.status = 'done')"),
                 0, "an effects row does not carry its job's done execution id");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects f JOIN skipq.jobs j ON j.id = f.job_id"
                              " WHERE NOT j.payload ? 'txn'"),
                 0);

    /* One ledger line per execution (handler start), none missing or extra. */
    size_t nl = check_ledger_matches_executions(c, ledger);
    cr_assert_eq((long long)nl, n + n_fail);

    fprintf(stderr, "[hammer] mixed: %lld fail_times jobs, %lld txn jobs; split %s=%lld %s=%lld\n", n_fail, n_txn,
            h[0].name,
            th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE worker LIKE '%s:%%'", h[0].name),
            h[1].name,
            th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE worker LIKE '%s:%%'", h[1].name));
    report(what, n, 16, 2, c, wall);
    for (int i = 0; i < 2; i++)
        th_assert_clean_log(h[i].ini);
}

Test(hammer, mixed_retries_and_transactions, .timeout = 600)
{
    mixed("threads = 8\n", 18, "mixed, 2 hosts x 8 threads");
}

/* The same with 24 threads sharing 3 sessions per host: the outcomes of a
 * claim are recorded together while the next claim runs, and a handler
 * that writes in the job's transaction does so on its thread's own session
 * -- its write and the done marker still commit together, exactly once. */
Test(hammer, mixed_retries_and_transactions_on_shared_sessions, .timeout = 600)
{
    if (th_process_mode())
        cr_skip_test("sessions are shared by threads, not by worker processes");
    mixed("threads = 24\nconnections = 3\nisolation = thread\n", 2 * (3 + 2), "mixed, 2 hosts x 24 threads on 3 sessions");
}

/*
 * [kind test] keep_done = off: two hosts of 8 threads, jobs mixed as in
 * mixed() (planned retries, writes in the job's transaction). Each done
 * job leaves skipq.jobs in the transaction that records it, and still ran
 * exactly once: one done execution per job, carrying its queue and kind,
 * the retried attempt before it kept as it was, each transactional write
 * once and tied to the done execution, and one ledger line per execution.
 */
Test(hammer, done_jobs_that_leave_the_table_ran_exactly_once, .timeout = 600)
{
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(3000, 140);
    th_execf(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/leave.ledger", th_tmpdir());
    const char *extra = "[queue default]\nthreads = 8\nbatch = 16\n"
                        "[kind test]\nkeep_done = off\nbackoff_base = 10ms\nbackoff_cap = 50ms\n";
    struct host h[2] = {{.name = "leave-a"}, {.name = "leave-b"}};
    struct host *hs[2] = {&h[0], &h[1]};
    for (int i = 0; i < 2; i++) {
        h[i].ini = th_host_ini(&db, h[i].name, NULL, ledger, extra);
        host_start(&h[i]);
    }
    cr_assert_geq(th_wait_at_least(db.conn, 18, 60000, 50, hs, 2, CONNECTED_SQL), 18, "hosts did not connect");
    cr_assert_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.kind_options WHERE kind = 'test' AND NOT keep_done"),
                 1, "the hosts did not register keep_done = off");

    PGconn *c = db.conn;
    th_execf(c, "CREATE TABLE public.planned AS SELECT i, CASE"
                "  WHEN i %% 70 = 0 THEN '{\"fail_times\": 1, \"txn\": true}'"
                "  WHEN i %% 10 = 0 THEN '{\"fail_times\": 1}'"
                "  WHEN i %% 7 = 0 THEN '{\"txn\": true}'"
                "  ELSE '{}' END::jsonb AS payload, 0::bigint AS job FROM generate_series(1, %lld) i",
             n);
    int64_t t0 = th_now_ms();
    th_execf(c, "UPDATE public.planned SET job = skipq.enqueue('test', payload)");
    long long left = th_wait_at_least(c, n, 300000, 100, hs, 2,
                                      "SELECT count(*) FROM skipq.job_executions WHERE queue IS NOT NULL");
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(left, n, "only %lld of %lld jobs finished and left after 300 s", left, n);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(host_stop(&h[i], 20000), 0, "host %s did not stop cleanly on SIGTERM", h[i].name);

    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs"), 0, "%lld done job(s) stayed in skipq.jobs",
                 th_scalar(c, "SELECT count(*) FROM skipq.jobs"));
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions WHERE status = 'running'"), 0);
    /* Each job: its attempts in order, the last done and carrying the job's
     * queue and kind, the retried one before it as it was written. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.planned p WHERE"
                              " (SELECT string_agg(e.status || ':' || coalesce(e.queue || '/' || e.kind, '-'), ','"
                              "                    ORDER BY e.attempt)"
                              "   FROM skipq.job_executions e WHERE e.job_id = p.job)"
                              " IS DISTINCT FROM CASE WHEN p.payload ? 'fail_times' THEN 'retry:-,done:default/test'"
                              "                       ELSE 'done:default/test' END"),
                 0, "a job's executions are not (retry, then) one done execution that says whose it was");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), n + n / 10);
    /* Writes in the job's transaction: once per txn job, by its done attempt. */
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.planned p WHERE p.payload ? 'txn' AND"
                              " (SELECT count(*) FROM public.testkit_effects f JOIN skipq.job_executions e"
                              "   ON e.id = f.execution_id AND e.job_id = f.job_id AND e.status = 'done'"
                              "  WHERE f.job_id = p.job) <> 1"),
                 0, "a txn job does not have exactly one effects row from its done execution");
    cr_assert_eq(th_scalar(c, "SELECT count(*) FROM public.testkit_effects"), n / 7);
    /* The statistics count what left: one count row per statement. */
    cr_assert_eq(th_scalar(c, "SELECT coalesce(sum(n), 0) FROM skipq.done_counts WHERE queue = 'default'"
                              " AND kind = 'test'"),
                 n, "done_counts does not add up to the jobs that left");
    size_t nl = check_ledger_matches_executions(c, ledger);
    cr_assert_eq((long long)nl, n + n / 10);
    th_check_invariants(c);
    report("done jobs leave, 2 hosts x 8 threads", n, 16, 2, c, wall);
    for (int i = 0; i < 2; i++)
        th_assert_clean_log(h[i].ini);
}

/* Many threads on few sessions: 64 threads, 4 sessions, 20,000 jobs
 * (scaled), each done exactly once, every invariant holding after. */
Test(hammer, one_host_sixty_four_threads_on_four_sessions, .timeout = 600)
{
    if (th_process_mode())
        cr_skip_test("sessions are shared by threads, not by worker processes");
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(20000, 200);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/pool.ledger", th_tmpdir());
    struct host h = {.name = "pool"};
    h.ini = th_host_ini(&db, h.name, NULL, ledger, "[queue default]\nthreads = 64\nconnections = 4\nisolation = thread\n");
    struct host *hs[] = {&h};
    host_start(&h);
    cr_assert_geq(th_wait_at_least(db.conn, 4 + 2, 60000, 50, hs, 1, CONNECTED_SQL), 4 + 2, "host did not connect");

    int64_t t0 = th_now_ms();
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', CASE WHEN i %% 3 = 0 THEN '{\"sleep_ms\": 2}' ELSE '{}' END::jsonb))"
                      " FROM generate_series(1, %lld) i", n);
    long long done = th_wait_at_least(db.conn, n, 300000, 100, hs, 1, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 300 s", done, n);
    /* Four sessions, not one per thread: no handler here asks for one. */
    cr_expect_eq(th_scalar(db.conn, CONNECTED_SQL), 4 + 2, "the host has more sessions than its 4 and 2");
    /* What `skipq stats` shows of the host: its 64 threads, not its sessions. */
    cr_expect_eq(th_scalar(db.conn, "SELECT threads FROM skipq.hosts WHERE name = 'pool'"), 64);
    cr_assert_eq(host_stop(&h, 20000), 0, "host did not stop cleanly on SIGTERM");

    check_exactly_once(db.conn, n, ledger);
    th_check_invariants(db.conn);
    report("1 host x 64 threads on 4 sessions", n, 64, 1, db.conn, wall);
    th_assert_clean_log(h.ini);
}

/* The load scenario: 100,000 jobs (scaled), 4 host processes x 8 threads
 * claiming in batches, exactly once, and every invariant holds after. */
Test(hammer, load_four_hosts_eight_threads, .timeout = 900)
{
    struct th_db db;
    th_db_new(&db);
    const long long n = th_scaled(100000, 1000);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/load.ledger", th_tmpdir());
    struct host h[4] = {{.name = "load-a"}, {.name = "load-b"}, {.name = "load-c"}, {.name = "load-d"}};
    struct host *hs[4];
    for (int i = 0; i < 4; i++) {
        h[i].ini = th_host_ini(&db, h[i].name, NULL, ledger, "[queue default]\nthreads = 8\nbatch = 20\n");
        hs[i] = &h[i];
        host_start(&h[i]);
    }
    cr_assert_geq(th_wait_at_least(db.conn, 32, 60000, 50, hs, 4, CONNECTED_SQL), 32, "hosts did not connect");

    int64_t t0 = th_now_ms();
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, %lld)", n);
    long long done = th_wait_at_least(db.conn, n, 600000, 200, hs, 4, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 600 s", done, n);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(host_stop(&h[i], 20000), 0, "host %s did not stop cleanly on SIGTERM", h[i].name);

    check_exactly_once(db.conn, n, ledger);
    th_check_invariants(db.conn);
    fprintf(stderr, "[hammer] load split:");
    for (int i = 0; i < 4; i++) {
        long long by_db = th_scalarf(db.conn, "SELECT count(*) FROM skipq.job_executions WHERE worker LIKE '%s:%%'",
                                     h[i].name);
        fprintf(stderr, " %s=%lld", h[i].name, by_db);
        cr_expect_gt(by_db, 0, "host %s claimed no job", h[i].name);
    }
    fprintf(stderr, "\n");
    report("load, 4 hosts x 8 threads, batch 20", n, 32, 4, db.conn, wall);
    for (int i = 0; i < 4; i++)
        th_assert_clean_log(h[i].ini);
}

/* ---- hand-over at enqueue ------------------------------------------------------------ */

struct trickle {
    const char *conninfo;
    int jobs;
    unsigned seed;
    int handed; /* jobs found running under a host's thread before their commit (of those looked at) */
};

/* One application session: single-job enqueues, each in its own
 * transaction, a little apart, so that threads go idle between them; every
 * seventh is rolled back first (its hand-over undone) and enqueued again. */
static void *trickle_main(void *arg)
{
    struct trickle *t = arg;
    PGconn *c = PQconnectdb(t->conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        return (void *)"connect";
    const char *fail = NULL;
    for (int i = 0; i < t->jobs && !fail; i++) {
        bool undo = i % 7 == 3;
        for (int pass = undo ? 0 : 1; pass < 2 && !fail; pass++) {
            PGresult *r = PQexec(c, "BEGIN");
            PQclear(r);
            r = PQexec(c, "SELECT skipq.enqueue('test')");
            if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
                fail = "enqueue";
            /* Every other job is handed over before the commit, where the
             * test can see it (and the rolled-back ones are undone after
             * it); the rest as the commit does it. */
            bool look = pass == 0 || i % 2 == 0;
            if (look) {
                PGresult *sc = PQexec(c, "SET CONSTRAINTS skipq.handoffs_at_commit IMMEDIATE");
                if (PQresultStatus(sc) != PGRES_COMMAND_OK)
                    fail = "set constraints";
                PQclear(sc);
            }
            const char *id[1] = {fail ? "0" : PQgetvalue(r, 0, 0)};
            PGresult *st = PQexecParams(c, "SELECT status FROM skipq.jobs WHERE id = $1::bigint", 1, NULL, id, NULL,
                                        NULL, 0);
            if (!fail && (PQresultStatus(st) != PGRES_TUPLES_OK || PQntuples(st) != 1))
                fail = "read back";
            else if (!fail && look && pass == 1 && strcmp(PQgetvalue(st, 0, 0), "running") == 0)
                t->handed++;
            PQclear(st);
            PQclear(r);
            r = PQexec(c, pass == 0 ? "ROLLBACK" : "COMMIT");
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                fail = "commit";
            PQclear(r);
        }
        usleep((useconds_t)(rand_r(&t->seed) % 1000));
    }
    PQfinish(c);
    return (void *)fail;
}

Test(hammer, single_enqueues_handed_to_idle_threads_run_exactly_once, .timeout = 600)
{
    if (th_process_mode())
        cr_skip_test("worker processes claim; hand-overs go to threads of the host process");
    struct th_db db;
    th_db_new(&db);
    enum { SESSIONS = 4 };
    const int per = th_scaled(600, 50);
    const long long n = (long long)per * SESSIONS;
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/trickle.ledger", th_tmpdir());
    struct host h = {.name = "trickle"};
    h.ini = th_host_ini(&db, h.name, NULL, ledger, "[queue default]\nthreads = 6\n");
    struct host *hs[] = {&h};
    host_start(&h);
    cr_assert_eq(th_wait_at_least(db.conn, 6, 60000, 20, hs, 1,
                                  "SELECT count(*) FROM skipq.waiting WHERE until > clock_timestamp()"),
                 6, "the idle threads did not register as waiting");

    int64_t t0 = th_now_ms();
    pthread_t tid[SESSIONS];
    struct trickle t[SESSIONS];
    for (int i = 0; i < SESSIONS; i++) {
        t[i] = (struct trickle){.conninfo = db.conninfo, .jobs = per, .seed = 7919u * (unsigned)(i + 1)};
        cr_assert_eq(pthread_create(&tid[i], NULL, trickle_main, &t[i]), 0);
    }
    int handed = 0;
    for (int i = 0; i < SESSIONS; i++) {
        void *fail;
        pthread_join(tid[i], &fail);
        cr_assert_null(fail, "session %d: %s failed", i, (const char *)fail);
        handed += t[i].handed;
    }
    long long done = th_wait_at_least(db.conn, n, 300000, 50, hs, 1, DONE_SQL);
    int64_t wall = th_now_ms() - t0;
    cr_assert_eq(done, n, "only %lld of %lld jobs done after 300 s", done, n);
    cr_assert_eq(host_stop(&h, 20000), 0, "host did not stop cleanly on SIGTERM");
    fprintf(stderr, "[hammer] hand-over: %d of the %lld jobs looked at before their commit were handed over\n", handed,
            n / 2);
    cr_assert_gt(handed, 0, "no job was handed over: the path under test never ran");
    check_exactly_once(db.conn, n, ledger);
    report("4 sessions of single enqueues, 1 host x 6 threads", n, 6, 1, db.conn, wall);
    th_assert_clean_log(h.ini);
}
