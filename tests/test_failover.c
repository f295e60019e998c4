/*
 * test_failover.c -- hosts follow a real PostgreSQL failover.
 *
 * Why: skipq's promise -- every committed job done exactly once in the
 * database, a handler's transactional writes committed with its done marker
 * -- has to hold when the primary is lost and an HA manager promotes the
 * standby, which no single-server suite can show. scripts/ha.sh runs
 * pg_auto_failover here (a monitor, a primary and a synchronous standby).
 * Each test starts its own cluster, drains 10,000 jobs (plain, transactional
 * through testkit and txn_note, noop) through two hosts that connect with a
 * multi-host URL and target_session_attrs=read-write, and disrupts the
 * primary when a fifth of them are done: kill -9 of the whole primary node
 * (its pg_autoctl, postmaster and backends: a lost machine), or a planned
 * switchover. Meanwhile an application thread enqueues one job per
 * transaction and remembers each enqueue whose COMMIT succeeded, and a plain
 * client (no skipq) inserts one row per transaction the same way: if the
 * cluster loses one of those, pg_auto_failover broke synchronous
 * replication's promise on that run (its events are printed), and the test
 * runs once more on a new cluster; twice in a row fails it.
 *
 * Asserted: every job whose enqueue committed ends done exactly once; no
 * done marker a host saw commit is lost (a host logs "done" once per
 * commit it saw: a job logged done twice lost its first done marker) and
 * every transactional write belongs to its job's done execution; hosts never
 * exit and stop cleanly; LISTEN works on the new primary (poll_interval is
 * 60s, so only a notification explains a job that an idle host starts
 * within seconds; checked for each host); the invariant checker is clean;
 * and the first claim on the new primary comes at most 5 s after the new
 * primary first accepts writes. Timings are printed with "[failover]".
 *
 * Asynchronous replication is measured, not asserted: with
 * SKIPQ_HA_ASYNC_RUNS=N the last test kills the primary N times with
 * replication-quorum off and prints what vanished; SKIPQ_HA_ASYNC_LAG_MS=M
 * stalls the primary's WAL senders M ms before each kill (a standby that
 * far behind; on loopback it is otherwise a few milliseconds behind).
 *
 * Ports: 3 per cluster (monitor, node1, node2). SKIPQ_HA_PORT=BASE gives
 * test k the ports from BASE + 3k; otherwise a free range above 59000.
 * SKIPQ_HA_KEEP=1 stops the clusters at the end instead of removing them,
 * so their logs (DIR/log and each node's log directory) can be read after a failure.
 * Needs pg_auto_failover (scripts/deps.sh installs it).
 */
#include "harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "skipq/skipq.h"

#define JOBS 10000
#define DISRUPT_AT (JOBS / 5)
#define THREADS_PER_HOST 4
#define TARGET_CLAIM_AFTER_WRITABLE_MS 5000
#define LISTEN_BOUND_MS 5000

/* ---- the HA cluster (scripts/ha.sh) ------------------------------------------------ */

struct ha {
    char dir[64];
    int base; /* monitor; node1 = base + 1, node2 = base + 2 */
    char conninfo[256];
};

static char ha_dirs[6][64];

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Run `scripts/ha.sh ARGS`: its exit status; *out gets its stdout (trimmed),
 * its stderr goes to th_tmpdir()/ha.log. Arguments come from this file only. */
static int ha_cmd(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ha_cmd(char **out, const char *fmt, ...)
{
    char args[512], cmd[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/scripts/ha.sh %s 2>>%s/ha.log", SKIPQ_SOURCE_DIR, args, th_tmpdir());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen: %s", strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The tail of ha.sh's log, for failure messages (static storage). */
static const char *ha_log_tail(void)
{
    static char tail[3000];
    char path[300];
    snprintf(path, sizeof path, "%s/ha.log", th_tmpdir());
    FILE *f = fopen(path, "r");
    tail[0] = '\0';
    if (!f)
        return tail;
    fseek(f, 0, SEEK_END);
    long end = ftell(f), from = end > (long)sizeof tail - 1 ? end - (long)sizeof tail + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(tail, 1, sizeof tail - 1, f);
    tail[n] = '\0';
    fclose(f);
    return tail;
}

static void ha_destroy_all(void)
{
    const char *keep = getenv("SKIPQ_HA_KEEP");
    if (keep && *keep && strcmp(keep, "0") != 0) {
        for (size_t i = 0; i < sizeof ha_dirs / sizeof ha_dirs[0]; i++)
            if (ha_dirs[i][0]) {
                ha_cmd(NULL, "stop %s", ha_dirs[i]);
                fprintf(stderr, "[failover] SKIPQ_HA_KEEP: cluster kept, stopped, in %s\n", ha_dirs[i]);
            }
        return;
    }
    for (size_t i = 0; i < sizeof ha_dirs / sizeof ha_dirs[0]; i++)
        if (ha_dirs[i][0])
            ha_cmd(NULL, "destroy %s", ha_dirs[i]);
}

static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static int pick_base(int k)
{
    const char *env = getenv("SKIPQ_HA_PORT");
    if (env && *env)
        return atoi(env) + 3 * k;
    srand((unsigned)(getpid() ^ wall_ms()));
    for (int tries = 0; tries < 50; tries++) {
        int b = 59000 + 3 * (rand() % 300);
        if (port_free(b) && port_free(b + 1) && port_free(b + 2))
            return b;
    }
    cr_assert_fail("no free range of 3 ports above 59000");
    return 0;
}

/*
 * Start cluster k (a fresh one: whatever an earlier run left in its
 * directory goes first) and make it the server th_db_new() uses. It is
 * destroyed when the test process exits.
 */
static void ha_start(struct ha *c, int k)
{
    memset(c, 0, sizeof *c);
    c->base = pick_base(k);
    snprintf(c->dir, sizeof c->dir, "/tmp/skipq-ha-%d-%d", (int)getpid(), k);
    static bool registered;
    if (!registered)
        atexit(ha_destroy_all);
    registered = true;
    snprintf(ha_dirs[k], sizeof ha_dirs[k], "%s", c->dir);
    ha_cmd(NULL, "destroy %s", c->dir);
    int64_t t0 = th_now_ms();
    char *out = NULL;
    int st = ha_cmd(&out, "start %s %d", c->dir, c->base);
    cr_assert_eq(st, 0, "scripts/ha.sh start %s %d failed (exit %d); pg_auto_failover comes from scripts/deps.sh:\n%s",
                 c->dir, c->base, st, ha_log_tail());
    snprintf(c->conninfo, sizeof c->conninfo, "%s", out);
    free(out);
    fprintf(stderr, "[failover] cluster started in %.1f s: %s\n", (th_now_ms() - t0) / 1000.0, c->conninfo);
    setenv("SKIPQ_TEST_DB", c->conninfo, 1);
}

/*
 * List the node that takes writes first in the test's own conninfo. libpq
 * moves on to the next host only when a host cannot be reached or has the
 * wrong role; a FATAL at connection start-up ends the attempt. A new
 * database that the standby has not replayed yet is such a FATAL ("database
 * ... does not exist"), so th_db_new() must meet the primary first.
 */
static void primary_first(struct ha *c)
{
    char *out = NULL;
    int st = ha_cmd(&out, "primary %s", c->dir);
    cr_assert_eq(st, 0, "no primary in %s:\n%s", c->dir, ha_log_tail());
    int port = atoi(strchr(out, ' ') ? strchr(out, ' ') + 1 : "0");
    free(out);
    int other = port == c->base + 1 ? c->base + 2 : c->base + 1;
    snprintf(c->conninfo, sizeof c->conninfo,
             "host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres target_session_attrs=read-write"
             " connect_timeout=5",
             port, other);
    setenv("SKIPQ_TEST_DB", c->conninfo, 1);
}

static void ha_must(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ha_must(const char *what, const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int st = ha_cmd(NULL, "%s", args);
    cr_assert_eq(st, 0, "%s: scripts/ha.sh %s failed (exit %d):\n%s", what, args, st, ha_log_tail());
}

/* ---- a database connection that survives the failover ---------------------------- */

static bool try_scalar(PGconn *conn, const char *sql, long long *v)
{
    PGresult *r = PQexec(conn, sql);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) >= 1;
    if (ok)
        *v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return ok;
}

/* A scalar from the test database, reconnecting (to whichever node accepts
 * writes) until it answers or timeout_ms passes. */
static long long db_scalar(struct th_db *db, const char *sql, int timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v = 0;
    for (;;) {
        if (db->conn && PQstatus(db->conn) == CONNECTION_OK && try_scalar(db->conn, sql, &v))
            return v;
        cr_assert_lt(th_now_ms(), end, "the test database did not answer within %d ms: %s\n%s", timeout_ms,
                     db->conn ? PQerrorMessage(db->conn) : "", sql);
        PQfinish(db->conn);
        db->conn = PQconnectdb(db->conninfo);
        if (PQstatus(db->conn) != CONNECTION_OK)
            usleep(100000);
    }
}

/* ---- hosts ----------------------------------------------------------------------------- */

static void assert_alive(struct host *hs, int n, const char *when)
{
    for (int i = 0; i < n; i++) {
        int st = host_exited(&hs[i]);
        if (st >= 0) {
            char *log = slurp_log(&hs[i]);
            size_t len = strlen(log);
            cr_assert_fail("host %s exited with status %d %s\n--- end of its log ---\n%s", hs[i].name, st, when,
                           len > 6000 ? log + len - 6000 : log);
        }
    }
}

/* Poll `sql` on db until it returns at least `want`; hosts must stay up. */
static long long wait_for(struct th_db *db, struct host *hs, int nh, long long want, int timeout_ms, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        long long v = db_scalar(db, sql, timeout_ms);
        assert_alive(hs, nh, "while the test waited");
        if (v >= want || th_now_ms() > end)
            return v;
        usleep(50000);
    }
}

/*
 * The multi-host URL a user would write: both data nodes, and libpq keeps
 * only the one that accepts writes. A long poll_interval so that only a
 * notification can wake an idle thread quickly; the default lease (30s is
 * longer than this cluster's failover); debug logging for the "done" lines.
 */
static char *host_ini(const struct ha *c, const struct th_db *db, const char *name, const char *ledger)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "[database]\n"
             "url = postgresql://127.0.0.1:%d,127.0.0.1:%d/%s?user=postgres&target_session_attrs=read-write"
             "&connect_timeout=5\n\n"
             "[host]\nname = %s\npoll_interval = 60s\nlease = 30s\nheartbeat = 1s\nshutdown_grace = 10s\n"
             "log_level = debug\n\n"
             "[queue default]\nthreads = %d\n\n"
             "[plugin testkit]\npath = %s/testkit.so\nledger = %s\n\n"
             "[plugin notes]\npath = %s/txn_note.so\n\n"
             "[plugin noop]\npath = %s/noop.so\n",
             c->base + 1, c->base + 2, db->name, name, THREADS_PER_HOST, SKIPQ_PLUGIN_DIR, ledger, SKIPQ_PLUGIN_DIR,
             SKIPQ_PLUGIN_DIR);
    char file[64];
    snprintf(file, sizeof file, "%s.ini", name);
    return th_write_file(file, buf);
}

static void wait_ready(struct host *hs, int n)
{
    int64_t end = th_now_ms() + 60000;
    for (int i = 0; i < n; i++) {
        for (;;) {
            char *log = slurp_log(&hs[i]);
            bool ready = strstr(log, "ready: every thread is connected") != NULL;
            free(log);
            if (ready)
                break;
            assert_alive(hs, n, "before it was ready");
            cr_assert_lt(th_now_ms(), end, "host %s not ready after 60 s", hs[i].name);
            usleep(50000);
        }
    }
}

/* ---- the application: one job per transaction, through the failover ------------------ */

/* The application, or with plain set, a client that is not skipq at all:
 * each transaction one INSERT into public.ha_probe. If the cluster loses a
 * probe row whose COMMIT succeeded, the database broke its promise, and
 * what skipq did cannot be judged on that run. */
struct enqueuer {
    const char *conninfo;
    bool plain;
    atomic_bool stop;
    pthread_t thread;
    int64_t *ids; /* enqueues whose COMMIT succeeded */
    int64_t *seq; /* the "n" in each one's payload */
    int64_t *at;  /* when each COMMIT returned (wall clock, ms) */
    size_t n, cap;
    long long failed; /* errors, connection attempts included */
};

/* A COMMIT cut off while it waited for the standby comes with a warning
 * ("committed locally, but might not have been replicated"); the enqueue
 * fails and counts as not committed either way. */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static bool app_enqueue(PGconn *conn, int64_t seq, int64_t *id)
{
    skipq_enqueue_opts o = {0};
    char err[SKIPQ_ERRBUF_SIZE];
    char payload[64];
    snprintf(payload, sizeof payload, "{\"from\": \"app\", \"n\": %" PRId64 "}", seq);
    return skipq_enqueue(conn, "test", payload, &o, id, err, sizeof err) == SKIPQ_OK;
}

static bool probe_insert(PGconn *conn, int64_t seq)
{
    char n[24];
    snprintf(n, sizeof n, "%" PRId64, seq);
    const char *params[1] = {n};
    PGresult *r = PQexecParams(conn, "INSERT INTO public.ha_probe (n) VALUES ($1::int8)", 1, NULL, params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok;
}

static void *enqueuer_main(void *arg)
{
    struct enqueuer *e = arg;
    PGconn *conn = NULL;
    for (int64_t seq = 1; !atomic_load(&e->stop); seq++) {
        if (!conn) {
            conn = PQconnectdb(e->conninfo);
            if (PQstatus(conn) != CONNECTION_OK) {
                PQfinish(conn);
                conn = NULL;
                e->failed++;
                usleep(100000);
                continue;
            }
            PQsetNoticeProcessor(conn, quiet, NULL);
        }
        int64_t id = 0;
        if (e->plain ? probe_insert(conn, seq) : app_enqueue(conn, seq, &id)) {
            if (e->plain)
                id = seq;
            if (e->n < e->cap) {
                e->at[e->n] = wall_ms();
                e->seq[e->n] = seq;
                e->ids[e->n++] = id;
            }
        } else {
            e->failed++; /* committed or not: unknown, so not counted as committed */
            PQfinish(conn);
            conn = NULL;
        }
        usleep(10000);
    }
    PQfinish(conn);
    return NULL;
}

static void enqueuer_start(struct enqueuer *e, const char *conninfo, bool plain)
{
    memset(e, 0, sizeof *e);
    e->conninfo = conninfo;
    e->plain = plain;
    e->cap = 200000;
    e->ids = calloc(e->cap, sizeof *e->ids);
    e->at = calloc(e->cap, sizeof *e->at);
    e->seq = calloc(e->cap, sizeof *e->seq);
    cr_assert(e->ids && e->at && e->seq);
    cr_assert_eq(pthread_create(&e->thread, NULL, enqueuer_main, e), 0);
}

static void enqueuer_stop(struct enqueuer *e)
{
    atomic_store(&e->stop, true);
    pthread_join(e->thread, NULL);
}

static void enqueuer_free(struct enqueuer *e)
{
    free(e->ids);
    free(e->at);
    free(e->seq);
}

/* An int8[] literal of a[0..n). */
static char *int8_array(const int64_t *a, size_t n)
{
    char *arr = malloc(n * 21 + 3);
    size_t o = 0;
    arr[o++] = '{';
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(arr + o, "%s%" PRId64, i ? "," : "", a[i]);
    arr[o++] = '}';
    arr[o] = '\0';
    return arr;
}

/* What `sql` counts of the committed enqueues; it takes their ids as
 * $1::int8[] and their payloads' "n" as $2::int8[]. */
static long long count_acked(PGconn *conn, const char *sql, const struct enqueuer *e)
{
    char *ids = int8_array(e->ids, e->n), *seq = int8_array(e->seq, e->n);
    const char *params[2] = {ids, seq};
    PGresult *r = PQexecParams(conn, sql, 2, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(conn));
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    free(ids);
    free(seq);
    return v;
}

/* ---- counting from logs and the ledger ---------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* How many distinct values occur more than once in ids[] (sorts it). */
static long long repeated(int64_t *ids, size_t n)
{
    qsort(ids, n, sizeof *ids, cmp_i64);
    long long r = 0;
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1] && (i == 1 || ids[i - 1] != ids[i - 2]))
            r++;
    return r;
}

/* Append to *ids the job of every "job N (kind) done on attempt K" line: a
 * host logs it once per done marker whose COMMIT it saw succeed. */
static void done_lines(const struct host *h, int64_t **ids, size_t *n, size_t *cap)
{
    char *log = slurp_log(h);
    for (char *p = log; (p = strstr(p, ") done on attempt ")) != NULL; p++) {
        char *q = p;
        while (q > log && q[-1] != '\n' && strncmp(q, "job ", 4) != 0)
            q--;
        if (strncmp(q, "job ", 4) != 0)
            continue;
        if (*n == *cap)
            *ids = realloc(*ids, (*cap = *cap ? *cap * 2 : 4096) * sizeof **ids);
        (*ids)[(*n)++] = strtoll(q + 4, NULL, 10);
    }
    free(log);
}

/* ---- one drain through one disruption ------------------------------------------------ */

enum disruption { KILL_PRIMARY, SWITCHOVER };

struct run {
    int64_t t0;             /* wall clock: the kill done, or the switchover begun */
    int64_t ha_ms;          /* t0 -> scripts/ha.sh saw a node commit (wait-primary, switchover) */
    int64_t write_gap_ms;   /* the application's longest wait between two committed enqueues */
    int64_t writable_ms;    /* t0 -> the application's first commit after that wait */
    int64_t first_claim_ms; /* t0 -> the first claim on the new primary */
    int64_t claim_gap_ms;   /* the longest time without a claim */
    int64_t listen_ms[2];   /* enqueue -> done, idle host i alone, after the failover */
    long long acked, acked_missing, acked_not_done, acked_reused, enqueue_errors;
    long long probe_acked, probe_lost; /* the plain client's committed rows, and those gone */
    long long jobs, not_done, done_twice, started_twice, bad_done_count, bad_effects, bad_notes;
    const char *kind; /* "kill", "switchover began" */
};

static const char ENQUEUE_SQL[] =
    "SELECT count(skipq.enqueue(CASE WHEN i %% 7 = 0 THEN 'note.write' WHEN i %% 11 = 0 THEN 'noop' ELSE 'test' END,"
    " CASE WHEN i %% 7 = 0 THEN '{\"note\": \"n\"}' WHEN i %% 5 = 0 THEN '{\"txn\": true}' ELSE '{}' END::jsonb))"
    " FROM generate_series(1, %d) i";

/* Worker sessions: their last statement was a claim cycle, or an idle
 * thread's registration for hand-overs or its read of one (the text shown
 * is cut at track_activity_query_size; queue.c starts each of these
 * statements one of these ways). */
#define WORKER_SESSIONS \
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'skipq'" \
    " AND (query LIKE 'WITH pick AS%' OR query LIKE 'WITH fin AS%' OR query LIKE 'WITH gone AS%'" \
    "      OR query LIKE 'WITH c AS%' OR query LIKE 'SELECT answer, since FROM skipq.waiter_set%'" \
    "      OR query LIKE 'SELECT skipq.waiter_unset%')"
/* ...that are not idle, or were busy within the last second. */
static const char BUSY_SQL[] =
    WORKER_SESSIONS " AND (state <> 'idle' OR state_change > now() - interval '1 second')";
static const char WORKERS_SQL[] = WORKER_SESSIONS;

/* skipq's sessions on the test database, for failure messages. */
static char *sessions(PGconn *conn)
{
    PGresult *r = PQexec(conn, "SELECT pid, state, state_change, left(query, 50) FROM pg_stat_activity"
                               " WHERE datname = current_database() AND application_name = 'skipq' ORDER BY pid");
    size_t cap = 8192, o = 0;
    char *buf = malloc(cap);
    buf[0] = '\0';
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r) && o < cap - 200; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s | %s | %s | %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                              PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
    PQclear(r);
    return buf;
}

/*
 * LISTEN on the new primary, host by host: with the other host stopped
 * (SIGSTOP), its threads' registrations for hand-overs lapsed, and every
 * worker idle for a second, a new job must be done in far less than the
 * 54 s an idle thread sleeps at the least (it is handed to one of the
 * host's threads, which learns of it by LISTEN, or claimed after one).
 */
static void check_listen(struct th_db *db, struct host *hs, struct run *r)
{
    for (int i = 0; i < 2; i++) {
        struct host *other = &hs[1 - i];
        cr_assert_eq(kill(other->pid, SIGSTOP), 0);
        /* ...and the stopped host's idle threads no longer registered for
         * hand-overs (their rows lapse three heartbeats after its last). */
        char lapsed[200];
        snprintf(lapsed, sizeof lapsed,
                 "SELECT count(*) FROM skipq.waiting WHERE until > clock_timestamp() AND worker LIKE '%s:%%'",
                 other->name);
        int64_t end = th_now_ms() + 30000;
        while (db_scalar(db, WORKERS_SQL, 30000) < 2 * THREADS_PER_HOST || db_scalar(db, BUSY_SQL, 30000) > 0 ||
               db_scalar(db, lapsed, 30000) > 0) {
            if (th_now_ms() > end) {
                kill(other->pid, SIGCONT);
                cr_assert_fail("the workers did not all sit idle on the new primary within 30 s:\n%s",
                               sessions(db->conn));
            }
            usleep(100000);
        }
        int64_t t = th_now_ms();
        long long id = db_scalar(db, "SELECT skipq.enqueue('test', '{\"from\": \"listen check\"}')", 10000);
        char sql[300];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", id);
        long long done = wait_for(db, hs, 2, 1, 30000, sql);
        r->listen_ms[i] = th_now_ms() - t;
        kill(other->pid, SIGCONT);
        cr_assert_eq(done, 1, "job %lld, enqueued into idle host %s after the failover, was not done in 30 s", id,
                     hs[i].name);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld AND worker LIKE '%s:%%'", id,
                 hs[i].name);
        cr_assert_eq(db_scalar(db, sql, 10000), 1, "job %lld did not run on %s", id, hs[i].name);
    }
}

/* lag_ms > 0: stall the primary's WAL senders that long before the kill, so
 * that an asynchronous standby is that far behind when the primary goes. */
static void disrupt(struct ha *c, enum disruption d, int lag_ms, struct host *hs, struct run *r)
{
    char *out = NULL;
    if (d == KILL_PRIMARY) {
        if (lag_ms > 0) {
            ha_must("stall replication", "stall-replication %s on", c->dir);
            int64_t until = th_now_ms() + lag_ms;
            while (th_now_ms() < until) {
                assert_alive(hs, 2, "while replication was stalled");
                usleep(10000);
            }
        }
        ha_must("kill the primary", "kill-primary %s", c->dir);
        if (lag_ms > 0)
            ha_must("forget the stalled senders", "stall-replication %s off", c->dir);
        r->t0 = wall_ms();
        int st = ha_cmd(&out, "wait-primary %s 120", c->dir);
        cr_assert_eq(st, 0, "no node took writes within 120 s of the kill:\n%s", ha_log_tail());
    } else {
        r->t0 = wall_ms();
        ha_must("switchover", "switchover %s", c->dir);
    }
    free(out);
    r->ha_ms = wall_ms() - r->t0;
}

/* The application's view of the outage: the longest wait between two
 * committed enqueues, and when the first commit after it came. */
static void write_gap(const struct enqueuer *e, struct run *r)
{
    size_t best = 0;
    int64_t gap = -1;
    for (size_t i = 1; i < e->n; i++) {
        if (e->at[i] - e->at[i - 1] > gap) {
            gap = e->at[i] - e->at[i - 1];
            best = i;
        }
    }
    cr_assert_gt(best, 0, "the application committed fewer than two enqueues (%zu)", e->n);
    r->write_gap_ms = gap;
    r->writable_ms = e->at[best] - r->t0;
}

/* When claims resumed: after a kill every claim after t0 is the new
 * primary's; a switchover has the old primary claim for a while, so there
 * the end of the longest gap between claims marks it. Claims run without a
 * break before the disruption, so the gap is looked for from 10 s before. */
static void claim_times(struct th_db *db, enum disruption d, struct run *r)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (extract(epoch FROM g.s) * 1000)::int8 - %" PRId64 " FROM ("
             "  SELECT started_at AS s, started_at - lag(started_at) OVER (ORDER BY started_at) AS gap"
             "    FROM skipq.job_executions WHERE started_at >= to_timestamp(%" PRId64 " / 1000.0)) g"
             " WHERE g.gap IS NOT NULL ORDER BY g.gap DESC LIMIT 1",
             r->t0, r->t0 - 10000);
    int64_t gap_end = db_scalar(db, sql, 10000);
    snprintf(sql, sizeof sql,
             "SELECT (extract(epoch FROM max(gap)) * 1000)::int8 FROM ("
             "  SELECT started_at - lag(started_at) OVER (ORDER BY started_at) AS gap"
             "    FROM skipq.job_executions WHERE started_at >= to_timestamp(%" PRId64 " / 1000.0)) g",
             r->t0 - 10000);
    r->claim_gap_ms = db_scalar(db, sql, 10000);
    if (d == SWITCHOVER) {
        r->first_claim_ms = gap_end;
        return;
    }
    snprintf(sql, sizeof sql,
             "SELECT (extract(epoch FROM min(started_at)) * 1000)::int8 - %" PRId64
             " FROM skipq.job_executions WHERE started_at > to_timestamp(%" PRId64 " / 1000.0)",
             r->t0, r->t0);
    r->first_claim_ms = db_scalar(db, sql, 10000);
}

/* What the drain left in the database and the logs. */
static void tally(struct th_db *db, struct host *hs, const char *ledger, struct enqueuer *e, struct enqueuer *probe,
                  struct run *r)
{
    PGconn *c = db->conn;
    r->probe_acked = (long long)probe->n;
    r->probe_lost = r->probe_acked - count_acked(c, "SELECT count(*) FROM public.ha_probe p"
                                                    " JOIN unnest($1::int8[], $2::int8[]) AS a(id, n) ON p.n = a.n",
                                                 probe);
    r->acked = (long long)e->n;
    r->enqueue_errors = e->failed;
    /* By id and payload: after a failover that lost WAL, a job id the
     * application was given can be handed out again, to another job. */
    r->acked_missing = r->acked - count_acked(c, "SELECT count(*) FROM skipq.jobs j"
                                                 " JOIN unnest($1::int8[], $2::int8[]) AS a(id, n) ON a.id = j.id"
                                                 " WHERE (j.payload ->> 'n')::int8 = a.n", e);
    r->acked_not_done = r->acked - count_acked(c, "SELECT count(*) FROM skipq.jobs j"
                                                  " JOIN unnest($1::int8[], $2::int8[]) AS a(id, n) ON a.id = j.id"
                                                  " WHERE (j.payload ->> 'n')::int8 = a.n AND j.status = 'done'", e);
    r->acked_reused = count_acked(c, "SELECT count(*) FROM skipq.jobs j"
                                     " JOIN unnest($1::int8[], $2::int8[]) AS a(id, n) ON a.id = j.id"
                                     " WHERE (j.payload ->> 'n') IS DISTINCT FROM a.n::text", e);
    r->jobs = th_scalar(c, "SELECT count(*) FROM skipq.jobs");
    r->not_done = th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'");
    r->bad_done_count = th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE (SELECT count(*)"
                                     " FROM skipq.job_executions e WHERE e.job_id = j.id AND e.status = 'done') <> 1");
    /* Transactional writes: exactly one per job that makes one, from the
     * execution that is its job's done one, and none from other jobs. */
    r->bad_effects = th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.kind = 'test' AND j.payload ? 'txn' AND"
                                  " (SELECT count(*) FROM public.testkit_effects f WHERE f.job_id = j.id"
                                  "   AND f.execution_id = j.current_execution_id) <> 1")
                     + th_scalar(c, "SELECT count(*) FROM public.testkit_effects f JOIN skipq.jobs j ON j.id = f.job_id"
                                    " WHERE NOT j.payload ? 'txn' OR f.execution_id <> j.current_execution_id");
    r->bad_notes = th_scalar(c, "SELECT count(*) FROM skipq.jobs j WHERE j.kind = 'note.write' AND"
                                " (SELECT count(*) FROM public.skipq_notes f WHERE f.job_id = j.id"
                                "   AND f.execution_id = j.current_execution_id) <> 1")
                   + th_scalar(c, "SELECT count(*) FROM public.skipq_notes f JOIN skipq.jobs j ON j.id = f.job_id"
                                  " WHERE j.kind <> 'note.write' OR f.execution_id <> j.current_execution_id");
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int i = 0; i < 2; i++)
        done_lines(&hs[i], &ids, &n, &cap);
    r->done_twice = repeated(ids, n);
    free(ids);
    n = th_read_ledger(ledger, &ids);
    r->started_twice = repeated(ids, n);
    free(ids);
}

static void print_run(const char *what, const struct run *r)
{
    fprintf(stderr,
            "[failover] %s: scripts/ha.sh saw a writable node after %" PRId64 " ms; the application waited %" PRId64
            " ms between two commits and committed again %" PRId64 " ms after the %s; the first claim on the new"
            " primary came %" PRId64 " ms after it (%+" PRId64 " ms after the application's commit; longest gap"
            " between claims %" PRId64 " ms); LISTEN wake-up on the new primary %" PRId64 " / %" PRId64 " ms\n"
            "[failover] %s: %lld jobs; application enqueues committed %lld (errors %lld), of them vanished %lld"
            " (their id now another job's: %lld), not done %lld; done markers lost (a job reported done twice) %lld; handlers started twice %lld; jobs"
            " not done %lld, without exactly one done execution %lld; bad effects %lld, bad notes %lld; a plain client's"
            " commits %lld, lost by the cluster %lld\n",
            what, r->ha_ms, r->write_gap_ms, r->writable_ms, r->kind, r->first_claim_ms,
            r->first_claim_ms - r->writable_ms, r->claim_gap_ms, r->listen_ms[0], r->listen_ms[1], what, r->jobs,
            r->acked, r->enqueue_errors, r->acked_missing, r->acked_reused, r->acked_not_done, r->done_twice, r->started_twice,
            r->not_done, r->bad_done_count, r->bad_effects, r->bad_notes, r->probe_acked, r->probe_lost);
}

/* Lines of the file at path holding needle, DEBUG lines aside (the hosts
 * here log at debug: a session's every failed attempt); with show, they go
 * to stderr. */
static int count_lines_with(const char *path, const char *needle, bool show)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle) && !strstr(line, " DEBUG ")) {
            n++;
            if (show)
                fprintf(stderr, "[failover] %s", line);
        }
    fclose(f);
    return n;
}

/*
 * A host's log after one disruption: each session (THREADS_PER_HOST
 * workers, the heartbeat, the listener) logs the outage at most once and
 * the recovery at most once, however many attempts it took; and no error
 * reads "(null)" (a handler's message when libpq's result had none).
 */
static void expect_quiet_log(const char *ini)
{
    char log[600];
    snprintf(log, sizeof log, "%s.log", ini);
    int sessions = THREADS_PER_HOST + 2;
    int down = count_lines_with(log, "cannot reach the database", false);
    int back = count_lines_with(log, "connected to the database again", false);
    if (down > sessions || back > sessions)
        count_lines_with(log, "database", true);
    cr_expect_leq(down, sessions, "%s: the outage was logged %d times (once per session expected)", log, down);
    cr_expect_leq(back, sessions, "%s: the recovery was logged %d times (once per session expected)", log, back);
    cr_expect_eq(count_lines_with(log, "(null)", true), 0, "%s: a message reads \"(null)\"", log);
}

/*
 * Drain JOBS jobs through two hosts on cluster c and disrupt the primary
 * when DISRUPT_AT are done. Fills r; leaves the strict checks to the caller.
 */
static void drain_through(struct ha *c, enum disruption d, int lag_ms, int run_no, struct run *r)
{
    memset(r, 0, sizeof *r);
    r->kind = d == KILL_PRIMARY ? "kill" : "switchover began";
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "CREATE TABLE public.testkit_effects (job_id bigint, execution_id bigint)");
    th_execf(db.conn, "CREATE TABLE public.skipq_notes (job_id bigint, execution_id bigint, note text)");
    th_execf(db.conn, "CREATE TABLE public.ha_probe (n bigint PRIMARY KEY)");
    th_execf(db.conn, ENQUEUE_SQL, JOBS);

    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/run%d.ledger", th_tmpdir(), run_no);
    char na[32], nb[32];
    snprintf(na, sizeof na, "fo%d-a", run_no);
    snprintf(nb, sizeof nb, "fo%d-b", run_no);
    struct host hs[2] = {{.name = na}, {.name = nb}};
    for (int i = 0; i < 2; i++) {
        hs[i].ini = host_ini(c, &db, hs[i].name, ledger);
        host_start(&hs[i]);
    }
    wait_ready(hs, 2);
    wait_for(&db, hs, 2, DISRUPT_AT, 300000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'");

    struct enqueuer e, probe;
    enqueuer_start(&e, db.conninfo, false);
    enqueuer_start(&probe, db.conninfo, true);
    disrupt(c, d, lag_ms, hs, r);
    /* Let the application go on enqueueing into the new primary a while. */
    int64_t until = th_now_ms() + 3000;
    while (th_now_ms() < until) {
        assert_alive(hs, 2, "during the failover");
        usleep(50000);
    }
    enqueuer_stop(&e);
    enqueuer_stop(&probe);
    write_gap(&e, r);

    long long left = 0;
    int64_t end = th_now_ms() + 300000;
    while ((left = db_scalar(&db, "SELECT count(*) FROM skipq.jobs WHERE status <> 'done'", 60000)) > 0 &&
           th_now_ms() < end) {
        assert_alive(hs, 2, "while draining after the failover");
        usleep(100000);
    }
    cr_expect_eq(left, 0, "%lld jobs not done 300 s after the failover", left);
    claim_times(&db, d, r);
    check_listen(&db, hs, r);
    db_scalar(&db, "SELECT 1", 10000); /* db.conn is connected to the new primary */
    tally(&db, hs, ledger, &e, &probe, r);
    th_check_invariants(db.conn);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(host_stop(&hs[i], 30000), 0, "host %s did not stop cleanly on SIGTERM", hs[i].name);
        th_assert_clean_log(hs[i].ini);
        expect_quiet_log(hs[i].ini);
    }
    enqueuer_free(&e);
    enqueuer_free(&probe);
}

/* When a commit was lost, what the HA manager did around the disruption
 * (scripts/ha.sh events) goes to stderr: the failure's evidence, which
 * would go with the cluster's directory. */
static void show_events_if_lost(struct ha *c, const struct run *r)
{
    if (r->acked_missing == 0 && r->done_twice == 0 && r->bad_effects == 0 && r->bad_notes == 0 && r->probe_lost == 0)
        return;
    char *out = NULL;
    ha_cmd(&out, "events %s", c->dir);
    fprintf(stderr, "[failover] commits were lost; the cluster's events (monitor and servers):\n%s\n", out ? out : "");
    free(out);
}

/* What synchronous replication promises, whatever the disruption. */
static void expect_nothing_lost(const struct run *r)
{
    cr_expect_gt(r->acked, 0, "the application committed no enqueue during the test");
    cr_expect_eq(r->acked_missing, 0, "%lld enqueue(s) whose COMMIT succeeded vanished", r->acked_missing);
    cr_expect_eq(r->acked_not_done, 0, "%lld committed enqueue(s) did not end done", r->acked_not_done);
    cr_expect_eq(r->not_done, 0, "%lld job(s) not done", r->not_done);
    cr_expect_eq(r->bad_done_count, 0, "%lld job(s) without exactly one done execution", r->bad_done_count);
    cr_expect_eq(r->done_twice, 0, "%lld done marker(s) a host saw commit were lost (the job was reported done twice)",
                 r->done_twice);
    cr_expect_eq(r->bad_effects, 0, "%lld testkit transactional write(s) missing, doubled or not from the done execution",
                 r->bad_effects);
    cr_expect_eq(r->bad_notes, 0, "%lld txn_note write(s) missing, doubled or not from the done execution",
                 r->bad_notes);
    for (int i = 0; i < 2; i++)
        cr_expect_leq(r->listen_ms[i], LISTEN_BOUND_MS,
                      "host %d took %" PRId64 " ms to start a job enqueued while it was idle (poll_interval 60s)", i,
                      r->listen_ms[i]);
    cr_expect_leq(r->first_claim_ms, r->writable_ms + TARGET_CLAIM_AFTER_WRITABLE_MS,
                  "the first claim on the new primary came %" PRId64 " ms after the disruption, %" PRId64
                  " ms after the application could commit again (target: at most %d ms)",
                  r->first_claim_ms, r->first_claim_ms - r->writable_ms, TARGET_CLAIM_AFTER_WRITABLE_MS);
}

/*
 * Drain through disruption d on cluster k and hold skipq to what
 * synchronous replication promises. That promise is the database's: when
 * the cluster loses commits of the plain client too (pg_auto_failover let
 * the old primary commit without its standby; its events are printed), no
 * check of skipq means anything on that run, so it is run once more on a
 * new cluster, and a second such run fails the test.
 */
static void disrupt_and_expect_nothing_lost(enum disruption d, int k, const char *what)
{
    struct run r;
    for (int attempt = 0;; attempt++) {
        struct ha c;
        ha_start(&c, k + 3 * attempt);
        drain_through(&c, d, 0, attempt, &r);
        print_run(what, &r);
        show_events_if_lost(&c, &r);
        if (r.probe_lost == 0 || attempt == 1)
            break;
        fprintf(stderr,
                "[failover] %s: the cluster lost %lld of a plain client's %lld commits, so it broke synchronous"
                " replication's promise (see its events above); once more on a new cluster\n",
                what, r.probe_lost, r.probe_acked);
        ha_cmd(NULL, "stop %s", c.dir);
    }
    cr_expect_gt(r.probe_acked, 0, "the plain client committed nothing during the test");
    cr_expect_eq(r.probe_lost, 0, "the cluster lost %lld of a plain client's %lld commits in two runs in a row",
                 r.probe_lost, r.probe_acked);
    expect_nothing_lost(&r);
}

Test(failover, hosts_follow_a_killed_primary_to_its_standby_and_every_committed_job_is_done_once, .timeout = 900)
{
    disrupt_and_expect_nothing_lost(KILL_PRIMARY, 0, "kill -9 of the primary node");
}

Test(failover, hosts_follow_a_planned_switchover_and_every_committed_job_is_done_once, .timeout = 900)
{
    disrupt_and_expect_nothing_lost(SWITCHOVER, 1, "planned switchover");
}

/*
 * The cost of asynchronous replication, measured over SKIPQ_HA_ASYNC_RUNS
 * kills: enqueues and done markers whose COMMIT succeeded on the old
 * primary but never reached the standby. Only the database's own
 * consistency is asserted (every job it holds is done exactly once).
 */
Test(failover, asynchronous_replication_cost_of_a_kill_is_measured, .timeout = 3600)
{
    const char *env = getenv("SKIPQ_HA_ASYNC_RUNS"), *lag = getenv("SKIPQ_HA_ASYNC_LAG_MS");
    int runs = env ? atoi(env) : 0, lag_ms = lag ? atoi(lag) : 0;
    if (runs <= 0)
        cr_skip_test("set SKIPQ_HA_ASYNC_RUNS=N to measure N kills under asynchronous replication");
    struct ha c;
    ha_start(&c, 2);
    long long vanished = 0, lost_done = 0, twice = 0;
    for (int i = 0; i < runs; i++) {
        if (i > 0) {
            ha_must("rejoin the killed node", "rejoin %s", c.dir);
            primary_first(&c);
        }
        ha_must("asynchronous replication", "set-sync %s off", c.dir);
        struct run r;
        drain_through(&c, KILL_PRIMARY, lag_ms, i, &r);
        char what[96];
        snprintf(what, sizeof what, "async run %d of %d, replication stalled %d ms", i + 1, runs, lag_ms);
        print_run(what, &r);
        cr_expect_eq(r.not_done, 0);
        cr_expect_eq(r.bad_done_count, 0);
        vanished += r.acked_missing;
        lost_done += r.done_twice;
        twice += r.started_twice;
    }
    fprintf(stderr,
            "[failover] asynchronous replication, %d kill(s), replication stalled %d ms before each: committed enqueues"
            " vanished %lld, done markers lost %lld, handlers started twice %lld\n",
            runs, lag_ms, vanished, lost_done, twice);
}
