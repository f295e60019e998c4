/* util.h -- small helpers shared by the core: durations, names, clocks. */
#ifndef SQ_UTIL_H
#define SQ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* The longest duration any key or flag takes: 1000 years, so that now()
 * plus or minus it stays a valid timestamp and ms * 10^6 fits in 64 bits. */
#define SQ_MAX_DURATION_MS (365250LL * 86400000LL)
#define SQ_MAX_DURATION_TEXT "365250d, 1000 years"
/* Parse "250ms", "30s", "5m", "1h", "2d" or a bare number of seconds (a
 * fraction and an exponent are allowed: 1.5s, 2e3ms) into milliseconds.
 * NULL if it parses, else what is wrong, as a phrase to follow the quoted
 * value: "is not a number" (nan, inf), "is too long (maximum ...)", ... */
const char *sq_parse_duration_why(const char *s, int64_t *out);
bool sq_parse_duration_ms(const char *s, int64_t *out);
/* Parse a whole decimal number ([-]digits) within [min, max]; NULL, or
 * "is not a number", "is not a whole number", "is out of range"... */
const char *sq_parse_int_why(const char *s, int64_t min, int64_t max, int64_t *out);
/* Parse a size: a whole number of bytes, or followed by B, kB/KiB, MB/MiB
 * or GB/GiB (each a power of 1024, as PostgreSQL counts them). false on
 * anything else and on overflow. */
bool sq_parse_bytes(const char *s, int64_t *out);
bool sq_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);
bool sq_parse_bool(const char *s, bool *out);
/* Kinds and queue names: 1-128 bytes of [A-Za-z0-9_.:-]. */
bool sq_valid_name(const char *s);
/* Copy with truncation; always NUL-terminates (dst_size > 0). */
size_t sq_strlcpy(char *dst, const char *src, size_t dst_size);
/* Monotonic clock in milliseconds. */
int64_t sq_now_ms(void);
/* The same clock in microseconds. */
int64_t sq_now_us(void);
/* Make `s` valid UTF-8 in place: each byte of an invalid or truncated
 * sequence becomes '?'. Handler messages go to the database as text, which
 * refuses invalid UTF-8 -- and a message cut at a buffer's end often is. */
void sq_utf8_sanitize(char *s);
/* The first byte of s that does not start a valid UTF-8 sequence, or NULL. */
const char *sq_utf8_invalid(const char *s);
/* Write s as a JSON string literal. Control characters (C0, DEL, C1) are
 * \u-escaped, so the output is as safe on a terminal as the tables. */
void sq_json_string(FILE *out, const char *s);
/* Write JSON text the server produced, with DEL and C1 controls (legal
 * unescaped in a JSON string, and only there) \u-escaped. */
void sq_json_raw(FILE *out, const char *json);
/*
 * Text from the database (or any other untrusted text) for a terminal:
 * every control character (C0 with ESC, DEL, C1 as U+0080-U+009F) and every
 * byte of invalid UTF-8 is written in a visible form (\x1b, \u009b, \n),
 * so no value can move the cursor, retitle or clear the screen, fake lines
 * or reach the clipboard. Every table and message the CLI prints from
 * database text goes through sq_fput_text().
 */
/* Columns s takes once made visible. */
size_t sq_text_width(const char *s);
/* Write s made visible, at most `max` columns (SIZE_MAX: no limit), then
 * blanks up to `pad` columns; returns the columns of text written. */
size_t sq_fput_text(FILE *out, const char *s, size_t max, size_t pad);
/* Trim leading and trailing white space in place; returns s. */
char *sq_trim(char *s);
/* An int64 array as a PostgreSQL array literal, "{1,2,3}" (malloc'd). */
char *sq_int8_array(const int64_t *v, size_t n);

#endif
