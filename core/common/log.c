/*
 * log.c -- every host log line goes through here: to stderr, one write(2)
 * per line so lines from different threads never interleave, with UTC time,
 * level and the thread's name. Nothing here ever sees a conninfo string;
 * callers log connection targets through db_describe(), which omits
 * passwords. A thread may tap its own lines (sq_log_set_tap): `skipq exec`
 * and the plugin test kit keep a handler's log lines that way, without the
 * time and thread.
 */
#include "common/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Atomic int sq_log_threshold = SQ_LOG_INFO;
static _Thread_local char thread_name[16] = "main";
static _Thread_local char database[48]; /* a host serving several databases: which one this thread is for */

static _Thread_local sq_log_tap_fn *tap;
static _Thread_local void *tap_arg;

void sq_log_set_tap(sq_log_tap_fn *fn, void *arg)
{
    tap = fn;
    tap_arg = arg;
}

bool sq_log_tapped(void)
{
    return tap != NULL;
}

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void sq_log_set_level(int level) { sq_log_threshold = level; }

const char *sq_log_level_name(int level)
{
    return level >= 0 && level <= 3 ? level_names[level] : "?";
}

void sq_log_set_thread(const char *name)
{
    snprintf(thread_name, sizeof thread_name, "%s", name);
}

void sq_log_set_database(const char *name)
{
    snprintf(database, sizeof database, "%s", name ? name : "");
}

void sq_log_vwrite(int level, const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s%s%s] %s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, sq_log_level_name(level), database, database[0] ? "/" : "", thread_name,
                     prefix ? prefix : "");
    if (n < 0)
        return;
    if ((size_t)n < sizeof line) {
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    /* Messages from libpq end in a newline already; never print two. */
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    line[n++] = '\n';
    if (tap) {
        const char *msg = strchr(line, ']'); /* past the time, level and thread */
        line[n - 1] = '\0';
        bool keep_quiet = tap(tap_arg, level, msg ? msg + 2 : line);
        line[n - 1] = '\n';
        if (keep_quiet || level > sq_log_threshold)
            return; /* a tap sees every level; stderr only the threshold's */
    }
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void sq_log_write(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sq_log_vwrite(level, NULL, fmt, ap);
    va_end(ap);
}
