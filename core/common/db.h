/* db.h -- connection parameters, connecting, and SQL error helpers. */
#ifndef SQ_DB_H
#define SQ_DB_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct sq_config;

/* libpq keyword/value arrays, NULL-terminated. The strings are borrowed
 * from the config, the flag and the environment, except `options`. */
struct sq_dbparams {
    const char **keys;
    const char **values;
    size_t n;
    char *options;            /* skipq's `options` value (owned), or NULL */
    int pin_at;               /* its index in keys, or -1: not pinned (pooler = transaction) */
    _Atomic bool pin_refused; /* the server refused `options`: connect without it */
};

/*
 * Build connection parameters by precedence: `flag` (the --db option: a URI
 * or conninfo), else cfg's [database], else $DATABASE_URL, else libpq's own
 * PG* environment defaults. skipq's defaults (application_name, keepalives,
 * tcp_user_timeout, connect_timeout) come first, so anything the user sets
 * wins. Last comes `options`: the user's options (from any of those places,
 * or $PGOPTIONS) followed by -c search_path=pg_catalog,pg_temp, which wins;
 * not with cfg's pooler = transaction.
 */
bool sq_dbparams_build(struct sq_dbparams *p, const struct sq_config *cfg, const char *flag,
                       const char *application_name);
/* skipq's defaults for libpq keywords (after application_name), ending
 * with {NULL, NULL}; the configuration reference shows them. */
struct sq_db_default {
    const char *keyword, *value;
};
extern const struct sq_db_default sq_db_defaults[];
void sq_dbparams_free(struct sq_dbparams *p);

/* Does a session made from p start with skipq's search_path? */
bool sq_dbparams_pinned(const struct sq_dbparams *p);

/* Connect; on failure returns NULL and a message in err that holds no
 * connection string and no password (a malformed connection string is
 * described, not quoted: conninfo.h). When the server refuses `options`
 * (pgbouncer in session mode), connects without it from then on and says
 * so once (log_info). */
PGconn *sq_db_connect(struct sq_dbparams *p, char *err, size_t errlen);

/* "host=... port=... dbname=... user=..." of a live connection, for logs. */
void sq_db_describe(PGconn *conn, char *buf, size_t len);

/* Is this failure the connection's (reconnect) rather than the statement's?
 * With res NULL, the last error recorded by sq_db_error() on this thread
 * is judged. */
bool sq_db_conn_lost(PGconn *conn, const PGresult *res);

/* The SQLSTATE of the last error sq_db_error() recorded on this thread. */
/* The DETAIL and CONTEXT of the last error this thread recorded ("" if
 * none): where in a bad JSON text the parser stopped, for instance. */
const char *sq_db_last_detail(void);
const char *sq_db_last_sqlstate(void);

/* The SQLSTATE of a result, or "" */
const char *sq_db_sqlstate(const PGresult *res);

/* Run a command that returns no rows; false (with message) on failure. */
bool sq_db_exec(PGconn *conn, const char *sql, char *err, size_t errlen);

/*
 * Execute, check, record the error -- the one place that does it. Returns
 * `res` when it succeeded (rows, or a command's completion); otherwise
 * copies the error into err (may be NULL) as sq_db_error() does, clears
 * `res` and returns NULL. Takes a NULL `res` (out of memory) as a failure.
 */
PGresult *sq_db_check(PGconn *conn, PGresult *res, char *err, size_t errlen);

/* sq_db_check() of a parameterised statement sent as an unnamed one. */
PGresult *sq_db_query(PGconn *conn, const char *sql, int nparams, const char *const *params, char *err,
                      size_t errlen);

/* Copy the primary message of a failed result (or the connection's). */
void sq_db_error(PGconn *conn, const PGresult *res, char *err, size_t errlen);

/* Record on this thread that the session is no good (as SQLSTATE 08006, so
 * sq_db_conn_lost() says so), for a failure libpq reported without one. */
void sq_db_note_lost(void);

#endif
