/*
 * cron.c -- cron expressions, parsed and matched here rather than in SQL so
 * a bad schedule is refused with FILE:LINE when the INI is read, and so the
 * matching can be unit-tested without a database.
 *
 * Matching works on local wall-clock minutes (struct sq_civil) and knows
 * nothing of time zones: the scheduler asks the database for "now" and the
 * last tick in the schedule's zone, lists the matching local minutes here,
 * and lets the database turn them back into instants (which is where DST
 * gaps and repeats are resolved; see README, "Cron").
 *
 * Syntax, as Vixie cron: fields minute hour day-of-month month day-of-week;
 * each a comma list of `*`, N, N-M, with an optional /STEP (N/STEP means
 * N-max/STEP); months JAN-DEC and days SUN-SAT by name (case-insensitive);
 * day of week 0-7 with 0 and 7 both Sunday. When both day fields are
 * restricted (neither starts with `*`), a day matches if EITHER matches;
 * when one starts with `*` -- a stepped `*` included, as in Vixie cron and
 * cronie, which set their DOM_STAR/DOW_STAR flags from the first character
 * -- a day must match BOTH, the `*` field being every day (or every Nth).
 * So "0 0 *\/31 2 6" (day of month `*` stepped by 31, i.e. the 1st) is
 * midnight on 1 February when that is a Saturday (2025, 2031, 2042...),
 * not every Saturday of February.
 * Aliases: @yearly @annually @monthly @weekly @daily @midnight @hourly.
 *
 * Completeness: the Gregorian calendar repeats every 400 years (146097
 * days, a whole number of weeks), and a cron expression sees nothing but
 * the calendar, so its matching minutes repeat with that period. If any
 * minute matches, one lies in every 400-year span, and sq_cron_next()
 * searches exactly that far: it fails only for an expression that never
 * matches, which sq_cron_parse() refuses (by the same search).
 */
#include "common/cron.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct field {
    const char *name;
    int min, max;
    const char *const *names; /* names[i] is min + i */
    int nnames;
};

static const struct field fields[5] = {
    {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},
    {"day of month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 12},
    {"day of week", 0, 7, day_names, 7},
};

/* A number or a name at *p; advances *p. */
static bool parse_value(const struct field *f, const char **p, int *out)
{
    const char *s = *p;
    if (isdigit((unsigned char)*s)) {
        long v = 0;
        while (isdigit((unsigned char)*s) && v < 1000)
            v = v * 10 + (*s++ - '0');
        *out = (int)v;
        *p = s;
        return true;
    }
    for (int i = 0; i < f->nnames; i++) {
        if (strncasecmp(s, f->names[i], 3) == 0 && !isalpha((unsigned char)s[3])) {
            *out = f->min + i;
            *p = s + 3;
            return true;
        }
    }
    return false;
}

/* One comma-separated field into a bit set. */
static bool parse_field(const struct field *f, const char *text, uint64_t *bits, char *err, size_t errlen)
{
    *bits = 0;
    const char *p = text;
    for (;;) {
        int lo, hi, step = 1;
        if (*p == '*') {
            lo = f->min;
            hi = f->max;
            p++;
        } else {
            if (!parse_value(f, &p, &lo))
                goto bad;
            hi = lo;
            if (*p == '-') {
                p++;
                if (!parse_value(f, &p, &hi))
                    goto bad;
            } else if (*p == '/') {
                hi = f->max;
            }
        }
        if (*p == '/') {
            p++;
            if (!isdigit((unsigned char)*p))
                goto bad;
            step = 0;
            while (isdigit((unsigned char)*p) && step < 1000)
                step = step * 10 + (*p++ - '0');
        }
        if (lo < f->min || hi > f->max || lo > f->max || hi < f->min) {
            snprintf(err, errlen, "%s \"%s\": values must be from %d to %d", f->name, text, f->min, f->max);
            return false;
        }
        if (lo > hi) {
            snprintf(err, errlen, "%s \"%s\": range %d-%d runs backwards", f->name, text, lo, hi);
            return false;
        }
        if (step < 1 || step > f->max) {
            snprintf(err, errlen, "%s \"%s\": step must be from 1 to %d", f->name, text, f->max);
            return false;
        }
        for (int v = lo; v <= hi; v += step)
            *bits |= 1ull << v;
        if (*p == '\0')
            return true;
        if (*p != ',')
            goto bad;
        p++;
    }
bad:
    snprintf(err, errlen, "%s \"%s\" is not valid (use *, N, N-M, lists with commas, /STEP%s)", f->name, text,
             f->names ? (f->nnames == 12 ? ", or JAN-DEC" : ", or SUN-SAT") : "");
    return false;
}

static const struct {
    const char *alias;
    const char *expr;
} aliases[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"},
};

bool sq_cron_parse(const char *expr, struct sq_cron *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    while (isspace((unsigned char)*expr))
        expr++;
    if (expr[0] == '@') {
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            if (strcasecmp(expr, aliases[i].alias) == 0)
                return sq_cron_parse(aliases[i].expr, out, err, errlen);
        snprintf(err, errlen, "unknown alias \"%s\" (use @yearly, @annually, @monthly, @weekly, @daily, "
                              "@midnight or @hourly)", expr);
        return false;
    }
    char copy[256];
    if (strlen(expr) >= sizeof copy) {
        snprintf(err, errlen, "expression is too long");
        return false;
    }
    strcpy(copy, expr);
    char *tok[6] = {0};
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (n == 5) {
            n++;
            break;
        }
        tok[n++] = t;
    }
    if (n != 5) {
        snprintf(err, errlen, "\"%s\" does not have 5 fields (minute hour day-of-month month day-of-week) "
                              "or an @alias", expr);
        return false;
    }
    uint64_t bits[5];
    for (int i = 0; i < 5; i++)
        if (!parse_field(&fields[i], tok[i], &bits[i], err, errlen))
            return false;
    out->minutes = bits[0];
    out->hours = (uint32_t)bits[1];
    out->days = (uint32_t)bits[2];
    out->months = (uint16_t)bits[3];
    out->weekdays = (uint8_t)((bits[4] | (bits[4] >> 7)) & 0x7f); /* 7 is Sunday too */
    out->dom_star = tok[2][0] == '*';
    out->dow_star = tok[4][0] == '*';
    struct sq_civil start = {2000, 1, 1, 0, 0}, next;
    if (!sq_cron_next(out, &start, &next)) {
        snprintf(err, errlen, "\"%s\" never matches a real date", expr);
        return false;
    }
    return true;
}

int64_t sq_days_from_civil(int y, int m, int d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void sq_civil_from_days(int64_t z, int *y, int *m, int *d)
{
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static int days_in_month(int y, int m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return dm[m - 1];
}

static int weekday(int y, int m, int d)
{
    int64_t z = sq_days_from_civil(y, m, d); /* 1970-01-01 was a Thursday */
    return (int)(((z % 7) + 7 + 4) % 7);
}

static bool day_matches(const struct sq_cron *c, int y, int m, int d)
{
    bool dom = (c->days >> d) & 1, dow = (c->weekdays >> weekday(y, m, d)) & 1;
    if (c->dom_star || c->dow_star)
        return dom && dow; /* a '*' field matches every day, so this is the other one */
    return dom || dow;
}

bool sq_cron_matches(const struct sq_cron *c, const struct sq_civil *t)
{
    return ((c->months >> t->month) & 1) && day_matches(c, t->year, t->month, t->day) &&
           ((c->hours >> t->hour) & 1) && ((c->minutes >> t->minute) & 1);
}

bool sq_cron_next(const struct sq_cron *c, const struct sq_civil *after, struct sq_civil *out)
{
    struct sq_civil t = *after;
    sq_civil_add_minutes(&t, 1);
    /* One whole period of the calendar (see the top of the file). */
    const int last_year = after->year + SQ_CRON_PERIOD_YEARS;
    while (t.year <= last_year) {
        if (!((c->months >> t.month) & 1)) {
            t.day = 1, t.hour = 0, t.minute = 0;
            if (++t.month > 12)
                t.month = 1, t.year++;
            continue;
        }
        if (!day_matches(c, t.year, t.month, t.day)) {
            t.hour = 0, t.minute = 0;
            if (++t.day > days_in_month(t.year, t.month)) {
                t.day = 1;
                if (++t.month > 12)
                    t.month = 1, t.year++;
            }
            continue;
        }
        if (!((c->hours >> t.hour) & 1)) {
            t.minute = 0;
            sq_civil_add_minutes(&t, 60);
            continue;
        }
        if (!((c->minutes >> t.minute) & 1)) {
            sq_civil_add_minutes(&t, 1);
            continue;
        }
        *out = t;
        return true;
    }
    return false;
}

void sq_civil_add_minutes(struct sq_civil *t, int64_t minutes)
{
    int64_t total = (sq_days_from_civil(t->year, t->month, t->day) * 24 + t->hour) * 60 + t->minute + minutes;
    int64_t days = total >= 0 ? total / 1440 : -((-total + 1439) / 1440);
    int64_t rem = total - days * 1440;
    sq_civil_from_days(days, &t->year, &t->month, &t->day);
    t->hour = (int)(rem / 60);
    t->minute = (int)(rem % 60);
}

bool sq_civil_parse(const char *s, struct sq_civil *out)
{
    int y, mo, d, h, mi, n = 0;
    if (sscanf(s, "%d-%d-%d %d:%d%n", &y, &mo, &d, &h, &mi, &n) != 5 || n == 0)
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h < 0 || h > 23 || mi < 0 || mi > 59)
        return false;
    *out = (struct sq_civil){y, mo, d, h, mi};
    return true;
}

void sq_civil_format(const struct sq_civil *t, char *buf, size_t len)
{
    snprintf(buf, len, "%04d-%02d-%02d %02d:%02d:00", t->year, t->month, t->day, t->hour, t->minute);
}
