/* wproc.h -- a worker process of a host's [queue] isolation = process group. */
#ifndef SQ_WPROC_H
#define SQ_WPROC_H

struct sq_config;

/* `skipq run` started by a host as one of its worker processes (the
 * environment says so: SQ_WPROC_ENV, procs.h): run that one worker until it
 * stops, then exit the process. Returns only when the environment does not
 * say so (a host is to run). */
void sq_wproc_run_if_asked(struct sq_config *cfg, const char *db_flag);

#endif
