/*
 * test_metrics.c -- [metrics]: /metrics and /healthz of a real host, scraped
 * with the curl binary (a real HTTP client), against the real server.
 *
 * Counter values are asserted exactly: the jobs' outcomes are known in
 * advance (testkit payloads), and a scrape is polled with a deadline only
 * until the last outcome has been counted, never timed.
 *
 * Slow clients -- connections that trickle a header that never ends, or send
 * nothing -- must not keep /healthz from answering, whether they come from
 * the prober's own address or fill every slot from several.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "harness.h"
#include "host/queue.h"

/* The value of the sample `series` (name{labels}), or -1 when absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

static char *metrics_ini(const struct th_db *db, const char *name, int port, const char *extra)
{
    char more[1024];
    snprintf(more, sizeof more,
             "kinds = test, test.other\n\n[metrics]\nlisten = 127.0.0.1:%d\nunhealthy_after = 5s\n\n%s", port,
             extra ? extra : "");
    return th_host_ini(db, name, NULL, NULL, more);
}

/* Poll /metrics until `series` reads `want` (or 30 s pass); the last body. */
static char *scrape_until(int port, const char *series, double want)
{
    int64_t end = th_now_ms() + 30000;
    for (;;) {
        int status = 0;
        char *text = th_http_get(port, "/metrics", &status);
        if ((status == 200 && sample(text, series) == want) || th_now_ms() > end)
            return text;
        free(text);
        usleep(100 * 1000);
    }
}

/* claimed, done, retried, dead as given; with `others`, fenced, lost and
 * cancelled must be 0. */
static void expect_counts(const char *text, const char *kind, double claimed, double done, double retried,
                          double dead, bool others)
{
    const char *names[] = {"claimed", "done", "retried", "dead", "fenced", "lost", "cancelled"};
    double want[] = {claimed, done, retried, dead, 0, 0, 0};
    char series[200];
    for (int i = 0; i < (others ? 7 : 4); i++) {
        snprintf(series, sizeof series, "skipq_jobs_%s_total{kind=\"%s\"}", names[i], kind);
        cr_expect_eq(sample(text, series), want[i], "%s = %g, expected %g", series, sample(text, series), want[i]);
    }
    /* The histogram: one observation per handler run, cumulative buckets. */
    snprintf(series, sizeof series, "skipq_handler_duration_seconds_count{kind=\"%s\"}", kind);
    cr_expect_eq(sample(text, series), claimed, "%s", series);
    char prefix[200];
    snprintf(prefix, sizeof prefix, "skipq_handler_duration_seconds_bucket{kind=\"%s\",le=\"", kind);
    double last = 0;
    int buckets = 0;
    for (const char *l = strstr(text, prefix); l; l = strstr(l + 1, prefix)) {
        double v = strtod(strchr(l, '}') + 2, NULL);
        cr_expect_geq(v, last, "bucket counts must not decrease: %.80s", l);
        last = v;
        buckets++;
        if (strncmp(l + strlen(prefix), "+Inf\"}", 6) == 0)
            cr_expect_eq(v, claimed, "the +Inf bucket must equal the count");
    }
    cr_expect_eq(buckets, 15, "expected 14 buckets and +Inf for %s", kind);
}

static void expect_kind(const char *text, const char *kind, double claimed, double done, double retried,
                        double dead)
{
    expect_counts(text, kind, claimed, done, retried, dead, true);
}

Test(metrics, exact_counters_histogram_and_gauges, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* kind test: 3 done at once, 2 retried once then done;
     * kind test.other: 2 permanent failures, 1 failing until its 2 attempts
     * are spent (one retry, then dead). */
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{}')) FROM generate_series(1, 3)");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test', '{\"fail_times\": 1, \"retry_in_ms\": 0}'))"
                      " FROM generate_series(1, 2)");
    th_execf(db.conn, "SELECT count(skipq.enqueue('test.other', '{\"permanent\": \"no\"}')) FROM generate_series(1, 2)");
    th_enqueue(db.conn, "test.other", "{\"fail\": \"again\", \"retry_in_ms\": 0}", NULL, 0, 2);
    /* Never claimed: queue "later" is served for test.other only. */
    th_enqueue(db.conn, "test", "{}", "later", 0, 0);
    th_enqueue(db.conn, "test", "{}", "later", 0, 0);
    th_execf(db.conn, "UPDATE skipq.jobs SET run_at = now() - interval '1 hour' WHERE queue = 'later'");

    int port = th_free_port();
    char *ini = metrics_ini(&db, "counts", port,
                            "[queue default]\nthreads = 2\n\n[queue later]\nkinds = test.other\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 8, 30000,
                                "SELECT count(*) FROM skipq.jobs WHERE queue = 'default' AND status IN ('done', 'dead')"),
                 8);
    char *text = scrape_until(port, "skipq_jobs_dead_total{kind=\"test.other\"}", 3);
    free(text);
    text = scrape_until(port, "skipq_jobs_done_total{kind=\"test\"}", 5);
    expect_kind(text, "test", 7, 5, 2, 0);
    expect_kind(text, "test.other", 4, 0, 1, 3);

    /* 3 worker threads, all idle by now; every session up (3 workers,
     * heartbeat, listener). */
    cr_expect_eq(sample(text, "skipq_worker_threads{state=\"busy\"}") + sample(text, "skipq_worker_threads{state=\"idle\"}"),
                 3);
    cr_expect_eq(sample(text, "skipq_database_connections"), 5);
    free(text);
    /* The ready-job gauges are sampled, so wait for a sample that has seen
     * the drained default queue; "later" keeps its two hour-old jobs. */
    text = scrape_until(port, "skipq_queue_ready_jobs{queue=\"default\"}", 0);
    cr_expect_eq(sample(text, "skipq_queue_ready_jobs{queue=\"default\"}"), 0);
    cr_expect_eq(sample(text, "skipq_queue_ready_jobs{queue=\"later\"}"), 2);
    cr_expect_geq(sample(text, "skipq_queue_oldest_ready_job_age_seconds{queue=\"later\"}"), 3600);
    cr_expect_eq(sample(text, "skipq_queue_oldest_ready_job_age_seconds{queue=\"default\"}"), 0);
    /* Every family, the sampled gauges included (a sample exists by now). */
    const char *families[] = {"skipq_jobs_claimed_total counter",   "skipq_jobs_done_total counter",
                              "skipq_jobs_retried_total counter",   "skipq_jobs_dead_total counter",
                              "skipq_jobs_fenced_total counter",    "skipq_jobs_lost_total counter",
                              "skipq_jobs_cancelled_total counter", "skipq_handler_duration_seconds histogram",
                              "skipq_worker_threads gauge",         "skipq_database_connections gauge",
                              "skipq_queue_ready_jobs gauge",       "skipq_queue_oldest_ready_job_age_seconds gauge"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char type[160], help[160];
        snprintf(type, sizeof type, "# TYPE %s\n", families[i]);
        snprintf(help, sizeof help, "# HELP %.*s ", (int)(strchr(families[i], ' ') - families[i]), families[i]);
        cr_expect_not_null(strstr(text, type), "no \"%s\"", type);
        cr_expect_not_null(strstr(text, help), "no \"%s\"", help);
    }
    free(text);

    int status = 0;
    text = th_http_get(port, "/healthz", &status);
    cr_expect_eq(status, 200, "healthz: %d %s", status, text);
    cr_expect_str_eq(text, "ok\n");
    free(text);
    text = th_http_get(port, "/nothing", &status);
    cr_expect_eq(status, 404);
    free(text);

    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

Test(metrics, healthz_says_stopping_during_the_grace, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "test", "{\"sleep_ms\": 8000}", NULL, 0, 0);
    int port = th_free_port();
    char *ini = metrics_ini(&db, "stopping", port, "[queue default]\n");
    pid_t pid = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'running'"), 1);
    int status = 0;
    char *text = NULL;
    for (int64_t end = th_now_ms() + 20000; status != 200 && th_now_ms() < end; usleep(100 * 1000)) {
        free(text);
        text = th_http_get(port, "/healthz", &status);
    }
    cr_assert_eq(status, 200, "healthz never became ok: %s", text);
    free(text);
    text = scrape_until(port, "skipq_worker_threads{state=\"busy\"}", 1);
    cr_expect_eq(sample(text, "skipq_worker_threads{state=\"busy\"}"), 1);
    free(text);

    /* SIGTERM: the handler keeps running through the grace; health is 503. */
    kill(pid, SIGTERM);
    text = th_http_get(port, "/healthz", &status);
    for (int64_t end = th_now_ms() + 4000; status == 200 && th_now_ms() < end; usleep(50 * 1000)) {
        free(text);
        text = th_http_get(port, "/healthz", &status);
    }
    cr_expect_eq(status, 503, "healthz while stopping: %d %s", status, text);
    cr_expect(strstr(text, "stopping") != NULL, "%s", text);
    free(text);
    cr_expect_eq(th_wait_exit(pid, 20000), 0);
    th_assert_clean_log(ini);
}

/* Socket inodes of pid's descriptors that listen on TCP. */
static int listening_sockets(pid_t pid)
{
    char cmd[300], line[64];
    snprintf(cmd, sizeof cmd,
             "for f in /proc/%d/fd/*; do readlink $f; done | sed -n 's/^socket:\\[\\([0-9]*\\)\\]$/\\1/p' | sort > %s/inodes;"
             " awk '$4 == \"0A\" {print $10}' /proc/net/tcp /proc/net/tcp6 | sort | comm -12 - %s/inodes | wc -l",
             (int)pid, th_tmpdir(), th_tmpdir());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = -1;
    if (fgets(line, sizeof line, p))
        n = atoi(line);
    pclose(p);
    return n;
}

Test(metrics, off_unless_configured, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "off", NULL, NULL, "[queue default]\n");
    pid_t pid = th_host_start(ini);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    cr_expect_eq(listening_sockets(pid), 0, "a host without [metrics] listens on a TCP port");
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    char *log = th_host_log(ini);
    cr_expect_null(strstr(log, "metrics:"), "%s", log);
    free(log);

    /* and with it, exactly one listening socket */
    int port = th_free_port();
    ini = metrics_ini(&db, "on", port, "[queue default]\n");
    pid = th_host_start(ini);
    int status = 0;
    char *text = NULL;
    for (int64_t end = th_now_ms() + 20000; status != 200 && th_now_ms() < end; usleep(100 * 1000)) {
        free(text);
        text = th_http_get(port, "/healthz", &status);
    }
    free(text);
    cr_expect_eq(status, 200);
    cr_expect_eq(listening_sockets(pid), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
}

static void expect_bad_listen(const char *value, const char *needle)
{
    char text[300], err[1024];
    snprintf(text, sizeof text, "[host]\nname = x\n\n[metrics]\nlisten = %s\n", value);
    char *path = th_write_file("bad_listen.ini", text);
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_null(cfg, "listen = %s was accepted", value);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s:5: [metrics] listen: ", path);
    cr_expect(strncmp(err, prefix, strlen(prefix)) == 0, "\"%s\" does not start with \"%s\"", err, prefix);
    cr_expect(strstr(err, needle) != NULL, "\"%s\" does not mention \"%s\"", err, needle);
}

Test(metrics, listen_is_validated_with_file_and_line, .timeout = 60)
{
    expect_bad_listen("localhost:9464", "not a numeric IPv4 address");
    expect_bad_listen("127.0.0.1", "is not HOST:PORT");
    expect_bad_listen("127.0.0.1:0", "port must be");
    expect_bad_listen("127.0.0.1:65536", "port must be");
    expect_bad_listen("127.0.0.1:94x", "port must be");
    expect_bad_listen("::1:9464", "is not HOST:PORT");
    expect_bad_listen("[::1]9464", "is not [IPV6]:PORT");
    expect_bad_listen("[::g]:9464", "not an IPv6 address");
    expect_bad_listen("300.1.1.1:80", "not a numeric IPv4 address");

    char err[1024];
    const char *good[] = {"127.0.0.1:9464", "0.0.0.0:1", "[::1]:9464", "[::]:65535"};
    for (size_t i = 0; i < 4; i++) {
        char text[200];
        snprintf(text, sizeof text, "[metrics]\nlisten = %s\nunhealthy_after = 45s\n", good[i]);
        struct sq_config *cfg = sq_config_load(th_write_file("good_listen.ini", text), err, sizeof err);
        cr_expect_not_null(cfg, "%s: %s", good[i], err);
        if (cfg) {
            cr_expect_str_eq(cfg->metrics_listen, good[i]);
            cr_expect_eq(cfg->metrics_unhealthy_ms, 45000);
        }
        sq_config_free(cfg);
    }
    struct sq_config *cfg = sq_config_load(th_write_file("metrics_key.ini", "[metrics]\nport = 9464\n"), err, sizeof err);
    cr_expect_null(cfg);
    cr_expect(strstr(err, ":2: unknown key \"port\" in [metrics]") != NULL, "%s", err);

    /* Through the host: exit 2 and the FILE:LINE error in its log. */
    struct th_db db;
    th_db_new(&db);
    char *ini = th_host_ini(&db, "badlisten", NULL, NULL, "\n[metrics]\nlisten = localhost:9464\n[queue default]\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_exit(pid, 20000), 2);
    char *log = th_host_log(ini);
    char want[700];
    snprintf(want, sizeof want, "%s:", ini);
    cr_expect(strstr(log, want) && strstr(log, "[metrics] listen: ") != NULL, "%s", log);
    free(log);
}

Test(metrics, a_port_in_use_stops_the_host, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 1), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    char *ini = metrics_ini(&db, "inuse", ntohs(a.sin_port), "[queue default]\n");
    pid_t pid = th_host_start(ini);
    cr_expect_eq(th_wait_exit(pid, 20000), 1);
    char *log = th_host_log(ini);
    cr_expect(strstr(log, "cannot listen there: Address already in use") != NULL, "%s", log);
    free(log);
    /* It stopped before claiming anything. */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs WHERE status = 'pending' AND attempts = 0"), 1);
    close(fd);
}

Test(metrics, cancelled_and_lost_are_counted, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    /* A job another (dead) host claimed and whose lease ran out. */
    int64_t orphan = th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    struct sq_claimed c;
    char err[512];
    PGconn *ghost = th_connect(&db);
    cr_assert(sq_queue_prepare(ghost, err, sizeof err), "%s", err);
    cr_assert_eq(sq_queue_claim(ghost, "default", "{test}", "{30000}", "ghost:1:w0", 1, &c, err, sizeof err), 1,
                 "%s", err);
    sq_claimed_clear(&c);
    PQfinish(ghost);
    th_execf(db.conn, "UPDATE skipq.jobs SET lease_expires_at = now() - interval '1 minute' WHERE id = %lld",
             (long long)orphan);
    int64_t slow = th_enqueue(db.conn, "test", "{\"sleep_ms\": 60000}", NULL, 0, 0);

    int port = th_free_port();
    char *ini = metrics_ini(&db, "cancel", port, "[queue default]\nthreads = 2\n");
    pid_t pid = th_host_start(ini);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'running'", (long long)slow);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, sql), 1);
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)slow);
    cr_assert_eq(th_cli(NULL, NULL, "cancel", id, "--db", db.conninfo, NULL), 0);

    char *text = scrape_until(port, "skipq_jobs_cancelled_total{kind=\"test\"}", 1);
    cr_expect_eq(sample(text, "skipq_jobs_cancelled_total{kind=\"test\"}"), 1, "%s", text);
    free(text);
    text = scrape_until(port, "skipq_jobs_done_total{kind=\"test\"}", 1);
    /* The orphan: swept (lost), claimed again here and done; the slow job:
     * claimed, cancelled under its handler -- not fenced, not done. */
    expect_counts(text, "test", 2, 1, 0, 0, false);
    cr_expect_eq(sample(text, "skipq_jobs_lost_total{kind=\"test\"}"), 1);
    cr_expect_eq(sample(text, "skipq_jobs_fenced_total{kind=\"test\"}"), 0);
    free(text);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_check_invariants(db.conn);
    th_assert_clean_log(ini);
}

/* ---- slow clients ------------------------------------------------------------------------ */

/* How long the server lets a connection take over one request (metrics.c). */
#define DEADLINE_MS 5000

struct slow {
    int fd;
    bool trickle;   /* sends a byte of an endless header each round; else nothing */
    size_t sent;
    int64_t opened;
    int64_t closed; /* 0: still open */
};

/* A connection to 127.0.0.1:port from source address `from`. */
static void slow_open(struct slow *s, int port, const char *from, bool trickle)
{
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s->fd, 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, from, &src.sin_addr), 1);
    cr_assert_eq(bind(s->fd, (struct sockaddr *)&src, sizeof src), 0, "bind %s: %s", from, strerror(errno));
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(s->fd, (struct sockaddr *)&dst, sizeof dst), 0, "connect: %s", strerror(errno));
    s->trickle = trickle;
    s->sent = 0;
    s->opened = th_now_ms();
    s->closed = 0;
}

/* One round: each trickler sends one more byte; note which were closed. */
static void slow_round(struct slow *s, int n)
{
    static const char start[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n", more[] = "X-Slow: yes\r\n";
    for (int i = 0; i < n; i++) {
        if (s[i].closed)
            continue;
        char buf[512];
        ssize_t r = recv(s[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            s[i].closed = th_now_ms();
            continue;
        }
        if (!s[i].trickle)
            continue;
        size_t k = s[i].sent++;
        char c = k < sizeof start - 1 ? start[k] : more[(k - (sizeof start - 1)) % (sizeof more - 1)];
        if (send(s[i].fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
            s[i].closed = th_now_ms();
    }
}

static int slow_alive(const struct slow *s, int n)
{
    int alive = 0;
    for (int i = 0; i < n; i++)
        alive += s[i].closed == 0;
    return alive;
}

/* GET /healthz with curl while the slow clients go on trickling every
 * 100 ms; the HTTP status (0: no answer within 10 s) and how long it took. */
static int healthz_while_trickling(int port, struct slow *s, int n, int64_t *took)
{
    char out[600], cmd[1400];
    snprintf(out, sizeof out, "%s/trickle-healthz.code", th_tmpdir());
    snprintf(cmd, sizeof cmd, "curl -s -m 10 -o /dev/null -w '%%{http_code}' 'http://127.0.0.1:%d/healthz' > '%s'",
             port, out);
    int64_t start = th_now_ms();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    while (th_wait_exit(pid, 100) == -1)
        slow_round(s, n);
    *took = th_now_ms() - start;
    FILE *f = fopen(out, "r");
    char code[16] = "";
    if (f) {
        if (!fgets(code, sizeof code, f))
            code[0] = '\0';
        fclose(f);
    }
    return atoi(code);
}

/* Trickle until every slow client is closed (or 15 s pass); the longest
 * any of them lived. */
static int64_t slow_until_closed(struct slow *s, int n)
{
    for (int64_t end = th_now_ms() + 15000; slow_alive(s, n) > 0 && th_now_ms() < end; usleep(100 * 1000))
        slow_round(s, n);
    int64_t longest = 0;
    for (int i = 0; i < n; i++) {
        int64_t lived = (s[i].closed ? s[i].closed : th_now_ms()) - s[i].opened;
        longest = lived > longest ? lived : longest;
        close(s[i].fd);
    }
    return longest;
}

/* A host with [metrics] whose /healthz already answers 200; its port. */
static int healthy_host(struct th_db *db, const char *name, pid_t *pid, char **ini)
{
    th_db_new(db);
    int port = th_free_port();
    *ini = metrics_ini(db, name, port, "[queue default]\n");
    *pid = th_host_start(*ini);
    int status = 0;
    for (int64_t end = th_now_ms() + 20000; status != 200 && th_now_ms() < end; usleep(100 * 1000))
        free(th_http_get(port, "/healthz", &status));
    cr_assert_eq(status, 200, "healthz never became ok");
    return port;
}

Test(metrics, slow_clients_from_the_probers_own_address_do_not_keep_healthz_from_answering, .timeout = 120)
{
    struct th_db db;
    pid_t pid;
    char *ini;
    int port = healthy_host(&db, "slow", &pid, &ini);
    /* 40 connections from 127.0.0.1, like the prober: half trickle a header
     * that never ends, half send nothing */
    struct slow s[40];
    for (int i = 0; i < 40; i++)
        slow_open(&s[i], port, "127.0.0.1", i % 2 == 0);
    for (int r = 0; r < 10; r++, usleep(100 * 1000))
        slow_round(s, 40);
    cr_expect_leq(slow_alive(s, 40), 8, "%d connections from one address still open", slow_alive(s, 40));

    int64_t took = 0;
    int status = healthz_while_trickling(port, s, 40, &took);
    cr_expect_eq(status, 200, "healthz answered %d after %lld ms", status, (long long)took);
    cr_expect_lt(took, 3000, "healthz took %lld ms", (long long)took);
    cr_log_info("healthz beside 40 slow clients from its address: %d in %lld ms", status, (long long)took);

    /* the survivors are cut at the deadline, however busy they keep */
    int64_t longest = slow_until_closed(s, 40);
    cr_expect_eq(slow_alive(s, 40), 0);
    cr_expect_leq(longest, DEADLINE_MS + 1500, "a slow client lived %lld ms", (long long)longest);
    cr_expect_geq(longest, DEADLINE_MS - 500, "the newest slow clients were cut early (%lld ms)", (long long)longest);
    cr_log_info("the last slow client was cut after %lld ms", (long long)longest);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_assert_clean_log(ini);
}

Test(metrics, a_server_full_of_slow_clients_answers_healthz_within_the_deadline, .timeout = 120)
{
    struct th_db db;
    pid_t pid;
    char *ini;
    int port = healthy_host(&db, "full", &pid, &ini);
    /* 8 connections from each of 127.0.0.2 to 127.0.0.9: every slot */
    struct slow s[64];
    for (int i = 0; i < 64; i++) {
        char from[32];
        snprintf(from, sizeof from, "127.0.0.%d", 2 + i / 8);
        slow_open(&s[i], port, from, i % 2 == 0);
    }
    for (int r = 0; r < 10; r++, usleep(100 * 1000))
        slow_round(s, 64);
    cr_expect_eq(slow_alive(s, 64), 64, "the server cut slow clients before its deadline");

    /* the probe waits in the listen backlog until the deadline frees slots */
    int64_t took = 0;
    int status = healthz_while_trickling(port, s, 64, &took);
    cr_expect_eq(status, 200, "healthz answered %d after %lld ms", status, (long long)took);
    cr_expect_lt(took, DEADLINE_MS + 2000, "healthz took %lld ms", (long long)took);
    int64_t longest = slow_until_closed(s, 64);
    cr_expect_leq(longest, DEADLINE_MS + 1500, "a slow client lived %lld ms", (long long)longest);
    cr_log_info("healthz behind 64 slow clients: %d in %lld ms; the last was cut after %lld ms", status,
                (long long)took, (long long)longest);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    th_assert_clean_log(ini);
}
