/*
 * metrics.c -- /metrics and /healthz for `skipq run`, over libmicrohttpd.
 *
 * DESIGN
 * - The job path takes no lock for metrics: counters and histogram buckets
 *   are C11 atomics in each kind's struct (kinds.h), bumped by the worker
 *   threads; a scrape only reads them, and reads the host through the
 *   accessors of state.h.
 * - Nothing a scrape does touches the database. The ready-job gauges come
 *   from one query the heartbeat thread runs every SAMPLE_MS on its own
 *   connection; a scrape reads the last sample under a mutex. Scrapes
 *   cannot add load to PostgreSQL, however often they come.
 * - The server (common/http.c, shared with the dashboard) runs on one
 *   thread of ours, started after the host blocked its signals, so it
 *   never takes a SIGTERM meant for the main loop. Whoever can reach the
 *   port cannot keep /healthz from answering: every request has a
 *   deadline, and a client address a few connections at most (http.c says
 *   how and why).
 */
#include "host/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "common/http.h"
#include "common/log.h"
#include "common/util.h"
#include "host/kinds.h"
#include "host/queue.h"
#include "host/state.h"

#define SAMPLE_MS 5000

/* One per host: a process serving several databases has a host for each,
 * all answered by the first one's server, each sample labelled with its
 * database. */
struct sq_metrics {
    struct sq_host *h;
    struct sq_metrics *next; /* the next database's host; NULL: the last */
    /* the server: the first host's only */
    struct sq_http *http;
    pthread_t thread;
    bool running;
    int stop_fd; /* eventfd: the server thread returns when it is readable */
    char *queues_array; /* the groups' queues, text[] literal */
    pthread_mutex_t lock; /* guards the sample below */
    bool sampled;
    int64_t next_sample;
    long long *ready;    /* per group */
    double *oldest_age;  /* per group, seconds */
};

/* ---- sampling (heartbeat thread) ------------------------------------------------ */

/* Built-ins named by schema: see "SCHEMA-QUALIFIED SQL" in queue.c. */
static const char SAMPLE_SQL[] =
    "SELECT q.queue, pg_catalog.count(j.id),"
    "       coalesce(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at)), 0)"
    "         ::pg_catalog.float8"
    "  FROM pg_catalog.unnest($1::pg_catalog.text[]) AS q(queue)"
    "  LEFT JOIN skipq.jobs j ON j.queue OPERATOR(pg_catalog.=) q.queue AND j.status OPERATOR(pg_catalog.=) 'pending'"
    "   AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()"
    " GROUP BY q.queue";

void sq_metrics_sample(struct sq_metrics *m, PGconn *conn)
{
    if (!m || sq_now_ms() < m->next_sample)
        return;
    m->next_sample = sq_now_ms() + SAMPLE_MS; /* only this thread reads or writes it */
    const char *params[1] = {m->queues_array};
    PGresult *res = PQexecParams(conn, SAMPLE_SQL, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_warn("metrics: could not sample the ready jobs: %s", PQerrorMessage(conn));
        PQclear(res);
        return;
    }
    pthread_mutex_lock(&m->lock);
    for (int r = 0; r < PQntuples(res); r++) {
        for (size_t g = 0; g < sq_host_ngroups(m->h); g++) {
            if (strcmp(sq_host_group_queue(m->h, g), PQgetvalue(res, r, 0)) != 0)
                continue;
            m->ready[g] = strtoll(PQgetvalue(res, r, 1), NULL, 10);
            m->oldest_age[g] = strtod(PQgetvalue(res, r, 2), NULL);
        }
    }
    m->sampled = true;
    pthread_mutex_unlock(&m->lock);
    PQclear(res);
}

/* ---- exposition --------------------------------------------------------------------- */

/* A label value with \, " and newline escaped, as the text format wants. */
static void put_label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

/* A sample's name and its labels' opening: `name{`, with the host's
 * database first when the process serves several. The caller adds its own
 * labels (or none) and the closing brace. */
static void put_lead(FILE *f, const struct sq_metrics *m, const char *name, bool more)
{
    fprintf(f, "%s{", name);
    if (sq_host_database(m->h)) {
        fputs("database=\"", f);
        put_label(f, sq_host_database(m->h));
        fputs(more ? "\"," : "\"", f);
    }
}

static void put_header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One counter family with a sample per kind (and database); `off` selects the field. */
static void put_kind_counter(FILE *f, struct sq_metrics *first, const char *name, const char *help, size_t off)
{
    put_header(f, name, "counter", help);
    for (struct sq_metrics *m = first; m; m = m->next) {
        struct sq_kinds *ks = sq_host_kinds(m->h);
        for (size_t i = 0; i < sq_kinds_count(ks); i++) {
            put_lead(f, m, name, true);
            fputs("kind=\"", f);
            put_label(f, sq_kinds_at(ks, i)->name);
            fprintf(f, "\"} %llu\n", sq_kind_total(ks, i, off));
        }
    }
}

/* `name_SUFFIX{[database,]kind="K"` of one kind's histogram series. */
static void put_kind_lead(FILE *f, const struct sq_metrics *m, const char *name, const char *suffix,
                          const struct sq_kind *k)
{
    char full[96];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    put_lead(f, m, full, true);
    fputs("kind=\"", f);
    put_label(f, k->name);
    fputc('"', f);
}

static void put_histogram(FILE *f, struct sq_metrics *first)
{
    const char *name = "skipq_handler_duration_seconds";
    put_header(f, name, "histogram", "Time handlers took, from start to return.");
    for (struct sq_metrics *m = first; m; m = m->next) {
        struct sq_kinds *ks = sq_host_kinds(m->h);
        for (size_t i = 0; i < sq_kinds_count(ks); i++) {
            const struct sq_kind *k = sq_kinds_at(ks, i);
            unsigned long long cum = 0;
            for (int b = 0; b <= SQ_DURATION_BUCKETS; b++) {
                cum += sq_kind_total(ks, i,
                                     offsetof(struct sq_kind_counts, duration_buckets) + (size_t)b * sizeof(atomic_ulong));
                put_kind_lead(f, m, name, "_bucket", k);
                if (b < SQ_DURATION_BUCKETS)
                    fprintf(f, ",le=\"%g\"} %llu\n", sq_duration_bounds[b], cum);
                else
                    fprintf(f, ",le=\"+Inf\"} %llu\n", cum);
            }
            put_kind_lead(f, m, name, "_sum", k);
            fprintf(f, "} %.6f\n",
                    (double)sq_kind_total(ks, i, offsetof(struct sq_kind_counts, duration_sum_us)) / 1e6);
            put_kind_lead(f, m, name, "_count", k);
            fprintf(f, "} %llu\n", cum);
        }
    }
}

/* One gauge family with a sample per queue: a count, or (age) an age. */
static void put_queue_gauge(FILE *f, struct sq_metrics *first, const char *name, const char *help, bool age)
{
    put_header(f, name, "gauge", help);
    for (struct sq_metrics *m = first; m; m = m->next) {
        pthread_mutex_lock(&m->lock);
        for (size_t g = 0; m->sampled && g < sq_host_ngroups(m->h); g++) {
            put_lead(f, m, name, true);
            fputs("queue=\"", f);
            put_label(f, sq_host_group_queue(m->h, g));
            if (!age)
                fprintf(f, "\"} %lld\n", m->ready[g]);
            else
                fprintf(f, "\"} %.3f\n", m->oldest_age[g]);
        }
        pthread_mutex_unlock(&m->lock);
    }
}

/* What each host last read of skipq.paused: each queue it serves, each kind it runs. */
static void put_paused(FILE *f, struct sq_metrics *first)
{
    put_header(f, "skipq_queue_paused", "gauge",
               "1 while the queue is paused (skipq pause --queue): this host claims none of its jobs.");
    for (struct sq_metrics *m = first; m; m = m->next) {
        for (size_t g = 0; g < sq_host_ngroups(m->h); g++) {
            put_lead(f, m, "skipq_queue_paused", true);
            fputs("queue=\"", f);
            put_label(f, sq_host_group_queue(m->h, g));
            fprintf(f, "\"} %d\n", sq_host_group_paused(m->h, g) ? 1 : 0);
        }
    }
    put_header(f, "skipq_kind_paused", "gauge",
               "1 while the kind is paused (skipq pause --kind): this host claims it on no queue.");
    for (struct sq_metrics *m = first; m; m = m->next) {
        struct sq_kinds *ks = sq_host_kinds(m->h);
        for (size_t i = 0; i < sq_kinds_count(ks); i++) {
            const struct sq_kind *k = sq_kinds_at(ks, i);
            put_lead(f, m, "skipq_kind_paused", true);
            fputs("kind=\"", f);
            put_label(f, k->name);
            fprintf(f, "\"} %d\n", atomic_load(&k->paused) ? 1 : 0);
        }
    }
}

static void put_gauges(FILE *f, struct sq_metrics *first)
{
    put_header(f, "skipq_worker_threads", "gauge", "Worker threads running a handler (busy) or not (idle).");
    for (struct sq_metrics *m = first; m; m = m->next) {
        int nworkers, busy, up;
        sq_host_threads(m->h, &nworkers, &busy, &up);
        put_lead(f, m, "skipq_worker_threads", true);
        fprintf(f, "state=\"busy\"} %d\n", busy);
        put_lead(f, m, "skipq_worker_threads", true);
        fprintf(f, "state=\"idle\"} %d\n", nworkers - busy);
    }
    put_header(f, "skipq_database_connections", "gauge",
               "Database sessions of this host that are up (workers, heartbeat, listener).");
    for (struct sq_metrics *m = first; m; m = m->next) {
        int nworkers, busy, up;
        sq_host_threads(m->h, &nworkers, &busy, &up);
        if (sq_host_database(m->h)) {
            put_lead(f, m, "skipq_database_connections", false);
            fprintf(f, "} %d\n", up);
        } else {
            fprintf(f, "skipq_database_connections %d\n", up);
        }
    }
    bool sampled = false;
    for (struct sq_metrics *m = first; m; m = m->next) {
        pthread_mutex_lock(&m->lock);
        sampled = sampled || m->sampled;
        pthread_mutex_unlock(&m->lock);
    }
    if (sampled) {
        put_queue_gauge(f, first, "skipq_queue_ready_jobs",
                        "Jobs ready to run (pending, run_at reached) per queue this host serves; sampled every 5s.",
                        false);
        put_queue_gauge(f, first, "skipq_queue_oldest_ready_job_age_seconds",
                        "How long the oldest ready job of the queue has been waiting (0: none); sampled every 5s.",
                        true);
    }
}

static char *render_metrics(struct sq_metrics *m, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    put_kind_counter(f, m, "skipq_jobs_claimed_total", "Jobs this host claimed.",
                     offsetof(struct sq_kind_counts, claimed));
    put_kind_counter(f, m, "skipq_jobs_done_total", "Jobs this host completed.", offsetof(struct sq_kind_counts, done));
    put_kind_counter(f, m, "skipq_jobs_retried_total", "Failed attempts that will be retried.",
                     offsetof(struct sq_kind_counts, retried));
    put_kind_counter(f, m, "skipq_jobs_dead_total",
                     "Jobs that failed for good (permanent failure or out of attempts).",
                     offsetof(struct sq_kind_counts, dead));
    put_kind_counter(f, m, "skipq_jobs_fenced_total",
                     "Outcomes discarded because the job's lease had been lost to another worker.",
                     offsetof(struct sq_kind_counts, fenced));
    put_kind_counter(f, m, "skipq_jobs_lost_total",
                     "Jobs whose lease expired (any host's), recovered by this host's sweep.",
                     offsetof(struct sq_kind_counts, lost));
    put_kind_counter(f, m, "skipq_jobs_cancelled_total", "Jobs cancelled while their handler ran on this host.",
                     offsetof(struct sq_kind_counts, cancelled));
    put_kind_counter(f, m, "skipq_jobs_crashed_total",
                     "Attempts cut short because the worker process running them died (isolation = process).",
                     offsetof(struct sq_kind_counts, crashed));
    put_histogram(f, m);
    put_gauges(f, m);
    put_paused(f, m);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- HTTP ------------------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body, size_t len,
                             const char *type)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result r = MHD_queue_response(conn, status, res);
    MHD_destroy_response(res);
    return r;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    char *body = strdup(text);
    return body ? reply(conn, status, body, strlen(body), "text/plain; charset=utf-8") : MHD_NO;
}

/* What is wrong with one host, or NULL. */
static const char *host_trouble(struct sq_host *h, char *why, size_t whylen)
{
    if (sq_host_stopping(h))
        return "stopping";
    if (sq_host_deferred(h))
        return "unreachable since start-up: its queues start once it answers";
    if (!sq_host_ready(h))
        return "starting: not every thread has connected to the database yet";
    if (sq_host_progress(h, sq_host_config(h)->metrics_unhealthy_ms, true, why, whylen))
        return NULL;
    return why;
}

/* "ok\n", or a line per host in trouble -- "database eu: ..." when the
 * process serves several, so the one that is unreachable is named. */
static char *health(struct sq_metrics *first)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    bool ok = true;
    for (struct sq_metrics *m = first; m; m = m->next) {
        char why[256];
        const char *trouble = host_trouble(m->h, why, sizeof why);
        if (!trouble)
            continue;
        ok = false;
        if (sq_host_database(m->h))
            fprintf(f, "database %s: ", sq_host_database(m->h));
        fprintf(f, "%s\n", trouble);
    }
    if (ok)
        fputs("ok\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload_data, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)state;
    struct sq_metrics *m = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    if (strcmp(url, "/metrics") == 0) {
        size_t len = 0;
        char *body = render_metrics(m, &len);
        if (!body)
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        return reply(conn, MHD_HTTP_OK, body, len, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/healthz") == 0) {
        char *body = health(m);
        if (!body)
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        unsigned status = strcmp(body, "ok\n") == 0 ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        return reply(conn, status, body, strlen(body), "text/plain; charset=utf-8");
    }
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics or /healthz\n");
}

static void *serve_loop(void *arg)
{
    struct sq_metrics *m = arg;
    char err[256];
    if (!sq_http_run(m->http, m->stop_fd, err, sizeof err))
        log_error("metrics: %s; /metrics and /healthz stop answering", err);
    return NULL;
}

/* ---- start and stop ---------------------------------------------------------------- */

static bool start_server(struct sq_metrics *m, char *err, size_t errlen)
{
    const struct sq_config *cfg = sq_host_config(m->h);
    char what[400];
    snprintf(what, sizeof what, "%s:%d: [metrics] listen = %s", cfg->path, cfg->metrics_line, cfg->metrics_listen);
    m->http = sq_http_start(&cfg->metrics_addr, cfg->metrics_addrlen, what, serve, NULL, m, err, errlen);
    if (!m->http)
        return false;
    int rc = pthread_create(&m->thread, NULL, serve_loop, m);
    if (rc != 0) {
        snprintf(err, errlen, "metrics: cannot start the HTTP server's thread: %s", strerror(rc));
        return false;
    }
    m->running = true;
    return true;
}

/* One host's samples; NULL when out of memory. */
static struct sq_metrics *metrics_new(struct sq_host *h)
{
    size_t ngroups = sq_host_ngroups(h);
    struct sq_metrics *m = calloc(1, sizeof *m);
    const char **queues = calloc(ngroups ? ngroups : 1, sizeof *queues);
    if (!m || !queues) {
        free(m);
        free(queues);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->stop_fd = -1;
    m->h = h;
    for (size_t g = 0; g < ngroups; g++)
        queues[g] = sq_host_group_queue(h, g);
    m->queues_array = sq_text_array(queues, ngroups);
    m->ready = calloc(ngroups ? ngroups : 1, sizeof *m->ready);
    m->oldest_age = calloc(ngroups ? ngroups : 1, sizeof *m->oldest_age);
    free(queues);
    if (!m->queues_array || !m->ready || !m->oldest_age) {
        sq_metrics_stop(m);
        return NULL;
    }
    return m;
}

struct sq_metrics *sq_metrics_start(struct sq_host **hosts, size_t n, char *err, size_t errlen)
{
    const struct sq_config *cfg = sq_host_config(hosts[0]);
    struct sq_metrics *first = NULL, **tail = &first;
    for (size_t i = 0; i < n; i++) {
        if (!(*tail = metrics_new(hosts[i])))
            goto oom;
        tail = &(*tail)->next;
    }
    if ((first->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0)
        goto oom;
    if (!start_server(first, err, errlen))
        goto fail;
    for (struct sq_metrics *m = first; m; m = m->next)
        sq_host_set_metrics(m->h, m);
    log_info("metrics: serving /metrics and /healthz on %s", cfg->metrics_listen);
    return first;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    sq_metrics_stop(first);
    return NULL;
}

void sq_metrics_stop(struct sq_metrics *m)
{
    if (!m)
        return;
    sq_metrics_stop(m->next);
    if (m->running) {
        uint64_t one = 1;
        if (write(m->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
            log_warn("metrics: cannot stop the HTTP server's thread: %s", strerror(errno));
        pthread_join(m->thread, NULL);
    }
    sq_http_stop(m->http);
    if (m->stop_fd >= 0)
        close(m->stop_fd);
    pthread_mutex_destroy(&m->lock);
    free(m->queues_array);
    free(m->ready);
    free(m->oldest_age);
    free(m);
}
