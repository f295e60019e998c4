/* host.h -- `skipq run`: the host's lifecycle. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

struct sq_config;

/* Block SIGTERM, SIGINT and SIGHUP in the calling thread, and so in every
 * thread it starts: `skipq run` takes them synchronously in its signal
 * loop, so one that comes during start-up waits for it. *set receives
 * them. SIGCHLD is blocked too (not in *set): the thread that supervises
 * worker processes takes it through a signalfd. */
void sq_host_block_signals(sigset_t *set);

struct sq_host;
/* The host's name: [host] name, else the machine's. */
void sq_host_name_init(struct sq_host *h);
/* Resolve each [queue] group against the kinds the plugins registered
 * (h->plugins, h->kinds): false with a FILE:LINE message in err, or with
 * err empty when out of memory. */
bool sq_host_build_groups(struct sq_host *h, char *err, size_t errlen);

/* The grace period is over: ask every handler to stop, give back the jobs
 * still running (interrupted, uncharged) and record the outcomes of those
 * that returned. */
void sq_host_release_running(struct sq_host *h);

/* Entry point of `skipq run`. Returns the process exit code. */
int sq_host_run(struct sq_config *cfg, const char *db_flag);

#endif
