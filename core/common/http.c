/*
 * http.c -- the HTTP server of /metrics, /healthz and the dashboard.
 *
 * DESIGN
 * - We bind the socket ourselves and hand it to libmicrohttpd, so an
 *   address in use is reported with its errno instead of a bare "cannot
 *   start".
 * - One thread drives libmicrohttpd's epoll loop (MHD_run) and its
 *   callbacks run on that thread too, so the connection table below needs
 *   no lock, and a descriptor in it is never closed under our feet.
 * - Whoever can reach the port must not be able to keep the server from
 *   answering. libmicrohttpd's connection timeout restarts with every byte
 *   received, so a client trickling a request (or 32 of them) would hold
 *   its connection for ever. Hence three limits of our own:
 *   - a deadline: every request must arrive and be answered within
 *     SQ_HTTP_DEADLINE_MS of the connection's start (or of the previous
 *     answer, on a kept-alive connection); past it the connection is cut,
 *     however busy;
 *   - SQ_HTTP_PER_ADDRESS connections per client address: one more cuts
 *     that address's oldest, so a monitoring system's fresh request goes
 *     ahead of the connections that have been dawdling from the same
 *     address;
 *   - SQ_HTTP_MAX_CONNECTIONS in all: beyond them libmicrohttpd stops
 *     accepting, and new connections wait in the listen backlog until the
 *     deadline frees slots.
 *   libmicrohttpd's own per-IP limit is not used: it refuses the newcomer,
 *   which is the wrong one when a prober shares its address with whoever
 *   holds the slots.
 */
#include "common/http.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

/* A connection libmicrohttpd holds, as its socket context. */
struct http_conn {
    bool used;
    bool cut; /* shut down; libmicrohttpd closes it on its next round */
    int fd;
    struct sockaddr_storage addr;
    int64_t since; /* start, or end of the previous request (ms) */
};

struct sq_http {
    struct MHD_Daemon *daemon;
    sq_http_done_fn done;
    void *cls;
    struct http_conn conns[SQ_HTTP_MAX_CONNECTIONS];
};

/* ---- connection limits ------------------------------------------------------------ */

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
static void limit_address(struct sq_http *s, struct http_conn *c)
{
    struct http_conn *oldest = NULL;
    int n = 0;
    for (int i = 0; i < SQ_HTTP_MAX_CONNECTIONS; i++) {
        struct http_conn *o = &s->conns[i];
        if (!o->used || o->cut || !same_address(&o->addr, &c->addr))
            continue;
        n++;
        if (o != c && (!oldest || o->since < oldest->since))
            oldest = o;
    }
    if (n > SQ_HTTP_PER_ADDRESS && oldest)
        cut(oldest);
}

static void conn_started(struct sq_http *s, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct http_conn *c = NULL;
    for (int i = 0; i < SQ_HTTP_MAX_CONNECTIONS && !c; i++)
        c = s->conns[i].used ? NULL : &s->conns[i];
    if (!fd || !c) { /* cannot happen: libmicrohttpd holds at most SQ_HTTP_MAX_CONNECTIONS */
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
    struct sq_http *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(s, conn, socket_context);
    } else if (*socket_context) {
        struct http_conn *c = *socket_context;
        c->used = false;
        *socket_context = NULL;
    }
}

/* A request answered (or dropped): the handler's state goes; a kept-alive
 * connection's next request has a deadline of its own. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode code)
{
    (void)code;
    struct sq_http *s = cls;
    if (s->done)
        s->done(s->cls, state);
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct http_conn *c = i ? i->socket_context : NULL;
    if (c)
        c->since = sq_now_ms();
}

/* Cut what is past its deadline; ms until the next deadline (-1: none). */
static int cut_late(struct sq_http *s)
{
    int64_t now = sq_now_ms(), next = -1;
    for (int i = 0; i < SQ_HTTP_MAX_CONNECTIONS; i++) {
        struct http_conn *c = &s->conns[i];
        if (!c->used || c->cut)
            continue;
        int64_t left = c->since + SQ_HTTP_DEADLINE_MS - now;
        if (left <= 0)
            cut(c);
        else if (next < 0 || left < next)
            next = left;
    }
    return (int)next;
}

/* ---- start, run, stop ------------------------------------------------------------- */

static int bind_listen(const struct sockaddr_storage *addr, socklen_t addrlen, const char *what, char *err,
                       size_t errlen)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a socket: %s", what, strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)addr, addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "%s: cannot listen there: %s", what, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

struct sq_http *sq_http_start(const struct sockaddr_storage *addr, socklen_t addrlen, const char *what,
                              MHD_AccessHandlerCallback fn, sq_http_done_fn done, void *cls, char *err,
                              size_t errlen)
{
    struct sq_http *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->done = done;
    s->cls = cls;
    int fd = bind_listen(addr, addrlen, what, err, errlen);
    if (fd < 0)
        goto fail;
    unsigned flags = MHD_USE_EPOLL | (addr->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, fn, cls, MHD_OPTION_LISTEN_SOCKET, fd,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)SQ_HTTP_MAX_CONNECTIONS,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(SQ_HTTP_DEADLINE_MS / 1000),
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "%s: cannot start the HTTP server", what);
        close(fd);
        goto fail;
    }
    return s;
fail:
    free(s);
    return NULL;
}

bool sq_http_run(struct sq_http *s, int stop_fd, char *err, size_t errlen)
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

void sq_http_stop(struct sq_http *s)
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
