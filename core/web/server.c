/*
 * server.c -- the HTTP server of `skipq web`.
 *
 * DESIGN
 * - One thread, the process's main one, drives libmicrohttpd's epoll loop
 *   (MHD_run) and answers each request inline, database query included.
 *   A dashboard serves a few people; every statement it sends is bounded
 *   by statement_timeout (web.c), so no request holds the others for long,
 *   and the connection table below needs no lock.
 * - The limits are those of /metrics (host/metrics.c, whose approach this
 *   copies; the two belong in one module): libmicrohttpd's own timeout
 *   restarts with every byte, so a client trickling a request would hold
 *   its connection for ever. Hence
 *   - a deadline: a request must arrive and be answered within DEADLINE_MS
 *     of the connection's start (or of the previous answer, when kept
 *     alive); past it the connection is cut, however busy;
 *   - PER_ADDRESS connections per client address: one more cuts that
 *     address's oldest (libmicrohttpd's per-IP limit would refuse the
 *     newcomer, which is the wrong one);
 *   - MAX_CONNECTIONS in all: beyond them new connections wait in the
 *     listen backlog until the deadline frees slots.
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

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

#define DEADLINE_MS 5000
#define PER_ADDRESS 8
#define MAX_CONNECTIONS 64

/* default-src 'none': nothing loads unless named here. Styles come only
 * from the style sheet under /assets; the scripts set style properties
 * through the CSSOM, which CSP allows, while style attributes in markup
 * are refused. */
static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct http_conn {
    bool used;
    bool cut; /* shut down; libmicrohttpd closes it on its next round */
    int fd;
    struct sockaddr_storage addr;
    int64_t since; /* start, or end of the previous request (ms) */
};

/* A request's body as it arrives. */
struct body {
    char *buf;
    size_t len;
    bool too_big;
};

struct sq_server {
    struct MHD_Daemon *daemon;
    sq_request_fn fn;
    void *cls;
    struct http_conn conns[MAX_CONNECTIONS];
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

/* ---- connection limits ---------------------------------------------------------------- */

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return true;
}

static void cut(struct http_conn *c)
{
    if (c->used && !c->cut) {
        shutdown(c->fd, SHUT_RDWR);
        c->cut = true;
    }
}

/* One connection more from c's address than allowed: cut its oldest. */
static void limit_address(struct sq_server *s, struct http_conn *c)
{
    struct http_conn *oldest = NULL;
    int n = 0;
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
        struct http_conn *o = &s->conns[i];
        if (!o->used || o->cut || !same_address(&o->addr, &c->addr))
            continue;
        n++;
        if (o != c && (!oldest || o->since < oldest->since))
            oldest = o;
    }
    if (n > PER_ADDRESS && oldest)
        cut(oldest);
}

static void conn_started(struct sq_server *s, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct http_conn *c = NULL;
    for (int i = 0; i < MAX_CONNECTIONS && !c; i++)
        c = s->conns[i].used ? NULL : &s->conns[i];
    if (!fd || !c) { /* cannot happen: libmicrohttpd holds at most MAX_CONNECTIONS */
        if (fd)
            shutdown(fd->connect_fd, SHUT_RDWR);
        return;
    }
    memset(c, 0, sizeof *c);
    c->used = true;
    c->fd = fd->connect_fd;
    c->since = sq_now_ms();
    if (addr && addr->client_addr) {
        sa_family_t family = addr->client_addr->sa_family;
        memcpy(&c->addr, addr->client_addr,
               family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    }
    *socket_context = c;
    limit_address(s, c);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct sq_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(s, conn, socket_context);
    } else if (*socket_context) {
        struct http_conn *c = *socket_context;
        c->used = false;
        *socket_context = NULL;
    }
}

/* A request answered (or dropped): free its body; a kept-alive
 * connection's next request has a deadline of its own. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)code;
    struct body *b = *state;
    if (b) {
        free(b->buf);
        free(b);
        *state = NULL;
    }
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct http_conn *c = i ? i->socket_context : NULL;
    if (c)
        c->since = sq_now_ms();
}

/* Cut what is past its deadline; ms until the next deadline (-1: none). */
static int cut_late(struct sq_server *s)
{
    int64_t now = sq_now_ms(), next = -1;
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
        struct http_conn *c = &s->conns[i];
        if (!c->used || c->cut)
            continue;
        int64_t left = c->since + DEADLINE_MS - now;
        if (left <= 0)
            cut(c);
        else if (next < 0 || left < next)
            next = left;
    }
    return (int)next;
}

/* ---- start, run, stop ----------------------------------------------------------------- */

static int bind_listen(const struct sockaddr_storage *addr, socklen_t addrlen, const char *text, char *err,
                       size_t errlen)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) {
        snprintf(err, errlen, "--listen %s: cannot create a socket: %s", text, strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)addr, addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "--listen %s: cannot listen there: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

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
    int fd = bind_listen(addr, addrlen, listen_text, err, errlen);
    if (fd < 0) {
        free(s);
        return NULL;
    }
    unsigned flags = MHD_USE_EPOLL | (addr->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(DEADLINE_MS / 1000),
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "--listen %s: cannot start the HTTP server", listen_text);
        close(fd);
        free(s);
        return NULL;
    }
    return s;
}

bool sq_server_run(struct sq_server *s, int stop_fd, char *err, size_t errlen)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        snprintf(err, errlen, "libmicrohttpd has no epoll descriptor");
        return false;
    }
    struct pollfd p[2] = {{.fd = info->epoll_fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
    for (;;) {
        MHD_UNSIGNED_LONG_LONG mhd_ms = 0;
        int timeout = cut_late(s);
        if (MHD_get_timeout(s->daemon, &mhd_ms) == MHD_YES && (timeout < 0 || mhd_ms < (unsigned)timeout))
            timeout = (int)mhd_ms;
        if (poll(p, 2, timeout) < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll failed: %s", strerror(errno));
            return false;
        }
        if (p[1].revents)
            return true;
        MHD_run(s->daemon);
    }
}

void sq_server_stop(struct sq_server *s)
{
    if (!s)
        return;
    if (s->daemon) {
        int fd = MHD_quiesce_daemon(s->daemon);
        MHD_stop_daemon(s->daemon);
        if (fd >= 0)
            close(fd);
    }
    free(s);
}
