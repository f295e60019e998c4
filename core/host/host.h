/* host.h -- `skipq run`: the host's lifecycle. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

struct sq_config;

/* Entry point of `skipq run`. Returns the process exit code. */
int sq_host_run(struct sq_config *cfg, const char *db_flag);

#endif
