/* hosts.h -- the host registry (skipq.hosts) and the finished-job totals. */
#ifndef SQ_HOSTS_H
#define SQ_HOSTS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sq_host;

/* Hosts whose heartbeat is older than this many of their own heartbeat
 * intervals are not alive (skipq.host_alive). */
#define SQ_HOST_ALIVE_BEATS 3
/* The totals lag this far behind now(), at most (see sql/008_hosts.sql). */
#define SQ_TOTALS_LAG_MS 60000

/* Register (first) or refresh this host's row. */
bool sq_hosts_beat(PGconn *conn, const struct sq_host *h, bool first, char *err, size_t errlen);
/* Remove this host's row: it stopped cleanly. */
bool sq_hosts_gone(PGconn *conn, const struct sq_host *h, char *err, size_t errlen);
/* Advance skipq.job_totals; the number of jobs added, -1 if another host is
 * at it, -2 on error. */
long sq_hosts_advance_totals(PGconn *conn, int64_t lag_ms, char *err, size_t errlen);

#endif
