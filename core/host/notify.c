/*
 * notify.c -- the host's side of systemd's Type=notify protocol, through
 * libsystemd's sd_notify. Outside systemd ($NOTIFY_SOCKET unset) every call
 * is a no-op, so the host needs no "am I under systemd" switch.
 *
 * What the host sends and when is decided in host.c: READY=1 once every
 * thread has connected, STATUS= on each change of state, STOPPING=1 at the
 * first SIGTERM, WATCHDOG=1 only while its threads make progress.
 */
#include "host/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "common/log.h"

void sq_notify(const char *state)
{
    int r = sd_notify(0, state);
    if (r < 0)
        log_debug("sd_notify(%s) failed: error %d", state, -r);
}

void sq_notify_status(const char *fmt, ...)
{
    char msg[512] = "STATUS=";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 7, sizeof msg - 7, fmt, ap);
    va_end(ap);
    sq_notify(msg);
}

int64_t sq_notify_watchdog_ms(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return (int64_t)(usec / 1000);
}
