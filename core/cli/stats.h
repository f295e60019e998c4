/* stats.h -- `skipq stats` and `skipq top`: what the queue holds, what it
 * did lately, and which hosts serve it. */
#ifndef SQ_STATS_H
#define SQ_STATS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Print to `out` as tables or as one JSON object; false (message in err)
 * on failure. */
bool sq_stats_print(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);

/* What stats prints, read in one snapshot: the totals watermark (through,
 * scan start, began_at text), a row per queue and kind (ready ... served,
 * paused), the hosts (queues and kinds as JSON arrays when json_arrays,
 * else comma-separated), and the paused set (scope, name, paused_at,
 * paused_by). Clear with sq_stats_clear; on failure nothing is left. */
struct sq_stats_data {
    PGresult *mark, *rows, *hosts, *paused;
};
bool sq_stats_fetch(PGconn *conn, bool json_arrays, struct sq_stats_data *d, char *err, size_t errlen);
void sq_stats_clear(struct sq_stats_data *d);

/* What one refresh of top prints: the head (at, hosts, threads,
 * last_error_job, last_error, last_error_at), a row per queue with rates
 * over window_ms, the paused set, and the crashes of the last hour per kind
 * (kind, crashed_1h, last_cause). */
struct sq_top_data {
    PGresult *head, *rows, *paused, *crashed;
};
bool sq_top_fetch(PGconn *conn, int64_t window_ms, struct sq_top_data *d, char *err, size_t errlen);
void sq_top_clear(struct sq_top_data *d);

struct sq_top_opts {
    int64_t interval_ms; /* between refreshes */
    int64_t window_ms;   /* rates are over this much recent time */
    long iterations;     /* 0: until SIGINT or SIGTERM */
    bool json;           /* one JSON object per refresh */
    bool clear;          /* clear the screen before each refresh (a TTY) */
};

/* Refresh until o->iterations are done or SIGINT/SIGTERM arrives: 0, or -1
 * (message in err) when a refresh fails. */
int sq_top_run(PGconn *conn, FILE *out, const struct sq_top_opts *o, char *err, size_t errlen);

#endif
