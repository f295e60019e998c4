/*
 * skipq_bench.c -- skipq-bench: how fast skipq takes jobs in, how fast real
 * `skipq run` hosts drain them, how soon an idle host picks a new job up,
 * and how that compares with what this PostgreSQL can commit at all.
 *
 * Everything runs against a database of its own (skipq_bench_PID), on a
 * throwaway cluster started with scripts/pg.sh unless --db names a server.
 * Hosts are the real binary with the real plugins (noop, and probe for the
 * latency mode), so the figures include everything a deployment pays:
 * process start, connections, the claim/cycle statements, commits.
 *
 * Modes (see bench/README.md for what each measures and why):
 *   enqueue  N jobs four ways: one set-based statement, COPY,
 *            skipq.enqueue_many() arrays, and one skipq.enqueue() per
 *            transaction (the naive baseline)
 *   drain    N noop jobs drained by H hosts x T threads with batch B
 *   latency  enqueue-commit to handler-start delay on an idle host
 *   ceiling  T connections doing single-row autocommit UPDATEs: the commit
 *            rate this server sustains, to put drain's figure in context
 *   aging    drain again with R finished jobs (and their executions) in the
 *            tables, for each R in --aging-rows
 *   churn    (only when asked for) jobs enqueued at a steady rate for M
 *            minutes while hosts drain them and [retention] deletes them;
 *            table and index sizes reported as it goes, to show they level off
 *
 * --isolation process runs every host's group as worker processes ([queue]
 * isolation); bench/isolation.sh alternates it with thread mode.
 *
 * Values always travel as parameters (PQexecParams/PQprepare); only fixed
 * table names and constants are part of the SQL text. Sessions are opened
 * as skipq opens its own (core/common/db.c: search_path pinned from the start),
 * and the SQL names built-ins by schema, as skipq's does (core/host/queue.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/db.h"
#include "skipq/skipq.h"

#ifndef SKIPQ_BENCH_SKIPQ_BIN
#error "SKIPQ_BENCH_SKIPQ_BIN must name the skipq binary"
#endif

#define MODE_ENQUEUE 1u
#define MODE_DRAIN 2u
#define MODE_LATENCY 4u
#define MODE_CEILING 8u
#define MODE_AGING 16u
#define MODE_CHURN 32u
#define MAX_CHURN_REPORTS 1024

#define MAX_HOSTS 64
#define MAX_AGING 16
#define MAX_REPEAT 15
#define COPY_BATCH 10000
#define AGING_CHUNK 500000
#define NAIVE_MAX 2000
#define POLL_MS 50
#define LATENCY_GAP_MS 20

static const struct {
    const char *name;
    unsigned bit;
} mode_names[] = {{"enqueue", MODE_ENQUEUE},
                  {"drain", MODE_DRAIN},
                  {"latency", MODE_LATENCY},
                  {"ceiling", MODE_CEILING},
                  {"aging", MODE_AGING},
                  {"churn", MODE_CHURN}};

/* ---- options ------------------------------------------------------------------- */

static struct {
    const char *db; /* --db, or NULL: start a throwaway cluster */
    unsigned modes;
    long jobs, threads, hosts, batch, latency_jobs, ceiling_seconds, timeout_s;
    long churn_minutes, churn_rate, churn_report_s, churn_retain_s;
    long repeat; /* drains per drain/aging measurement; the median is reported */
    long aging_rows[MAX_AGING];
    int naging;
    const char *json_path;
    bool keep;
    const char *isolation; /* [queue] isolation of every host: thread or process */
    const char *keep_done; /* [kind noop] keep_done of the drain hosts: "on", "off", or NULL (not set) */
    const char *handoff;   /* [host] handoff of the latency host: "on", "off", or NULL (not set) */
} opt = {
    .modes = MODE_ENQUEUE | MODE_DRAIN | MODE_LATENCY | MODE_CEILING | MODE_AGING,
    .jobs = 20000,
    .threads = 4,
    .hosts = 1,
    .batch = 200,
    .latency_jobs = 200,
    .ceiling_seconds = 5,
    .timeout_s = 600,
    .churn_minutes = 5,
    .churn_rate = 5000,
    .churn_report_s = 60,
    .churn_retain_s = 60,
    .aging_rows = {0, 1000000},
    .naging = 2,
    .repeat = 1,
    .isolation = "thread",
};

/* The [queue default] line for --isolation: none in thread mode (the
 * default), so the same INI runs builds older than the key. */
static const char *isolation_line(void)
{
    return strcmp(opt.isolation, "process") == 0 ? "isolation = process\n" : "";
}

/* The [kind noop] section for --keep-done: none unless it is given. */
static const char *keep_done_section(void)
{
    if (!opt.keep_done)
        return "";
    return strcmp(opt.keep_done, "off") == 0 ? "[kind noop]\nkeep_done = off\n" : "[kind noop]\nkeep_done = on\n";
}

/* The [host] line for --handoff: none unless it is given, so the same INI
 * runs builds older than the key. */
static const char *handoff_line(void)
{
    if (!opt.handoff)
        return "";
    return strcmp(opt.handoff, "off") == 0 ? "handoff = off\n" : "handoff = on\n";
}

/* Above every job and execution so far: ids a drain's jobs get are above
 * it. (Jobs that left skipq.jobs as they finished, --keep-done off, are
 * found by their executions.) */
#define HIGHEST_JOB_SQL \
    "SELECT greatest((SELECT coalesce(pg_catalog.max(id), 0) FROM skipq.jobs)," \
    "                (SELECT coalesce(pg_catalog.max(job_id), 0) FROM skipq.job_executions))"

/* ---- global state (for cleanup) --------------------------------------------------- */

static struct {
    pid_t main_pid;
    char dir[128];    /* /tmp/skipq-bench-PID: INI files, logs, ledger */
    char pgdir[160];  /* DIR/pg: the throwaway cluster */
    bool dir_made;
    bool worth_keeping; /* holds host or server logs */
    bool own_cluster; /* pg.sh start succeeded (or may have half-succeeded) */
    char admin_conninfo[2048];
    char dbname[64];
    bool db_created;
    char conninfo[2048]; /* the bench database */
    PGconn *conn;
    pid_t hosts[MAX_HOSTS];
    char host_logs[MAX_HOSTS][256];
    int nhosts;
    bool failed;
} g;

static volatile sig_atomic_t interrupted;

/* ---- results ----------------------------------------------------------------------- */

/* What a drain cost, from the hosts' start to their exit: server-wide WAL,
 * row changes in skipq's two tables, and CPU time of the server's processes
 * (a cluster of our own only) and of the hosts. */
struct cost {
    bool wal, tuples, server_cpu;
    long long wal_records, wal_fpi, wal_bytes;
    long long jobs_ins, jobs_upd, jobs_hot, exec_ins, exec_upd, exec_hot;
    double server_cpu_s, hosts_cpu_s;
};

struct drain_result {
    bool ran;
    long jobs;
    double db_seconds, jobs_per_s;
    double wall_seconds, wall_jobs_per_s;
    long executions, claims;
    double jobs_per_claim;
    bool exactly_once;
    bool hosts_exit_ok;
    /* what else the server did meanwhile (to explain an outlier) */
    long autovacuums, autoanalyzes, checkpoints;
    int vacuum_seen; /* polls that saw a (auto)vacuum running on the bench database */
    struct cost cost; /* what it cost, from host start to host exit */
    int nruns;       /* --repeat: this is the median run of nruns; runs[] are all of them */
    double runs[MAX_REPEAT];
};

static struct {
    char source[128]; /* git describe of the source tree, when it is a checkout */
    double load_start[3], load_end[3];
    char pg_version[128];
    long pg_version_num;
    char sync_commit[32], fsync[16];
    bool enqueue_ran;
    long enq_jobs, naive_jobs;
    double set_s, copy_s, naive_s, many_s;
    struct drain_result drain;
    bool latency_ran;
    long lat_jobs, lat_matched, lat_ledger_lines;
    double lat_min, lat_p50, lat_p95, lat_p99, lat_max, lat_mean, lat_db_p50;
    double lat_call_p50, lat_call_p99; /* from the enqueue call, not its reply */
    double rtt_idle_p50, rtt_busy_p50; /* SELECT 1 after LATENCY_GAP_MS of quiet / back to back */
    bool ceiling_ran;
    long ceiling_tx;
    double ceiling_s, ceiling_tx_per_s;
    bool aging_ran;
    int naging;
    struct {
        long rows;
        double load_s;
        long long jobs_bytes, exec_bytes;
        struct drain_result d;
    } aging[MAX_AGING];
    bool churn_ran;
    int nchurn;
    struct churn_report {
        double at_s;
        long long enqueued, backlog, executions_live, dead_tuples;
        long long jobs_heap, jobs_idx, exec_heap, exec_idx;
        long autovacuums;
    } churn[MAX_CHURN_REPORTS];
    double churn_growth; /* total size, last report vs. the one at half time */
} R;

/* ---- small helpers ------------------------------------------------------------------ */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double secs_since(int64_t t0)
{
    return (double)(now_ns() - t0) / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !interrupted)
        ;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("skipq-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g.failed = true;
    exit(1);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    fputs("skipq-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void check_interrupt(void)
{
    if (interrupted)
        die("interrupted");
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* Print the last `max` bytes of a file to stderr (host and pg.sh logs). */
static void print_tail(const char *path, long max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > max ? size - max : 0, SEEK_SET);
    fprintf(stderr, "---- %s (last %ld bytes) ----\n", path, size > max ? max : size);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of %s ----\n", path);
    fclose(f);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        die("cannot write %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len)
        die("cannot write %s: %s", path, strerror(errno));
    fchmod(fd, mode);
    close(fd);
}

/* ---- SQL helpers: every failure is fatal, with the statement named --------------------- */

static PGresult *query(PGconn *c, const char *sql, int n, const char *const *params)
{
    PGresult *r = n > 0 ? PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0) : PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        const char *msg = PQresultErrorMessage(r);
        die("query failed: %s   in: %s", msg && *msg ? msg : PQerrorMessage(c), sql);
    }
    return r;
}

static void cmd(const char *sql)
{
    PQclear(query(g.conn, sql, 0, NULL));
}

static long long scalar(const char *sql, int n, const char *const *params)
{
    PGresult *r = query(g.conn, sql, n, params);
    long long v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return v;
}

static double scalar_f(const char *sql, int n, const char *const *params)
{
    PGresult *r = query(g.conn, sql, n, params);
    double v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? strtod(PQgetvalue(r, 0, 0), NULL) : NAN;
    PQclear(r);
    return v;
}

static void scalar_s(const char *sql, char *out, size_t outlen)
{
    PGresult *r = query(g.conn, sql, 0, NULL);
    snprintf(out, outlen, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
}

/* A session as skipq opens them (core/common/db.c): search_path pinned to
 * pg_catalog, pg_temp from the start; NULL with the reason in err. */
static PGconn *connect_pinned(const char *conninfo, char *err, size_t errlen)
{
    struct sq_dbparams p;
    if (!sq_dbparams_build(&p, NULL, conninfo, "skipq-bench")) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    PGconn *c = sq_db_connect(&p, err, errlen);
    sq_dbparams_free(&p);
    return c;
}

static PGconn *connect_or_die(const char *conninfo)
{
    char err[1024];
    PGconn *c = connect_pinned(conninfo, err, sizeof err);
    if (!c)
        die("cannot connect to the database: %s", err);
    PQclear(query(c, "SET client_min_messages = warning", 0, NULL));
    return c;
}

/* key='value' with ' and \ escaped, appended to a conninfo string. */
static void append_kv(char *out, size_t outlen, const char *key, const char *val)
{
    size_t o = strlen(out);
    int n = snprintf(out + o, outlen - o, "%s%s='", o ? " " : "", key);
    if (n < 0 || (size_t)n >= outlen - o)
        die("connection string too long");
    o += (size_t)n;
    for (const char *p = val; *p; p++) {
        if (o + 3 >= outlen)
            die("connection string too long");
        if (*p == '\'' || *p == '\\')
            out[o++] = '\\';
        out[o++] = *p;
    }
    if (o + 2 >= outlen)
        die("connection string too long");
    out[o++] = '\'';
    out[o] = '\0';
}

/* The admin conninfo (a URI or key=value string) with dbname replaced. */
static void conninfo_with_db(const char *base, const char *dbname, char *out, size_t outlen)
{
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(base, &errmsg);
    if (!opts)
        die("cannot parse the connection string: %s", errmsg ? errmsg : "out of memory");
    out[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (o->val && *o->val && strcmp(o->keyword, "dbname") != 0)
            append_kv(out, outlen, o->keyword, o->val);
    append_kv(out, outlen, "dbname", dbname);
    PQconninfoFree(opts);
}

/* ---- processes ------------------------------------------------------------------------ */

/* Run argv; its stdout goes to `out` (if not NULL), its stderr to `errlog`.
 * Returns the wait status. */
static int run_capture(char *const argv[], char *out, size_t outlen, const char *errlog)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int e = open(errlog, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (e >= 0)
            dup2(e, 2);
        dup2(pfd[1], 1);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t o = 0;
    char buf[1024];
    ssize_t n;
    while ((n = read(pfd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        for (ssize_t i = 0; i < n; i++)
            if (out && o + 1 < outlen)
                out[o++] = buf[i];
    }
    if (out)
        out[o] = '\0';
    close(pfd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

static pid_t start_host(const char *ini, const char *log)
{
    if (g.nhosts >= MAX_HOSTS)
        die("too many hosts");
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        execl(SKIPQ_BENCH_SKIPQ_BIN, "skipq", "run", "-c", ini, (char *)NULL);
        _exit(127);
    }
    g.worth_keeping = true;
    g.hosts[g.nhosts] = pid;
    snprintf(g.host_logs[g.nhosts], sizeof g.host_logs[0], "%s", log);
    g.nhosts++;
    return pid;
}

/* Die if a host exited on its own (it must run until we stop it). */
static void check_hosts_alive(void)
{
    for (int i = 0; i < g.nhosts; i++) {
        int status;
        if (g.hosts[i] > 0 && waitpid(g.hosts[i], &status, WNOHANG) == g.hosts[i]) {
            g.hosts[i] = 0;
            print_tail(g.host_logs[i], 3000);
            if (WIFEXITED(status))
                die("host %d (%s) exited with status %d before the queue drained", i, g.host_logs[i],
                    WEXITSTATUS(status));
            die("host %d (%s) was killed by signal %d before the queue drained", i, g.host_logs[i],
                WIFSIGNALED(status) ? WTERMSIG(status) : -1);
        }
    }
}

/* SIGTERM every host and wait (SIGKILL after `grace_ms`). True if all exited 0. */
static bool stop_hosts(long grace_ms)
{
    bool ok = true;
    for (int i = 0; i < g.nhosts; i++)
        if (g.hosts[i] > 0)
            kill(g.hosts[i], SIGTERM);
    int64_t deadline = now_ns() + grace_ms * 1000000;
    for (int i = 0; i < g.nhosts; i++) {
        if (g.hosts[i] <= 0)
            continue;
        int status = 0;
        for (;;) {
            pid_t r = waitpid(g.hosts[i], &status, WNOHANG);
            if (r == g.hosts[i] || (r < 0 && errno != EINTR))
                break;
            if (now_ns() > deadline) {
                note("host %d did not stop within %ld ms; killing it", i, grace_ms);
                kill(g.hosts[i], SIGKILL);
                waitpid(g.hosts[i], &status, 0);
                ok = false;
                break;
            }
            sleep_ms(10);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ok = false;
            note("host %d exited with %s %d (log: %s)", i, WIFEXITED(status) ? "status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), g.host_logs[i]);
            print_tail(g.host_logs[i], 2000);
        }
        g.hosts[i] = 0;
    }
    g.nhosts = 0;
    return ok;
}

/* ---- the throwaway cluster and the bench database ------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path) == 0 ? 0 : 0; /* best effort */
}

static void cleanup(void)
{
    if (getpid() != g.main_pid)
        return;
    if (g.nhosts)
        stop_hosts(10000);
    if (g.conn) {
        PQfinish(g.conn);
        g.conn = NULL;
    }
    if (g.db_created) {
        char err[1024];
        PGconn *a = connect_pinned(g.admin_conninfo, err, sizeof err);
        if (a) {
            char *ident = PQescapeIdentifier(a, g.dbname, strlen(g.dbname));
            char sql[256];
            snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", ident ? ident : g.dbname);
            PGresult *r = PQexec(a, sql);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                note("could not drop database %s: %s", g.dbname, PQerrorMessage(a));
            PQclear(r);
            PQfreemem(ident);
        } else {
            note("could not connect to drop database %s: %s", g.dbname, err);
        }
        PQfinish(a);
        g.db_created = false;
    }
    if (g.own_cluster && (g.failed || opt.keep)) {
        char src[256], dst[256];
        snprintf(src, sizeof src, "%s/postgres.log", g.pgdir);
        snprintf(dst, sizeof dst, "%s/postgres.log", g.dir);
        rename(src, dst);
    }
    if (g.own_cluster) {
        char script[512], log[256];
        snprintf(script, sizeof script, "%s/scripts/pg.sh", SKIPQ_BENCH_SOURCE_DIR);
        snprintf(log, sizeof log, "%s/pg.sh.log", g.dir);
        char *argv[] = {"bash", script, "destroy", g.pgdir, NULL};
        int st = run_capture(argv, NULL, 0, log);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            note("pg.sh destroy %s failed", g.pgdir);
            print_tail(log, 2000);
        }
        g.own_cluster = false;
    }
    if (g.dir_made) {
        if ((g.failed && g.worth_keeping) || opt.keep) {
            note("logs and configuration kept in %s", g.dir);
        } else {
            nftw(g.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        }
    }
}

static void start_cluster(void)
{
    char script[512], log[256], out[2048];
    snprintf(script, sizeof script, "%s/scripts/pg.sh", SKIPQ_BENCH_SOURCE_DIR);
    snprintf(log, sizeof log, "%s/pg.sh.log", g.dir);
    snprintf(g.pgdir, sizeof g.pgdir, "%s/pg", g.dir);
    srand((unsigned)(getpid() ^ (unsigned)time(NULL)));
    for (int attempt = 0; attempt < 5; attempt++) {
        char port[16];
        snprintf(port, sizeof port, "%d", 56000 + rand() % 1000);
        char *argv[] = {"bash", script, "start", g.pgdir, port, NULL};
        note("starting a throwaway PostgreSQL in %s on port %s", g.pgdir, port);
        g.own_cluster = true; /* destroy whatever it left, even on failure */
        g.worth_keeping = true;
        int st = run_capture(argv, out, sizeof out, log);
        char *nl = strchr(out, '\n');
        if (nl)
            *nl = '\0';
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && out[0]) {
            snprintf(g.admin_conninfo, sizeof g.admin_conninfo, "%s", out);
            return;
        }
        note("pg.sh start failed on port %s; trying another", port);
    }
    print_tail(log, 3000);
    die("could not start a throwaway PostgreSQL (log: %s)", log);
}

/* Which skipq was measured: `git describe --always --dirty` of the source
 * tree, when it is a git checkout. */
static void describe_source(void)
{
    char *argv[] = {"git", "-C", SKIPQ_BENCH_SOURCE_DIR, "describe", "--always", "--dirty", NULL};
    int st = run_capture(argv, R.source, sizeof R.source, "/dev/null");
    char *nl = strchr(R.source, '\n');
    if (nl)
        *nl = '\0';
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        R.source[0] = '\0';
}

static void create_database(void)
{
    snprintf(g.dbname, sizeof g.dbname, "skipq_bench_%d", (int)getpid());
    PGconn *a = connect_or_die(g.admin_conninfo);
    char *ident = PQescapeIdentifier(a, g.dbname, strlen(g.dbname));
    if (!ident)
        die("out of memory");
    char sql[256];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", ident);
    PQfreemem(ident);
    PQclear(query(a, sql, 0, NULL));
    g.db_created = true;
    PQfinish(a);
    conninfo_with_db(g.admin_conninfo, g.dbname, g.conninfo, sizeof g.conninfo);
    g.conn = connect_or_die(g.conninfo);
    char err[SKIPQ_ERRBUF_SIZE];
    int applied = 0;
    if (skipq_migrate(g.conn, &applied, err, sizeof err) != SKIPQ_OK)
        die("skipq_migrate: %s", err);
    scalar_s("SELECT pg_catalog.current_setting('server_version')", R.pg_version, sizeof R.pg_version);
    R.pg_version_num =
        (long)scalar("SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4", 0, NULL);
    scalar_s("SELECT pg_catalog.current_setting('synchronous_commit')", R.sync_commit, sizeof R.sync_commit);
    scalar_s("SELECT pg_catalog.current_setting('fsync')", R.fsync, sizeof R.fsync);
    note("database %s, PostgreSQL %s, synchronous_commit=%s, fsync=%s, %d migration(s) applied", g.dbname,
         R.pg_version, R.sync_commit, R.fsync, applied);
}

/* ---- shared pieces of the modes ---------------------------------------------------------- */

#define AUTOVACUUMS_SQL \
    "SELECT coalesce(pg_catalog.sum(autovacuum_count), 0) FROM pg_catalog.pg_stat_user_tables" \
    " WHERE schemaname OPERATOR(pg_catalog.=) 'skipq'"
#define AUTOANALYZES_SQL \
    "SELECT coalesce(pg_catalog.sum(autoanalyze_count), 0) FROM pg_catalog.pg_stat_user_tables" \
    " WHERE schemaname OPERATOR(pg_catalog.=) 'skipq'"
#define DAY_AGO "(pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.interval '1 day')"

static const char ENQUEUE_SET_SQL[] =
    "SELECT pg_catalog.count(skipq.enqueue($2::pg_catalog.text))"
    "  FROM pg_catalog.generate_series(1, $1::pg_catalog.int4)";

static void enqueue_set_based(long n, const char *kind)
{
    char a[32];
    snprintf(a, sizeof a, "%ld", n);
    const char *p[2] = {a, kind};
    long long got = scalar(ENQUEUE_SET_SQL, 2, p);
    if (got != n)
        die("set-based enqueue returned %lld, expected %ld", got, n);
}

/* Is any job pending or running? Also counts, in *vacuums (if not NULL),
 * polls that saw a VACUUM running in this database. Both EXISTS stop at the
 * first row of a partial index, so polling costs the server next to nothing. */
static bool queue_busy(int *vacuums)
{
    PGresult *r = query(g.conn,
                        "SELECT (EXISTS (SELECT 1 FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'pending')"
                        "     OR EXISTS (SELECT 1 FROM skipq.jobs WHERE status OPERATOR(pg_catalog.=) 'running'))"
                        "         ::pg_catalog.int4,"
                        "       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_progress_vacuum"
                        "         WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())",
                        0, NULL);
    bool busy = PQgetvalue(r, 0, 0)[0] == '1';
    if (vacuums && atoi(PQgetvalue(r, 0, 1)) > 0)
        (*vacuums)++;
    PQclear(r);
    return busy;
}

/* Poll every POLL_MS until no job is pending or running. */
static void wait_idle(const char *what, int *vacuums)
{
    int64_t deadline = now_ns() + (int64_t)opt.timeout_s * 1000000000;
    while (queue_busy(vacuums)) {
        check_interrupt();
        check_hosts_alive();
        if (now_ns() > deadline)
            die("%s: jobs still pending or running after %ld s (--timeout)", what, opt.timeout_s);
        sleep_ms(POLL_MS);
    }
}

static long long checkpoints_done(void)
{
    return scalar("SELECT checkpoints_timed OPERATOR(pg_catalog.+) checkpoints_req FROM pg_catalog.pg_stat_bgwriter", 0,
                  NULL);
}

/*
 * Best effort (it needs superuser or pg_checkpoint): start a measurement
 * from a fresh checkpoint, so one that the set-up's writes made due does not
 * land in the middle of the run. Returns the checkpoint counter once this
 * checkpoint shows in it (the checkpointer reports it a moment after the
 * command returns), so the run counts only checkpoints that happened during it.
 */
static long long checkpoint(void)
{
    long long before = checkpoints_done();
    PGresult *r = PQexec(g.conn, "CHECKPOINT");
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    long long now = checkpoints_done();
    for (int i = 0; ok && now == before && i < 200; i++) {
        sleep_ms(10);
        now = checkpoints_done();
    }
    return now;
}

/*
 * The drain measurement: enqueue n noop jobs, start the hosts, wait until
 * the queue is empty, stop them, and read the figures from job_executions.
 * Only jobs enqueued here (id above the table's max id before) are counted.
 */
/* ---- what a drain costs ------------------------------------------------------------------- */

/* CPU seconds of a process from /proc/PID/stat (with its waited-for
 * children's when `children`), and its parent; false when it is gone. */
static bool proc_cpu(pid_t pid, bool children, double *cpu_s, pid_t *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close = strrchr(buf, ')');
    int parent;
    unsigned long long ut, st;
    long long cut, cst;
    /* after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
    if (!close || sscanf(close + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &parent, &ut,
                         &st, &cut, &cst) != 5)
        return false;
    double ticks = (double)sysconf(_SC_CLK_TCK);
    *cpu_s = (double)(ut + st) / ticks + (children ? (double)(cut + cst) / ticks : 0);
    *ppid = parent;
    return true;
}

/* The CPU time of the throwaway server so far: the postmaster with the
 * backends it has reaped, and every process it runs now. */
static bool server_cpu(double *total)
{
    char path[256], line[32];
    snprintf(path, sizeof path, "%s/data/postmaster.pid", g.pgdir);
    FILE *f = g.own_cluster ? fopen(path, "r") : NULL;
    if (!f)
        return false;
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    pid_t pm = ok ? (pid_t)atoi(line) : 0, parent;
    double cpu;
    if (pm <= 0 || !proc_cpu(pm, true, total, &parent))
        return false;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end == '\0' && pid > 0 && pid != pm && proc_cpu((pid_t)pid, false, &cpu, &parent) && parent == pm)
            *total += cpu;
    }
    if (d)
        closedir(d);
    return true;
}

static double children_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

/* The counters now. Row counts need PostgreSQL 15's explicit flush of this
 * session's own pending statistics (its enqueue); the hosts' sessions flush
 * theirs when they end. */
static void cost_snap(struct cost *c)
{
    memset(c, 0, sizeof *c);
    c->hosts_cpu_s = children_cpu();
    c->server_cpu = server_cpu(&c->server_cpu_s);
    if (R.pg_version_num >= 150000) {
        PQclear(query(g.conn, "SELECT pg_catalog.pg_stat_force_next_flush()", 0, NULL));
        PQclear(query(g.conn, "SELECT pg_catalog.pg_stat_clear_snapshot()", 0, NULL));
        PGresult *r = query(g.conn,
                            "SELECT (SELECT wal_records FROM pg_catalog.pg_stat_wal), (SELECT wal_fpi FROM"
                            " pg_catalog.pg_stat_wal), (SELECT wal_bytes FROM pg_catalog.pg_stat_wal),"
                            " t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, e.n_tup_ins, e.n_tup_upd, e.n_tup_hot_upd"
                            "  FROM pg_catalog.pg_stat_user_tables t, pg_catalog.pg_stat_user_tables e"
                            " WHERE t.relid OPERATOR(pg_catalog.=) 'skipq.jobs'::pg_catalog.regclass"
                            "   AND e.relid OPERATOR(pg_catalog.=) 'skipq.job_executions'::pg_catalog.regclass",
                            0, NULL);
        long long *v[] = {&c->wal_records, &c->wal_fpi, &c->jobs_ins, &c->jobs_upd, &c->jobs_hot,
                          &c->exec_ins,    &c->exec_upd, &c->exec_hot};
        c->wal = c->tuples = PQntuples(r) == 1;
        for (int i = 0, col = 0; c->wal && col < 9; col++) {
            if (col == 2)
                c->wal_bytes = (long long)strtod(PQgetvalue(r, 0, col), NULL); /* numeric */
            else
                *v[i++] = atoll(PQgetvalue(r, 0, col));
        }
        PQclear(r);
    }
}

static void cost_since(struct cost *c, const struct cost *before)
{
    struct cost now;
    cost_snap(&now);
    now.wal = now.wal && before->wal;
    now.tuples = now.tuples && before->tuples;
    now.server_cpu = now.server_cpu && before->server_cpu;
    now.wal_records -= before->wal_records;
    now.wal_fpi -= before->wal_fpi;
    now.wal_bytes -= before->wal_bytes;
    now.jobs_ins -= before->jobs_ins;
    now.jobs_upd -= before->jobs_upd;
    now.jobs_hot -= before->jobs_hot;
    now.exec_ins -= before->exec_ins;
    now.exec_upd -= before->exec_upd;
    now.exec_hot -= before->exec_hot;
    now.server_cpu_s -= before->server_cpu_s;
    now.hosts_cpu_s -= before->hosts_cpu_s;
    *c = now;
}

static void drain_run(struct drain_result *out, long n, const char *label)
{
    memset(out, 0, sizeof *out);
    out->jobs = n;
    long long base = scalar(HIGHEST_JOB_SQL, 0, NULL);
    enqueue_set_based(n, "noop");
    cmd("VACUUM ANALYZE skipq.jobs");
    long long ck0 = checkpoint();

    char ini[256], body[4096];
    snprintf(ini, sizeof ini, "%s/%s.ini", g.dir, label);
    int len = snprintf(body, sizeof body,
                       "[database]\nurl = %s\n\n"
                       "[host]\npoll_interval = 20ms\nlog_level = warn\nshutdown_grace = 5s\n\n"
                       "[plugin noop]\npath = %s/noop.so\n\n"
                       "[queue default]\nthreads = %ld\nbatch = %ld\n%s%s",
                       g.conninfo, SKIPQ_BENCH_PLUGIN_DIR, opt.threads, opt.batch, isolation_line(),
                       keep_done_section());
    if (len < 0 || (size_t)len >= sizeof body)
        die("INI too long");
    write_file(ini, body, 0600);

    long long av0 = scalar(AUTOVACUUMS_SQL, 0, NULL), aa0 = scalar(AUTOANALYZES_SQL, 0, NULL);
    struct cost c0;
    cost_snap(&c0);
    int64_t t0 = now_ns();
    for (long h = 0; h < opt.hosts; h++) {
        char log[256];
        snprintf(log, sizeof log, "%s/%s-host%ld.log", g.dir, label, h);
        start_host(ini, log);
    }
    wait_idle(label, &out->vacuum_seen);
    out->wall_seconds = secs_since(t0);
    out->wall_jobs_per_s = (double)n / out->wall_seconds;
    out->hosts_exit_ok = stop_hosts(30000);
    cost_since(&out->cost, &c0);
    out->checkpoints = checkpoints_done() - ck0;
    PQclear(query(g.conn, "SELECT pg_catalog.pg_stat_clear_snapshot()", 0, NULL));
    out->autovacuums = scalar(AUTOVACUUMS_SQL, 0, NULL) - av0;
    out->autoanalyzes = scalar(AUTOANALYZES_SQL, 0, NULL) - aa0;

    char b[32];
    snprintf(b, sizeof b, "%lld", base);
    const char *p[1] = {b};
    PGresult *r = query(g.conn,
                        "SELECT pg_catalog.count(*), pg_catalog.count(DISTINCT job_id),"
                        "       pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'done'),"
                        "       extract(epoch FROM pg_catalog.max(finished_at) OPERATOR(pg_catalog.-)"
                        "                          pg_catalog.min(started_at)),"
                        "       pg_catalog.count(DISTINCT (worker, started_at))"
                        "  FROM skipq.job_executions WHERE job_id OPERATOR(pg_catalog.>) $1::pg_catalog.int8",
                        1, p);
    long execs = atol(PQgetvalue(r, 0, 0)), distinct = atol(PQgetvalue(r, 0, 1));
    long done_execs = atol(PQgetvalue(r, 0, 2));
    out->db_seconds = PQgetisnull(r, 0, 3) ? NAN : strtod(PQgetvalue(r, 0, 3), NULL);
    out->claims = atol(PQgetvalue(r, 0, 4));
    PQclear(r);
    /* A job that left the table as it finished counts as a done job of one
     * attempt when its one execution is the done one that says so. */
    r = query(g.conn,
              "SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'done'"
              "                                                         AND attempts OPERATOR(pg_catalog.=) 1)"
              "  FROM skipq.jobs WHERE id OPERATOR(pg_catalog.>) $1::pg_catalog.int8",
              1, p);
    long jobs = atol(PQgetvalue(r, 0, 0)), jobs_done = atol(PQgetvalue(r, 0, 1));
    PQclear(r);
    long left = scalar("SELECT pg_catalog.count(*) FROM skipq.job_executions"
                       " WHERE job_id OPERATOR(pg_catalog.>) $1::pg_catalog.int8 AND queue IS NOT NULL"
                       "   AND status OPERATOR(pg_catalog.=) 'done' AND attempt OPERATOR(pg_catalog.=) 1",
                       1, p);
    jobs += left;
    jobs_done += left;
    out->executions = execs;
    out->exactly_once = jobs == n && jobs_done == n && execs == n && distinct == n && done_execs == n;
    if (!out->exactly_once)
        note("%s: NOT exactly once: %ld jobs (%ld done on attempt 1), %ld executions of %ld jobs, %ld done", label,
             jobs, jobs_done, execs, distinct, done_execs);
    out->jobs_per_s = out->db_seconds > 0 ? (double)n / out->db_seconds : NAN;
    out->jobs_per_claim = out->claims > 0 ? (double)execs / (double)out->claims : NAN;
    out->ran = true;
}

static int cmp_drain(const void *a, const void *b)
{
    double x = ((const struct drain_result *)a)->jobs_per_s, y = ((const struct drain_result *)b)->jobs_per_s;
    return x < y ? -1 : x > y;
}

/* --repeat: the same drain opt.repeat times over the same history (the jobs
 * of a run are deleted, with their executions, before the next), reporting
 * the median run. One drain of 20,000 jobs lasts about half a second, so a
 * single figure swings with whatever else the machine does at that moment. */
static void drain_measure(struct drain_result *out, long n, const char *label)
{
    static struct drain_result all[MAX_REPEAT];
    long long base = scalar(HIGHEST_JOB_SQL, 0, NULL);
    char b[32];
    snprintf(b, sizeof b, "%lld", base);
    const char *p[1] = {b};
    bool every = true;
    for (long i = 0; i < opt.repeat; i++) {
        if (i > 0) {
            PQclear(query(g.conn, "DELETE FROM skipq.jobs WHERE id OPERATOR(pg_catalog.>) $1::pg_catalog.int8", 1, p));
            PQclear(query(g.conn, "DELETE FROM skipq.job_executions WHERE job_id OPERATOR(pg_catalog.>) $1::pg_catalog.int8",
                          1, p)); /* of jobs that left the table */
            cmd("VACUUM skipq.job_executions");
        }
        drain_run(&all[i], n, label);
        every = every && all[i].exactly_once;
        if (opt.repeat > 1)
            note("%s: run %ld of %ld: %.0f jobs/s", label, i + 1, opt.repeat, all[i].jobs_per_s);
    }
    double runs[MAX_REPEAT];
    for (long i = 0; i < opt.repeat; i++)
        runs[i] = all[i].jobs_per_s;
    qsort(all, (size_t)opt.repeat, sizeof all[0], cmp_drain);
    *out = all[(opt.repeat - 1) / 2];
    out->nruns = (int)opt.repeat;
    memcpy(out->runs, runs, sizeof runs);
    out->exactly_once = every;
}

static void print_drain_line(const char *label, const struct drain_result *d)
{
    printf("%s: %ld jobs, %ld host(s) x %ld thread(s), batch %ld: %.0f jobs/s (db %.3f s); wall %.3f s from host "
           "start (%.0f jobs/s); %ld claim statements (%.1f jobs each); exactly once: %s%s\n",
           label, d->jobs, opt.hosts, opt.threads, opt.batch, d->jobs_per_s, d->db_seconds, d->wall_seconds,
           d->wall_jobs_per_s, d->claims, d->jobs_per_claim, d->exactly_once ? "yes" : "NO",
           d->hosts_exit_ok ? "" : " (a host did not exit cleanly)");
    if (d->nruns > 1) {
        printf("    median of %d runs (jobs/s, in order):", d->nruns);
        for (int i = 0; i < d->nruns; i++)
            printf(" %.0f", d->runs[i]);
        printf("\n");
    }
    const struct cost *c = &d->cost;
    double per = d->jobs > 0 ? 1.0 / (double)d->jobs : NAN;
    printf("    per job: hosts' CPU %.1f us", c->hosts_cpu_s * 1e6 * per);
    if (c->server_cpu)
        printf(", server CPU %.1f us", c->server_cpu_s * 1e6 * per);
    if (c->wal)
        printf(", WAL %.0f bytes in %.2f records (%.3f full pages)", (double)c->wal_bytes * per,
               (double)c->wal_records * per, (double)c->wal_fpi * per);
    if (c->tuples)
        printf("; rows: jobs %.2f inserted %.2f updated (%.0f %% HOT), executions %.2f inserted %.2f updated "
               "(%.0f %% HOT)",
               (double)c->jobs_ins * per, (double)c->jobs_upd * per,
               c->jobs_upd ? 100.0 * (double)c->jobs_hot / (double)c->jobs_upd : 0.0, (double)c->exec_ins * per,
               (double)c->exec_upd * per, c->exec_upd ? 100.0 * (double)c->exec_hot / (double)c->exec_upd : 0.0);
    printf("\n");
    if (d->autovacuums || d->autoanalyzes || d->checkpoints || d->vacuum_seen)
        printf("    meanwhile on the server: %ld autovacuum(s), %ld autoanalyze(s) of skipq tables finished, "
               "%ld checkpoint(s), a vacuum running at %d of the %d ms polls\n",
               d->autovacuums, d->autoanalyzes, d->checkpoints, d->vacuum_seen, POLL_MS);
    fflush(stdout);
}

/* ---- mode: enqueue ------------------------------------------------------------------------ */

/* The bulk path as a client uses it: libskipq's skipq_copy_*, one COPY
 * statement for all n jobs (each checked by the library on the way). */
static void copy_enqueue(long n)
{
    char err[SKIPQ_ERRBUF_SIZE];
    skipq_copy *cp = NULL;
    if (skipq_copy_begin(g.conn, &cp, err, sizeof err) != SKIPQ_OK)
        die("skipq_copy_begin: %s", err);
    for (long i = 0; i < n; i++)
        if (skipq_copy_add(cp, "noop", "{}", NULL, err, sizeof err) != SKIPQ_OK)
            die("skipq_copy_add: %s", err);
    int64_t added = 0;
    if (skipq_copy_end(cp, &added, err, sizeof err) != SKIPQ_OK || added != n)
        die("skipq_copy_end: %s (%" PRId64 " of %ld jobs)", err, added, n);
}

/* skipq.enqueue_many() as a client uses it: JSON arrays of 10,000 jobs
 * built on the client, all in one transaction. */
static void enqueue_many_batches(long n)
{
    cmd("BEGIN");
    size_t cap = (size_t)COPY_BATCH * 40 + 16;
    char *buf = malloc(cap);
    if (!buf)
        die("out of memory");
    for (long done = 0; done < n;) {
        long k = n - done < COPY_BATCH ? n - done : COPY_BATCH;
        size_t o = 0;
        buf[o++] = '[';
        for (long i = 0; i < k; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s{\"kind\":\"noop\",\"payload\":{}}", i ? "," : "");
        buf[o++] = ']';
        buf[o] = '\0';
        char err[SKIPQ_ERRBUF_SIZE];
        int64_t added = 0;
        if (skipq_enqueue_many(g.conn, buf, &added, err, sizeof err) != SKIPQ_OK || added != k)
            die("enqueue_many: %s", err);
        done += k;
        check_interrupt();
    }
    free(buf);
    cmd("COMMIT");
}

static void mode_enqueue(void)
{
    long n = opt.jobs;

    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    int64_t t0 = now_ns();
    enqueue_set_based(n, "noop");
    R.set_s = secs_since(t0);

    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    t0 = now_ns();
    copy_enqueue(n);
    R.copy_s = secs_since(t0);
    if (scalar("SELECT pg_catalog.count(*) FROM skipq.jobs", 0, NULL) != n)
        die("COPY enqueue: wrong number of rows");

    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    t0 = now_ns();
    enqueue_many_batches(n);
    R.many_s = secs_since(t0);
    if (scalar("SELECT pg_catalog.count(*) FROM skipq.jobs", 0, NULL) != n)
        die("enqueue_many: wrong number of rows");

    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    long naive = n < NAIVE_MAX ? n : NAIVE_MAX;
    PGresult *r = PQprepare(g.conn, "bench_enqueue", "SELECT skipq.enqueue($1::pg_catalog.text)", 1, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        die("prepare: %s", PQerrorMessage(g.conn));
    PQclear(r);
    const char *p[1] = {"noop"};
    t0 = now_ns();
    for (long i = 0; i < naive; i++) {
        r = PQexecPrepared(g.conn, "bench_enqueue", 1, p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            die("enqueue: %s", PQerrorMessage(g.conn));
        PQclear(r);
        if ((i & 255) == 0)
            check_interrupt();
    }
    R.naive_s = secs_since(t0);
    if (scalar("SELECT pg_catalog.count(*) FROM skipq.jobs", 0, NULL) != naive)
        die("naive enqueue: wrong number of rows");
    cmd("TRUNCATE skipq.jobs, skipq.job_executions");

    R.enq_jobs = n;
    R.naive_jobs = naive;
    R.enqueue_ran = true;
    printf("enqueue: %ld jobs: set-based %.0f jobs/s (%.3f s); COPY %.0f jobs/s (%.3f s); "
           "enqueue_many %.0f jobs/s (%.3f s); one per transaction %.0f jobs/s (%ld jobs, %.3f s)\n",
           n, (double)n / R.set_s, R.set_s, (double)n / R.copy_s, R.copy_s, (double)n / R.many_s, R.many_s,
           (double)naive / R.naive_s, naive, R.naive_s);
    fflush(stdout);
}

/* ---- mode: drain -------------------------------------------------------------------------- */

static void mode_drain(void)
{
    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    drain_measure(&R.drain, opt.jobs, "drain");
    print_drain_line("drain", &R.drain);
    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
}

/* ---- mode: latency ------------------------------------------------------------------------ */

struct lat_rec {
    int64_t id;
    int64_t called_ns; /* just before the enqueue was sent */
    int64_t commit_ns; /* its reply read: the commit */
};

static int cmp_rec(const void *a, const void *b)
{
    int64_t x = ((const struct lat_rec *)a)->id, y = ((const struct lat_rec *)b)->id;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double percentile(const double *v, long n, double pct)
{
    if (n <= 0)
        return NAN;
    long k = (long)ceil(pct / 100.0 * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1];
}

/*
 * The floor under the latency figure: one trivial round trip to a server
 * session that has been idle for the same gap as the probe jobs, and the
 * same back to back. Waking an idle backend (and, on a virtual machine, the
 * CPU it sleeps on) is part of every wake-up; a job start needs at least
 * one such round trip, the claim.
 */
static void measure_rtt(void)
{
    enum { N = 200 };
    static double idle[N], busy[N];
    PGconn *c = connect_or_die(g.conninfo);
    PQclear(query(c, "SELECT 1", 0, NULL));
    for (int i = 0; i < N; i++) {
        sleep_ms(LATENCY_GAP_MS);
        int64_t t0 = now_ns();
        PQclear(query(c, "SELECT 1", 0, NULL));
        idle[i] = (double)(now_ns() - t0) / 1e6;
    }
    for (int i = 0; i < N; i++) {
        int64_t t0 = now_ns();
        PQclear(query(c, "SELECT 1", 0, NULL));
        busy[i] = (double)(now_ns() - t0) / 1e6;
    }
    PQfinish(c);
    qsort(idle, N, sizeof idle[0], cmp_double);
    qsort(busy, N, sizeof busy[0], cmp_double);
    R.rtt_idle_p50 = percentile(idle, N, 50);
    R.rtt_busy_p50 = percentile(busy, N, 50);
}

static void mode_latency(void)
{
    long n = opt.latency_jobs;
    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    char ini[256], ledger[256], log[256], body[4096];
    snprintf(ini, sizeof ini, "%s/latency.ini", g.dir);
    snprintf(ledger, sizeof ledger, "%s/latency-ledger.txt", g.dir);
    snprintf(log, sizeof log, "%s/latency-host.log", g.dir);
    unlink(ledger);
    int len = snprintf(body, sizeof body,
                       "[database]\nurl = %s\n\n"
                       "[host]\npoll_interval = 1s\nlog_level = warn\nshutdown_grace = 5s\n%s\n"
                       "[plugin probe]\npath = %s/probe.so\nledger = %s\n\n"
                       "[queue default]\nthreads = %ld\nbatch = 1\nkinds = probe\n%s",
                       g.conninfo, handoff_line(), SKIPQ_BENCH_PLUGIN_DIR, ledger, opt.threads, isolation_line());
    if (len < 0 || (size_t)len >= sizeof body)
        die("INI too long");
    write_file(ini, body, 0600);
    start_host(ini, log);

    /* Wait for the workers' connections (and the heartbeat's), then 1 s so
     * every thread has found the queue empty and gone to sleep. */
    char t[32];
    snprintf(t, sizeof t, "%ld", opt.threads);
    const char *tp[1] = {t};
    int64_t deadline = now_ns() + 30 * 1000000000LL;
    while (!scalar("SELECT (pg_catalog.count(*) OPERATOR(pg_catalog.>=) $1::pg_catalog.int4)::pg_catalog.int4"
                   "  FROM pg_catalog.pg_stat_activity"
                   " WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()"
                   "   AND application_name OPERATOR(pg_catalog.=) 'skipq'",
                   1, tp)) {
        check_interrupt();
        check_hosts_alive();
        if (now_ns() > deadline)
            die("latency: the host did not connect within 30 s");
        sleep_ms(20);
    }
    sleep_ms(1000);
    check_hosts_alive();

    struct lat_rec *recs = calloc((size_t)n, sizeof *recs);
    if (!recs)
        die("out of memory");
    PGresult *r = PQprepare(g.conn, "bench_enqueue_probe", "SELECT skipq.enqueue($1::pg_catalog.text)", 1, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        die("prepare: %s", PQerrorMessage(g.conn));
    PQclear(r);
    const char *p[1] = {"probe"};
    int64_t start = now_ns();
    for (long i = 0; i < n; i++) {
        int64_t at = start + i * (int64_t)LATENCY_GAP_MS * 1000000;
        struct timespec ts = {(time_t)(at / 1000000000), (long)(at % 1000000000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !interrupted)
            ;
        check_interrupt();
        int64_t called = now_ns();
        r = PQexecPrepared(g.conn, "bench_enqueue_probe", 1, p, NULL, NULL, 0);
        int64_t committed = now_ns();
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            die("enqueue: %s", PQerrorMessage(g.conn));
        recs[i].id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        recs[i].called_ns = called;
        recs[i].commit_ns = committed;
        PQclear(r);
    }
    wait_idle("latency", NULL);
    stop_hosts(30000);

    qsort(recs, (size_t)n, sizeof *recs, cmp_rec);
    double *lat = calloc((size_t)n, sizeof *lat), *from_call = calloc((size_t)n, sizeof *from_call);
    bool *seen = calloc((size_t)n, sizeof *seen);
    if (!lat || !from_call || !seen)
        die("out of memory");
    FILE *f = fopen(ledger, "r");
    if (!f)
        die("latency: no ledger %s: %s", ledger, strerror(errno));
    long matched = 0, lines = 0;
    int64_t id, ns;
    while (fscanf(f, "%" SCNd64 " %" SCNd64, &id, &ns) == 2) {
        lines++;
        struct lat_rec key = {.id = id};
        struct lat_rec *hit = bsearch(&key, recs, (size_t)n, sizeof *recs, cmp_rec);
        if (!hit || seen[hit - recs])
            continue; /* a job not enqueued here, or a second run of one */
        seen[hit - recs] = true;
        from_call[matched] = (double)(ns - hit->called_ns) / 1e6;
        lat[matched++] = (double)(ns - hit->commit_ns) / 1e6;
    }
    fclose(f);
    qsort(lat, (size_t)matched, sizeof *lat, cmp_double);
    qsort(from_call, (size_t)matched, sizeof *from_call, cmp_double);
    R.lat_call_p50 = percentile(from_call, matched, 50);
    R.lat_call_p99 = percentile(from_call, matched, 99);
    free(from_call);
    double sum = 0;
    for (long i = 0; i < matched; i++)
        sum += lat[i];
    R.lat_jobs = n;
    R.lat_matched = matched;
    R.lat_ledger_lines = lines;
    R.lat_min = matched ? lat[0] : NAN;
    R.lat_p50 = percentile(lat, matched, 50);
    R.lat_p95 = percentile(lat, matched, 95);
    R.lat_p99 = percentile(lat, matched, 99);
    R.lat_max = matched ? lat[matched - 1] : NAN;
    R.lat_mean = matched ? sum / (double)matched : NAN;
    /* Cross-check on the database's clock: the attempt's start (read by the
     * claim) minus the enqueue transaction's start. */
    R.lat_db_p50 = scalar_f("SELECT 1000 OPERATOR(pg_catalog.*) pg_catalog.percentile_cont(0.5) WITHIN GROUP"
                            " (ORDER BY extract(epoch FROM e.started_at OPERATOR(pg_catalog.-) j.created_at))"
                            "  FROM skipq.jobs j JOIN skipq.job_executions e ON e.job_id OPERATOR(pg_catalog.=) j.id"
                            " WHERE j.kind OPERATOR(pg_catalog.=) 'probe'",
                            0, NULL);
    R.latency_ran = true;
    free(lat);
    free(seen);
    free(recs);
    cmd("TRUNCATE skipq.jobs, skipq.job_executions");
    printf("latency: %ld jobs %d ms apart, 1 host x %ld thread(s), batch 1, poll_interval 1s: "
           "p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms (min %.1f, mean %.1f; db-clock p50 %.1f ms; "
           "from the enqueue call p50 %.1f ms, p99 %.1f ms); matched %ld/%ld, ledger lines %ld\n",
           n, LATENCY_GAP_MS, opt.threads, R.lat_p50, R.lat_p95, R.lat_p99, R.lat_max, R.lat_min, R.lat_mean,
           R.lat_db_p50, R.lat_call_p50, R.lat_call_p99, matched, n, lines);
    measure_rtt();
    printf("latency: SELECT 1 round trip p50 %.3f ms to a session idle for %d ms, %.3f ms back to back\n",
           R.rtt_idle_p50, LATENCY_GAP_MS, R.rtt_busy_p50);
    fflush(stdout);
}

/* ---- mode: ceiling -------------------------------------------------------------------------- */

struct ceil_arg {
    PGconn *conn;
    long row;
    long count;
    int64_t end_ns;
    char err[512];
    pthread_barrier_t *barrier;
    const int64_t *deadline;
};

static void *ceiling_thread(void *arg)
{
    struct ceil_arg *a = arg;
    char id[32];
    snprintf(id, sizeof id, "%ld", a->row);
    const char *p[1] = {id};
    pthread_barrier_wait(a->barrier);
    int64_t deadline = *a->deadline;
    while (!interrupted) {
        PGresult *r = PQexecPrepared(a->conn, "bench_ceiling", 1, p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(a->err, sizeof a->err, "%s", PQerrorMessage(a->conn));
            PQclear(r);
            break;
        }
        PQclear(r);
        a->count++;
        if (now_ns() >= deadline)
            break;
    }
    a->end_ns = now_ns();
    return NULL;
}

static void mode_ceiling(void)
{
    long t = opt.threads;
    char a[32];
    snprintf(a, sizeof a, "%ld", t);
    const char *p[1] = {a};
    cmd("DROP TABLE IF EXISTS public.bench_ceiling");
    cmd("CREATE TABLE public.bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL)");
    PQclear(query(g.conn,
                  "INSERT INTO public.bench_ceiling"
                  " SELECT g, 0 FROM pg_catalog.generate_series(1, $1::pg_catalog.int4) g",
                  1, p));
    cmd("VACUUM ANALYZE public.bench_ceiling");
    (void)checkpoint();

    struct ceil_arg *args = calloc((size_t)t, sizeof *args);
    pthread_t *th = calloc((size_t)t, sizeof *th);
    if (!args || !th)
        die("out of memory");
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)t + 1);
    int64_t deadline = 0;
    for (long i = 0; i < t; i++) {
        args[i].conn = connect_or_die(g.conninfo);
        PGresult *r = PQprepare(args[i].conn, "bench_ceiling",
                                "UPDATE public.bench_ceiling SET n = n OPERATOR(pg_catalog.+) 1"
                                " WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int4",
                                1, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            die("prepare: %s", PQerrorMessage(args[i].conn));
        PQclear(r);
        args[i].row = i + 1;
        args[i].barrier = &barrier;
        args[i].deadline = &deadline;
        if (pthread_create(&th[i], NULL, ceiling_thread, &args[i]) != 0)
            die("pthread_create failed");
    }
    int64_t start = now_ns();
    deadline = start + opt.ceiling_seconds * 1000000000LL;
    pthread_barrier_wait(&barrier);
    long total = 0;
    int64_t end = start;
    const char *err = NULL;
    for (long i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        total += args[i].count;
        if (args[i].end_ns > end)
            end = args[i].end_ns;
        if (args[i].err[0] && !err)
            err = args[i].err;
    }
    pthread_barrier_destroy(&barrier);
    check_interrupt();
    if (err)
        die("ceiling: %s", err);
    long long sum = scalar("SELECT pg_catalog.sum(n) FROM public.bench_ceiling", 0, NULL);
    if (sum != total)
        die("ceiling: the table counted %lld updates, the threads %ld", sum, total);
    for (long i = 0; i < t; i++)
        PQfinish(args[i].conn);
    free(args);
    free(th);
    cmd("DROP TABLE public.bench_ceiling");
    R.ceiling_tx = total;
    R.ceiling_s = (double)(end - start) / 1e9;
    R.ceiling_tx_per_s = (double)total / R.ceiling_s;
    R.ceiling_ran = true;
    printf("ceiling: %ld connection(s) x %.2f s of single-row UPDATE, autocommit: %.0f tx/s (%ld transactions)\n", t,
           R.ceiling_s, R.ceiling_tx_per_s, total);
    fflush(stdout);
}

/* ---- mode: aging ---------------------------------------------------------------------------- */

static void aging_load(long rows)
{
    cmd("TRUNCATE skipq.jobs, skipq.job_executions RESTART IDENTITY");
    for (long lo = 1; lo <= rows; lo += AGING_CHUNK) {
        long hi = lo + AGING_CHUNK - 1 < rows ? lo + AGING_CHUNK - 1 : rows;
        char a[32], b[32];
        snprintf(a, sizeof a, "%ld", lo);
        snprintf(b, sizeof b, "%ld", hi);
        const char *p[2] = {a, b};
        cmd("BEGIN");
        PQclear(query(g.conn,
                      "INSERT INTO skipq.jobs (id, queue, kind, payload, status, attempts, max_attempts, run_at,"
                      "                        created_at, finished_at, locked_by, current_execution_id)"
                      " OVERRIDING SYSTEM VALUE"
                      " SELECT g, 'default', 'noop', '{}', 'done', 1, 5, " DAY_AGO ", " DAY_AGO ","
                      "        " DAY_AGO " OPERATOR(pg_catalog.+) pg_catalog.interval '5 ms', 'bench-aging', g"
                      "   FROM pg_catalog.generate_series($1::pg_catalog.int8, $2::pg_catalog.int8) g",
                      2, p));
        PQclear(query(g.conn,
                      "INSERT INTO skipq.job_executions (id, job_id, attempt, worker, started_at, finished_at, status)"
                      " OVERRIDING SYSTEM VALUE"
                      " SELECT g, g, 1, 'bench-aging', " DAY_AGO ","
                      "        " DAY_AGO " OPERATOR(pg_catalog.+) pg_catalog.interval '5 ms', 'done'"
                      "   FROM pg_catalog.generate_series($1::pg_catalog.int8, $2::pg_catalog.int8) g",
                      2, p));
        cmd("COMMIT");
        check_interrupt();
    }
    if (rows > 0) {
        char a[32];
        snprintf(a, sizeof a, "%ld", rows);
        const char *p[1] = {a};
        PQclear(query(g.conn,
                      "SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('skipq.jobs', 'id'),"
                      "                         $1::pg_catalog.int8)",
                      1, p));
        PQclear(query(g.conn,
                      "SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('skipq.job_executions', 'id'),"
                      "                         $1::pg_catalog.int8)",
                      1, p));
    }
    cmd("VACUUM ANALYZE skipq.jobs");
    cmd("VACUUM ANALYZE skipq.job_executions");
}

static void mode_aging(void)
{
    for (int i = 0; i < opt.naging; i++) {
        long rows = opt.aging_rows[i];
        int64_t t0 = now_ns();
        aging_load(rows);
        R.aging[i].rows = rows;
        R.aging[i].load_s = secs_since(t0);
        R.aging[i].jobs_bytes = scalar("SELECT pg_catalog.pg_total_relation_size('skipq.jobs')", 0, NULL);
        R.aging[i].exec_bytes = scalar("SELECT pg_catalog.pg_total_relation_size('skipq.job_executions')", 0, NULL);
        char label[64];
        snprintf(label, sizeof label, "aging-%ld", rows);
        drain_measure(&R.aging[i].d, opt.jobs, label);
        R.naging = i + 1;
        printf("aging: %ld finished jobs in the tables (loaded in %.1f s; skipq.jobs %.1f MB, skipq.job_executions "
               "%.1f MB): ",
               rows, R.aging[i].load_s, (double)R.aging[i].jobs_bytes / 1048576.0,
               (double)R.aging[i].exec_bytes / 1048576.0);
        print_drain_line("drain", &R.aging[i].d);
    }
    R.aging_ran = true;
    cmd("TRUNCATE skipq.jobs, skipq.job_executions RESTART IDENTITY");
}

/* ---- mode: churn ---------------------------------------------------------------------------- */

static void churn_sample(struct churn_report *c, double at_s, long long enqueued)
{
    PGresult *r = query(g.conn,
                        "SELECT (SELECT pg_catalog.count(*) FROM skipq.jobs"
                        "         WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'running'])),"
                        "       (SELECT coalesce(pg_catalog.sum(n_live_tup), 0) FROM pg_catalog.pg_stat_user_tables"
                        "         WHERE schemaname OPERATOR(pg_catalog.=) 'skipq'"
                        "           AND relname OPERATOR(pg_catalog.=) 'job_executions'),"
                        "       (SELECT coalesce(pg_catalog.sum(n_dead_tup), 0) FROM pg_catalog.pg_stat_user_tables"
                        "         WHERE schemaname OPERATOR(pg_catalog.=) 'skipq'),"
                        "       pg_catalog.pg_relation_size('skipq.jobs'), pg_catalog.pg_indexes_size('skipq.jobs'),"
                        "       pg_catalog.pg_relation_size('skipq.job_executions'),"
                        "       pg_catalog.pg_indexes_size('skipq.job_executions'),"
                        "       (" AUTOVACUUMS_SQL ")",
                        0, NULL);
    c->at_s = at_s;
    c->enqueued = enqueued;
    c->backlog = atoll(PQgetvalue(r, 0, 0));
    c->executions_live = atoll(PQgetvalue(r, 0, 1));
    c->dead_tuples = atoll(PQgetvalue(r, 0, 2));
    c->jobs_heap = atoll(PQgetvalue(r, 0, 3));
    c->jobs_idx = atoll(PQgetvalue(r, 0, 4));
    c->exec_heap = atoll(PQgetvalue(r, 0, 5));
    c->exec_idx = atoll(PQgetvalue(r, 0, 6));
    c->autovacuums = atol(PQgetvalue(r, 0, 7));
    PQclear(r);
    PQclear(query(g.conn, "SELECT pg_catalog.pg_stat_clear_snapshot()", 0, NULL));
}

static long long churn_total(const struct churn_report *c)
{
    return c->jobs_heap + c->jobs_idx + c->exec_heap + c->exec_idx;
}

static void print_churn_line(const struct churn_report *c)
{
    printf("churn: %6.0f s  enqueued %lld  backlog %lld  executions kept %lld  dead tuples %lld  jobs %.1f+%.1f MB"
           "  job_executions %.1f+%.1f MB  total %.1f MB  autovacuums %ld\n",
           c->at_s, c->enqueued, c->backlog, c->executions_live, c->dead_tuples, (double)c->jobs_heap / 1048576.0,
           (double)c->jobs_idx / 1048576.0, (double)c->exec_heap / 1048576.0, (double)c->exec_idx / 1048576.0,
           (double)churn_total(c) / 1048576.0, c->autovacuums);
    fflush(stdout);
}

/*
 * A steady producer (COPY every 100 ms, catching up if it falls behind)
 * against hosts that drain and, through [retention], delete what finished
 * more than --churn-retain seconds ago. Sizes are sampled every
 * --churn-report seconds; what matters is that they stop growing.
 */
static void mode_churn(void)
{
    cmd("TRUNCATE skipq.jobs, skipq.job_executions RESTART IDENTITY");
    char ini[256], body[4096];
    snprintf(ini, sizeof ini, "%s/churn.ini", g.dir);
    long batch = opt.churn_rate * 2 < 5000 ? 5000 : opt.churn_rate * 2;
    int len = snprintf(body, sizeof body,
                       "[database]\nurl = %s\n\n"
                       "[host]\npoll_interval = 20ms\nlog_level = warn\nshutdown_grace = 5s\n\n"
                       "[retention]\ndone = %lds\ndead = %lds\ninterval = 5s\nbatch = %ld\n\n"
                       "[plugin noop]\npath = %s/noop.so\n\n"
                       "[queue default]\nthreads = %ld\nbatch = %ld\n%s%s",
                       g.conninfo, opt.churn_retain_s, opt.churn_retain_s, batch, SKIPQ_BENCH_PLUGIN_DIR,
                       opt.threads, opt.batch, isolation_line(), keep_done_section());
    if (len < 0 || (size_t)len >= sizeof body)
        die("INI too long");
    write_file(ini, body, 0600);
    for (long h = 0; h < opt.hosts; h++) {
        char log[256];
        snprintf(log, sizeof log, "%s/churn-host%ld.log", g.dir, h);
        start_host(ini, log);
    }
    note("churn: %ld jobs/s for %ld min, %ld host(s) x %ld thread(s), done jobs deleted after %ld s; sizes every %ld s",
         opt.churn_rate, opt.churn_minutes, opt.hosts, opt.threads, opt.churn_retain_s, opt.churn_report_s);

    int64_t t0 = now_ns(), end = t0 + (int64_t)opt.churn_minutes * 60 * 1000000000;
    int64_t next_report = t0 + (int64_t)opt.churn_report_s * 1000000000;
    long long sent = 0;
    R.nchurn = 0;
    churn_sample(&R.churn[R.nchurn++], 0, 0);
    print_churn_line(&R.churn[0]);
    while (now_ns() < end) {
        check_interrupt();
        check_hosts_alive();
        double el = secs_since(t0);
        long long due = (long long)(el * (double)opt.churn_rate) - sent;
        if (due > opt.churn_rate)
            due = opt.churn_rate; /* fell behind by more than a second: do not flood */
        if (due > 0) {
            copy_enqueue((long)due);
            sent += due;
        }
        if (now_ns() >= next_report && R.nchurn < MAX_CHURN_REPORTS) {
            churn_sample(&R.churn[R.nchurn], secs_since(t0), sent);
            print_churn_line(&R.churn[R.nchurn]);
            R.nchurn++;
            next_report += (int64_t)opt.churn_report_s * 1000000000;
        }
        sleep_ms(100);
    }
    if (R.nchurn < MAX_CHURN_REPORTS) {
        churn_sample(&R.churn[R.nchurn], secs_since(t0), sent);
        print_churn_line(&R.churn[R.nchurn]);
        R.nchurn++;
    }
    stop_hosts(30000);
    const struct churn_report *half = &R.churn[R.nchurn / 2], *last = &R.churn[R.nchurn - 1];
    R.churn_growth = churn_total(half) > 0 ? (double)churn_total(last) / (double)churn_total(half) - 1.0 : NAN;
    printf("churn: %lld jobs in %.0f s (%.0f jobs/s asked for, %.0f sent); total size %.1f MB at %.0f s, %.1f MB at "
           "the end (%+.1f%%)\n",
           sent, last->at_s, (double)opt.churn_rate, (double)sent / last->at_s, (double)churn_total(half) / 1048576.0,
           half->at_s, (double)churn_total(last) / 1048576.0, R.churn_growth * 100.0);
    R.churn_ran = true;
    cmd("TRUNCATE skipq.jobs, skipq.job_executions RESTART IDENTITY");
}

/* ---- report --------------------------------------------------------------------------------- */

static double aging_base(void)
{
    for (int i = 0; i < R.naging; i++)
        if (R.aging[i].rows == 0)
            return R.aging[i].d.jobs_per_s;
    return NAN;
}

static void json_num(FILE *f, double v, int decimals)
{
    if (isfinite(v))
        fprintf(f, "%.*f", decimals, v);
    else
        fputs("null", f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_drain(FILE *f, const struct drain_result *d)
{
    fprintf(f, "{\"jobs\": %ld, \"jobs_per_s\": ", d->jobs);
    json_num(f, d->jobs_per_s, 1);
    fputs(", \"db_seconds\": ", f);
    json_num(f, d->db_seconds, 4);
    fputs(", \"wall_seconds\": ", f);
    json_num(f, d->wall_seconds, 4);
    fputs(", \"wall_jobs_per_s\": ", f);
    json_num(f, d->wall_jobs_per_s, 1);
    fprintf(f, ", \"executions\": %ld, \"claim_statements\": %ld, \"jobs_per_claim\": ", d->executions, d->claims);
    json_num(f, d->jobs_per_claim, 2);
    fprintf(f, ", \"exactly_once\": %s, \"hosts_exit_ok\": %s", d->exactly_once ? "true" : "false",
            d->hosts_exit_ok ? "true" : "false");
    fputs(", \"runs_jobs_per_s\": [", f);
    for (int i = 0; i < d->nruns; i++) {
        if (i)
            fputs(", ", f);
        json_num(f, d->runs[i], 1);
    }
    fputs("]", f);
    fprintf(f, ", \"during\": {\"autovacuums\": %ld, \"autoanalyzes\": %ld, \"checkpoints\": %ld, "
               "\"polls_seeing_vacuum\": %d}",
            d->autovacuums, d->autoanalyzes, d->checkpoints, d->vacuum_seen);
    const struct cost *c = &d->cost;
    fputs(", \"cost\": {\"hosts_cpu_s\": ", f);
    json_num(f, c->hosts_cpu_s, 4);
    fputs(", \"server_cpu_s\": ", f);
    json_num(f, c->server_cpu ? c->server_cpu_s : NAN, 4);
    if (c->wal)
        fprintf(f, ", \"wal_records\": %lld, \"wal_fpi\": %lld, \"wal_bytes\": %lld", c->wal_records, c->wal_fpi,
                c->wal_bytes);
    if (c->tuples)
        fprintf(f,
                ", \"jobs_inserted\": %lld, \"jobs_updated\": %lld, \"jobs_hot_updated\": %lld,"
                " \"executions_inserted\": %lld, \"executions_updated\": %lld, \"executions_hot_updated\": %lld",
                c->jobs_ins, c->jobs_upd, c->jobs_hot, c->exec_ins, c->exec_upd, c->exec_hot);
    fputs("}}", f);
}

static void write_json(FILE *f)
{
    fputs("{\n  \"params\": {", f);
    fprintf(f, "\"jobs\": %ld, \"threads\": %ld, \"hosts\": %ld, \"batch\": %ld, \"isolation\": \"%s\", "
               "\"keep_done\": \"%s\", \"handoff\": \"%s\", \"latency_jobs\": %ld, \"ceiling_seconds\": %ld, "
               "\"repeat\": %ld, \"aging_rows\": [",
            opt.jobs, opt.threads, opt.hosts, opt.batch, opt.isolation, opt.keep_done ? opt.keep_done : "not set",
            opt.handoff ? opt.handoff : "not set", opt.latency_jobs, opt.ceiling_seconds, opt.repeat);
    for (int i = 0; i < opt.naging; i++)
        fprintf(f, "%s%ld", i ? ", " : "", opt.aging_rows[i]);
    fputs("], \"modes\": [", f);
    int k = 0;
    for (size_t i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++)
        if (opt.modes & mode_names[i].bit)
            fprintf(f, "%s\"%s\"", k++ ? ", " : "", mode_names[i].name);
    fputs("], \"postgresql_version\": ", f);
    json_str(f, R.pg_version);
    fprintf(f, ", \"postgresql_version_num\": %ld, \"synchronous_commit\": ", R.pg_version_num);
    json_str(f, R.sync_commit);
    fputs(", \"fsync\": ", f);
    json_str(f, R.fsync);
    fprintf(f, ", \"own_cluster\": %s, \"cpus\": %ld, \"skipq_version\": \"%s\", \"source\": ",
            opt.db ? "false" : "true", sysconf(_SC_NPROCESSORS_ONLN), SKIPQ_VERSION);
    if (R.source[0])
        json_str(f, R.source);
    else
        fputs("null", f);
    fputs(", \"loadavg_1m_start\": ", f);
    json_num(f, R.load_start[0], 2);
    fputs(", \"loadavg_1m_end\": ", f);
    json_num(f, R.load_end[0], 2);
    fputc('}', f);
    if (R.enqueue_ran) {
        fprintf(f, ",\n  \"enqueue\": {\"jobs\": %ld, \"set_based_jobs_per_s\": ", R.enq_jobs);
        json_num(f, (double)R.enq_jobs / R.set_s, 1);
        fputs(", \"set_based_seconds\": ", f);
        json_num(f, R.set_s, 4);
        fputs(", \"copy_jobs_per_s\": ", f);
        json_num(f, (double)R.enq_jobs / R.copy_s, 1);
        fputs(", \"copy_seconds\": ", f);
        json_num(f, R.copy_s, 4);
        fputs(", \"enqueue_many_jobs_per_s\": ", f);
        json_num(f, (double)R.enq_jobs / R.many_s, 1);
        fprintf(f, ", \"naive_jobs\": %ld, \"naive_jobs_per_s\": ", R.naive_jobs);
        json_num(f, (double)R.naive_jobs / R.naive_s, 1);
        fputs(", \"naive_seconds\": ", f);
        json_num(f, R.naive_s, 4);
        fputc('}', f);
    }
    if (R.drain.ran) {
        fputs(",\n  \"drain\": ", f);
        json_drain(f, &R.drain);
    }
    if (R.latency_ran) {
        fprintf(f, ",\n  \"latency\": {\"jobs\": %ld, \"matched\": %ld, \"ledger_lines\": %ld, \"gap_ms\": %d, "
                   "\"poll_interval_ms\": 1000, \"threads\": %ld, \"p50_ms\": ",
                R.lat_jobs, R.lat_matched, R.lat_ledger_lines, LATENCY_GAP_MS, opt.threads);
        json_num(f, R.lat_p50, 3);
        fputs(", \"p95_ms\": ", f);
        json_num(f, R.lat_p95, 3);
        fputs(", \"p99_ms\": ", f);
        json_num(f, R.lat_p99, 3);
        fputs(", \"max_ms\": ", f);
        json_num(f, R.lat_max, 3);
        fputs(", \"min_ms\": ", f);
        json_num(f, R.lat_min, 3);
        fputs(", \"mean_ms\": ", f);
        json_num(f, R.lat_mean, 3);
        fputs(", \"db_clock_p50_ms\": ", f);
        json_num(f, R.lat_db_p50, 3);
        fputs(", \"from_call_p50_ms\": ", f);
        json_num(f, R.lat_call_p50, 3);
        fputs(", \"from_call_p99_ms\": ", f);
        json_num(f, R.lat_call_p99, 3);
        fputs(", \"select1_idle_p50_ms\": ", f);
        json_num(f, R.rtt_idle_p50, 3);
        fputs(", \"select1_back_to_back_p50_ms\": ", f);
        json_num(f, R.rtt_busy_p50, 3);
        fputc('}', f);
    }
    if (R.ceiling_ran) {
        fprintf(f, ",\n  \"ceiling\": {\"connections\": %ld, \"seconds\": ", opt.threads);
        json_num(f, R.ceiling_s, 3);
        fprintf(f, ", \"transactions\": %ld, \"tx_per_s\": ", R.ceiling_tx);
        json_num(f, R.ceiling_tx_per_s, 1);
        fputs(", \"drain_to_ceiling_ratio\": ", f);
        json_num(f, R.drain.ran ? R.drain.jobs_per_s / R.ceiling_tx_per_s : NAN, 3);
        fputc('}', f);
    }
    if (R.aging_ran) {
        fputs(",\n  \"aging\": [", f);
        double base = aging_base();
        for (int i = 0; i < R.naging; i++) {
            fprintf(f, "%s\n    {\"rows\": %ld, \"load_seconds\": ", i ? "," : "", R.aging[i].rows);
            json_num(f, R.aging[i].load_s, 2);
            fprintf(f, ", \"jobs_table_bytes\": %lld, \"job_executions_table_bytes\": %lld, \"ratio_to_0\": ",
                    R.aging[i].jobs_bytes, R.aging[i].exec_bytes);
            json_num(f, R.aging[i].d.jobs_per_s / base, 3);
            fputs(", \"drain\": ", f);
            json_drain(f, &R.aging[i].d);
            fputc('}', f);
        }
        fputs("\n  ]", f);
    }
    if (R.churn_ran) {
        fprintf(f, ",\n  \"churn\": {\"rate\": %ld, \"minutes\": %ld, \"retain_seconds\": %ld, \"growth_second_half\": ",
                opt.churn_rate, opt.churn_minutes, opt.churn_retain_s);
        json_num(f, R.churn_growth, 4);
        fputs(", \"reports\": [", f);
        for (int i = 0; i < R.nchurn; i++) {
            const struct churn_report *c = &R.churn[i];
            fprintf(f, "%s\n    {\"seconds\": %.0f, \"enqueued\": %lld, \"backlog\": %lld, \"dead_tuples\": %lld, "
                       "\"jobs_heap_bytes\": %lld, \"jobs_index_bytes\": %lld, \"executions_heap_bytes\": %lld, "
                       "\"executions_index_bytes\": %lld}",
                    i ? "," : "", c->at_s, c->enqueued, c->backlog, c->dead_tuples, c->jobs_heap, c->jobs_idx,
                    c->exec_heap, c->exec_idx);
        }
        fputs("\n  ]}", f);
    }
    fputs("\n}\n", f);
}

static void row(const char *mode, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(const char *mode, const char *what, const char *fmt, ...)
{
    char v[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    printf("  %-8s  %-44s  %s\n", mode, what, v);
}

static void print_table(void)
{
    printf("\nskipq-bench: skipq %s (%s), PostgreSQL %s, synchronous_commit=%s, fsync=%s, %ld CPU(s), "
           "load average %.1f at start, %.1f at end; jobs %ld, hosts %ld, threads %ld, batch %ld, isolation %s, "
           "keep_done %s\n",
           SKIPQ_VERSION, R.source[0] ? R.source : "source revision unknown", R.pg_version, R.sync_commit, R.fsync,
           sysconf(_SC_NPROCESSORS_ONLN), R.load_start[0], R.load_end[0], opt.jobs, opt.hosts, opt.threads,
           opt.batch, opt.isolation, opt.keep_done ? opt.keep_done : "not set");
    printf("  %-8s  %-44s  %s\n", "mode", "measure", "value");
    if (R.enqueue_ran) {
        row("enqueue", "set-based, one statement", "%.0f jobs/s", (double)R.enq_jobs / R.set_s);
        row("enqueue", "COPY through skipq_copy_add(), one statement", "%.0f jobs/s", (double)R.enq_jobs / R.copy_s);
        row("enqueue", "skipq.enqueue_many, 10k-job arrays, one transaction", "%.0f jobs/s",
            (double)R.enq_jobs / R.many_s);
        char w[64];
        snprintf(w, sizeof w, "skipq.enqueue, one per transaction (%ld)", R.naive_jobs);
        row("enqueue", w, "%.0f jobs/s", (double)R.naive_jobs / R.naive_s);
    }
    if (R.drain.ran) {
        row("drain", "throughput (db clock)", "%.0f jobs/s", R.drain.jobs_per_s);
        row("drain", "wall time from host start", "%.3f s (%.0f jobs/s)", R.drain.wall_seconds,
            R.drain.wall_jobs_per_s);
        row("drain", "jobs per claim statement", "%.1f", R.drain.jobs_per_claim);
        row("drain", "every job done exactly once", "%s", R.drain.exactly_once ? "yes" : "NO");
    }
    if (R.latency_ran) {
        row("latency", "enqueue commit -> handler start, p50", "%.1f ms", R.lat_p50);
        row("latency", "p95 / p99 / max", "%.1f / %.1f / %.1f ms", R.lat_p95, R.lat_p99, R.lat_max);
        row("latency", "enqueue call -> handler start, p50 / p99", "%.1f / %.1f ms", R.lat_call_p50, R.lat_call_p99);
        row("latency", "jobs matched in the ledger", "%ld / %ld", R.lat_matched, R.lat_jobs);
        row("latency", "SELECT 1 p50, idle session / back to back", "%.3f / %.3f ms", R.rtt_idle_p50,
            R.rtt_busy_p50);
    }
    if (R.ceiling_ran) {
        row("ceiling", "single-row autocommit UPDATEs", "%.0f tx/s", R.ceiling_tx_per_s);
        if (R.drain.ran)
            row("ceiling", "drain jobs/s / ceiling tx/s", "%.2f", R.drain.jobs_per_s / R.ceiling_tx_per_s);
    }
    if (R.aging_ran) {
        double base = aging_base();
        for (int i = 0; i < R.naging; i++) {
            char w[96];
            snprintf(w, sizeof w, "drain with %ld finished jobs", R.aging[i].rows);
            row("aging", w, "%.0f jobs/s (%.2fx of 0), %.0f+%.0f MB", R.aging[i].d.jobs_per_s,
                R.aging[i].d.jobs_per_s / base, (double)R.aging[i].jobs_bytes / 1048576.0,
                (double)R.aging[i].exec_bytes / 1048576.0);
        }
    }
    if (R.churn_ran) {
        const struct churn_report *last = &R.churn[R.nchurn - 1];
        row("churn", "total size at the end", "%.1f MB (%+.1f%% over the second half)",
            (double)churn_total(last) / 1048576.0, R.churn_growth * 100.0);
    }
    printf("\n");
}

/* ---- command line ----------------------------------------------------------------------------- */

static const char USAGE[] =
    "usage: skipq-bench [--db CONNINFO] [--modes enqueue,drain,latency,ceiling,aging,churn] [--jobs N]\n"
    "                   [--threads T] [--hosts H] [--batch B] [--latency-jobs N] [--ceiling-seconds S]\n"
    "                   [--aging-rows R1,R2,...] [--churn-minutes M] [--churn-rate N] [--churn-report S]\n"
    "                   [--churn-retain S] [--isolation thread|process] [--keep-done on|off] [--repeat N]\n"
    "                   [--handoff on|off] [--json FILE] [--timeout S] [--keep]\n"
    "\n"
    "  --db CONNINFO        server to use (URI or conninfo; needs CREATEDB). Default: start a\n"
    "                       throwaway PostgreSQL with scripts/pg.sh under /tmp/skipq-bench-PID\n"
    "  --modes LIST         modes to run; they always run in the order above (default: all\n"
    "                       but churn, which runs only when named)\n"
    "  --jobs N             jobs per enqueue/drain/aging run (default 20000)\n"
    "  --threads T          worker threads per host; also ceiling connections (default 4)\n"
    "  --hosts H            `skipq run` processes for drain and aging (default 1)\n"
    "  --batch B            [queue] batch for drain and aging (default 200)\n"
    "  --latency-jobs N     probe jobs for the latency mode (default 200)\n"
    "  --ceiling-seconds S  length of the ceiling run (default 5)\n"
    "  --aging-rows LIST    finished jobs to preload, one drain per value (default 0,1000000)\n"
    "  --churn-minutes M    length of the churn run (default 5)\n"
    "  --churn-rate N       jobs/s enqueued during the churn run (default 5000)\n"
    "  --churn-report S     seconds between size reports in the churn run (default 60)\n"
    "  --churn-retain S     [retention] done/dead age in the churn run, seconds (default 60)\n"
    "  --isolation MODE     [queue] isolation of every host: thread (default) or process, each\n"
    "                       of the --threads a worker process\n"
    "  --keep-done on|off   [kind noop] keep_done of the drain, aging and churn hosts (default: not\n"
    "                       set, so done jobs stay in skipq.jobs)\n"
    "  --handoff on|off     [host] handoff of the latency host (default: not set, so on)\n"
    "  --repeat N           drains per drain/aging measurement, median reported (default 1)\n"
    "  --json FILE          also write the JSON report to FILE\n"
    "  --timeout S          give up when a drain takes longer (default 600)\n"
    "  --keep               keep the work directory (INI files, host logs, ledger)\n"
    "\n"
    "Every database it uses is its own (skipq_bench_PID, dropped at the end).\n";

static long parse_long(const char *name, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "skipq-bench: %s: \"%s\" must be a whole number from %ld to %ld\n%s", name, s, min, max,
                USAGE);
        exit(2);
    }
    return v;
}

/* s if it is "on" or "off"; otherwise a usage error naming the flag. */
static const char *parse_on_off(const char *name, const char *s)
{
    if (strcmp(s, "on") != 0 && strcmp(s, "off") != 0) {
        fprintf(stderr, "skipq-bench: %s: \"%s\" is not on or off\n%s", name, s, USAGE);
        exit(2);
    }
    return s;
}

static void parse_args(int argc, char **argv)
{
    enum { O_DB = 256, O_MODES, O_JOBS, O_THREADS, O_HOSTS, O_BATCH, O_LAT, O_CEIL, O_AGING, O_JSON, O_TIMEOUT, O_KEEP,
           O_CHURN_MIN, O_CHURN_RATE, O_CHURN_REPORT, O_CHURN_RETAIN, O_REPEAT, O_ISOLATION, O_KEEP_DONE,
           O_HANDOFF };
    static const struct option longopts[] = {
        {"db", required_argument, NULL, O_DB},
        {"modes", required_argument, NULL, O_MODES},
        {"jobs", required_argument, NULL, O_JOBS},
        {"threads", required_argument, NULL, O_THREADS},
        {"hosts", required_argument, NULL, O_HOSTS},
        {"batch", required_argument, NULL, O_BATCH},
        {"latency-jobs", required_argument, NULL, O_LAT},
        {"ceiling-seconds", required_argument, NULL, O_CEIL},
        {"aging-rows", required_argument, NULL, O_AGING},
        {"json", required_argument, NULL, O_JSON},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"keep", no_argument, NULL, O_KEEP},
        {"churn-minutes", required_argument, NULL, O_CHURN_MIN},
        {"churn-rate", required_argument, NULL, O_CHURN_RATE},
        {"churn-report", required_argument, NULL, O_CHURN_REPORT},
        {"churn-retain", required_argument, NULL, O_CHURN_RETAIN},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"isolation", required_argument, NULL, O_ISOLATION},
        {"keep-done", required_argument, NULL, O_KEEP_DONE},
        {"handoff", required_argument, NULL, O_HANDOFF},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_DB:
            opt.db = optarg;
            break;
        case O_MODES: {
            opt.modes = 0;
            char *copy = strdup(optarg), *save = NULL;
            for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                size_t i = 0;
                for (; i < sizeof mode_names / sizeof mode_names[0]; i++)
                    if (strcmp(tok, mode_names[i].name) == 0)
                        break;
                if (i == sizeof mode_names / sizeof mode_names[0]) {
                    fprintf(stderr, "skipq-bench: --modes: unknown mode \"%s\"\n%s", tok, USAGE);
                    exit(2);
                }
                opt.modes |= mode_names[i].bit;
            }
            free(copy);
            if (!opt.modes) {
                fprintf(stderr, "skipq-bench: --modes: empty list\n%s", USAGE);
                exit(2);
            }
            break;
        }
        case O_JOBS:
            opt.jobs = parse_long("--jobs", optarg, 1, 100000000);
            break;
        case O_THREADS:
            opt.threads = parse_long("--threads", optarg, 1, 256);
            break;
        case O_HOSTS:
            opt.hosts = parse_long("--hosts", optarg, 1, MAX_HOSTS);
            break;
        case O_BATCH:
            opt.batch = parse_long("--batch", optarg, 1, 1000);
            break;
        case O_LAT:
            opt.latency_jobs = parse_long("--latency-jobs", optarg, 1, 1000000);
            break;
        case O_CEIL:
            opt.ceiling_seconds = parse_long("--ceiling-seconds", optarg, 1, 3600);
            break;
        case O_AGING: {
            opt.naging = 0;
            char *copy = strdup(optarg), *save = NULL;
            for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (opt.naging == MAX_AGING) {
                    fprintf(stderr, "skipq-bench: --aging-rows: at most %d values\n", MAX_AGING);
                    exit(2);
                }
                opt.aging_rows[opt.naging++] = parse_long("--aging-rows", tok, 0, 1000000000);
            }
            free(copy);
            if (!opt.naging) {
                fprintf(stderr, "skipq-bench: --aging-rows: empty list\n%s", USAGE);
                exit(2);
            }
            break;
        }
        case O_JSON:
            opt.json_path = optarg;
            break;
        case O_TIMEOUT:
            opt.timeout_s = parse_long("--timeout", optarg, 1, 86400);
            break;
        case O_KEEP:
            opt.keep = true;
            break;
        case O_CHURN_MIN:
            opt.churn_minutes = parse_long("--churn-minutes", optarg, 1, 24 * 60);
            break;
        case O_CHURN_RATE:
            opt.churn_rate = parse_long("--churn-rate", optarg, 1, 1000000);
            break;
        case O_CHURN_REPORT:
            opt.churn_report_s = parse_long("--churn-report", optarg, 5, 3600);
            break;
        case O_CHURN_RETAIN:
            opt.churn_retain_s = parse_long("--churn-retain", optarg, 1, 86400);
            break;
        case O_REPEAT:
            opt.repeat = parse_long("--repeat", optarg, 1, MAX_REPEAT);
            break;
        case O_ISOLATION:
            if (strcmp(optarg, "thread") != 0 && strcmp(optarg, "process") != 0) {
                fprintf(stderr, "skipq-bench: --isolation: \"%s\" is not thread or process\n%s", optarg, USAGE);
                exit(2);
            }
            opt.isolation = optarg;
            break;
        case O_KEEP_DONE:
            opt.keep_done = parse_on_off("--keep-done", optarg);
            break;
        case O_HANDOFF:
            opt.handoff = parse_on_off("--handoff", optarg);
            break;
        case 'h':
            fputs(USAGE, stdout);
            exit(0);
        default:
            fputs(USAGE, stderr);
            exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "skipq-bench: unexpected argument \"%s\"\n%s", argv[optind], USAGE);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    g.main_pid = getpid();
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (access(SKIPQ_BENCH_SKIPQ_BIN, X_OK) != 0)
        die("the skipq binary %s is missing: build the skipq target first", SKIPQ_BENCH_SKIPQ_BIN);

    snprintf(g.dir, sizeof g.dir, "/tmp/skipq-bench-%d", (int)getpid());
    if (mkdir(g.dir, 0755) != 0)
        die("cannot create %s: %s (a stale directory from an earlier run? remove it)", g.dir, strerror(errno));
    chmod(g.dir, 0755); /* the postgres user must reach DIR/pg */
    g.dir_made = true;
    atexit(cleanup);

    int64_t t0 = now_ns();
    describe_source();
    if (getloadavg(R.load_start, 3) != 3)
        R.load_start[0] = R.load_start[1] = R.load_start[2] = NAN;
    if (opt.db)
        snprintf(g.admin_conninfo, sizeof g.admin_conninfo, "%s", opt.db);
    else
        start_cluster();
    check_interrupt();
    create_database();

    if (opt.modes & MODE_ENQUEUE)
        mode_enqueue();
    check_interrupt();
    if (opt.modes & MODE_DRAIN)
        mode_drain();
    check_interrupt();
    if (opt.modes & MODE_LATENCY)
        mode_latency();
    check_interrupt();
    if (opt.modes & MODE_CEILING)
        mode_ceiling();
    check_interrupt();
    if (opt.modes & MODE_AGING)
        mode_aging();
    check_interrupt();
    if (opt.modes & MODE_CHURN)
        mode_churn();

    if (getloadavg(R.load_end, 3) != 3)
        R.load_end[0] = R.load_end[1] = R.load_end[2] = NAN;
    print_table();
    write_json(stdout);
    if (opt.json_path) {
        FILE *f = fopen(opt.json_path, "w");
        if (!f)
            die("cannot write %s: %s", opt.json_path, strerror(errno));
        write_json(f);
        if (fclose(f) != 0)
            die("cannot write %s: %s", opt.json_path, strerror(errno));
    }
    bool ok = (!R.drain.ran || R.drain.exactly_once);
    for (int i = 0; i < R.naging; i++)
        ok = ok && R.aging[i].d.exactly_once;
    if (R.latency_ran && R.lat_matched != R.lat_jobs)
        ok = false;
    note("finished in %.1f s%s", secs_since(t0), ok ? "" : "; a correctness check FAILED (see above)");
    if (!ok)
        g.failed = true;
    return ok ? 0 : 1;
}
