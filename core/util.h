/* util.h -- small helpers shared by the core: durations, names, clocks. */
#ifndef SQ_UTIL_H
#define SQ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* Parse "250ms", "30s", "5m", "1h", "2d" or a bare number of seconds into
 * milliseconds. false on anything else, on negatives and on overflow. */
bool sq_parse_duration_ms(const char *s, int64_t *out);
/* Parse a size: a whole number of bytes, or followed by B, kB/KiB, MB/MiB
 * or GB/GiB (each a power of 1024, as PostgreSQL counts them). false on
 * anything else and on overflow. */
bool sq_parse_bytes(const char *s, int64_t *out);
/* Parse a whole decimal number within [min, max]. */
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
/* Write s as a JSON string literal. */
void sq_json_string(FILE *out, const char *s);
/* Trim leading and trailing white space in place; returns s. */
char *sq_trim(char *s);
/* An int64 array as a PostgreSQL array literal, "{1,2,3}" (malloc'd). */
char *sq_int8_array(const int64_t *v, size_t n);

#endif
