/* harness.c -- see harness.h. */
#include "harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

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

pid_t th_host_start(const char *ini)
{
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

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

char *th_host_log(const char *ini)
{
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    return slurp(log);
}

void th_assert_clean_log(const char *ini)
{
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    char *text = slurp(log);
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
        *out = slurp(op);
    if (err)
        *err = slurp(ep);
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

/* ---- pgbouncer ------------------------------------------------------------------------ */

#define MAX_POOLERS 8
static pid_t live_poolers[MAX_POOLERS];
static char pooler_dirs[MAX_POOLERS][128];

/* At exit: kill what still runs and remove the poolers' directories. */
static void kill_leftover_poolers(void)
{
    for (int i = 0; i < MAX_POOLERS; i++) {
        if (live_poolers[i] > 0) {
            kill(live_poolers[i], SIGKILL);
            waitpid(live_poolers[i], NULL, 0);
            live_poolers[i] = 0;
        }
    }
    static const char *const files[] = {"pgbouncer.ini", "userlist.txt", "pgbouncer.log", "pgbouncer.out"};
    for (int i = 0; i < MAX_POOLERS && pooler_dirs[i][0]; i++) {
        char path[300];
        for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
            snprintf(path, sizeof path, "%.127s/%s", pooler_dirs[i], files[f]);
            unlink(path);
        }
        rmdir(pooler_dirs[i]);
    }
}

static void track_pooler(pid_t old, pid_t pid)
{
    static bool registered;
    if (!registered)
        atexit(kill_leftover_poolers);
    registered = true;
    for (int i = 0; i < MAX_POOLERS; i++) {
        if (live_poolers[i] == old) {
            live_poolers[i] = pid;
            return;
        }
    }
}

/* A port on 127.0.0.1 that nothing listens on right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* The test server's host and port, from $SKIPQ_TEST_DB. */
static void server_address(char *host, size_t hlen, char *port, size_t plen)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(th_admin_conninfo(), &msg);
    cr_assert_not_null(opts, "SKIPQ_TEST_DB: %s", msg ? msg : "cannot parse");
    snprintf(host, hlen, "127.0.0.1");
    snprintf(port, plen, "5432");
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (o->val && *o->val && strcmp(o->keyword, "host") == 0)
            snprintf(host, hlen, "%s", o->val);
        if (o->val && *o->val && strcmp(o->keyword, "port") == 0)
            snprintf(port, plen, "%s", o->val);
    }
    PQconninfoFree(opts);
}

static void write_pooler_files(struct th_pgbouncer *b)
{
    char host[256], port[16], path[300];
    server_address(host, sizeof host, port, sizeof port);
    snprintf(path, sizeof path, "%s/pgbouncer.ini", b->dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fprintf(f,
            "[databases]\n* = host=%s port=%s\n\n"
            "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n"
            "auth_type = trust\nauth_file = %s/userlist.txt\n"
            "pool_mode = transaction\ndefault_pool_size = %d\nmin_pool_size = 0\nreserve_pool_size = 0\n"
            "max_client_conn = 500\nserver_login_retry = 1\n"
            "logfile = %s/pgbouncer.log\n",
            host, port, b->port, b->dir, b->pool_size, b->dir);
    fclose(f);
    snprintf(path, sizeof path, "%s/userlist.txt", b->dir);
    f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fprintf(f, "\"postgres\" \"\"\n");
    fclose(f);
}

/* In the child: become `postgres` if root (pgbouncer refuses to run as
 * root), die with the test, and run pgbouncer in the foreground. */
static void exec_pooler(const struct th_pgbouncer *b)
{
    char path[300];
    snprintf(path, sizeof path, "%s/pgbouncer.out", b->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    if (getuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw || setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
            fprintf(stderr, "cannot become user postgres: %s\n", strerror(errno));
            _exit(126);
        }
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid, which clears it */
    snprintf(path, sizeof path, "%s/pgbouncer.ini", b->dir);
    execl("/usr/sbin/pgbouncer", "pgbouncer", path, (char *)NULL);
    fprintf(stderr, "cannot run /usr/sbin/pgbouncer: %s\n", strerror(errno));
    _exit(127);
}

/* Start pgbouncer on b->port; false if it exited (port taken) before
 * accepting connections. */
static bool launch_pooler(struct th_pgbouncer *b)
{
    write_pooler_files(b);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        exec_pooler(b);
    track_pooler(0, pid);
    b->pid = pid;
    char ping[200];
    snprintf(ping, sizeof ping, "host=127.0.0.1 port=%d user=postgres dbname=postgres connect_timeout=2", b->port);
    int64_t end = th_now_ms() + 20000;
    while (th_now_ms() < end) {
        if (th_host_exited(pid) >= 0) {
            waitpid(pid, NULL, 0);
            track_pooler(pid, 0);
            b->pid = 0;
            return false;
        }
        if (PQping(ping) == PQPING_OK)
            return true;
        usleep(20000);
    }
    char *log = th_pgbouncer_log(b);
    cr_assert_fail("pgbouncer on port %d did not accept connections within 20 s:\n%s", b->port, log);
    return false;
}

void th_pgbouncer_start(struct th_pgbouncer *b, int pool_size)
{
    memset(b, 0, sizeof *b);
    b->pool_size = pool_size;
    snprintf(b->dir, sizeof b->dir, "/tmp/skipq-pgb-XXXXXX");
    cr_assert_not_null(mkdtemp(b->dir), "mkdtemp: %s", strerror(errno));
    for (int i = 0; i < MAX_POOLERS; i++) {
        if (!pooler_dirs[i][0]) {
            snprintf(pooler_dirs[i], sizeof pooler_dirs[i], "%s", b->dir);
            break;
        }
    }
    if (getuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        cr_assert_not_null(pw, "running as root, and there is no user postgres to run pgbouncer as");
        cr_assert_eq(chown(b->dir, pw->pw_uid, pw->pw_gid), 0, "chown %s: %s", b->dir, strerror(errno));
    }
    chmod(b->dir, 0755);
    for (int attempt = 0; attempt < 5; attempt++) {
        b->port = free_port();
        if (launch_pooler(b))
            return;
    }
    char *log = th_pgbouncer_log(b);
    cr_assert_fail("pgbouncer would not start:\n%s", log);
}

void th_pgbouncer_stop(struct th_pgbouncer *b)
{
    if (b->pid <= 0)
        return;
    kill(b->pid, SIGTERM);
    int64_t end = th_now_ms() + 10000;
    while (waitpid(b->pid, NULL, WNOHANG) == 0) {
        if (th_now_ms() > end) {
            kill(b->pid, SIGKILL);
            waitpid(b->pid, NULL, 0);
            break;
        }
        usleep(10000);
    }
    track_pooler(b->pid, 0);
    b->pid = 0;
}

void th_pgbouncer_restart(struct th_pgbouncer *b)
{
    th_pgbouncer_stop(b);
    /* The port was ours a moment ago; give a slow socket teardown a few tries. */
    for (int attempt = 0; attempt < 50; attempt++) {
        if (launch_pooler(b))
            return;
        usleep(100000);
    }
    char *log = th_pgbouncer_log(b);
    cr_assert_fail("pgbouncer would not start again on port %d:\n%s", b->port, log);
}

void th_pgbouncer_db(const struct th_pgbouncer *b, const struct th_db *db, struct th_db *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", db->name);
    snprintf(out->conninfo, sizeof out->conninfo, "host=127.0.0.1 port=%d user=postgres dbname=%s", b->port,
             db->name);
    /* Not th_connect: its SET would stay on whichever server session the
     * pooler lent, and some tests look at what sessions hold. */
    out->conn = PQconnectdb(out->conninfo);
    cr_assert_eq(PQstatus(out->conn), CONNECTION_OK, "connect %s: %s", out->conninfo, PQerrorMessage(out->conn));
}

char *th_pgbouncer_log(const struct th_pgbouncer *b)
{
    char path[300];
    snprintf(path, sizeof path, "%s/pgbouncer.log", b->dir);
    char *log = slurp(path);
    snprintf(path, sizeof path, "%s/pgbouncer.out", b->dir);
    char *out = slurp(path);
    size_t n = strlen(log) + strlen(out) + 2;
    char *both = malloc(n);
    snprintf(both, n, "%s%s", log, out);
    free(log);
    free(out);
    return both;
}
