/* admin.h -- operator commands: jobs (list, show, retry, cancel), cron schedules, kind limits. */
#ifndef SQ_ADMIN_H
#define SQ_ADMIN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* NULL members match everything. */
struct sq_job_filter {
    const char *status;
    const char *queue;
    const char *kind;
    const char *since; /* timestamp text: finished at or after */
    int limit;         /* list only; 0: 50 */
    /* List only (the dashboard's filters); text, checked by the server. */
    const char *before_id;    /* keyset paging: ids below this one */
    const char *created_from; /* created at or after this timestamp */
    const char *created_to;   /* created before this timestamp */
    const char *unique_key;
    const char *ordering_key;
    const char *error_text;   /* in last_error, ignoring case */
};

bool sq_admin_list(PGconn *conn, FILE *out, const struct sq_job_filter *f, bool json, char *err, size_t errlen);
/* The rows `jobs list` prints, newest first; NULL on error. */
PGresult *sq_admin_list_fetch(PGconn *conn, const struct sq_job_filter *f, char *err, size_t errlen);
/* 1 shown, 0 no such job, -1 error. */
int sq_admin_show(PGconn *conn, FILE *out, int64_t id, bool json, char *err, size_t errlen);
/* What `jobs show` prints: the job's row and its executions (the caller
 * clears both when it returns 1). 1, 0 no such job, -1 error. */
int sq_admin_show_fetch(PGconn *conn, int64_t id, PGresult **job, PGresult **executions, char *err, size_t errlen);
/* Dead (or, by id, cancelled) jobs back to pending with `extra` more
 * attempts; by ids, or (ids NULL) every dead job matching f. Returns the
 * count, -1 on error. */
long sq_admin_retry(PGconn *conn, const int64_t *ids, size_t n, const struct sq_job_filter *f, int extra,
                    char *err, size_t errlen);
/* Pending or running jobs -> cancelled. Returns the count, -1 on error. */
long sq_admin_cancel(PGconn *conn, const int64_t *ids, size_t n, char *err, size_t errlen);

/* skipq cron: the schedules hosts registered, with their last ticks. */
bool sq_admin_cron(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);
PGresult *sq_admin_cron_fetch(PGconn *conn, char *err, size_t errlen);
/* skipq limits: the per-kind limits in force, with what is running now. */
bool sq_admin_limits(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);
PGresult *sq_admin_limits_fetch(PGconn *conn, char *err, size_t errlen);
/* skipq limits clear KIND: 1 removed, 0 there was none, -1 error. */
long sq_admin_limits_clear(PGconn *conn, const char *kind, char *err, size_t errlen);

/* skipq pause / resume: scope "queue" or "kind" (skipq.pause() checks
 * both). 1 changed, 0 it already was so, -1 error (class 22: bad input). */
long sq_admin_pause(PGconn *conn, const char *scope, const char *name, bool pause, char *err, size_t errlen);

#endif
