/* jobapi.h -- the job half of the plugin host API: the services a handler calls about its job. */
#ifndef SQ_JOBAPI_H
#define SQ_JOBAPI_H

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "skipq/plugin.h"

struct sq_slot;
struct sq_worker;

/* A job attempt as the host tracks it while the handler runs. */
struct sq_job_ctx {
    skipq_job pub; /* first: handlers hold &pub */
    struct sq_slot *slot;
    PGconn *conn;   /* the worker's connection (may break) */
    /* A handler thread of a pool (pool.c) has no session until its handler
     * asks for one: sq_job_conn opens it into *lazy, owned by lazy_owner. */
    PGconn **lazy;
    struct sq_worker *lazy_owner;
    PGconn *(*open)(struct sq_worker *owner, char *err, size_t errlen);
    char error[SKIPQ_ERROR_SIZE];
    int64_t retry_ms; /* -1: the kind's backoff */
    bool in_txn;      /* the handler asked for the connection */
    bool conn_broken; /* BEGIN failed: reconnect after the handler */
    char *output;     /* skipq_job_output(): valid JSON, malloc'd; NULL: none */
};

/* Behind sq_host_api's job_* entries (plugin.c). */
void sq_job_verror(skipq_job *job, const char *fmt, va_list ap);
void sq_job_retry_in(skipq_job *job, int64_t delay_ms);
struct pg_conn *sq_job_conn(skipq_job *job);
int sq_job_should_stop(const skipq_job *job);
void sq_job_vlog(skipq_job *job, int level, const char *fmt, va_list ap);
int64_t sq_job_deadline_ms(const skipq_job *job);
int sq_job_output(skipq_job *job, const char *json, size_t len);

/* The job's session: the worker's, or a pool thread's, opened now if
 * need be (NULL: it cannot be made, logged). */
PGconn *sq_job_session(struct sq_job_ctx *c);

/* One JSON value (strict), and nothing after it but white space. */
bool sq_job_json_valid(const char *s, size_t len);

/* Write the attempt's output (if the handler gave one) to its execution
 * row, on conn, which must be outside a transaction (NULL: lost, logged);
 * frees it. After the outcome's own transaction, if any: the output is kept
 * whatever the outcome. */
void sq_job_output_save(struct sq_job_ctx *c, PGconn *conn);

#endif
