/* notify.h -- readiness, status and watchdog messages to systemd. */
#ifndef SQ_NOTIFY_H
#define SQ_NOTIFY_H

#include <stdint.h>

/* Send "READY=1", "STOPPING=1", "WATCHDOG=1"... (no-op without
 * $NOTIFY_SOCKET). */
void sq_notify(const char *state);
/* Send "STATUS=<formatted text>". */
void sq_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The watchdog interval systemd asked for, in ms; 0 when there is none. */
int64_t sq_notify_watchdog_ms(void);

#endif
