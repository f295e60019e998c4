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
