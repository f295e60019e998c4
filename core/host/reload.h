/* reload.h -- SIGHUP: re-read the INI file of a running host. */
#ifndef SQ_RELOAD_H
#define SQ_RELOAD_H

struct sq_host;

/* Re-read the INI file, apply what can change live, log what needs a
 * restart; a bad file changes nothing. */
void sq_host_reload(struct sq_host *h);

#endif
