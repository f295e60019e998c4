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
};

bool sq_admin_list(PGconn *conn, FILE *out, const struct sq_job_filter *f, bool json, char *err, size_t errlen);
/* 1 shown, 0 no such job, -1 error. */
int sq_admin_show(PGconn *conn, FILE *out, int64_t id, bool json, char *err, size_t errlen);
/* Dead (or, by id, cancelled) jobs back to pending with `extra` more
 * attempts; by ids, or (ids NULL) every dead job matching f. Returns the
 * count, -1 on error. */
long sq_admin_retry(PGconn *conn, const int64_t *ids, size_t n, const struct sq_job_filter *f, int extra,
                    char *err, size_t errlen);
/* Pending or running jobs -> cancelled. Returns the count, -1 on error. */
long sq_admin_cancel(PGconn *conn, const int64_t *ids, size_t n, char *err, size_t errlen);

/* skipq cron: the schedules hosts registered, with their last ticks. */
bool sq_admin_cron(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);
/* skipq limits: the per-kind limits in force, with what is running now. */
bool sq_admin_limits(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);
/* skipq limits clear KIND: 1 removed, 0 there was none, -1 error. */
long sq_admin_limits_clear(PGconn *conn, const char *kind, char *err, size_t errlen);

#endif
