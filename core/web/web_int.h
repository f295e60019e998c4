/* web_int.h -- what the parts of `skipq web` share: the process's state,
 * one API call as its handler sees it, and the helpers that turn database
 * rows into JSON (json-c; no JSON text is ever put together by hand). */
#ifndef SQ_WEB_INT_H
#define SQ_WEB_INT_H

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

/* ---- the database (web.c) ---- */

/* Read again who the session's role is and whether it may act (a grant or
 * a revoke since the last look shows at the next page load). */
bool web_read_caps(struct sq_web *w, PGconn *conn, char *err, size_t errlen);
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

/* ---- arguments (api.c) ---- */

/* The query argument `name`, or NULL when absent or empty. */
const char *web_arg(struct web_call *c, const char *name);
/* 400 (and false) when the query holds an argument not in `names`
 * (NULL-terminated), one given twice, or text that is not UTF-8. */
bool web_args_check(struct web_call *c, const char *const *names);
unsigned web_bad(struct web_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- rows as JSON (api.c) ---- */

/* One value by its column's type: NULL -> null, booleans, integers,
 * numeric and float8 as numbers (as the server wrote them), json as JSON,
 * timestamptz as ISO 8601 text, anything else as a string. */
json_object *web_value(const PGresult *res, int row, int col);
json_object *web_row(const PGresult *res, int row);
json_object *web_rows(const PGresult *res);

/* ---- handlers ---- */

unsigned web_api_session(struct web_call *c, const char *tail);
unsigned web_api_overview(struct web_call *c, const char *tail);
unsigned web_api_throughput(struct web_call *c, const char *tail);
unsigned web_api_jobs(struct web_call *c, const char *tail);
unsigned web_api_job(struct web_call *c, const char *tail);
unsigned web_api_dead(struct web_call *c, const char *tail);
unsigned web_api_dead_jobs(struct web_call *c, const char *tail);
unsigned web_api_hosts(struct web_call *c, const char *tail);
/* Actions (actions.c): POST, JSON body. */
unsigned web_act_retry(struct web_call *c, const char *tail);
unsigned web_act_cancel(struct web_call *c, const char *tail);
unsigned web_act_pause(struct web_call *c, const char *tail);
unsigned web_act_resume(struct web_call *c, const char *tail);

/* The ids of the dead jobs of one group of the dead page (kind and folded
 * error, api.c), as an int8[] literal in a PGresult; NULL on failure. */
PGresult *web_dead_group_ids(struct web_call *c, const char *kind, const char *group);

#endif
