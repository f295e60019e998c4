/* http.h -- the HTTP server skipq's programs share (/metrics and /healthz
 * of `skipq run`, the dashboard of `skipq web`): libmicrohttpd on a socket
 * we bind, driven from one thread, with limits a slow client cannot get
 * round (http.c). */
#ifndef SQ_HTTP_H
#define SQ_HTTP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* A request must arrive and be answered within this of its connection's
 * start (or of the previous answer on that connection). */
#define SQ_HTTP_DEADLINE_MS 5000
/* Connections per client address; one more cuts that address's oldest. */
#define SQ_HTTP_PER_ADDRESS 8
/* Connections in all; more wait in the listen backlog. */
#define SQ_HTTP_MAX_CONNECTIONS 64

struct sq_http;

/* Called when a request is over (answered or dropped) with the state its
 * handler kept in *state, to free it; may be NULL. */
typedef void (*sq_http_done_fn)(void *cls, void **state);

/*
 * Bind addr and start a server whose requests go to fn(cls, ...); nothing
 * is served until sq_http_run. `what` names the address in messages
 * ("--listen 127.0.0.1:9470"). NULL with a message in err when the
 * address cannot be bound or the server not started.
 */
struct sq_http *sq_http_start(const struct sockaddr_storage *addr, socklen_t addrlen, const char *what,
                              MHD_AccessHandlerCallback fn, sq_http_done_fn done, void *cls, char *err,
                              size_t errlen);
/* Serve on the calling thread until stop_fd is readable (true), or the
 * loop fails (false, message in err). */
bool sq_http_run(struct sq_http *s, int stop_fd, char *err, size_t errlen);
/* Stop serving and free s (NULL is fine). Not while sq_http_run runs. */
void sq_http_stop(struct sq_http *s);

#endif
