/*
 * metrics.c -- /metrics and /healthz for `skipq run`, over libmicrohttpd.
 *
 * DESIGN
 * - The job path takes no lock for metrics: counters and histogram buckets
 *   are C11 atomics in the host's per-kind table (host.h), bumped by the
 *   worker threads; a scrape only reads them.
 * - Nothing a scrape does touches the database. The ready-job gauges come
 *   from one query the heartbeat thread runs every SAMPLE_MS on its own
 *   connection; a scrape reads the last sample under a mutex. Scrapes
 *   cannot add load to PostgreSQL, however often they come.
 * - We bind the socket ourselves and hand it to libmicrohttpd, so a port in
 *   use is reported with its errno instead of a bare "cannot start".
 * - The server runs in libmicrohttpd's own thread, started after the host
 *   blocked its signals, so it never takes a SIGTERM meant for the main loop.
 */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "host.h"
#include "log.h"
#include "queue.h"
#include "util.h"

#define SAMPLE_MS 5000

const double sq_duration_bounds[SQ_DURATION_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                        1,     2.5,  5,     10,   30,  60,   300};

struct sq_metrics {
    struct sq_host *h;
    struct MHD_Daemon *daemon;
    char *queues_array; /* the groups' queues, text[] literal */
    pthread_mutex_t lock; /* guards the sample below */
    bool sampled;
    int64_t next_sample;
    long long *ready;    /* per group */
    double *oldest_age;  /* per group, seconds */
};

void sq_kind_observe(struct sq_kind_rt *k, int64_t us)
{
    if (us < 0)
        us = 0;
    double s = (double)us / 1e6;
    int b = 0;
    while (b < SQ_DURATION_BUCKETS && s > sq_duration_bounds[b])
        b++;
    atomic_fetch_add_explicit(&k->duration_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->duration_sum_us, (unsigned long long)us, memory_order_relaxed);
}

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

void sq_metrics_sample(struct sq_host *h, PGconn *conn)
{
    struct sq_metrics *m = h->metrics;
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
        for (size_t g = 0; g < h->ngroups; g++) {
            if (strcmp(h->groups[g].queue, PQgetvalue(res, r, 0)) != 0)
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

static void put_header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One counter family with a sample per kind; `off` selects the field. */
static void put_kind_counter(FILE *f, const struct sq_host *h, const char *name, const char *help, size_t off)
{
    put_header(f, name, "counter", help);
    for (size_t i = 0; i < h->nkinds; i++) {
        const atomic_ulong *c = (const atomic_ulong *)((const char *)&h->kinds[i] + off);
        fprintf(f, "%s{kind=\"", name);
        put_label(f, h->kinds[i].name);
        fprintf(f, "\"} %lu\n", atomic_load_explicit(c, memory_order_relaxed));
    }
}

static void put_histogram(FILE *f, struct sq_host *h)
{
    const char *name = "skipq_handler_duration_seconds";
    put_header(f, name, "histogram", "Time handlers took, from start to return.");
    for (size_t i = 0; i < h->nkinds; i++) {
        struct sq_kind_rt *k = &h->kinds[i];
        unsigned long long cum = 0;
        for (int b = 0; b <= SQ_DURATION_BUCKETS; b++) {
            cum += atomic_load_explicit(&k->duration_buckets[b], memory_order_relaxed);
            fprintf(f, "%s_bucket{kind=\"", name);
            put_label(f, k->name);
            if (b < SQ_DURATION_BUCKETS)
                fprintf(f, "\",le=\"%g\"} %llu\n", sq_duration_bounds[b], cum);
            else
                fprintf(f, "\",le=\"+Inf\"} %llu\n", cum);
        }
        fprintf(f, "%s_sum{kind=\"", name);
        put_label(f, k->name);
        fprintf(f, "\"} %.6f\n", (double)atomic_load_explicit(&k->duration_sum_us, memory_order_relaxed) / 1e6);
        fprintf(f, "%s_count{kind=\"", name);
        put_label(f, k->name);
        fprintf(f, "\"} %llu\n", cum);
    }
}

static void put_gauges(FILE *f, struct sq_host *h)
{
    int busy = 0, up = 0, nworkers = atomic_load(&h->workers_built) ? h->nworkers : 0;
    for (int i = 0; i < nworkers; i++) {
        busy += atomic_load(&h->workers[i].busy) ? 1 : 0;
        up += atomic_load(&h->workers[i].connected) ? 1 : 0;
    }
    up += atomic_load(&h->hb_connected) ? 1 : 0;
    up += atomic_load(&h->listener_connected) ? 1 : 0;
    put_header(f, "skipq_worker_threads", "gauge", "Worker threads running a handler (busy) or not (idle).");
    fprintf(f, "skipq_worker_threads{state=\"busy\"} %d\nskipq_worker_threads{state=\"idle\"} %d\n", busy,
            nworkers - busy);
    put_header(f, "skipq_database_connections", "gauge",
               "Database sessions of this host that are up (workers, heartbeat, listener).");
    fprintf(f, "skipq_database_connections %d\n", up);

    struct sq_metrics *m = h->metrics;
    pthread_mutex_lock(&m->lock);
    if (m->sampled) {
        put_header(f, "skipq_queue_ready_jobs", "gauge",
                   "Jobs ready to run (pending, run_at reached) per queue this host serves; sampled every 5s.");
        for (size_t g = 0; g < h->ngroups; g++) {
            fputs("skipq_queue_ready_jobs{queue=\"", f);
            put_label(f, h->groups[g].queue);
            fprintf(f, "\"} %lld\n", m->ready[g]);
        }
        put_header(f, "skipq_queue_oldest_ready_job_age_seconds", "gauge",
                   "How long the oldest ready job of the queue has been waiting (0: none); sampled every 5s.");
        for (size_t g = 0; g < h->ngroups; g++) {
            fputs("skipq_queue_oldest_ready_job_age_seconds{queue=\"", f);
            put_label(f, h->groups[g].queue);
            fprintf(f, "\"} %.3f\n", m->oldest_age[g]);
        }
    }
    pthread_mutex_unlock(&m->lock);
}

static char *render_metrics(struct sq_host *h, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    put_kind_counter(f, h, "skipq_jobs_claimed_total", "Jobs this host claimed.",
                     offsetof(struct sq_kind_rt, claimed));
    put_kind_counter(f, h, "skipq_jobs_done_total", "Jobs this host completed.", offsetof(struct sq_kind_rt, done));
    put_kind_counter(f, h, "skipq_jobs_retried_total", "Failed attempts that will be retried.",
                     offsetof(struct sq_kind_rt, retried));
    put_kind_counter(f, h, "skipq_jobs_dead_total", "Jobs that failed for good (permanent failure or out of attempts).",
                     offsetof(struct sq_kind_rt, dead));
    put_kind_counter(f, h, "skipq_jobs_fenced_total",
                     "Outcomes discarded because the job's lease had been lost to another worker.",
                     offsetof(struct sq_kind_rt, fenced));
    put_kind_counter(f, h, "skipq_jobs_lost_total",
                     "Jobs whose lease expired (any host's), recovered by this host's sweep.",
                     offsetof(struct sq_kind_rt, lost));
    put_kind_counter(f, h, "skipq_jobs_cancelled_total", "Jobs cancelled while their handler ran on this host.",
                     offsetof(struct sq_kind_rt, cancelled));
    put_histogram(f, h);
    put_gauges(f, h);
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

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload_data, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)state;
    struct sq_metrics *m = cls;
    struct sq_host *h = m->h;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    if (strcmp(url, "/metrics") == 0) {
        size_t len = 0;
        char *body = render_metrics(h, &len);
        if (!body)
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        return reply(conn, MHD_HTTP_OK, body, len, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/healthz") == 0) {
        char why[256], body[300];
        if (atomic_load(&h->stopping))
            snprintf(why, sizeof why, "stopping");
        else if (!atomic_load(&h->ready))
            snprintf(why, sizeof why, "starting: not every thread has connected to the database yet");
        else if (sq_host_progress(h, h->cfg->metrics_unhealthy_ms, true, why, sizeof why))
            return reply_text(conn, MHD_HTTP_OK, "ok\n");
        snprintf(body, sizeof body, "%s\n", why);
        return reply_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, body);
    }
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics or /healthz\n");
}

static int bind_listen(const struct sq_config *cfg, char *err, size_t errlen)
{
    int fd = socket(cfg->metrics_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) {
        snprintf(err, errlen, "[metrics] listen = %s: cannot create a socket: %s", cfg->metrics_listen,
                 strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (cfg->metrics_addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)&cfg->metrics_addr, cfg->metrics_addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "%s:%d: [metrics] listen = %s: cannot listen there: %s", cfg->path, cfg->metrics_line,
                 cfg->metrics_listen, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

struct sq_metrics *sq_metrics_start(struct sq_host *h, char *err, size_t errlen)
{
    struct sq_metrics *m = calloc(1, sizeof *m);
    const char **queues = calloc(h->ngroups ? h->ngroups : 1, sizeof *queues);
    int fd = -1;
    if (m)
        pthread_mutex_init(&m->lock, NULL);
    if (!m || !queues)
        goto oom;
    m->h = h;
    for (size_t g = 0; g < h->ngroups; g++)
        queues[g] = h->groups[g].queue;
    m->queues_array = sq_text_array(queues, h->ngroups);
    m->ready = calloc(h->ngroups ? h->ngroups : 1, sizeof *m->ready);
    m->oldest_age = calloc(h->ngroups ? h->ngroups : 1, sizeof *m->oldest_age);
    if (!m->queues_array || !m->ready || !m->oldest_age)
        goto oom;
    fd = bind_listen(h->cfg, err, errlen);
    if (fd < 0)
        goto fail;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    if (h->cfg->metrics_addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    m->daemon = MHD_start_daemon(flags, 0, NULL, NULL, serve, m, MHD_OPTION_LISTEN_SOCKET, fd,
                                 MHD_OPTION_CONNECTION_LIMIT, 32u, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                 MHD_OPTION_END);
    if (!m->daemon) {
        snprintf(err, errlen, "[metrics] listen = %s: cannot start the HTTP server", h->cfg->metrics_listen);
        close(fd);
        goto fail;
    }
    free(queues);
    log_info("metrics: serving /metrics and /healthz on %s", h->cfg->metrics_listen);
    return m;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    free(queues);
    sq_metrics_stop(m);
    return NULL;
}

void sq_metrics_stop(struct sq_metrics *m)
{
    if (!m)
        return;
    if (m->daemon) {
        int fd = MHD_quiesce_daemon(m->daemon);
        MHD_stop_daemon(m->daemon);
        if (fd >= 0)
            close(fd);
    }
    pthread_mutex_destroy(&m->lock);
    free(m->queues_array);
    free(m->ready);
    free(m->oldest_age);
    free(m);
}
