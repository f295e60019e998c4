/* server.h -- the HTTP server of `skipq web`: libmicrohttpd driven from the
 * calling thread, with the limits /metrics has (connections per client
 * address, a deadline per request) and the security headers every response
 * carries. */
#ifndef SQ_WEB_SERVER_H
#define SQ_WEB_SERVER_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* The most a request body may hold; more is refused with 413. */
#define SQ_WEB_MAX_BODY (64 * 1024)

struct sq_server;

/* One request, once its body has arrived whole. */
struct sq_request {
    struct MHD_Connection *conn;
    const char *method;
    const char *url;  /* path only: libmicrohttpd splits the query off */
    const char *body; /* NUL-terminated; "" when there is none */
    size_t body_len;
    bool body_too_big;
};

/* Answers one request: queue a response (sq_server_reply) and return its
 * result. */
typedef enum MHD_Result (*sq_request_fn)(void *cls, const struct sq_request *r);

/* Bind addr and start serving (nothing runs until sq_server_run). NULL
 * with a message in err when the address cannot be bound. */
struct sq_server *sq_server_start(const struct sockaddr_storage *addr, socklen_t addrlen, const char *listen_text,
                                  sq_request_fn fn, void *cls, char *err, size_t errlen);
/* Serve on this thread until stop_fd is readable. false: the loop failed
 * (message in err). */
bool sq_server_run(struct sq_server *s, int stop_fd, char *err, size_t errlen);
void sq_server_stop(struct sq_server *s);

/*
 * Queue a response with the security headers (Content-Security-Policy,
 * nosniff, no framing, no referrer) and `cache` as Cache-Control. body is
 * copied unless `persistent` (static data). `headers`: more name/value
 * pairs, NULL-terminated, or NULL.
 */
enum MHD_Result sq_server_reply(struct MHD_Connection *c, unsigned status, const char *type, const char *cache,
                                const void *body, size_t len, bool persistent, const char *const *headers);

#endif
