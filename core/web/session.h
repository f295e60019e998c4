/* session.h -- what the parts of `skipq web` share: the process's state,
 * one API call as its handler sees it, and the dashboard's one database
 * session (connected on demand, set up read-only when asked, its errors
 * turned into HTTP statuses). */
#ifndef SQ_WEB_SESSION_H
#define SQ_WEB_SESSION_H

#include <json-c/json.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/db.h"

struct sq_config;

struct sq_web {
    bool read_only;     /* --read-only: actions hidden and refused */
    char *token;        /* from --token-file; NULL: none (loopback only) */
    char session[65];   /* the login cookie's value: random, per process */
    char csrf[65];      /* what actions carry in X-CSRF-Token: random, per process */
    const char *listen; /* as given */
    int port;
    struct sq_config *cfg; /* -c FILE, kept: params borrow from it */
    struct sq_dbparams params;
    PGconn *conn;       /* NULL: (re)connect at the next request */
    char role[128];     /* current_user */
    bool can_act;       /* the role may retry, cancel, pause and resume */
    char cannot_act[200]; /* why not */
};

/* One API call. A handler returns the HTTP status, with the answer in
 * `out` (2xx) or a message in `err` (4xx, 5xx). */
struct web_call {
    struct sq_web *w;
    struct MHD_Connection *conn;
    const char *body;
    size_t body_len;
    json_object *out;
    char err[600];
};

typedef unsigned (*web_handler)(struct web_call *c, const char *tail);

/* ---- the database ---- */

/* Read again who the session's role is and whether it may act (a grant or
 * a revoke since the last look shows at the next page load). */
bool web_read_caps(struct sq_web *w, PGconn *conn, char *err, size_t errlen);
/* A new session, set up, with the role's rights read; NULL (err) if not. */
PGconn *web_connect(struct sq_web *w, char *err, size_t errlen);
/* The session, connected (and set up) if it was not; NULL with 503. */
PGconn *web_db(struct web_call *c);
/* Status for a failed statement whose message is in c->err: 400 for bad
 * input (class 22), 403 for a privilege (42501), 503 for a statement
 * timeout or a lost connection (dropped, to reconnect), else 500. */
unsigned web_db_failed(struct web_call *c);
/* PQexecParams returning rows; NULL on failure (message in c->err). */
PGresult *web_query(struct web_call *c, const char *sql, int n, const char *const *params);
/* A read-only snapshot for the statements of one page (and its end). */
bool web_begin_read(struct web_call *c);
void web_end(struct web_call *c);

/* Longest a dashboard statement may run: under the server's 5 s request deadline. */
#define STATEMENT_TIMEOUT_MS 4000

#endif
