/* metrics.h -- /metrics (Prometheus text) and /healthz, served by `skipq run`. */
#ifndef SQ_METRICS_H
#define SQ_METRICS_H

#include <libpq-fe.h>
#include <stddef.h>

struct sq_host;
struct sq_metrics;

/*
 * Bind [metrics] listen and serve it from a thread of its own, for the n
 * hosts of this process (one per database; each gets its h->metrics).
 * Returns NULL with a message in err when the address cannot be bound (in
 * use, not local, no permission).
 */
struct sq_metrics *sq_metrics_start(struct sq_host **hosts, size_t n, char *err, size_t errlen);
/* Stop the server and free every host's samples (m: what start returned). */
void sq_metrics_stop(struct sq_metrics *m);

/* Called by the heartbeat thread each round: samples the ready-job gauges
 * with one query when the last sample is old enough (m NULL: [metrics]
 * off, nothing to do). */
void sq_metrics_sample(struct sq_metrics *m, PGconn *conn);

#endif
