/* host.h -- `skipq run`: the host's lifecycle. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

#include <signal.h>

struct sq_config;

/* Block SIGTERM, SIGINT and SIGHUP in the calling thread, and so in every
 * thread it starts: `skipq run` takes them synchronously in its signal
 * loop, so one that comes during start-up waits for it. *set receives
 * them. */
void sq_host_block_signals(sigset_t *set);

/* Entry point of `skipq run`. Returns the process exit code. */
int sq_host_run(struct sq_config *cfg, const char *db_flag);

#endif
