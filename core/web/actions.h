/* actions.h -- the dashboard's actions: retry, cancel, pause and resume,
 * through the command line's functions and rules. */
#ifndef SQ_WEB_ACTIONS_H
#define SQ_WEB_ACTIONS_H

#include "web/session.h"

/* Actions (actions.c): POST, JSON body. */
unsigned web_act_retry(struct web_call *c, const char *tail);
unsigned web_act_cancel(struct web_call *c, const char *tail);
unsigned web_act_pause(struct web_call *c, const char *tail);
unsigned web_act_resume(struct web_call *c, const char *tail);


#endif
