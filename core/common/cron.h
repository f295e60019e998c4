/* cron.h -- 5-field cron expressions over local wall-clock time. */
#ifndef SQ_CRON_H
#define SQ_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sq_cron {
    uint64_t minutes; /* bit m: minute m (0-59) */
    uint32_t hours;   /* bit h: hour h (0-23) */
    uint32_t days;    /* bit d: day of month d (1-31) */
    uint16_t months;  /* bit m: month m (1-12) */
    uint8_t weekdays; /* bit d: day of week d (0-6, Sunday = 0) */
    bool dom_star;    /* the day-of-month field began with '*' */
    bool dow_star;    /* the day-of-week field began with '*' */
};

/* A local (wall-clock) minute: no time zone, no seconds. */
struct sq_civil {
    int year, month, day, hour, minute;
};

/* Parse "M H DoM Mon DoW" or an @alias; on failure err says which field
 * and why. Refuses expressions that can never match (e.g. 0 0 30 2 *). */
bool sq_cron_parse(const char *expr, struct sq_cron *out, char *err, size_t errlen);
bool sq_cron_matches(const struct sq_cron *c, const struct sq_civil *t);
/* The calendar's period: 400 Gregorian years are 146097 days, 20871 weeks. */
#define SQ_CRON_PERIOD_YEARS 400

/* The first matching minute strictly after `after`. Complete: it searches
 * one whole period of the calendar, so it fails only for an expression
 * that never matches, which sq_cron_parse refuses. */
bool sq_cron_next(const struct sq_cron *c, const struct sq_civil *after, struct sq_civil *out);

/* Calendar helpers, proleptic Gregorian. */
int64_t sq_days_from_civil(int y, int m, int d);
void sq_civil_from_days(int64_t days, int *y, int *m, int *d);
/* Parse "YYYY-MM-DD HH:MM[:SS[.ffffff]]" (seconds dropped). */
bool sq_civil_parse(const char *s, struct sq_civil *out);
/* "YYYY-MM-DD HH:MM:00" into buf (at least 20 bytes). */
void sq_civil_format(const struct sq_civil *t, char *buf, size_t len);
/* t moved by `minutes` (may be negative). */
void sq_civil_add_minutes(struct sq_civil *t, int64_t minutes);

#endif
