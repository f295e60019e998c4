/*
 * server.c -- the HTTP server of `skipq web`.
 *
 * DESIGN
 * - One thread, the process's main one, drives libmicrohttpd's epoll loop
 *   (MHD_run) and answers each request inline, database query included.
 *   A dashboard serves a few people; every statement it sends is bounded
 *   by statement_timeout (web.c), so no request holds the others for long,
 *   and the connection table below needs no lock.
 * - The server and its limits are those of /metrics (common/http.c): a
 *   deadline per request, connections per client address, connections in
 *   all, so a client trickling a request cannot hold the dashboard.
 * - A request body (the JSON of an action) is collected up to
 *   SQ_WEB_MAX_BODY; beyond it the rest is read and dropped and the
 *   request answered 413, so a large upload costs no memory.
 * - Every answer closes its connection. A page refreshes every few
 *   seconds: a kept-alive connection would sit idle in between and meet
 *   the deadline just as the next refresh is sent on it.
 * - Every response carries the same security headers (sq_server_reply):
 *   script only from this origin's files (no inline script, no eval), no
 *   framing, no MIME sniffing, no Referer (a login URL holds the token).
 */
#include "web/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http.h"

/* default-src 'none': nothing loads unless named here. Styles come only
 * from the style sheet under /assets; the scripts set style properties
 * through the CSSOM, which CSP allows, while style attributes in markup
 * are refused. */
static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/* A request's body as it arrives. */
struct body {
    char *buf;
    size_t len;
    bool too_big;
};

struct sq_server {
    struct sq_http *http;
    sq_request_fn fn;
    void *cls;
};

/* ---- responses ------------------------------------------------------------------------ */

enum MHD_Result sq_server_reply(struct MHD_Connection *c, unsigned status, const char *type, const char *cache,
                                const void *body, size_t len, bool persistent, const char *const *headers)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(
        len, (void *)body, persistent ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_COPY);
    if (!res)
        return MHD_NO;
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, cache);
    MHD_add_response_header(res, "Content-Security-Policy", CSP);
    MHD_add_response_header(res, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(res, "X-Frame-Options", "DENY");
    MHD_add_response_header(res, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(res, "Cross-Origin-Opener-Policy", "same-origin");
    MHD_add_response_header(res, "Cross-Origin-Resource-Policy", "same-origin");
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONNECTION, "close");
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(res, headers[i], headers[i + 1]);
    enum MHD_Result r = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return r;
}

/* ---- requests ------------------------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **state)
{
    (void)version;
    struct sq_server *s = cls;
    struct body *b = *state;
    if (!b) { /* the headers are in; the body, if any, comes next */
        if (!(b = calloc(1, sizeof *b)))
            return MHD_NO;
        *state = b;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (b->too_big || b->len + n > SQ_WEB_MAX_BODY) {
            b->too_big = true;
            return MHD_YES;
        }
        char *nb = realloc(b->buf, b->len + n + 1);
        if (!nb)
            return MHD_NO;
        memcpy(nb + b->len, upload_data, n);
        b->buf = nb;
        b->len += n;
        b->buf[b->len] = '\0';
        return MHD_YES;
    }
    struct sq_request r = {conn, method, url, b->buf ? b->buf : "", b->len, b->too_big};
    return s->fn(s->cls, &r);
}

/* A request over (answered or dropped): its body goes. */
static void request_done(void *cls, void **state)
{
    (void)cls;
    struct body *b = *state;
    if (b) {
        free(b->buf);
        free(b);
        *state = NULL;
    }
}

/* ---- start, run, stop ----------------------------------------------------------------- */

struct sq_server *sq_server_start(const struct sockaddr_storage *addr, socklen_t addrlen, const char *listen_text,
                                  sq_request_fn fn, void *cls, char *err, size_t errlen)
{
    struct sq_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->fn = fn;
    s->cls = cls;
    char what[300];
    snprintf(what, sizeof what, "--listen %s", listen_text);
    s->http = sq_http_start(addr, addrlen, what, on_request, request_done, s, err, errlen);
    if (!s->http) {
        free(s);
        return NULL;
    }
    return s;
}

bool sq_server_run(struct sq_server *s, int stop_fd, char *err, size_t errlen)
{
    return sq_http_run(s->http, stop_fd, err, errlen);
}

void sq_server_stop(struct sq_server *s)
{
    if (!s)
        return;
    sq_http_stop(s->http);
    free(s);
}
