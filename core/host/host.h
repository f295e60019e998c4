/* host.h -- the state `skipq run` shares between its threads. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/state.h"

struct sq_config;

/*
 * Are the host's threads making progress? A worker counts as stuck when it
 * is not running a handler and has not gone round its loop for stale_ms
 * beyond its poll interval; the heartbeat thread when it has not for
 * stale_ms. With check_db, a database unreachable for stale_ms also fails.
 * On false, `why` says what is wrong.
 */
bool sq_host_progress(struct sq_host *h, int64_t stale_ms, bool check_db, char *why, size_t whylen);
/* reload.c: SIGHUP. Re-read the INI file, apply what can change live, log
 * what needs a restart; a bad file changes nothing. */
void sq_host_reload(struct sq_host *h);

/* Entry point of `skipq run`. Returns the process exit code. */
int sq_host_run(struct sq_config *cfg, const char *db_flag);

/* worker.c */
void *sq_worker_main(void *arg);

/* listen.c */
void *sq_listener_main(void *arg);

#endif
