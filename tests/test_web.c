/*
 * test_web.c -- `skipq web`: the dashboard's HTTP API, against a real
 * `skipq web` process and the real server.
 *
 * Requests go over a plain socket written here, so each test says exactly
 * which headers a request carries (Host, Cookie, Authorization, the CSRF
 * token, Origin). Answers are parsed with json-c. Every refused action is
 * followed by a look at the database: nothing may have changed. Page times
 * are the server's own (its Server-Timing header), so a slow machine's
 * network stack does not count.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* ---- the process -------------------------------------------------------------------------- */

struct web {
    pid_t pid;
    int port;
    char log[600];
};

static pid_t live_web[8];

static void kill_leftover_webs(void)
{
    for (int i = 0; i < 8; i++)
        if (live_web[i] > 0) {
            kill(live_web[i], SIGKILL);
            waitpid(live_web[i], NULL, 0);
        }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Exec `skipq web --db CONNINFO ARGS...` (NULL-terminated; conninfo NULL:
 * no --db) with its output in w->log; no wait. */
static void web_spawn(struct web *w, const char *conninfo, const char *const *args)
{
    static int n;
    snprintf(w->log, sizeof w->log, "%s/web-%d.log", th_tmpdir(), n++);
    const char *argv[24] = {SKIPQ_BIN, "web", "--db", conninfo};
    int argc = conninfo ? 4 : 2;
    for (int i = 0; args && args[i] && argc < 23; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    w->pid = fork();
    cr_assert_neq(w->pid, -1);
    if (w->pid == 0) {
        int fd = open(w->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        const char *o = getenv("SKIPQ_CHILD_ASAN_OPTIONS");
        if (o)
            setenv("ASAN_OPTIONS", o, 1);
        execv(SKIPQ_BIN, (char *const *)argv);
        _exit(127);
    }
    static bool registered;
    if (!registered)
        atexit(kill_leftover_webs);
    registered = true;
    for (int i = 0; i < 8; i++)
        if (live_web[i] == 0) {
            live_web[i] = w->pid;
            break;
        }
}

static char *slurp_path(const char *path)
{
    FILE *f = fopen(path, "r");
    char *s = calloc(1, 1 << 20);
    if (f) {
        size_t n = fread(s, 1, (1 << 20) - 1, f);
        s[n] = '\0';
        fclose(f);
    }
    return s;
}

static bool answers(int port);

/* Start on a free port (plus `args`; db NULL: no --db) and wait until it
 * answers. */
static void web_start(struct web *w, const struct th_db *db, const char *const *args)
{
    const char *all[20] = {"--listen", NULL};
    char listen[32];
    w->port = free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", w->port);
    all[1] = listen;
    for (int i = 0; args && args[i] && i < 17; i++)
        all[2 + i] = args[i];
    web_spawn(w, db ? db->conninfo : NULL, all);
    for (int64_t end = th_now_ms() + 15000; !answers(w->port); usleep(50 * 1000)) {
        if (th_host_exited(w->pid) >= 0 || th_now_ms() > end) {
            char *log = slurp_path(w->log);
            cr_assert_fail("skipq web did not start: %s", log);
        }
    }
}

/* SIGTERM; it must exit 0 with no sanitizer report. */
static void web_stop(struct web *w)
{
    kill(w->pid, SIGTERM);
    int st = th_wait_exit(w->pid, 15000);
    for (int i = 0; i < 8; i++)
        if (live_web[i] == w->pid)
            live_web[i] = 0;
    char *log = slurp_path(w->log);
    cr_expect_eq(st, 0, "skipq web exited %d: %s", st, log);
    cr_expect_null(strstr(log, "Sanitizer"), "%s", log);
    cr_expect_null(strstr(log, "runtime error:"), "%s", log);
    free(log);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

struct resp {
    int status;
    char *head; /* status line and headers */
    char *body;
    json_object *json; /* the body, parsed, when it is JSON */
    double ms;         /* the server's time (Server-Timing), -1 if absent */
};

static void resp_free(struct resp *r)
{
    free(r->head);
    json_object_put(r->json);
    memset(r, 0, sizeof *r);
}

/* A header's value (up to the line's end, copied into a static buffer),
 * or NULL. */
static const char *header(const struct resp *r, const char *name)
{
    static char v[1024];
    size_t n = strlen(name);
    for (const char *l = strstr(r->head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, name, n) == 0 && l[2 + n] == ':') {
            const char *s = l + 3 + n;
            while (*s == ' ')
                s++;
            size_t k = strcspn(s, "\r");
            snprintf(v, sizeof v, "%.*s", (int)(k < sizeof v ? k : sizeof v - 1), s);
            return v;
        }
    }
    return NULL;
}

/* One request on a connection of its own. `headers`: more header lines,
 * each ending in \r\n ("Host:" among them replaces the default one). */
static struct resp http(int port, const char *method, const char *path, const char *headers, const char *body)
{
    struct resp r = {.ms = -1};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return r;
    }
    headers = headers ? headers : "";
    size_t cap = strlen(path) + strlen(headers) + (body ? strlen(body) : 0) + 512;
    char *req = malloc(cap);
    char host[64] = "";
    if (!strcasestr(headers, "Host:"))
        snprintf(host, sizeof host, "Host: 127.0.0.1:%d\r\n", port);
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\n%sConnection: close\r\n%s", method, path, host, headers);
    if (body)
        n += snprintf(req + n, cap - (size_t)n, "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    else
        n += snprintf(req + n, cap - (size_t)n, "\r\n");
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    free(req);
    size_t len = 0, size = 1 << 16;
    char *buf = malloc(size);
    for (;;) {
        if (len + 4096 > size)
            buf = realloc(buf, size *= 2);
        ssize_t got = recv(fd, buf + len, size - len - 1, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r.status) != 1) {
        free(buf);
        return r;
    }
    *sep = '\0';
    r.head = buf;
    r.body = sep + 4;
    const char *type = header(&r, "Content-Type");
    if (type && strstr(type, "application/json"))
        r.json = json_tokener_parse(r.body);
    const char *timing = header(&r, "Server-Timing");
    if (timing && strstr(timing, "dur="))
        r.ms = strtod(strstr(timing, "dur=") + 4, NULL);
    return r;
}

static struct resp get(int port, const char *path)
{
    return http(port, "GET", path, NULL, NULL);
}

static bool answers(int port)
{
    struct resp r = get(port, "/api/session");
    bool ok = r.status != 0;
    resp_free(&r);
    return ok;
}

/* A member by a dotted path ("job.status", "jobs.0.id"), or NULL. */
static json_object *jat(json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        if (json_object_is_type(o, json_type_array))
            o = json_object_array_get_idx(o, (size_t)atoi(k));
        else if (!json_object_object_get_ex(o, k, &o))
            o = NULL;
    }
    return o;
}

static const char *jstr(json_object *o, const char *path)
{
    json_object *v = jat(o, path);
    return v ? json_object_get_string(v) : "(absent)";
}

static long long jint(json_object *o, const char *path)
{
    json_object *v = jat(o, path);
    return v ? json_object_get_int64(v) : -999;
}

static size_t jlen(json_object *o, const char *path)
{
    json_object *v = jat(o, path);
    return v && json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
}

/* The CSRF token an action needs, from /api/session (with `auth` headers). */
static char *csrf(int port, const char *auth)
{
    struct resp r = http(port, "GET", "/api/session", auth, NULL);
    cr_assert_eq(r.status, 200, "session: %d %s", r.status, r.body);
    char *t = strdup(jstr(r.json, "csrf"));
    resp_free(&r);
    return t;
}

/* POST a JSON action with the CSRF token and `auth` headers. */
static struct resp act(int port, const char *token, const char *auth, const char *path, const char *body)
{
    char h[1024];
    snprintf(h, sizeof h, "Content-Type: application/json\r\nX-CSRF-Token: %s\r\n%s", token, auth ? auth : "");
    return http(port, "POST", path, h, body);
}

/* ---- the database ------------------------------------------------------------------------------ */

static const char *status_of(PGconn *c, int64_t id)
{
    static char s[32];
    PGresult *r = th_query(c, "SELECT 1"); /* keep the connection warm */
    PQclear(r);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT status FROM skipq.jobs WHERE id = %lld", (long long)id);
    r = th_query(c, sql);
    snprintf(s, sizeof s, "%s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "(none)");
    PQclear(r);
    return s;
}

/* A dead job with one dead execution, as a host leaves one, made by SQL. */
static int64_t dead_job(PGconn *c, const char *kind, const char *queue, const char *error)
{
    const char *params[3] = {kind, queue, error};
    PGresult *r = PQexecParams(c,
                               "WITH j AS (INSERT INTO skipq.jobs (queue, kind, payload, status, attempts,"
                               "                               max_attempts, finished_at, last_error)"
                               "           VALUES ($2, $1, '{}', 'dead', 1, 1, now(), $3) RETURNING id)"
                               ", e AS (INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at,"
                               "                                          finished_at, status, error)"
                               "        SELECT id, 1, 'sql:1:w0', now() - interval '5 ms', now(), 'dead', $3 FROM j)"
                               " SELECT id FROM j",
                               3, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    int64_t id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return id;
}

/* skipq.enqueue with keys, run_at delay and parents. */
static int64_t enqueue_ex(PGconn *c, const char *kind, const char *payload, const char *queue, const char *unique_key,
                          const char *ordering_key, const char *depends_on, int delay_s)
{
    char delay[32];
    snprintf(delay, sizeof delay, "%d seconds", delay_s);
    const char *params[7] = {kind, payload, queue, delay, unique_key, ordering_key, depends_on};
    PGresult *r = PQexecParams(c,
                               "SELECT skipq.enqueue($1, $2::jsonb, $3, 0, now() + $4::interval, 5, $5, NULL, $6,"
                               "                     $7::bigint[])",
                               7, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    int64_t id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return id;
}

/* ---- pages and headers ------------------------------------------------------------------------- */

static void expect_security_headers(const struct resp *r, const char *what)
{
    const char *csp = header(r, "Content-Security-Policy");
    cr_expect(csp && strstr(csp, "script-src 'self'") && strstr(csp, "frame-ancestors 'none'") &&
                  strstr(csp, "default-src 'none'") && !strstr(csp, "unsafe"),
              "%s: Content-Security-Policy %s", what, csp ? csp : "(none)");
    const char *nosniff = header(r, "X-Content-Type-Options");
    cr_expect(nosniff && strcmp(nosniff, "nosniff") == 0, "%s: X-Content-Type-Options", what);
    const char *xfo = header(r, "X-Frame-Options");
    cr_expect(xfo && strcmp(xfo, "DENY") == 0, "%s: X-Frame-Options", what);
    const char *ref = header(r, "Referrer-Policy");
    cr_expect(ref && strcmp(ref, "no-referrer") == 0, "%s: Referrer-Policy", what);
}

Test(web, serves_its_page_and_assets_with_the_security_headers_on_every_response, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct web w;
    web_start(&w, &db, NULL);
    struct resp r = get(w.port, "/");
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(header(&r, "Content-Type"), "text/html") != NULL);
    cr_expect(strstr(r.body, "<script src=\"/assets/app.js\" defer></script>") != NULL, "%s", r.body);
    cr_expect(strstr(r.body, "<script>") == NULL, "an inline script in the page");
    expect_security_headers(&r, "/");
    resp_free(&r);
    static const char *const assets[][2] = {{"/assets/app.js", "text/javascript"},
                                            {"/assets/charts.js", "text/javascript"},
                                            {"/assets/app.css", "text/css"},
                                            {"/assets/icon.svg", "image/svg+xml"}};
    for (size_t i = 0; i < 4; i++) {
        r = get(w.port, assets[i][0]);
        cr_expect_eq(r.status, 200, "%s", assets[i][0]);
        cr_expect(strstr(header(&r, "Content-Type"), assets[i][1]) != NULL, "%s", assets[i][0]);
        expect_security_headers(&r, assets[i][0]);
        /* nothing that parses text as markup or code */
        static const char *const never[] = {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                                            "eval(", "new Function", "setTimeout('", "javascript:"};
        for (size_t k = 0; strstr(assets[i][0], ".js") && k < sizeof never / sizeof never[0]; k++)
            cr_expect(strstr(r.body, never[k]) == NULL, "%s holds %s", assets[i][0], never[k]);
        resp_free(&r);
    }
    r = get(w.port, "/api/session");
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(header(&r, "Cache-Control"), "no-store");
    expect_security_headers(&r, "/api/session");
    cr_expect_eq(json_object_get_boolean(jat(r.json, "actions")), 1);
    cr_expect_eq(strlen(jstr(r.json, "csrf")), 64);
    resp_free(&r);
    r = get(w.port, "/assets/nothing.js");
    cr_expect_eq(r.status, 404);
    expect_security_headers(&r, "404");
    resp_free(&r);
    r = get(w.port, "/api/nothing");
    cr_expect_eq(r.status, 404);
    cr_expect_str_eq(jstr(r.json, "error"), "no such API route");
    resp_free(&r);
    r = http(w.port, "DELETE", "/api/jobs", NULL, NULL);
    cr_expect_eq(r.status, 405);
    resp_free(&r);
    r = http(w.port, "GET", "/api/retry", NULL, NULL);
    cr_expect_eq(r.status, 405, "an action by GET");
    resp_free(&r);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- overview and charts ---------------------------------------------------------------------- */

/* The row of queue/kind in an array of rows, or NULL. */
static json_object *row_of(json_object *rows, const char *queue, const char *kind)
{
    for (size_t i = 0; rows && i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i);
        if (strcmp(jstr(r, "queue"), queue) == 0 && strcmp(jstr(r, "kind"), kind) == 0)
            return r;
    }
    return NULL;
}

Test(web, the_overview_counts_what_stats_counts_and_the_charts_count_every_attempt, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/ledger", th_tmpdir());
    /* 20 done, 3 retried once then done, 2 dead; 4 ready on a queue nobody
     * serves; 2 scheduled; 1 blocked */
    for (int i = 0; i < 20; i++)
        th_enqueue(db.conn, "test", "{}", "default", 0, 5);
    for (int i = 0; i < 3; i++)
        th_enqueue(db.conn, "test", "{\"fail_times\": 1, \"retry_in_ms\": 10}", "default", 0, 5);
    for (int i = 0; i < 2; i++)
        th_enqueue(db.conn, "test", "{\"permanent\": \"no such mailbox\"}", "default", 0, 5);
    for (int i = 0; i < 4; i++)
        th_enqueue(db.conn, "mail", "{}", "nobody", 0, 5);
    int64_t parent = enqueue_ex(db.conn, "mail", "{}", "nobody", NULL, NULL, NULL, 3600);
    enqueue_ex(db.conn, "mail", "{}", "nobody", NULL, NULL, NULL, 3600);
    char deps[32];
    snprintf(deps, sizeof deps, "{%lld}", (long long)parent);
    enqueue_ex(db.conn, "mail", "{}", "nobody", NULL, NULL, deps, 0);
    char *ini = th_host_ini(&db, "ov", NULL, ledger, "[queue default]\nthreads = 2\nkinds = test\n");
    pid_t host = th_host_start(ini);
    cr_assert_eq(th_wait_scalar(db.conn, 25, 30000,
                                "SELECT count(*) FROM skipq.jobs"
                                " WHERE queue = 'default' AND status IN ('done', 'dead')"),
                 25);
    struct web w;
    web_start(&w, &db, NULL);
    struct resp r = get(w.port, "/api/overview");
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_object *def = row_of(jat(r.json, "queues"), "default", "test");
    json_object *nob = row_of(jat(r.json, "queues"), "nobody", "mail");
    cr_assert(def && nob, "%s", r.body);
    cr_expect_eq(jint(def, "done_1h"), 23);
    cr_expect_eq(jint(def, "dead_1h"), 2);
    cr_expect_eq(jint(nob, "ready"), 4);
    cr_expect_eq(jint(nob, "scheduled"), 2);
    cr_expect_eq(jint(nob, "blocked"), 1);
    cr_expect_eq(jint(row_of(jat(r.json, "dead_now"), "default", "test"), "dead"), 2);
    cr_expect_eq(jlen(r.json, "unserved"), 1);
    cr_expect_str_eq(jstr(r.json, "unserved.0.queue"), "nobody");
    cr_expect_eq(jint(r.json, "hosts_alive"), 1);
    /* the same numbers as `skipq stats --json` */
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "stats", "--json", "--db", db.conninfo, NULL), 0);
    json_object *stats = json_tokener_parse(out);
    json_object *sdef = row_of(jat(stats, "queues"), "default", "test");
    static const char *const cols[] = {"ready",   "scheduled", "blocked", "running",
                                       "done_1h", "dead_1h",   "done",    "dead"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        cr_expect_eq(jint(def, cols[i]), jint(sdef, cols[i]), "%s: web %lld, stats %lld", cols[i],
                     jint(def, cols[i]), jint(sdef, cols[i]));
    json_object_put(stats);
    free(out);
    resp_free(&r);

    /* 28 attempts ended: 23 done; 3 retried and 2 dead, which count as failed */
    static const char *const ranges[] = {"hour", "day"};
    for (int k = 0; k < 2; k++) {
        for (int pass = 0; pass < 2; pass++) { /* the second from the kept buckets */
            char path[64];
            snprintf(path, sizeof path, "/api/throughput?range=%s", ranges[k]);
            r = get(w.port, path);
            cr_assert_eq(r.status, 200, "%s", r.body);
            long long done = 0, failed = 0;
            size_t n = jlen(r.json, "buckets");
            cr_expect_eq(n, k ? 96u : 60u);
            for (size_t i = 0; i < n; i++) {
                char p[64];
                snprintf(p, sizeof p, "buckets.%zu.done", i);
                done += jint(r.json, p);
                snprintf(p, sizeof p, "buckets.%zu.failed", i);
                failed += jint(r.json, p);
            }
            cr_expect_eq(done, 23, "%s: %lld done", ranges[k], done);
            cr_expect_eq(failed, 5, "%s: %lld failed (3 retries, 2 dead)", ranges[k], failed);
            resp_free(&r);
        }
    }
    cr_expect_eq(th_host_stop(host, 15000), 0);
    web_stop(&w);
    free(ini);
    PQfinish(db.conn);
}

/* ---- jobs -------------------------------------------------------------------------------------- */

/* The ids /api/jobs?QUERY returns, as "3,2,1". */
static char *ids_of(int port, const char *query)
{
    char path[1024];
    snprintf(path, sizeof path, "/api/jobs?%s", query);
    struct resp r = get(port, path);
    cr_assert_eq(r.status, 200, "%s: %d %s", query, r.status, r.body);
    char *s = calloc(1, 4096);
    for (size_t i = 0; i < jlen(r.json, "jobs"); i++) {
        char p[32];
        snprintf(p, sizeof p, "jobs.%zu.id", i);
        snprintf(s + strlen(s), 4096 - strlen(s), "%s%lld", i ? "," : "", jint(r.json, p));
    }
    resp_free(&r);
    return s;
}

/* An instant as ISO 8601 in UTC, for a query string. */
static const char *iso(PGconn *c, const char *expr)
{
    static char out[4][40];
    static int k;
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT to_char((%s) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')", expr);
    PGresult *r = th_query(c, sql);
    char *s = out[k++ % 4];
    snprintf(s, 40, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return s;
}

#define EXPECT_IDS(port, query, want)                                                                       \
    do {                                                                                                    \
        char *got_ = ids_of(port, query);                                                                   \
        cr_expect_str_eq(got_, want, "%s", query);                                                          \
        free(got_);                                                                                         \
    } while (0)

Test(web, filters_jobs_by_queue_kind_status_keys_error_text_and_creation_time, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t a = enqueue_ex(db.conn, "mail", "{}", "default", "order-7", NULL, NULL, 0);
    int64_t b = enqueue_ex(db.conn, "mail", "{}", "reports", NULL, "customer-1", NULL, 0);
    int64_t c = enqueue_ex(db.conn, "pdf", "{}", "reports", NULL, "customer-1", NULL, 0);
    int64_t d = dead_job(db.conn, "pdf", "reports", "Timeout after 30012 ms");
    int64_t e = dead_job(db.conn, "mail", "default", "smtp 550: mailbox unavailable");
    th_execf(db.conn, "UPDATE skipq.jobs SET created_at = now() - interval '2 days' WHERE id = %lld", (long long)a);
    struct web w;
    web_start(&w, &db, NULL);
    char want[128];
    snprintf(want, sizeof want, "%lld,%lld,%lld,%lld,%lld", (long long)e, (long long)d, (long long)c, (long long)b,
             (long long)a);
    EXPECT_IDS(w.port, "", want);
    snprintf(want, sizeof want, "%lld,%lld,%lld", (long long)d, (long long)c, (long long)b);
    EXPECT_IDS(w.port, "queue=reports", want);
    snprintf(want, sizeof want, "%lld,%lld", (long long)d, (long long)c);
    EXPECT_IDS(w.port, "kind=pdf", want);
    snprintf(want, sizeof want, "%lld", (long long)c);
    EXPECT_IDS(w.port, "kind=pdf&status=pending", want);
    snprintf(want, sizeof want, "%lld,%lld", (long long)e, (long long)d);
    EXPECT_IDS(w.port, "status=dead", want);
    snprintf(want, sizeof want, "%lld", (long long)a);
    EXPECT_IDS(w.port, "unique_key=order-7", want);
    snprintf(want, sizeof want, "%lld,%lld", (long long)c, (long long)b);
    EXPECT_IDS(w.port, "ordering_key=customer-1", want);
    snprintf(want, sizeof want, "%lld", (long long)d);
    EXPECT_IDS(w.port, "error=timeout%20AFTER", want); /* any case */
    EXPECT_IDS(w.port, "error=%25", "");                /* no pattern: a % is a %, and no error holds one */
    char q[160];
    snprintf(want, sizeof want, "%lld", (long long)a);
    snprintf(q, sizeof q, "to=%s", iso(db.conn, "now() - interval '1 day'"));
    EXPECT_IDS(w.port, q, want);
    snprintf(want, sizeof want, "%lld,%lld,%lld,%lld", (long long)e, (long long)d, (long long)c, (long long)b);
    snprintf(q, sizeof q, "from=%s", iso(db.conn, "now() - interval '1 hour'"));
    EXPECT_IDS(w.port, q, want);
    snprintf(q, sizeof q, "from=%s&to=%s", iso(db.conn, "now() - interval '3 days'"),
             iso(db.conn, "now() - interval '1 hour'"));
    snprintf(want, sizeof want, "%lld", (long long)a);
    EXPECT_IDS(w.port, q, want);
    /* keyset: below an id, a page at a time */
    snprintf(want, sizeof want, "%lld,%lld", (long long)b, (long long)a);
    snprintf(q, sizeof q, "before=%lld", (long long)c);
    EXPECT_IDS(w.port, q, want);
    struct resp r = get(w.port, "/api/jobs?limit=2");
    cr_expect_eq(jlen(r.json, "jobs"), 2);
    cr_expect_eq(jint(r.json, "next_before"), d);
    resp_free(&r);
    r = get(w.port, "/api/jobs?limit=5");
    cr_expect_null(jat(r.json, "next_before"), "a full last page has no next");
    resp_free(&r);
    web_stop(&w);
    PQfinish(db.conn);
}

/* Page through every job with `query` (limit per page); checks each id
 * comes once, newest first; the server's times into ms[] (returns pages). */
static int page_all(int port, const char *query, int limit, long long total, double *ms, int max_pages)
{
    long long seen = 0, last = 0;
    int pages = 0;
    char before[32] = "";
    for (;;) {
        char path[256];
        snprintf(path, sizeof path, "/api/jobs?%s%slimit=%d%s%s", query, *query ? "&" : "", limit,
                 *before ? "&before=" : "", before);
        struct resp r = get(port, path);
        cr_assert_eq(r.status, 200, "%s: %s", path, r.body);
        if (pages < max_pages)
            ms[pages] = r.ms;
        pages++;
        for (size_t i = 0; i < jlen(r.json, "jobs"); i++) {
            char p[32];
            snprintf(p, sizeof p, "jobs.%zu.id", i);
            long long id = jint(r.json, p);
            cr_assert(last == 0 || id < last, "ids out of order: %lld after %lld", id, last);
            last = id;
            seen++;
        }
        json_object *next = jat(r.json, "next_before");
        if (next)
            snprintf(before, sizeof before, "%lld", (long long)json_object_get_int64(next));
        resp_free(&r);
        if (!next)
            break;
    }
    cr_expect_eq(seen, total, "%s: %lld jobs paged, %lld expected", query, seen, total);
    return pages;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* p50, p95, max of n times. */
static void percentiles(double *ms, int n, double *p50, double *p95, double *max)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    *p50 = ms[n / 2];
    *p95 = ms[(n * 95) / 100];
    *max = ms[n - 1];
}

Test(web, pages_through_100000_jobs_by_keyset_in_under_50_ms_a_page, .timeout = 300)
{
    struct th_db db;
    th_db_new(&db);
    /* 100,000 jobs, as a day of work leaves them: most done, 1 % dead,
     * the newest 2,000 pending; seven kinds on two queues */
    th_execf(db.conn,
             "INSERT INTO skipq.jobs (queue, kind, payload, status, attempts, finished_at, last_error, created_at)"
             " SELECT CASE WHEN g %% 4 = 0 THEN 'reports' ELSE 'default' END, 'kind' || (g %% 7),"
             "        jsonb_build_object('n', g),"
             "        CASE WHEN g > 98000 THEN 'pending' WHEN g %% 100 = 3 THEN 'dead' ELSE 'done' END,"
             "        CASE WHEN g > 98000 THEN 0 ELSE 1 END,"
             "        CASE WHEN g <= 98000 THEN now() - interval '1 day' + g * interval '800 ms' END,"
             "        CASE WHEN g <= 98000 AND g %% 100 = 3 THEN 'timeout after ' || g || ' ms' END,"
             "        now() - interval '1 day' + g * interval '800 ms'"
             "   FROM generate_series(1, 100000) g");
    th_execf(db.conn, "ANALYZE skipq.jobs");
    struct web w;
    web_start(&w, &db, NULL);
    static double ms[2100];
    double p50, p95, max;
    int pages = page_all(w.port, "", 50, 100000, ms, 2100);
    percentiles(ms, pages, &p50, &p95, &max);
    cr_log_info("100,000 jobs, 50 a page: %d pages; server time p50 %.1f ms, p95 %.1f ms, max %.1f ms", pages, p50,
                p95, max);
    cr_expect_eq(pages, 2000);
    cr_expect_lt(p95, 50.0, "p95 of a page: %.1f ms", p95);
    pages = page_all(w.port, "", 500, 100000, ms, 2100);
    percentiles(ms, pages, &p50, &p95, &max);
    cr_log_info("500 a page: %d pages; p50 %.1f ms, p95 %.1f ms, max %.1f ms", pages, p50, p95, max);
    pages = page_all(w.port, "status=dead", 50, 980, ms, 2100);
    percentiles(ms, pages, &p50, &p95, &max);
    cr_log_info("status=dead (980 of them), 50 a page: p50 %.1f ms, p95 %.1f ms, max %.1f ms", p50, p95, max);
    cr_expect_lt(p95, 50.0, "p95 of a page of dead jobs: %.1f ms", p95);
    pages = page_all(w.port, "queue=reports&kind=kind3", 50, 3571, ms, 2100);
    percentiles(ms, pages, &p50, &p95, &max);
    cr_log_info("queue=reports&kind=kind3 (3,571), 50 a page: p50 %.1f ms, p95 %.1f ms, max %.1f ms", p50, p95, max);
    cr_expect_lt(p95, 50.0, "p95 of a page of one queue and kind: %.1f ms", p95);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- bad input ---------------------------------------------------------------------------------- */

/* One dashboard per database: --database picks a section of a file that
 * declares several, as for the other commands, and which one is never
 * guessed. */
Test(web, shows_the_database_that_database_names, .timeout = 60)
{
    struct th_db a, b;
    th_db_new(&a);
    th_db_new(&b);
    th_enqueue(a.conn, "test", "{}", "qa", 0, 0);
    int64_t in_b = th_enqueue(b.conn, "test", "{}", "qb", 0, 0);
    char text[2048];
    snprintf(text, sizeof text, "[database]\nurl = %s\n\n[database b]\nurl = %s\n", a.conninfo, b.conninfo);
    char *two = th_write_file("web-two.ini", text);
    const char *args[] = {"-c", two, "--database", "b", NULL};
    struct web w;
    web_start(&w, NULL, args);
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)in_b);
    EXPECT_IDS(w.port, "queue=qb", want);
    EXPECT_IDS(w.port, "queue=qa", "");
    web_stop(&w);

    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "web", "-c", two, "--database", "nowhere", NULL), 2);
    cr_expect_not_null(strstr(err, "no [database nowhere] section (its databases: default, b)"), "%s", err);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "web", "--database", "b", NULL), 2);
    cr_expect_not_null(strstr(err, "--database b names a section of the INI file: give it with -c FILE"), "%s", err);
    free(err);
    snprintf(text, sizeof text, "[database eu]\nurl = %s\n\n[database us]\nurl = %s\n", a.conninfo, b.conninfo);
    char *named = th_write_file("web-named.ini", text);
    cr_expect_eq(th_cli(NULL, &err, "web", "-c", named, NULL), 2);
    cr_expect_not_null(strstr(err, "declares [database eu], [database us] and no [database]: say which with "
                                   "--database NAME"),
                       "%s", err);
    free(err);
}

Test(web, bad_parameters_are_400_with_a_message_naming_them, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct web w;
    web_start(&w, &db, NULL);
    static const char *const cases[][2] = {
        {"/api/jobs?colour=red", "unknown parameter \"colour\""},
        {"/api/jobs?queue=a&queue=b", "parameter \"queue\" given twice"},
        {"/api/jobs?status=finished", "status: \"finished\" is not blocked, pending"},
        {"/api/jobs?queue=no%20spaces", "queue: \"no spaces\" is not a queue name"},
        {"/api/jobs?kind=%3Cscript%3E", "kind: \"<script>\" is not a kind name"},
        {"/api/jobs?before=0", "before: \"0\" is out of range"},
        {"/api/jobs?before=12abc", "before: \"12abc\""},
        {"/api/jobs?limit=501", "limit: \"501\" is out of range"},
        {"/api/jobs?limit=-1", "limit: \"-1\""},
        {"/api/jobs?from=yesterday%20noon", "from: invalid input syntax for type timestamp"},
        {"/api/jobs?to=2026-02-30T00:00:00Z", "to: date/time field value out of range"},
        {"/api/jobs?error=%FF%FE", "parameter \"error\" is not UTF-8 text"},
        {"/api/jobs/abc", "job id: \"abc\""},
        {"/api/jobs/0", "job id: \"0\" is out of range"},
        {"/api/jobs/99999999999999999999", "job id: \"99999999999999999999\""},
        {"/api/throughput?range=week", "range: \"week\" is not hour or day"},
        {"/api/dead/jobs?kind=mail", "give kind and group"},
        {"/api/overview?x=1", "unknown parameter \"x\"; this route takes none"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct resp r = get(w.port, cases[i][0]);
        cr_expect_eq(r.status, 400, "%s: %d %s", cases[i][0], r.status, r.body);
        cr_expect(strstr(jstr(r.json, "error"), cases[i][1]) != NULL, "%s: %s", cases[i][0], r.body);
        resp_free(&r);
    }
    char path[400] = "/api/jobs?unique_key=";
    memset(path + strlen(path), 'k', 257);
    struct resp r = get(w.port, path);
    cr_expect_eq(r.status, 400);
    cr_expect_str_eq(jstr(r.json, "error"), "unique_key: at most 256 characters");
    resp_free(&r);
    r = get(w.port, "/api/jobs/12345");
    cr_expect_eq(r.status, 404);
    cr_expect_str_eq(jstr(r.json, "error"), "no job with id 12345");
    resp_free(&r);

    /* actions: the body is checked whole before anything runs */
    int64_t dead = dead_job(db.conn, "mail", "default", "boom");
    char *t = csrf(w.port, NULL);
    static const char *const bodies[][3] = {
        {"/api/retry", "not json", "the body must be one JSON object"},
        {"/api/retry", "[1]", "the body must be one JSON object"},
        {"/api/retry", "{\"ids\": [1]} {}", "the body must be one JSON object"},
        {"/api/retry", "{\"ids\": [1], \"colour\": 1}", "unknown field \"colour\""},
        {"/api/retry", "{\"ids\": []}", "ids: give 1 to 10000 job ids (got 0)"},
        {"/api/retry", "{\"ids\": \"1\"}", "ids: give an array of job ids"},
        {"/api/retry", "{\"ids\": [1, -2]}", "ids: element 1 is not a job id"},
        {"/api/retry", "{\"ids\": [1.5]}", "ids: element 0 is not a job id"},
        {"/api/retry", "{\"ids\": [99999999999999999999]}", "ids: element 0 is not a job id"},
        {"/api/retry", "{\"ids\": [1], \"attempts\": 0}", "attempts: give a whole number from 1 to 100000"},
        {"/api/retry", "{\"ids\": [1], \"kind\": \"mail\", \"group\": \"boom\"}", "give ids, or kind and group"},
        {"/api/retry", "{\"kind\": \"mail\"}", "give ids, or kind and group"},
        {"/api/pause", "{\"scope\": \"host\", \"name\": \"x\"}", "scope: give \"queue\" or \"kind\""},
        {"/api/pause", "{\"scope\": \"queue\", \"name\": \"a b\"}", "name: give a queue name"},
        {"/api/pause", "{\"scope\": \"queue\"}", "name: give a queue name"},
        {"/api/cancel", "{\"ids\": [1], \"why\": \"x\"}", "unknown field \"why\""},
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        r = act(w.port, t, NULL, bodies[i][0], bodies[i][1]);
        cr_expect_eq(r.status, 400, "%s %s: %d %s", bodies[i][0], bodies[i][1], r.status, r.body);
        cr_expect(strstr(jstr(r.json, "error"), bodies[i][2]) != NULL, "%s: %s", bodies[i][1], r.body);
        resp_free(&r);
    }
    char big[70000];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{';
    big[sizeof big - 2] = '}';
    r = act(w.port, t, NULL, "/api/retry", big);
    cr_expect_eq(r.status, 413, "%d %s", r.status, r.body);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, dead), "dead", "a refused request changed a job");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    free(t);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- one job -------------------------------------------------------------------------------------- */

Test(web, a_job_shows_its_pretty_payload_every_attempt_its_parents_children_and_ordering_key, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t parent = th_enqueue(db.conn, "test", "{}", "default", 0, 5);
    char deps[32];
    snprintf(deps, sizeof deps, "{%lld}", (long long)parent);
    int64_t job = enqueue_ex(db.conn, "test", "{\"fail_times\": 2, \"retry_in_ms\": 10, \"note\": \"<b>x</b>\"}",
                             "default", NULL, "acct-9", deps, 0);
    int64_t next = enqueue_ex(db.conn, "test", "{}", "default", NULL, "acct-9", NULL, 3600);
    int64_t child = enqueue_ex(db.conn, "later", "{}", "elsewhere", NULL, NULL, NULL, 0);
    char cdeps[32];
    snprintf(cdeps, sizeof cdeps, "{%lld}", (long long)child);
    int64_t grandchild = enqueue_ex(db.conn, "later", "{}", "elsewhere", NULL, NULL, cdeps, 0);
    char *ini = th_host_ini(&db, "job", NULL, NULL, "[queue default]\nkinds = test\n");
    pid_t host = th_host_start(ini);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'", (long long)job);
    cr_assert_eq(th_wait_scalar(db.conn, 1, 30000, sql), 1);
    struct web w;
    web_start(&w, &db, NULL);
    char path[64];
    snprintf(path, sizeof path, "/api/jobs/%lld", (long long)job);
    struct resp r = get(w.port, path);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(jstr(r.json, "job.status"), "done");
    cr_expect_str_eq(jstr(r.json, "job.payload_pretty"),
                     "{\n    \"note\": \"<b>x</b>\",\n    \"fail_times\": 2,\n    \"retry_in_ms\": 10\n}");
    cr_expect_null(jat(r.json, "job.payload"));
    cr_expect_eq(jlen(r.json, "executions"), 3);
    cr_expect_str_eq(jstr(r.json, "executions.0.status"), "retry");
    cr_expect_str_eq(jstr(r.json, "executions.0.error"), "planned failure 1 of 2");
    cr_expect_str_eq(jstr(r.json, "executions.1.status"), "retry");
    cr_expect_str_eq(jstr(r.json, "executions.2.status"), "done");
    for (int i = 0; i < 3; i++) {
        char p[64];
        snprintf(p, sizeof p, "executions.%d.started_at", i);
        const char *t = jstr(r.json, p);
        cr_expect(strlen(t) >= 20 && t[10] == 'T' && t[strlen(t) - 1] == 'Z', "not ISO 8601 UTC: %s", t);
        snprintf(p, sizeof p, "executions.%d.attempt", i);
        cr_expect_eq(jint(r.json, p), i + 1);
        snprintf(p, sizeof p, "executions.%d.worker", i);
        cr_expect(strncmp(jstr(r.json, p), "job:", 4) == 0, "%s", jstr(r.json, p));
    }
    cr_expect_eq(jint(r.json, "parents.0.id"), parent);
    cr_expect_str_eq(jstr(r.json, "parents.0.status"), "done");
    cr_expect_str_eq(jstr(r.json, "job.ordering_key"), "acct-9");
    cr_expect_eq(jint(r.json, "ordering.unfinished"), 1, "only the later job of the key is unfinished");
    cr_expect_eq(jint(r.json, "ordering.ahead"), 0);
    resp_free(&r);
    /* the later job of the key: the holder is nobody or it, and one unfinished ahead of none */
    snprintf(path, sizeof path, "/api/jobs/%lld", (long long)next);
    r = get(w.port, path);
    cr_expect_eq(jint(r.json, "ordering.unfinished"), 1);
    resp_free(&r);
    /* a parent nobody runs: its child waits on it */
    snprintf(path, sizeof path, "/api/jobs/%lld", (long long)child);
    r = get(w.port, path);
    cr_expect_eq(jlen(r.json, "waiting_children"), 1);
    cr_expect_eq(jint(r.json, "waiting_children.0.id"), grandchild);
    cr_expect_str_eq(jstr(r.json, "waiting_children.0.status"), "blocked");
    resp_free(&r);
    cr_expect_eq(th_host_stop(host, 15000), 0);
    web_stop(&w);
    free(ini);
    PQfinish(db.conn);
}

/* ---- dead jobs ------------------------------------------------------------------------------------- */

Test(web, dead_jobs_group_by_kind_and_error_with_digits_folded_and_a_group_retries_whole, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t t1 = dead_job(db.conn, "mail", "default", "timeout after 30012 ms");
    int64_t t2 = dead_job(db.conn, "mail", "reports", "timeout after 31877 ms");
    int64_t t3 = dead_job(db.conn, "mail", "default", "timeout after 5 ms");
    int64_t other = dead_job(db.conn, "mail", "default", "smtp 550: mailbox unavailable");
    int64_t pdf = dead_job(db.conn, "pdf", "default", "timeout after 30012 ms");
    struct web w;
    web_start(&w, &db, NULL);
    struct resp r = get(w.port, "/api/dead");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(jint(r.json, "dead"), 5);
    cr_expect_eq(jlen(r.json, "groups"), 3);
    cr_expect_str_eq(jstr(r.json, "groups.0.kind"), "mail");
    cr_expect_str_eq(jstr(r.json, "groups.0.error_group"), "timeout after N ms");
    cr_expect_eq(jint(r.json, "groups.0.jobs"), 3);
    cr_expect_eq(jint(r.json, "groups.0.newest_id"), t3);
    cr_expect_str_eq(jstr(r.json, "groups.0.example"), "timeout after 5 ms");
    resp_free(&r);
    r = get(w.port, "/api/dead/jobs?kind=mail&group=timeout%20after%20N%20ms&limit=2");
    cr_expect_eq(jlen(r.json, "jobs"), 2);
    cr_expect_eq(jint(r.json, "jobs.0.id"), t3);
    cr_expect_eq(jint(r.json, "next_before"), t2);
    resp_free(&r);

    char *t = csrf(w.port, NULL);
    r = act(w.port, t, NULL, "/api/retry", "{\"kind\": \"mail\", \"group\": \"timeout after N ms\"}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(jint(r.json, "retried"), 3);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, t1), "pending");
    cr_expect_str_eq(status_of(db.conn, t2), "pending");
    cr_expect_str_eq(status_of(db.conn, t3), "pending");
    cr_expect_str_eq(status_of(db.conn, other), "dead", "another error's group was retried");
    cr_expect_str_eq(status_of(db.conn, pdf), "dead", "another kind's group was retried");
    /* as `skipq retry` does: attempts extended, not reset */
    cr_expect_eq(th_scalarf(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE id = %lld", (long long)t1), 2);
    /* one job, by id; and again: no longer dead, nothing to do */
    char body[64];
    snprintf(body, sizeof body, "{\"ids\": [%lld], \"attempts\": 3}", (long long)pdf);
    r = act(w.port, t, NULL, "/api/retry", body);
    cr_expect_eq(jint(r.json, "retried"), 1);
    resp_free(&r);
    cr_expect_eq(th_scalarf(db.conn, "SELECT max_attempts FROM skipq.jobs WHERE id = %lld", (long long)pdf), 4);
    r = act(w.port, t, NULL, "/api/retry", body);
    cr_expect_eq(jint(r.json, "retried"), 0);
    cr_expect_eq(jint(r.json, "asked"), 1);
    resp_free(&r);
    free(t);
    web_stop(&w);
    PQfinish(db.conn);
}

Test(web, cancel_follows_the_cli_rules, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t pending = th_enqueue(db.conn, "mail", "{}", "default", 0, 5);
    int64_t dead = dead_job(db.conn, "mail", "default", "boom");
    struct web w;
    web_start(&w, &db, NULL);
    char *t = csrf(w.port, NULL);
    char body[96];
    snprintf(body, sizeof body, "{\"ids\": [%lld, %lld, 424242]}", (long long)pending, (long long)dead);
    struct resp r = act(w.port, t, NULL, "/api/cancel", body);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(jint(r.json, "cancelled"), 1);
    cr_expect_eq(jint(r.json, "asked"), 3);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, pending), "cancelled");
    cr_expect_str_eq(status_of(db.conn, dead), "dead", "a dead job is not cancelled");
    /* retry by id takes cancelled jobs back, as the CLI's does */
    snprintf(body, sizeof body, "{\"ids\": [%lld]}", (long long)pending);
    r = act(w.port, t, NULL, "/api/retry", body);
    cr_expect_eq(jint(r.json, "retried"), 1);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, pending), "pending");
    free(t);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- who may act ---------------------------------------------------------------------------------- */

static char *token_file(const char *name, const char *token, mode_t mode)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", th_tmpdir(), name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
    return strdup(path);
}

#define TOKEN "0123456789abcdef0123456789abcdef"

Test(web, actions_without_or_with_a_wrong_token_or_csrf_token_are_403_and_change_nothing, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t dead = dead_job(db.conn, "mail", "default", "boom");
    int64_t pending = th_enqueue(db.conn, "mail", "{}", "default", 0, 5);
    char *tf = token_file("token", TOKEN, 0600);
    const char *args[] = {"--token-file", tf, NULL};
    struct web w;
    web_start(&w, &db, args);
    static const char auth[] = "Authorization: Bearer " TOKEN "\r\n";
    char *t = csrf(w.port, auth);
    char retry[64], cancel[64];
    snprintf(retry, sizeof retry, "{\"ids\": [%lld]}", (long long)dead);
    snprintf(cancel, sizeof cancel, "{\"ids\": [%lld]}", (long long)pending);
    struct {
        const char *why;
        const char *token; /* X-CSRF-Token */
        const char *auth;  /* more headers */
        const char *error;
    } refused[] = {
        {"no token", t, "", "a token is required"},
        {"a wrong token", t, "Authorization: Bearer 0123456789abcdef0123456789abcdeX\r\n", "wrong token"},
        {"a token one character short", t, "Authorization: Bearer 0123456789abcdef0123456789abcde\r\n", "wrong token"},
        {"the token by another scheme", t, "Authorization: Basic " TOKEN "\r\n", "must be \"Bearer TOKEN\""},
        {"a cookie from another process", t, "Cookie: skipq_session=00ff\r\n", "the session has ended"},
        {"no CSRF token", "", auth, "missing or wrong X-CSRF-Token"},
        {"a wrong CSRF token", "0000000000000000000000000000000000000000000000000000000000000000", auth,
         "missing or wrong X-CSRF-Token"},
        {"another site's request", t, "Authorization: Bearer " TOKEN "\r\nSec-Fetch-Site: cross-site\r\n",
         "must come from the dashboard's own page"},
    };
    static const char *const paths[] = {"/api/retry", "/api/cancel", "/api/pause", "/api/resume"};
    const char *bodies[] = {retry, cancel, "{\"scope\": \"queue\", \"name\": \"default\"}",
                            "{\"scope\": \"queue\", \"name\": \"default\"}"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        for (size_t k = 0; k < 4; k++) {
            struct resp r = act(w.port, refused[i].token, refused[i].auth, paths[k], bodies[k]);
            cr_expect_eq(r.status, 403, "%s, %s: %d %s", refused[i].why, paths[k], r.status, r.body);
            cr_expect(strstr(jstr(r.json, "error"), refused[i].error) != NULL, "%s: %s", refused[i].why, r.body);
            resp_free(&r);
        }
    }
    /* the form a page on another site could send without asking: no JSON */
    struct resp r = http(w.port, "POST", "/api/retry",
                         "Authorization: Bearer " TOKEN "\r\nContent-Type: text/plain\r\nX-CSRF-Token: x\r\n", retry);
    cr_expect_eq(r.status, 403);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, dead), "dead", "a refused retry changed the job");
    cr_expect_str_eq(status_of(db.conn, pending), "pending", "a refused cancel changed the job");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0, "a refused pause paused");
    /* with everything right */
    r = act(w.port, t, auth, "/api/retry", retry);
    cr_expect_eq(r.status, 200, "%s", r.body);
    resp_free(&r);
    r = act(w.port, t, auth, "/api/cancel", cancel);
    cr_expect_eq(r.status, 200, "%s", r.body);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, dead), "pending");
    cr_expect_str_eq(status_of(db.conn, pending), "cancelled");
    /* a text/plain POST with the right tokens is still refused: JSON only */
    r = http(w.port, "POST", "/api/cancel", "Authorization: Bearer " TOKEN "\r\nContent-Type: text/plain\r\n", retry);
    cr_expect_eq(r.status, 403);
    resp_free(&r);
    free(t);
    web_stop(&w);
    free(tf);
    PQfinish(db.conn);
}

Test(web, read_only_mode_hides_and_refuses_actions, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    int64_t dead = dead_job(db.conn, "mail", "default", "boom");
    const char *args[] = {"--read-only", NULL};
    struct web w;
    web_start(&w, &db, args);
    struct resp r = get(w.port, "/api/session");
    cr_expect_eq(json_object_get_boolean(jat(r.json, "actions")), 0);
    cr_expect_eq(json_object_get_boolean(jat(r.json, "read_only")), 1);
    cr_expect_str_eq(jstr(r.json, "why_no_actions"), "skipq web runs with --read-only");
    resp_free(&r);
    char *t = csrf(w.port, NULL);
    char body[64];
    snprintf(body, sizeof body, "{\"ids\": [%lld]}", (long long)dead);
    r = act(w.port, t, NULL, "/api/retry", body);
    cr_expect_eq(r.status, 403);
    cr_expect_str_eq(jstr(r.json, "error"), "skipq web runs with --read-only");
    resp_free(&r);
    r = act(w.port, t, NULL, "/api/pause", "{\"scope\": \"kind\", \"name\": \"mail\"}");
    cr_expect_eq(r.status, 403);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, dead), "dead");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    /* everything still reads */
    static const char *const pages[] = {"/api/overview", "/api/throughput", "/api/jobs", "/api/dead", "/api/hosts"};
    for (size_t i = 0; i < 5; i++) {
        r = get(w.port, pages[i]);
        cr_expect_eq(r.status, 200, "%s: %s", pages[i], r.body);
        resp_free(&r);
    }
    free(t);
    web_stop(&w);
    PQfinish(db.conn);
}

static void apply_roles(const struct th_db *db)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "psql -qX -v ON_ERROR_STOP=1 \"%s\" -f %s/sql/roles.sql >/dev/null 2>&1",
             db->conninfo, SKIPQ_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0, "roles.sql failed");
    /* Roles are cluster-wide: name them after this test's database. */
    th_execf(db->conn, "DROP ROLE IF EXISTS %s_r; CREATE ROLE %s_r LOGIN IN ROLE skipq_reader", db->name, db->name);
}

/* SQLSTATE of a statement run as `conn` ("" when it worked). */
static const char *sqlstate_of(PGconn *conn, const char *sql)
{
    static char st[8];
    PGresult *r = PQexec(conn, sql);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(st, sizeof st, "%s", s ? s : "");
    PQclear(r);
    return st;
}

Test(web, the_reader_role_reads_every_page_and_can_neither_act_nor_write, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    apply_roles(&db);
    int64_t dead = dead_job(db.conn, "mail", "default", "boom");
    th_execf(db.conn, "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick)"
                      " VALUES ('nightly', '30 2 * * *', 'Europe/Paris', now())");
    th_execf(db.conn, "INSERT INTO skipq.kind_limits (kind, max_running) VALUES ('mail', 2)");
    struct th_db as_reader = db;
    cr_assert_lt(strlen(db.conninfo) + strlen(db.name) + 10, sizeof as_reader.conninfo);
    strcat(as_reader.conninfo, " user=");
    strcat(as_reader.conninfo, db.name);
    strcat(as_reader.conninfo, "_r");
    struct web w;
    web_start(&w, &as_reader, NULL);
    struct resp r = get(w.port, "/api/session");
    char role[96];
    snprintf(role, sizeof role, "%s_r", db.name);
    cr_expect_str_eq(jstr(r.json, "role"), role);
    cr_expect_eq(json_object_get_boolean(jat(r.json, "actions")), 0);
    cr_expect_str_eq(jstr(r.json, "why_no_actions"), "the role may not update skipq.jobs and skipq.job_executions");
    resp_free(&r);
    char job[64];
    snprintf(job, sizeof job, "/api/jobs/%lld", (long long)dead);
    const char *pages[] = {"/api/overview", "/api/throughput?range=day", "/api/jobs?status=dead", job,
                           "/api/dead", "/api/dead/jobs?kind=mail&group=boom", "/api/hosts"};
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        r = get(w.port, pages[i]);
        cr_expect_eq(r.status, 200, "%s as the reader: %s", pages[i], r.body);
        resp_free(&r);
    }
    r = get(w.port, "/api/hosts");
    cr_expect_str_eq(jstr(r.json, "cron.0.name"), "nightly");
    cr_expect(strchr(jstr(r.json, "cron.0.next_tick"), 'T') != NULL, "%s", r.body);
    cr_expect_eq(jint(r.json, "limits.0.max_running"), 2);
    resp_free(&r);
    char *t = csrf(w.port, NULL);
    char body[64];
    snprintf(body, sizeof body, "{\"ids\": [%lld]}", (long long)dead);
    r = act(w.port, t, NULL, "/api/retry", body);
    cr_expect_eq(r.status, 403);
    cr_expect(strstr(jstr(r.json, "error"), "cannot act") != NULL, "%s", r.body);
    resp_free(&r);
    cr_expect_str_eq(status_of(db.conn, dead), "dead");
    free(t);
    web_stop(&w);

    /* and straight in SQL: nothing that writes */
    PGconn *rc = PQconnectdb(as_reader.conninfo);
    cr_assert_eq(PQstatus(rc), CONNECTION_OK, "%s", PQerrorMessage(rc));
    static const char *const forbidden[] = {
        "UPDATE skipq.jobs SET status = 'pending'",
        "DELETE FROM skipq.jobs",
        "INSERT INTO skipq.jobs (queue, kind) VALUES ('default', 'x')",
        "UPDATE skipq.job_executions SET status = 'done'",
        "INSERT INTO skipq.paused (scope, name, paused_by) VALUES ('queue', 'default', 'me')",
        "SELECT skipq.pause('queue', 'default')",
        "SELECT skipq.resume('queue', 'default')",
        "SELECT skipq.enqueue('mail')",
        "SELECT skipq.enqueue_many('[]')",
        "SELECT skipq.host_gone('x')",
        "SELECT skipq.advance_totals(1)",
        "SELECT skipq.settle_dependencies(1)",
        "DELETE FROM skipq.kind_limits",
        "UPDATE skipq.cron_state SET last_tick = now()",
        "LOCK TABLE skipq.jobs IN EXCLUSIVE MODE",
    };
    PQclear(PQexec(rc, "BEGIN"));
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
        cr_expect_str_eq(sqlstate_of(rc, forbidden[i]), "42501", "the reader may: %s", forbidden[i]);
        PQclear(PQexec(rc, "ROLLBACK; BEGIN"));
    }
    PQclear(PQexec(rc, "ROLLBACK"));
    static const char *const allowed[] = {
        "SELECT count(*) FROM skipq.jobs", "SELECT count(*) FROM skipq.job_executions",
        "SELECT count(*) FROM skipq.hosts", "SELECT count(*) FROM skipq.paused",
        "SELECT skipq.host_alive(now(), 1000)",
    };
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_expect_str_eq(sqlstate_of(rc, allowed[i]), "", "the reader may not: %s", allowed[i]);
    PQfinish(rc);
    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "stats", "--db", as_reader.conninfo, NULL), 0, "stats as the reader: %s", out);
    free(out);
    th_execf(db.conn, "DROP OWNED BY %s_r; DROP ROLE %s_r", db.name, db.name);
    PQfinish(db.conn);
}

/* ---- who may ask at all ------------------------------------------------------------------------------ */

Test(web, off_loopback_a_token_is_required_and_its_file_must_be_private, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "web", "--listen", "0.0.0.0:1", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "--listen 0.0.0.0:1 is not a loopback address: give --token-file too") != NULL, "%s", err);
    free(err);
    char *open_file = token_file("open", TOKEN, 0644);
    cr_expect_eq(th_cli(NULL, &err, "web", "--token-file", open_file, "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "is open to group or others (chmod 600 it)") != NULL, "%s", err);
    free(err);
    char *short_file = token_file("short", "abc", 0600);
    cr_expect_eq(th_cli(NULL, &err, "web", "--token-file", short_file, "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "must hold one token of 16 to 512 characters") != NULL, "%s", err);
    free(err);
    char *odd_file = token_file("odd", "0123456789abcdef 0123", 0600);
    cr_expect_eq(th_cli(NULL, &err, "web", "--token-file", odd_file, "--db", db.conninfo, NULL), 2);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "web", "--token-file", "/nonexistent/token", "--db", db.conninfo, NULL), 2);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "web", "--listen", "localhost:80", "--db", db.conninfo, NULL), 2);
    cr_expect(strstr(err, "not a numeric IPv4 address") != NULL, "%s", err);
    free(err);

    char *tf = token_file("token", TOKEN, 0600);
    const char *args[] = {"--token-file", tf, NULL};
    struct web w;
    web_start(&w, &db, args);
    struct resp r = get(w.port, "/");
    cr_expect_eq(r.status, 403, "the page without a token");
    resp_free(&r);
    r = get(w.port, "/assets/app.js");
    cr_expect_eq(r.status, 403, "an asset without a token");
    resp_free(&r);
    r = get(w.port, "/?token=0123456789abcdef0123456789abcdeF");
    cr_expect_eq(r.status, 403, "a wrong login");
    cr_expect_null(header(&r, "Set-Cookie"));
    resp_free(&r);
    r = get(w.port, "/api/session?token=" TOKEN);
    cr_expect_eq(r.status, 403, "the token in an API URL");
    resp_free(&r);
    r = get(w.port, "/?token=" TOKEN);
    cr_expect_eq(r.status, 303);
    cr_expect_str_eq(header(&r, "Location"), "/", "the login must leave the token out of the address bar");
    char cookie[200];
    snprintf(cookie, sizeof cookie, "%s", header(&r, "Set-Cookie"));
    cr_expect(strstr(cookie, "HttpOnly") && strstr(cookie, "SameSite=Strict") && !strstr(cookie, TOKEN),
              "%s", cookie);
    resp_free(&r);
    char h[300];
    snprintf(h, sizeof h, "Cookie: %.*s\r\n", (int)strcspn(cookie, ";"), cookie);
    r = http(w.port, "GET", "/api/session", h, NULL);
    cr_expect_eq(r.status, 200, "with the cookie: %s", r.body);
    cr_expect_eq(json_object_get_boolean(jat(r.json, "token")), 1);
    resp_free(&r);
    r = http(w.port, "GET", "/", h, NULL);
    cr_expect_eq(r.status, 200);
    resp_free(&r);
    /* behind a TLS proxy the cookie is Secure */
    r = http(w.port, "GET", "/?token=" TOKEN, "X-Forwarded-Proto: https\r\n", NULL);
    cr_expect(strstr(header(&r, "Set-Cookie"), "; Secure") != NULL);
    resp_free(&r);
    web_stop(&w);
    free(open_file);
    free(short_file);
    free(odd_file);
    free(tf);
    PQfinish(db.conn);
}

Test(web, on_loopback_it_answers_only_loopback_names_and_no_proxied_request, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct web w;
    web_start(&w, &db, NULL);
    char h[128];
    static const char *const ok[] = {"localhost", "127.0.0.1", "127.0.0.2", "LOCALHOST", "[::1]"};
    for (size_t i = 0; i < 5; i++) {
        snprintf(h, sizeof h, "Host: %s:%d\r\n", ok[i], w.port);
        struct resp r = http(w.port, "GET", "/api/session", h, NULL);
        cr_expect_eq(r.status, 200, "Host %s: %d", ok[i], r.status);
        resp_free(&r);
    }
    /* a page that rebinds its own name to 127.0.0.1 */
    static const char *const bad[] = {"evil.example", "127.0.0.1.evil.example", "10.0.0.1", "localhost.evil"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(h, sizeof h, "Host: %s:%d\r\n", bad[i], w.port);
        struct resp r = http(w.port, "GET", "/api/session", h, NULL);
        cr_expect_eq(r.status, 403, "Host %s: %d", bad[i], r.status);
        cr_expect(strstr(jstr(r.json, "error"), "the Host header names another site") != NULL, "%s", r.body);
        resp_free(&r);
        r = http(w.port, "GET", "/", h, NULL);
        cr_expect_eq(r.status, 403, "the page for Host %s", bad[i]);
        resp_free(&r);
    }
    static const char *const proxied[] = {"X-Forwarded-For: 203.0.113.9\r\n", "Forwarded: for=203.0.113.9\r\n",
                                          "X-Real-IP: 203.0.113.9\r\n"};
    for (size_t i = 0; i < 3; i++) {
        struct resp r = http(w.port, "GET", "/api/jobs", proxied[i], NULL);
        cr_expect_eq(r.status, 403, "%s", proxied[i]);
        cr_expect(strstr(jstr(r.json, "error"), "start skipq web with --token-file") != NULL, "%s", r.body);
        resp_free(&r);
    }
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- values stay values --------------------------------------------------------------------------------- */

Test(web, markup_in_payloads_errors_and_keys_comes_back_as_json_strings, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    static const char xss[] = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    char payload[300];
    snprintf(payload, sizeof payload, "{\"note\": \"<script>alert(1)</script>\\\"><img src=x onerror=alert(2)>\"}");
    int64_t id = enqueue_ex(db.conn, "mail", payload, "default", xss, xss, NULL, 0);
    int64_t dead = dead_job(db.conn, "mail", "default", xss);
    struct web w;
    web_start(&w, &db, NULL);
    char path[64];
    snprintf(path, sizeof path, "/api/jobs/%lld", (long long)id);
    struct resp r = get(w.port, path);
    cr_expect_str_eq(jstr(r.json, "job.unique_key"), xss);
    cr_expect_str_eq(jstr(r.json, "job.ordering_key"), xss);
    cr_expect(strstr(jstr(r.json, "job.payload_pretty"), "<script>alert(1)</script>") != NULL);
    cr_expect(strstr(header(&r, "Content-Type"), "application/json") != NULL);
    resp_free(&r);
    snprintf(path, sizeof path, "/api/jobs/%lld", (long long)dead);
    r = get(w.port, path);
    cr_expect_str_eq(jstr(r.json, "job.last_error"), xss);
    cr_expect_str_eq(jstr(r.json, "executions.0.error"), xss);
    resp_free(&r);
    r = get(w.port, "/api/dead");
    cr_expect_str_eq(jstr(r.json, "groups.0.example"), xss);
    resp_free(&r);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- pause and resume ----------------------------------------------------------------------------------- */

Test(web, pause_and_resume_from_the_dashboard_show_in_stats_and_top, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_enqueue(db.conn, "mail", "{}", "reports", 0, 5);
    struct web w;
    web_start(&w, &db, NULL);
    char *t = csrf(w.port, NULL);
    struct resp r = act(w.port, t, NULL, "/api/pause", "{\"scope\": \"queue\", \"name\": \"reports\"}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(json_object_get_boolean(jat(r.json, "changed")), 1);
    resp_free(&r);
    r = act(w.port, t, NULL, "/api/pause", "{\"scope\": \"queue\", \"name\": \"reports\"}");
    cr_expect_eq(json_object_get_boolean(jat(r.json, "changed")), 0, "paused twice");
    resp_free(&r);
    r = get(w.port, "/api/overview");
    cr_expect_str_eq(jstr(r.json, "paused.0.scope"), "queue");
    cr_expect_str_eq(jstr(r.json, "paused.0.name"), "reports");
    cr_expect_eq(json_object_get_boolean(jat(row_of(jat(r.json, "queues"), "reports", "mail"), "paused")), 1);
    resp_free(&r);
    char *out = NULL;
    cr_expect_eq(th_cli(&out, NULL, "stats", "--json", "--db", db.conninfo, NULL), 0);
    json_object *s = json_tokener_parse(out);
    cr_expect_str_eq(jstr(s, "paused.0.name"), "reports");
    cr_expect_eq(json_object_get_boolean(jat(row_of(jat(s, "queues"), "reports", "mail"), "paused")), 1);
    json_object_put(s);
    free(out);
    cr_expect_eq(th_cli(&out, NULL, "top", "--iterations", "1", "--json", "--db", db.conninfo, NULL), 0);
    s = json_tokener_parse(out);
    cr_expect_str_eq(jstr(s, "queues.0.queue"), "reports");
    cr_expect_eq(json_object_get_boolean(jat(s, "queues.0.paused")), 1, "%s", out);
    json_object_put(s);
    free(out);
    /* a kind paused from the CLI shows on the dashboard */
    cr_expect_eq(th_cli(&out, NULL, "pause", "--kind", "mail", "--db", db.conninfo, NULL), 0);
    free(out);
    r = get(w.port, "/api/hosts");
    cr_expect_eq(jlen(r.json, "paused"), 2);
    cr_expect_str_eq(jstr(r.json, "paused.1.scope"), "kind");
    resp_free(&r);
    r = act(w.port, t, NULL, "/api/resume", "{\"scope\": \"queue\", \"name\": \"reports\"}");
    cr_expect_eq(json_object_get_boolean(jat(r.json, "changed")), 1);
    resp_free(&r);
    r = act(w.port, t, NULL, "/api/resume", "{\"scope\": \"kind\", \"name\": \"mail\"}");
    cr_expect_eq(json_object_get_boolean(jat(r.json, "changed")), 1);
    resp_free(&r);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.paused"), 0);
    free(t);
    web_stop(&w);
    PQfinish(db.conn);
}

/* ---- robustness ------------------------------------------------------------------------------------------- */

Test(web, slow_clients_do_not_keep_it_from_answering_and_are_cut_at_the_deadline, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct web w;
    web_start(&w, &db, NULL);
    /* 30 connections from this address that send half a request */
    int fds[30];
    for (int i = 0; i < 30; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)w.port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
        send(fds[i], "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n", 40, MSG_NOSIGNAL);
    }
    usleep(300 * 1000);
    int64_t start = th_now_ms();
    struct resp r = get(w.port, "/api/session");
    int64_t took = th_now_ms() - start;
    cr_expect_eq(r.status, 200);
    cr_expect_lt(took, 2000, "took %lld ms", (long long)took);
    resp_free(&r);
    /* the dawdlers are closed within the 5 s deadline */
    int open = 0;
    usleep(6000 * 1000);
    for (int i = 0; i < 30; i++) {
        char c;
        ssize_t n = recv(fds[i], &c, 1, MSG_DONTWAIT);
        open += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        close(fds[i]);
    }
    cr_expect_eq(open, 0, "%d slow connections outlived the deadline", open);
    web_stop(&w);
    PQfinish(db.conn);
}

Test(web, a_lost_database_session_is_503_once_and_then_reconnected, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    struct web w;
    web_start(&w, &db, NULL);
    struct resp r = get(w.port, "/api/jobs");
    cr_expect_eq(r.status, 200);
    resp_free(&r);
    th_execf(db.conn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE application_name = 'skipq web' AND datname = current_database()");
    int statuses[3];
    for (int i = 0; i < 3; i++) {
        r = get(w.port, "/api/jobs");
        statuses[i] = r.status;
        resp_free(&r);
    }
    cr_expect(statuses[0] == 503 || statuses[0] == 200, "first after the loss: %d", statuses[0]);
    cr_expect_eq(statuses[1], 200, "not reconnected: %d", statuses[1]);
    cr_expect_eq(statuses[2], 200);
    web_stop(&w);
    PQfinish(db.conn);
}
