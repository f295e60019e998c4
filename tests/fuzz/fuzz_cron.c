/*
 * fuzz_cron.c -- cron expressions ([cron NAME] schedule): sq_cron_parse,
 * then sq_cron_next from a few starting points.
 *
 * Properties: no crash or undefined behaviour; a refused expression has a
 * message; an accepted one fires after any start (the parser refuses those
 * that never do), at a minute that matches, later than the start, with no
 * matching minute in between (checked for up to two days).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cron.h"
#include "fuzz.h"

static int64_t minute_of(const struct sq_civil *t)
{
    return (sq_days_from_civil(t->year, t->month, t->day) * 24 + t->hour) * 60 + t->minute;
}

static void check_next(const struct sq_cron *c, struct sq_civil after)
{
    struct sq_civil next;
    FUZZ_REQUIRE(sq_cron_next(c, &after, &next), "an accepted expression never fires");
    FUZZ_REQUIRE(sq_cron_matches(c, &next), "the next tick does not match");
    int64_t from = minute_of(&after), to = minute_of(&next);
    FUZZ_REQUIRE(to > from, "the next tick is not after the start");
    struct sq_civil t = after;
    for (int64_t m = from + 1; m < to && m <= from + 2 * 1440; m++) {
        sq_civil_add_minutes(&t, 1);
        FUZZ_REQUIRE(!sq_cron_matches(c, &t), "a matching minute before the next tick");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exactly as long as the input, so ASan sees a read past its NUL. */
    size_t n = size < 512 ? size : 512;
    char *expr = malloc(n + 1);
    FUZZ_REQUIRE(expr, "malloc");
    memcpy(expr, data, n);
    expr[n] = '\0';
    struct sq_cron c;
    char err[256] = "";
    bool ok = sq_cron_parse(expr, &c, err, sizeof err);
    free(expr);
    if (!ok) {
        FUZZ_REQUIRE(err[0], "an expression refused without a message");
        return 0;
    }
    static const struct sq_civil starts[] = {
        {1970, 1, 1, 0, 0}, {2026, 2, 28, 23, 59}, {2100, 2, 28, 12, 0}, {2399, 12, 31, 23, 59}};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
        check_next(&c, starts[i]);
    return 0;
}
