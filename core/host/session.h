/* session.h -- a database session with skipq's settings and statements; reconnecting. */
#ifndef SQ_SESSION_H
#define SQ_SESSION_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct sq_host;
struct sq_worker;

/* A fresh session with skipq's settings and statements (NULL, with the
 * reason in err, when it cannot be made). */
PGconn *sq_session_open(struct sq_host *h, char *err, size_t errlen);
/* A worker's connection came up or went down (for /healthz and gauges). */
void sq_session_mark(struct sq_worker *w, bool up);
/*
 * A worker's session, retrying with capped exponential backoff until it
 * works -- or, with `until_stop`, until the host stops (then NULL). The
 * outage is logged once, the recovery once.
 */
PGconn *sq_session_reconnect(struct sq_worker *w, bool until_stop);

#endif
