/*
 * harness.c -- see harness.h: databases, queries and waits, files, host
 * processes, the CLI, and the invariants. The extra servers (a private
 * cluster, pgbouncer) are in harness_servers.c.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "skipq/skipq.h"

static char admin_db_names[16][64];

#define MAX_LIVE_HOSTS 32
static pid_t live_hosts[MAX_LIVE_HOSTS];

static void kill_leftover_hosts(void)
{
    for (int i = 0; i < MAX_LIVE_HOSTS; i++) {
        if (live_hosts[i] > 0) {
            kill(live_hosts[i], SIGKILL);
            waitpid(live_hosts[i], NULL, 0);
            live_hosts[i] = 0;
        }
    }
}

static void forget_host(pid_t pid)
{
    for (int i = 0; i < MAX_LIVE_HOSTS; i++)
        if (live_hosts[i] == pid)
            live_hosts[i] = 0;
}

/* In a child about to exec skipq: die with the test process, and use the
 * sanitizer options meant for skipq itself (leak checks) rather than the
 * test runner's. */
static void child_env(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *o = getenv("SKIPQ_CHILD_ASAN_OPTIONS");
    if (o)
        setenv("ASAN_OPTIONS", o, 1);
}
static int n_admin_db_names;

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *th_admin_conninfo(void)
{
    const char *c = getenv("SKIPQ_TEST_DB");
    if (!c || !*c)
        cr_assert_fail("SKIPQ_TEST_DB is not set: run the suite through scripts/test.sh, which starts a throwaway "
                 "PostgreSQL");
    return c;
}

static void drop_databases(void)
{
    PGconn *a = PQconnectdb(th_admin_conninfo());
    for (int i = 0; i < n_admin_db_names && PQstatus(a) == CONNECTION_OK; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", admin_db_names[i]);
        PQclear(PQexec(a, sql));
    }
    PQfinish(a);
}

void th_db_new(struct th_db *db)
{
    static int counter;
    memset(db, 0, sizeof *db);
    snprintf(db->name, sizeof db->name, "t_%d_%d_%ld", (int)getpid(), counter++, (long)(th_now_ms() % 100000));
    PGconn *a = PQconnectdb(th_admin_conninfo());
    cr_assert_eq(PQstatus(a), CONNECTION_OK, "cannot connect to the test server: %s", PQerrorMessage(a));
    char sql[160];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db->name);
    PGresult *r = PQexec(a, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "create database: %s", PQerrorMessage(a));
    PQclear(r);
    PQfinish(a);
    if (n_admin_db_names == 0)
        atexit(drop_databases);
    if (n_admin_db_names < 16)
        snprintf(admin_db_names[n_admin_db_names++], 64, "%s", db->name);
    snprintf(db->conninfo, sizeof db->conninfo, "%s dbname=%s", th_admin_conninfo(), db->name);
    db->conn = th_connect(db);
    char err[SKIPQ_ERRBUF_SIZE];
    int applied = 0;
    cr_assert_eq(skipq_migrate(db->conn, &applied, err, sizeof err), SKIPQ_OK, "migrate: %s", err);
    cr_assert_gt(applied, 0);
}

PGconn *th_connect(const struct th_db *db)
{
    PGconn *c = PQconnectdb(db->conninfo);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect %s: %s", db->conninfo, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

PGresult *th_query(PGconn *conn, const char *sql)
{
    PGresult *r = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(r);
    cr_assert(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK, "query failed: %s\n%s", PQerrorMessage(conn), sql);
    return r;
}

long long th_scalar(PGconn *conn, const char *sql)
{
    PGresult *r = th_query(conn, sql);
    cr_assert(PQntuples(r) >= 1 && PQnfields(r) >= 1, "no rows from: %s", sql);
    long long v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

long long th_scalarf(PGconn *conn, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return th_scalar(conn, sql);
}

void th_execf(PGconn *conn, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PQclear(th_query(conn, sql));
}

long long th_wait_scalar(PGconn *conn, long long want, int timeout_ms, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v;
    for (;;) {
        v = th_scalar(conn, sql);
        if (v == want || th_now_ms() > end)
            return v;
        usleep(20000);
    }
}

int64_t th_enqueue(PGconn *conn, const char *kind, const char *payload, const char *queue, int priority,
                   int max_attempts)
{
    skipq_enqueue_opts o = {.queue = queue, .priority = priority, .max_attempts = max_attempts};
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t id = 0;
    cr_assert_eq(skipq_enqueue(conn, kind, payload, &o, &id, err, sizeof err), SKIPQ_OK, "enqueue: %s", err);
    return id;
}

const char *th_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/skipq-test-%d-XXXXXX", base && *base ? base : "/tmp", (int)getpid());
        cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    }
    return dir;
}

char *th_write_file(const char *name, const char *content)
{
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s", th_tmpdir(), name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(content, f);
    fclose(f);
    return path;
}

char *th_host_ini(const struct th_db *db, const char *name, const char *host_extra, const char *ledger,
                  const char *extra)
{
    char *buf = malloc(16384);
    int n = snprintf(buf, 16384,
                     "[database]\nurl = %s\n\n"
                     "[host]\n%slease = 3s\nheartbeat = 500ms\n%s"
                     "log_level = info\nname = %s\n%s\n"
                     "[plugin testkit]\npath = %s/testkit.so\n%s%s%s\n%s",
                     db->conninfo, host_extra && strstr(host_extra, "poll_interval") ? "" : "poll_interval = 50ms\n",
                     host_extra && strstr(host_extra, "shutdown_grace") ? "" : "shutdown_grace = 5s\n", name,
                     host_extra ? host_extra : "", SKIPQ_PLUGIN_DIR, ledger ? "ledger = " : "",
                     ledger ? ledger : "", ledger ? "\n" : "", extra ? extra : "");
    cr_assert_lt(n, 16384);
    char file[128];
    snprintf(file, sizeof file, "%s.ini", name);
    char *path = th_write_file(file, buf);
    free(buf);
    return path;
}

bool th_process_mode(void)
{
    const char *m = getenv("SKIPQ_TEST_ISOLATION");
    if (!m || !*m || strcmp(m, "thread") == 0)
        return false;
    cr_assert_str_eq(m, "process", "SKIPQ_TEST_ISOLATION=\"%s\": want thread or process", m);
    return true;
}

/* Is the line at p (up to the next newline) a [queue NAME] header? */
static bool queue_header(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return strncmp(p, "[queue", 6) == 0 && (p[6] == ' ' || p[6] == '\t');
}

/* Does the section whose body starts at p set `isolation`? */
static bool section_sets_isolation(const char *p)
{
    for (; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        const char *q = p;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q == '[')
            return false;
        if (strncmp(q, "isolation", 9) == 0 && (q[9] == ' ' || q[9] == '\t' || q[9] == '='))
            return true;
    }
    return false;
}

/* In process mode: `isolation = process` into each [queue] section of the
 * INI file that does not choose its isolation; the file is replaced by
 * rename, so a host never reads half of it. */
static void isolate_ini(const char *ini)
{
    if (!th_process_mode())
        return;
    char *text = th_read_file(ini);
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    cr_assert_not_null(m);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        fwrite(p, 1, n, m);
        if (queue_header(p) && !section_sets_isolation(p + n))
            fputs(nl ? "isolation = process\n" : "\nisolation = process\n", m);
        p += n;
    }
    fclose(m);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.isolated", ini);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f, "cannot write %s", tmp);
    fwrite(out, 1, len, f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, ini), 0, "rename %s: %s", tmp, strerror(errno));
    free(out);
    free(text);
}

pid_t th_host_start(const char *ini)
{
    isolate_ini(ini);
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        child_env();
        execl(SKIPQ_BIN, SKIPQ_BIN, "run", "-c", ini, (char *)NULL);
        _exit(127);
    }
    static bool registered;
    if (!registered)
        atexit(kill_leftover_hosts);
    registered = true;
    for (int i = 0; i < MAX_LIVE_HOSTS; i++) {
        if (live_hosts[i] == 0) {
            live_hosts[i] = pid;
            break;
        }
    }
    return pid;
}

/* The parent of process pid per /proc/PID/stat, or -1. The command name
 * in parentheses may hold anything, so read after its last ')'. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close = strrchr(buf, ')');
    int ppid = -1;
    if (!close || sscanf(close + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

/* pid's descendants (children before grandchildren) into out; how many. */
static int descendants(pid_t pid, pid_t *out, int max)
{
    int n = 0;
    for (int parent = -1; parent < n; parent++) {
        pid_t of = parent < 0 ? pid : out[parent];
        DIR *d = opendir("/proc");
        cr_assert_not_null(d, "opendir /proc: %s", strerror(errno));
        for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
            char *end;
            long p = strtol(e->d_name, &end, 10);
            if (*end == '\0' && p > 0 && parent_of((pid_t)p) == of)
                out[n++] = (pid_t)p;
        }
        closedir(d);
    }
    return n;
}

int th_host_descendants(pid_t pid, pid_t *out, int max)
{
    return descendants(pid, out, max);
}

void th_host_signal_all(pid_t pid, int sig)
{
    pid_t kids[256];
    int n = descendants(pid, kids, 256);
    if (sig == SIGKILL) /* all at once: none sees another die first */
        th_host_signal_all(pid, SIGSTOP);
    if (sig != SIGCONT)
        kill(pid, sig);
    for (int i = 0; i < n; i++)
        kill(kids[i], sig);
    if (sig == SIGCONT)
        kill(pid, sig);
}

/* Append opt to the options in environment variable var. */
static void add_option(const char *var, const char *opt)
{
    const char *o = getenv(var);
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s%s", o && *o ? o : "", o && *o ? ":" : "", opt);
    setenv(var, buf, 1);
}

void th_child_raw_crashes(void)
{
    add_option("SKIPQ_CHILD_ASAN_OPTIONS", "handle_segv=0:detect_leaks=0");
    add_option("TSAN_OPTIONS", "handle_segv=0");
}

int th_host_exited(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (pid <= 0 || waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != pid)
        return -1;
    return si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
}

int th_wait_exit(pid_t pid, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            forget_host(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (th_now_ms() > end)
            return -1;
        usleep(10000);
    }
}

int th_host_stop(pid_t pid, int timeout_ms)
{
    kill(pid, SIGTERM);
    int st = th_wait_exit(pid, timeout_ms);
    if (st == -1) {
        kill(pid, SIGKILL);
        th_wait_exit(pid, 5000);
    }
    return st;
}

/* Everything left in f, NUL-terminated (malloc'd); closes f. Read to the
 * end rather than by size, so files still growing (logs) and /proc files
 * read whole. */
static char *read_stream(FILE *f)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    cr_assert_not_null(m, "open_memstream: %s", strerror(errno));
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    fclose(m);
    return buf;
}

char *th_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    return f ? read_stream(f) : strdup("");
}

char *th_http_get(int port, const char *path, int *status)
{
    static int calls;
    char body[600], cmd[1400];
    snprintf(body, sizeof body, "%s/http-%d.body", th_tmpdir(), calls++);
    snprintf(cmd, sizeof cmd, "curl -s -m 10 -o '%s' -w '%%{http_code}' 'http://127.0.0.1:%d%s'", body, port, path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char code[16] = "";
    if (!fgets(code, sizeof code, p))
        code[0] = '\0';
    pclose(p);
    *status = atoi(code);
    return th_slurp(body);
}

char *th_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    return read_stream(f);
}

char *th_host_log(const char *ini)
{
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    return th_slurp(log);
}

bool th_wait_log(const char *ini, const char *needle, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        char *log = th_host_log(ini);
        bool found = strstr(log, needle) != NULL;
        free(log);
        if (found || th_now_ms() > end)
            return found;
        usleep(20000);
    }
}

void th_assert_clean_log(const char *ini)
{
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    char *text = th_slurp(log);
    cr_assert_null(strstr(text, "Sanitizer"), "sanitizer report in %s:\n%s", log, text);
    cr_assert_null(strstr(text, "runtime error:"), "UBSan report in %s:\n%s", log, text);
    free(text);
}

int th_cli(char **out, char **err, const char *arg0, ...)
{
    const char *argv[32];
    int argc = 0;
    argv[argc++] = SKIPQ_BIN;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    static int calls;
    char op[600], ep[600];
    snprintf(op, sizeof op, "%s/cli-%d.out", th_tmpdir(), calls);
    snprintf(ep, sizeof ep, "%s/cli-%d.err", th_tmpdir(), calls++);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        child_env();
        execv(SKIPQ_BIN, (char *const *)argv);
        _exit(127);
    }
    int st = th_wait_exit(pid, 60000);
    cr_assert_neq(st, -1, "skipq %s did not finish", arg0);
    if (out)
        *out = th_slurp(op);
    if (err)
        *err = th_slurp(ep);
    return st;
}

size_t th_read_ledger(const char *path, int64_t **job_ids)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (job_ids)
            *job_ids = NULL;
        return 0;
    }
    size_t cap = 1024, n = 0;
    int64_t *ids = malloc(cap * sizeof *ids);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (n == cap)
            ids = realloc(ids, (cap *= 2) * sizeof *ids);
        ids[n++] = strtoll(line, NULL, 10);
    }
    fclose(f);
    if (job_ids)
        *job_ids = ids;
    else
        free(ids);
    return n;
}

bool th_wait_ledger(const char *path, size_t n, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    while (th_read_ledger(path, NULL) < n) {
        if (th_now_ms() > end)
            return false;
        usleep(20000);
    }
    return true;
}

static void expect_none(PGconn *conn, const char *what, const char *sql)
{
    PGresult *r = th_query(conn, sql);
    int n = PQntuples(r);
    char ids[512] = "";
    size_t o = 0;
    for (int i = 0; i < n && i < 20 && o < sizeof ids - 24; i++)
        o += (size_t)snprintf(ids + o, sizeof ids - o, "%s%s", i ? "," : "", PQgetvalue(r, i, 0));
    PQclear(r);
    cr_expect_eq(n, 0, "invariant broken: %s (%d job(s): %s)", what, n, ids);
}

void th_check_invariants(PGconn *conn)
{
    expect_none(conn, "a job with two done executions",
                "SELECT job_id FROM skipq.job_executions WHERE status = 'done' GROUP BY job_id HAVING count(*) > 1");
    expect_none(conn, "attempts differs from the number of executions",
                "SELECT j.id FROM skipq.jobs j LEFT JOIN skipq.job_executions e ON e.job_id = j.id"
                " GROUP BY j.id, j.attempts HAVING j.attempts <> count(e.id)");
    expect_none(conn, "more than one open execution",
                "SELECT job_id FROM skipq.job_executions WHERE status = 'running' GROUP BY job_id HAVING count(*) > 1");
    expect_none(conn, "running past its lease + 5 s",
                "SELECT id FROM skipq.jobs WHERE status = 'running' AND lease_expires_at < now() - interval '5 seconds'");
    expect_none(conn, "running job whose current execution is not open",
                "SELECT j.id FROM skipq.jobs j LEFT JOIN skipq.job_executions e ON e.id = j.current_execution_id"
                " WHERE j.status = 'running' AND (e.id IS NULL OR e.status <> 'running')");
    expect_none(conn, "open execution of a job that is not running",
                "SELECT e.job_id FROM skipq.job_executions e JOIN skipq.jobs j ON j.id = e.job_id"
                " WHERE e.status = 'running' AND (j.status <> 'running' OR j.current_execution_id <> e.id)");
    expect_none(conn, "dead with attempts left and no permanent failure",
                "SELECT j.id FROM skipq.jobs j LEFT JOIN skipq.job_executions e ON e.id = j.current_execution_id"
                " WHERE j.status = 'dead' AND j.attempts < j.max_attempts AND coalesce(e.status, '') <> 'dead'"
                /* A job whose parent died never ran. */
                "   AND NOT (j.attempts = 0 AND j.last_error LIKE 'parent job % %')");
    expect_none(conn, "done job whose current execution is not its done one",
                "SELECT j.id FROM skipq.jobs j LEFT JOIN skipq.job_executions e"
                "   ON e.job_id = j.id AND e.status = 'done'"
                " WHERE j.status = 'done' AND (e.id IS NULL OR e.id <> j.current_execution_id)");
    expect_none(conn, "pending job with no attempts left",
                "SELECT id FROM skipq.jobs WHERE status = 'pending' AND attempts >= max_attempts");
    /* Done jobs that left skipq.jobs ([kind] keep_done = off): only a done
     * execution says so, and its job is gone. */
    expect_none(conn, "execution that says its job left, which is not done or whose job is still there",
                "SELECT e.job_id FROM skipq.job_executions e WHERE e.queue IS NOT NULL"
                " AND (e.status <> 'done' OR EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = e.job_id))");
}

void host_start(struct host *h)
{
    h->pid = th_host_start(h->ini);
}

int host_stop(struct host *h, int timeout_ms)
{
    int st = th_host_stop(h->pid, timeout_ms);
    h->pid = 0;
    return st;
}

int host_wait_exit(struct host *h, int timeout_ms)
{
    int st = th_wait_exit(h->pid, timeout_ms);
    if (st != -1)
        h->pid = 0;
    return st;
}

int host_exited(const struct host *h)
{
    return th_host_exited(h->pid);
}

char *slurp_log(const struct host *h)
{
    return th_host_log(h->ini);
}

/* ---- queries and waits ------------------------------------------------------------------ */

char *th_textf(PGconn *c, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGresult *r = th_query(c, sql);
    cr_assert(PQntuples(r) == 1 && PQnfields(r) >= 1, "expected one row from: %s", sql);
    char *v = PQgetisnull(r, 0, 0) ? NULL : strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

void th_expect_text(PGconn *c, const char *want, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    char *got = th_textf(c, "%s", sql);
    if (!want)
        cr_expect_null(got, "%s: expected NULL, got \"%s\"", sql, got ? got : "");
    else
        cr_expect(got && strcmp(got, want) == 0, "%s: expected \"%s\", got \"%s\"", sql, want, got ? got : "NULL");
    free(got);
}

const char *th_sqlstate(PGconn *c, const char *sql)
{
    static char st[8];
    PGresult *r = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(r);
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(st, sizeof st, "%s", (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) ? "" : (code ? code : "?"));
    PQclear(r);
    return st;
}

struct th_db th_db_as_role(const struct th_db *db, const char *suffix)
{
    struct th_db r = *db;
    int n = snprintf(r.conninfo, sizeof r.conninfo, "%s user=%s_%s", db->conninfo, db->name, suffix);
    cr_assert_lt(n, (int)sizeof r.conninfo);
    return r;
}

long long th_wait_at_least(PGconn *conn, long long want, int timeout_ms, int poll_ms, struct host *const *hs,
                           int nh, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        long long v = th_scalar(conn, sql);
        if (v >= want)
            return v;
        for (int i = 0; i < nh; i++) {
            int st = host_exited(hs[i]);
            if (st >= 0) {
                char *log = slurp_log(hs[i]);
                cr_assert_fail("host %s exited with status %d while waiting for %lld from: %s\n--- log ---\n%s",
                               hs[i]->name, st, want, sql, log);
            }
        }
        if (th_now_ms() > end)
            return v;
        usleep((useconds_t)poll_ms * 1000);
    }
}

/* ---- roles ------------------------------------------------------------------------------ */

void th_apply_roles(const struct th_db *db)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "psql -qX -v ON_ERROR_STOP=1 \"%s\" -f %s/sql/roles.sql >/dev/null 2>&1",
             db->conninfo, SKIPQ_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0, "roles.sql failed");
    /* Roles are cluster-wide: name them after this test's database. */
    static const char *const roles[][2] = {
        {"w", "skipq_worker"}, {"w2", "skipq_worker"}, {"e", "skipq_enqueuer"}, {"b", "skipq_bulk"}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        th_execf(db->conn, "DROP ROLE IF EXISTS %s_%s; CREATE ROLE %s_%s LOGIN IN ROLE %s", db->name, roles[i][0],
                 db->name, roles[i][0], roles[i][1]);
}

/* ---- files, commands, sizes ------------------------------------------------------------- */


const char *th_tmp_path(const char *rel)
{
    static char bufs[8][700];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", th_tmpdir(), rel);
    return b;
}

void th_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
}

char *th_id_text(int64_t id)
{
    char *s = malloc(24);
    snprintf(s, 24, "%" PRId64, id);
    return s;
}

double th_scale(void)
{
    const char *s = getenv("SKIPQ_HAMMER_SCALE");
    if (!s || !*s)
        return 1.0;
    char *end;
    double v = strtod(s, &end);
    cr_assert(end != s && *end == '\0' && v > 0 && v <= 100, "SKIPQ_HAMMER_SCALE=\"%s\": want a number in (0, 100]",
              s);
    return v;
}

int th_scaled(int base, int min)
{
    int n = (int)(base * th_scale() + 0.5);
    return n < min ? min : n;
}

/* ---- fixtures --------------------------------------------------------------------------- */

#define RPATH_DIR SKIPQ_FIXTURE_DIR "/rpath"

/* A copy of libsqdep.so with `mode` at dir/libsqdep.so, put in place by
 * rename: tests running at once each write their own temporary copy. */
static void place_library(const char *dir, const char *mode)
{
    th_sh("cp '%s/safe/libsqdep.so' '%s/libsqdep.so.%d' && chmod %s '%s/libsqdep.so.%d'"
          " && mv '%s/libsqdep.so.%d' '%s/libsqdep.so'",
          RPATH_DIR, dir, (int)getpid(), mode, dir, (int)getpid(), dir, (int)getpid(), dir);
}

void th_rpath_dirs(void)
{
    th_sh("chmod 0755 '%s/safe' && mkdir -p '%s/open' '%s/loose' && chmod 0777 '%s/open' && chmod 0755 '%s/loose'",
          RPATH_DIR, RPATH_DIR, RPATH_DIR, RPATH_DIR, RPATH_DIR);
    place_library(RPATH_DIR "/open", "0666");
    place_library(RPATH_DIR "/loose", "0664");
    unsetenv("SKIPQ_SQDEP_LOADED");
}
