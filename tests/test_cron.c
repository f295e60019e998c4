/*
 * test_cron.c -- [cron NAME]: the expression parser and the next-tick
 * search, with no database (ctest label nodb). Real hosts running
 * schedules are in test_cron_hosts.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/cron.h"
#include "harness.h"

static struct sq_cron parse_ok(const char *expr)
{
    struct sq_cron c;
    char err[256];
    cr_assert(sq_cron_parse(expr, &c, err, sizeof err), "\"%s\" refused: %s", expr, err);
    return c;
}

static void parse_bad(const char *expr, const char *needle)
{
    struct sq_cron c;
    char err[256] = "";
    cr_assert_not(sq_cron_parse(expr, &c, err, sizeof err), "\"%s\" accepted", expr);
    cr_assert_not_null(strstr(err, needle), "\"%s\": error \"%s\" does not mention \"%s\"", expr, err, needle);
}

/* The next tick after `from` ("YYYY-MM-DD HH:MM") as text. */
static char *next_of(const char *expr, const char *from)
{
    struct sq_cron c = parse_ok(expr);
    struct sq_civil t, n;
    cr_assert(sq_civil_parse(from, &t));
    cr_assert(sq_cron_next(&c, &t, &n), "%s: no next tick after %s", expr, from);
    char *buf = malloc(24);
    sq_civil_format(&n, buf, 24);
    buf[16] = '\0'; /* drop ":00" */
    return buf;
}

#define expect_next(expr, from, want)                                                                 \
    do {                                                                                              \
        char *got_ = next_of(expr, from);                                                             \
        cr_expect_str_eq(got_, want, "%s after %s", expr, from);                                      \
        free(got_);                                                                                   \
    } while (0)

Test(cron, fields_ranges_steps_lists_names)
{
    struct sq_cron c = parse_ok("*/15 9-17 * * MON-FRI");
    cr_expect_eq(c.minutes, (1ull << 0) | (1ull << 15) | (1ull << 30) | (1ull << 45));
    cr_expect_eq(c.hours, 0x3fe00u); /* 9..17 */
    cr_expect_eq(c.weekdays, 0x3eu); /* 1..5 */
    c = parse_ok("5,10-12,50-59/5 0 1 jan,Jul *");
    cr_expect_eq(c.minutes, (1ull << 5) | (1ull << 10) | (1ull << 11) | (1ull << 12) | (1ull << 50) | (1ull << 55));
    cr_expect_eq(c.months, (1u << 1) | (1u << 7));
    c = parse_ok("0 0 * * 7"); /* 7 is Sunday, like 0 */
    cr_expect_eq(c.weekdays, 1u);
    c = parse_ok("10/20 * * * *"); /* N/STEP: from N to the end */
    cr_expect_eq(c.minutes, (1ull << 10) | (1ull << 30) | (1ull << 50));
    expect_next("*/15 9-17 * * MON-FRI", "2026-11-20 17:45", "2026-11-23 09:00"); /* Friday evening -> Monday */
    expect_next("0 12 * * *", "2026-12-31 12:00", "2027-01-01 12:00");
    expect_next("30 * * * *", "2026-03-01 23:30", "2026-03-02 00:30");
}

Test(cron, aliases)
{
    expect_next("@hourly", "2026-05-05 10:00", "2026-05-05 11:00");
    expect_next("@daily", "2026-05-05 10:00", "2026-05-06 00:00");
    expect_next("@midnight", "2026-05-05 00:00", "2026-05-06 00:00");
    expect_next("@weekly", "2026-11-22 00:00", "2026-11-29 00:00"); /* Sundays */
    expect_next("@monthly", "2026-01-31 10:00", "2026-02-01 00:00");
    expect_next("@yearly", "2026-01-01 00:00", "2027-01-01 00:00");
    expect_next("@annually", "2026-06-01 00:00", "2027-01-01 00:00");
    parse_bad("@reboot", "unknown alias");
}

/* Vixie cron: both day fields restricted -> either matches; one of them
 * starting with '*' -> only the other counts. */
Test(cron, day_of_month_or_day_of_week)
{
    expect_next("0 0 13 * FRI", "2026-11-01 00:00", "2026-11-06 00:00");  /* a Friday before the 13th */
    expect_next("0 0 13 * FRI", "2026-11-06 00:00", "2026-11-13 00:00");  /* the 13th (also a Friday) */
    expect_next("0 0 1 * MON", "2026-11-02 00:00", "2026-11-09 00:00");   /* next Monday before Dec 1 */
    /* '*' first in one field: both must match (an odd day AND a Tuesday) */
    expect_next("0 0 */2 * TUE", "2026-11-02 00:00", "2026-11-03 00:00");
    expect_next("0 0 */2 * TUE", "2026-11-03 00:00", "2026-11-17 00:00");
    expect_next("0 0 * * MON", "2026-11-02 00:00", "2026-11-09 00:00");
}

Test(cron, calendar_edges)
{
    expect_next("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00");
    expect_next("0 0 31 * *", "2026-04-01 00:00", "2026-05-31 00:00");
    expect_next("59 23 31 12 *", "2026-12-31 23:58", "2026-12-31 23:59");
    expect_next("0 0 1 1 *", "2099-06-01 00:00", "2100-01-01 00:00");
    expect_next("0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"); /* 2100 is not a leap year */
}

Test(cron, bad_expressions)
{
    parse_bad("* * * *", "5 fields");
    parse_bad("* * * * * *", "5 fields");
    parse_bad("60 * * * *", "minute");
    parse_bad("* 24 * * *", "hour");
    parse_bad("* * 0 * *", "day of month");
    parse_bad("* * * 13 *", "month");
    parse_bad("* * * * 8", "day of week");
    parse_bad("5-1 * * * *", "backwards");
    parse_bad("*/0 * * * *", "step");
    parse_bad("a * * * *", "not valid");
    parse_bad("1,,2 * * * *", "not valid");
    parse_bad("* * * FOO *", "JAN-DEC");
    parse_bad("0 0 30 2 *", "never matches");
    parse_bad("0 0 31 4,6,9,11 *", "never matches");
    parse_bad("0 0 30,31 2 *", "never matches");
    parse_bad("0 0 31 feb-apr/2 */2", "never matches");
}

/* ---- completeness: an accepted expression fires, at the first minute it can ------------ */

/* A stepped '*' counts as '*' (Vixie cron, cronie): day 1 AND a Saturday, in
 * February. Those are years apart -- 2031 to 2042 is eleven -- and a search
 * that gave up after ten years never fired it again after 2031. */
Test(cron, a_stepped_star_counts_as_star_and_a_rare_day_still_fires)
{
    expect_next("0 0 */31 2 6", "2025-01-01 00:00", "2025-02-01 00:00");
    expect_next("0 0 */31 2 6", "2025-02-01 00:00", "2031-02-01 00:00");
    expect_next("0 0 */31 2 6", "2031-02-01 00:00", "2042-02-01 00:00");
    struct sq_cron c = parse_ok("0 0 */31 2 6");
    cr_expect(c.dom_star);
    cr_expect_not(sq_cron_matches(&c, &(struct sq_civil){2031, 2, 8, 0, 0}), "a Saturday that is not the 1st");
    cr_expect(sq_cron_matches(&c, &(struct sq_civil){2042, 2, 1, 0, 0}));
    /* Leap days that fall on a Sunday: 28 years apart, and 40 across 2100. */
    expect_next("0 0 29 2 */7", "2004-03-01 00:00", "2032-02-29 00:00");
    expect_next("0 0 29 2 */7", "2088-03-01 00:00", "2128-02-29 00:00");
}

/* Every file of the fuzz corpus for cron: refused with a message, or it
 * fires from any starting point, at a minute that matches. */
Test(cron, the_corpus_fires_or_is_refused)
{
    const char *dir = SKIPQ_SOURCE_DIR "/tests/fuzz/corpus/cron";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[600], expr[300] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f);
        size_t n = fread(expr, 1, sizeof expr - 1, f);
        fclose(f);
        expr[n] = '\0';
        expr[strcspn(expr, "\n")] = '\0';
        files++;
        struct sq_cron c;
        char err[256] = "";
        if (!sq_cron_parse(expr, &c, err, sizeof err)) {
            cr_expect(err[0], "%s: refused without a message", e->d_name);
            continue;
        }
        for (int y = 1970; y <= 2470; y += 50) {
            struct sq_civil after = {y, 3, 1, 0, 0}, next;
            cr_assert(sq_cron_next(&c, &after, &next), "%s (%s): no tick after %d-03-01", e->d_name, expr, y);
            cr_expect(sq_cron_matches(&c, &next), "%s: next does not match", e->d_name);
        }
    }
    closedir(d);
    cr_expect_geq(files, 3);
}

/* The expected field sets of a generated expression, computed apart from
 * the parser. */
struct want {
    uint64_t f[5];
    bool dom_star, dow_star;
};

static const int FIELD_LO[5] = {0, 0, 1, 1, 0}, FIELD_HI[5] = {59, 23, 31, 12, 7};
static const char *const MONTH_NAMES[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const DAY_NAMES[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

/* A value of field i as text: a number, or for months and days sometimes a name. */
static void value_text(unsigned *seed, int i, int v, char *buf, size_t len)
{
    if (i == 3 && rand_r(seed) % 3 == 0)
        snprintf(buf, len, "%s", MONTH_NAMES[v - 1]);
    else if (i == 4 && v < 7 && rand_r(seed) % 3 == 0)
        snprintf(buf, len, "%s", DAY_NAMES[v]);
    else
        snprintf(buf, len, "%d", v);
}

/* One comma item of field i appended to buf; its values ORed into *bits. */
static void random_item(unsigned *seed, int i, char *buf, size_t len, uint64_t *bits)
{
    int lo = FIELD_LO[i], hi = FIELD_HI[i], span = hi - lo + 1;
    int a = lo + rand_r(seed) % span, b = lo + rand_r(seed) % span, step = 1 + rand_r(seed) % (i == 0 ? 20 : i == 4 ? 7 : 8);
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    char va[8], vb[8], item[32];
    value_text(seed, i, a, va, sizeof va);
    value_text(seed, i, b, vb, sizeof vb);
    switch (rand_r(seed) % 6) {
    case 0: snprintf(item, sizeof item, "*"), a = lo, b = hi, step = 1; break;
    case 1: snprintf(item, sizeof item, "*/%d", step), a = lo, b = hi; break;
    case 2: snprintf(item, sizeof item, "%s", va), b = a, step = 1; break;
    case 3: snprintf(item, sizeof item, "%s-%s", va, vb), step = 1; break;
    case 4: snprintf(item, sizeof item, "%s-%s/%d", va, vb, step); break;
    default: snprintf(item, sizeof item, "%s/%d", va, step), b = hi; break;
    }
    for (int v = a; v <= b; v += step)
        *bits |= 1ull << v;
    strncat(buf, item, len - strlen(buf) - 1);
}

/* A random valid-syntax expression and what it should mean. Day fields
 * are often a single item, and one expression in six gets a late day of
 * month in a short month with a '*' day of week, so that rare and
 * impossible days come up. */
static void random_expr(unsigned *seed, char expr[static 512], struct want *w)
{
    memset(w, 0, sizeof *w);
    char field[5][64];
    for (int i = 0; i < 5; i++) {
        field[i][0] = '\0';
        int items = 1 + (i >= 2 ? rand_r(seed) % 4 == 0 : rand_r(seed) % 3);
        for (int k = 0; k < items; k++) {
            if (k)
                strcat(field[i], ",");
            random_item(seed, i, field[i], sizeof field[i], &w->f[i]);
        }
    }
    if (rand_r(seed) % 6 == 0) {
        static const int short_months[] = {2, 4, 6, 9, 11};
        int d = 29 + rand_r(seed) % 3, m = short_months[rand_r(seed) % 5], step = 1 + rand_r(seed) % 7;
        snprintf(field[2], sizeof field[2], "%d", d);
        snprintf(field[3], sizeof field[3], "%d", m);
        snprintf(field[4], sizeof field[4], "*/%d", step);
        w->f[2] = 1ull << d;
        w->f[3] = 1ull << m;
        w->f[4] = 0;
        for (int v = 0; v <= 7; v += step)
            w->f[4] |= 1ull << v;
    }
    snprintf(expr, 512, "%s %s %s %s %s", field[0], field[1], field[2], field[3], field[4]);
    w->dom_star = field[2][0] == '*';
    w->dow_star = field[4][0] == '*';
    w->f[4] = (w->f[4] | w->f[4] >> 7) & 0x7f;
}

static int weekday_of(int y, int m, int d) /* Sakamoto's method; 0 = Sunday */
{
    static const int t[] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
    y -= m < 3;
    return (y + y / 4 - y / 100 + y / 400 + t[m - 1] + d) % 7;
}

static int month_days(int y, int m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0) ? 29 : dm[m - 1];
}

static bool want_day(const struct want *w, int y, int m, int d)
{
    bool dom = w->f[2] >> d & 1, dow = w->f[4] >> weekday_of(y, m, d) & 1;
    return (w->f[3] >> m & 1) && (w->dom_star || w->dow_star ? dom && dow : dom || dow);
}

static bool want_minute(const struct want *w, const struct sq_civil *t)
{
    return want_day(w, t->year, t->month, t->day) && (w->f[1] >> t->hour & 1) && (w->f[0] >> t->minute & 1);
}

/* Whether it can ever fire: with either day field a '*', a day must be in
 * both, and each real (month, day) -- 29 February too -- falls on every
 * weekday within 400 years; otherwise every month has every weekday. */
static bool want_fires(const struct want *w)
{
    if (!w->dom_star && !w->dow_star)
        return true;
    for (int m = 1; m <= 12; m++)
        for (int d = 1; d <= month_days(2000, m); d++)
            if ((w->f[3] >> m & 1) && (w->f[2] >> d & 1))
                return true;
    return false;
}

static int64_t minute_index(const struct sq_civil *t)
{
    return (sq_days_from_civil(t->year, t->month, t->day) * 24 + t->hour) * 60 + t->minute;
}

/* No minute in (after, next) matches: minute by minute for a week, then
 * day by day (a day that matches has a matching minute: hours and
 * minutes are never empty) for ten years, then the day of `next`. */
static void expect_nothing_between(const char *expr, const struct want *w, struct sq_civil t,
                                   const struct sq_civil *next)
{
    int64_t end = minute_index(next);
    sq_civil_add_minutes(&t, 1);
    for (int i = 0; i < 7 * 1440 && minute_index(&t) < end; i++, sq_civil_add_minutes(&t, 1))
        cr_assert_not(want_minute(w, &t), "%s: %04d-%02d-%02d %02d:%02d matches before the next tick", expr, t.year,
                      t.month, t.day, t.hour, t.minute);
    if (minute_index(&t) >= end)
        return;
    int64_t day = sq_days_from_civil(t.year, t.month, t.day) + 1, last = sq_days_from_civil(next->year, next->month,
                                                                                          next->day);
    for (int i = 0; i < 3660 && day < last; i++, day++) {
        int y, m, d;
        sq_civil_from_days(day, &y, &m, &d);
        cr_assert_not(want_day(w, y, m, d), "%s: %04d-%02d-%02d matches before the next tick", expr, y, m, d);
    }
    struct sq_civil s = {next->year, next->month, next->day, 0, 0};
    for (; minute_index(&s) < end; sq_civil_add_minutes(&s, 1))
        cr_assert_not(want_minute(w, &s), "%s: %02d:%02d on the day of the next tick matches", expr, s.hour,
                      s.minute);
}

/*
 * Property: for many random expressions, parse accepts exactly those the
 * calendar says can fire, with the field sets the text means; and from
 * random instants, sq_cron_next() returns a minute that sq_cron_matches()
 * (and an independent matcher) accepts, with no matching minute before it.
 */
Test(cron, next_is_the_first_matching_minute_for_random_expressions, .timeout = 300)
{
    unsigned seed = 20261124;
    int accepted = 0, refused = 0, far = 0;
    for (int e = 0; e < 700; e++) {
        char expr[512];
        struct want w;
        random_expr(&seed, expr, &w);
        struct sq_cron c;
        char err[256] = "";
        bool ok = sq_cron_parse(expr, &c, err, sizeof err);
        cr_assert_eq(ok, want_fires(&w), "\"%s\": parse says %s (%s)", expr, ok ? "yes" : "no", err);
        if (!ok) {
            cr_expect_not_null(strstr(err, "never matches"), "\"%s\": %s", expr, err);
            refused++;
            continue;
        }
        accepted++;
        cr_assert(c.minutes == w.f[0] && c.hours == w.f[1] && c.days == w.f[2] && c.months == w.f[3] &&
                      c.weekdays == w.f[4] && c.dom_star == w.dom_star && c.dow_star == w.dow_star,
                  "\"%s\": parsed fields differ from the text", expr);
        for (int k = 0; k < 4; k++) {
            int y = 1950 + rand_r(&seed) % 450, m = 1 + rand_r(&seed) % 12;
            struct sq_civil after = {y, m, 1 + rand_r(&seed) % month_days(y, m), rand_r(&seed) % 24,
                                     rand_r(&seed) % 60},
                            next;
            cr_assert(sq_cron_next(&c, &after, &next), "\"%s\": no tick after %04d-%02d-%02d", expr, after.year,
                      after.month, after.day);
            cr_assert_gt(minute_index(&next), minute_index(&after), "\"%s\": next is not after", expr);
            cr_assert(sq_cron_matches(&c, &next) && want_minute(&w, &next), "\"%s\": next does not match", expr);
            far += minute_index(&next) - minute_index(&after) > 366LL * 1440;
            expect_nothing_between(expr, &w, after, &next);
        }
    }
    cr_log_info("%d accepted, %d refused, %d far", accepted, refused, far);
    cr_expect_gt(accepted, 500);
    cr_expect_gt(refused, 0, "no impossible expression came up: the generator needs a look");
    cr_expect_gt(far, 0, "no tick more than a year away came up: the generator needs a look");
}
