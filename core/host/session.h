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
/* The same for worker (or heartbeat) w, whose session is published
 * (sq_session_publish) from the moment it is connected. */
PGconn *sq_session_open_for(struct sq_host *h, struct sq_worker *w, char *err, size_t errlen);
/* A worker's connection came up or went down (for /healthz and gauges). */
void sq_session_mark(struct sq_worker *w, bool up);
/*
 * A worker's session, retrying with capped exponential backoff until it
 * works -- or, with `until_stop`, until the host stops (then NULL). The
 * outage is logged once, the recovery once.
 */
PGconn *sq_session_reconnect(struct sq_worker *w, bool until_stop);

/* Publish (conn) or withdraw (NULL) the session whose call sq_session_cut
 * may cut. */
void sq_session_publish(struct sq_worker *w, PGconn *conn);
/* Withdraw the session, close it and set *connp to NULL. */
void sq_session_close(struct sq_worker *w, PGconn **connp);
/*
 * Cut the published session of w from another thread: shut its socket
 * down, so a call waiting for a reply that will never come (a path that
 * swallows bytes and still answers keepalives) fails now as a lost
 * connection, and w reconnects. Returns whether there was one to cut.
 */
bool sq_session_cut(struct sq_worker *w);
/* The host's main thread, every tick: cut the session of each worker thread
 * (and of the heartbeat thread) stuck in a database call for longer than
 * [host] reply_timeout. */
void sq_session_cut_stuck(struct sq_host *h);

#endif
