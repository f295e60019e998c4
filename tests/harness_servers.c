/*
 * harness_servers.c -- the servers a test may start beside the shared one
 * ($SKIPQ_TEST_DB): a private PostgreSQL cluster of its own, for tests that
 * restart or stop the server (scripts/pg.sh), and pgbouncer in front of a
 * server. Each is a child or a directory of the test process and is gone
 * when the test exits, however it ends. See harness.h.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

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

int th_free_port(void)
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
        b->port = th_free_port();
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
    char *log = th_slurp(path);
    snprintf(path, sizeof path, "%s/pgbouncer.out", b->dir);
    char *out = th_slurp(path);
    size_t n = strlen(log) + strlen(out) + 2;
    char *both = malloc(n);
    snprintf(both, n, "%s%s", log, out);
    free(log);
    free(out);
    return both;
}

/* ---- a private PostgreSQL cluster --------------------------------------------------------- */

#define MAX_CLUSTERS 4
static char cluster_dirs[MAX_CLUSTERS][128];

/* At exit: stop and remove every cluster this process started. */
static void destroy_clusters(void)
{
    for (int i = 0; i < MAX_CLUSTERS && cluster_dirs[i][0]; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s/scripts/pg.sh destroy %s >/dev/null 2>&1", SKIPQ_SOURCE_DIR, cluster_dirs[i]);
        if (system(cmd) != 0)
            fprintf(stderr, "could not destroy %s\n", cluster_dirs[i]);
    }
}

static void track_cluster(const char *dir)
{
    for (int i = 0; i < MAX_CLUSTERS; i++) {
        if (!cluster_dirs[i][0]) {
            if (i == 0)
                atexit(destroy_clusters);
            snprintf(cluster_dirs[i], sizeof cluster_dirs[i], "%s", dir);
            return;
        }
    }
    cr_assert_fail("more than %d private clusters in one test", MAX_CLUSTERS);
}

void th_cluster_start(struct th_cluster *c, const char *tag)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/skipq-%s-%d", tag, (int)getpid());
    track_cluster(c->dir);
    for (int attempt = 0; attempt < 5 && !c->conninfo[0]; attempt++) {
        char cmd[700];
        c->port = th_free_port();
        snprintf(cmd, sizeof cmd, "%s/scripts/pg.sh start %s %d 2>/dev/null", SKIPQ_SOURCE_DIR, c->dir, c->port);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        if (!fgets(c->conninfo, sizeof c->conninfo, p))
            c->conninfo[0] = '\0';
        pclose(p);
    }
    cr_assert(c->conninfo[0], "could not start a private PostgreSQL in %s", c->dir);
    c->conninfo[strcspn(c->conninfo, "\n")] = '\0';
}

void th_cluster_use(const struct th_cluster *c)
{
    setenv("SKIPQ_TEST_DB", c->conninfo, 1);
}

void th_cluster_restart(const struct th_cluster *c, const char *mode)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s/scripts/pg.sh restart %s %s >/dev/null 2>&1", SKIPQ_SOURCE_DIR, c->dir, mode);
    cr_assert_eq(system(cmd), 0, "pg.sh restart %s %s failed", c->dir, mode);
}

/* ---- queries that survive a server restart ------------------------------------------------ */

long long th_robust_scalar(struct th_db *db, const char *sql)
{
    for (int i = 0; i < 200; i++) {
        if (PQstatus(db->conn) != CONNECTION_OK) {
            PQfinish(db->conn);
            db->conn = PQconnectdb(db->conninfo);
        }
        PGresult *r = PQexec(db->conn, sql);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            PQclear(r);
            return v;
        }
        PQclear(r);
        usleep(100000);
    }
    cr_assert_fail("database unreachable: %s", PQerrorMessage(db->conn));
    return -1;
}

long long th_wait_robust(struct th_db *db, long long want, int timeout_ms, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v;
    while ((v = th_robust_scalar(db, sql)) != want && th_now_ms() < end)
        usleep(50000);
    return v;
}

long long th_wait_robust_at_least(struct th_db *db, long long want, int timeout_ms, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v;
    while ((v = th_robust_scalar(db, sql)) < want && th_now_ms() < end)
        usleep(50000);
    return v;
}
