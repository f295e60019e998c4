/* scheduler.h -- cron, per-kind limits, priority aging and dependencies on a host. */
#ifndef SQ_SCHEDULER_H
#define SQ_SCHEDULER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct sq_host;

/*
 * At start, before any thread: check what only the database can check in
 * the INI (cron time zones and payloads), register the host's cron
 * schedules and kind limits, and learn which groups serve limited kinds
 * and what is paused (pause.c).
 * On failure err holds the reason; *bad_config says whether it is the INI's
 * fault (exit 2) rather than the database's (exit 1).
 */
bool sq_sched_start(struct sq_host *h, char *err, size_t errlen, bool *bad_config);

/* Write the [kind] max_attempts and keep_done of the kinds this host runs
 * into skipq.kind_defaults and skipq.kind_options (at start, and again
 * after SIGHUP), logging a value it replaced. */
bool sq_sched_register_defaults(struct sq_host *h, PGconn *conn, char *err, size_t errlen);

/* One round on the heartbeat thread: refresh the limited kinds, enqueue
 * due cron ticks, age priorities, settle new dependencies. Logs its own
 * failures. */
void sq_sched_round(struct sq_host *h, PGconn *conn);

/* Settle children the enqueue left in skipq.dependency_inbox (also run
 * between rounds when an enqueue's notification sets host->deps_wake). */
void sq_deps_round(struct sq_host *h, PGconn *conn);

#endif
