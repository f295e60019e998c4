/* log.h -- one printf-checked logger for the host: time, level, thread. */
#ifndef SQ_LOG_H
#define SQ_LOG_H

#include <stdarg.h>

enum sq_log_level { SQ_LOG_ERROR = 0, SQ_LOG_WARN = 1, SQ_LOG_INFO = 2, SQ_LOG_DEBUG = 3 };

/* Current threshold; messages above it are dropped before formatting. */
extern _Atomic int sq_log_threshold; /* SIGHUP may change it */

void sq_log_set_level(int level);
const char *sq_log_level_name(int level);
/* Name shown for the calling thread ("main", "w3", "hb"); copied. */
void sq_log_set_thread(const char *name);
/* A host serving several databases: the calling thread's lines say which
 * one it is for ("[eu/w3]"); NULL or "" for none. */
void sq_log_set_database(const char *name);
/* A tap on the calling thread's lines: called with each line's level and
 * text (without time, level and thread); returning true keeps the line off
 * stderr. NULL removes it. */
typedef _Bool sq_log_tap_fn(void *arg, int level, const char *line);
void sq_log_set_tap(sq_log_tap_fn *fn, void *arg);
/* Whether the calling thread has a tap: its lines of every level are
 * formatted then, whatever the threshold (stderr still gets only those
 * within it). */
_Bool sq_log_tapped(void);
/* Format and write one line (use the log_* macros). */
void sq_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sq_log_vwrite(int level, const char *prefix, const char *fmt, va_list ap);

#define sq_log(level, ...)                              \
    do {                                                \
        if ((level) <= sq_log_threshold)                \
            sq_log_write((level), __VA_ARGS__);         \
    } while (0)
#define log_error(...) sq_log(SQ_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) sq_log(SQ_LOG_WARN, __VA_ARGS__)
#define log_info(...) sq_log(SQ_LOG_INFO, __VA_ARGS__)
#define log_debug(...) sq_log(SQ_LOG_DEBUG, __VA_ARGS__)

#endif
