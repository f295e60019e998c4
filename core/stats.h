/* stats.h -- `skipq stats`: what the queue holds, per queue and kind. */
#ifndef SQ_STATS_H
#define SQ_STATS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>

/* Print to `out` as a table or as JSON; false (message in err) on failure. */
bool sq_stats_print(PGconn *conn, FILE *out, bool json, char *err, size_t errlen);

#endif
