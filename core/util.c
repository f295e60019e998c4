/* util.c -- see util.h. Kept tiny: anything with a concept goes elsewhere. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

bool sq_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool sq_parse_duration_ms(const char *s, int64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return false;
    double mult;
    if (*end == '\0' || strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else if (strcmp(end, "d") == 0)
        mult = 86400000;
    else
        return false;
    double ms = v * mult;
    if (ms > 9.0e15)
        return false;
    *out = (int64_t)(ms + 0.5);
    return true;
}

bool sq_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

bool sq_valid_name(const char *s)
{
    size_t n = 0;
    for (; s && s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (!(isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-'))
            return false;
    }
    return n >= 1 && n <= 128;
}

size_t sq_strlcpy(char *dst, const char *src, size_t dst_size)
{
    size_t n = strlen(src);
    size_t c = n < dst_size - 1 ? n : dst_size - 1;
    memcpy(dst, src, c);
    dst[c] = '\0';
    return n;
}

int64_t sq_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sq_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

char *sq_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void sq_utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq(p);
        if (n == 0) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

void sq_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

char *sq_int8_array(const int64_t *v, size_t n)
{
    char *s = malloc(n * 21 + 3);
    if (!s)
        return NULL;
    size_t o = 0;
    s[o++] = '{';
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(s + o, "%s%" PRId64, i ? "," : "", v[i]);
    s[o++] = '}';
    s[o] = '\0';
    return s;
}

bool sq_parse_bytes(const char *s, int64_t *out)
{
    static const struct {
        const char *unit;
        int64_t mult;
    } units[] = {{"", 1},          {"B", 1},          {"kB", 1LL << 10}, {"KiB", 1LL << 10}, {"MB", 1LL << 20},
                 {"MiB", 1LL << 20}, {"GB", 1LL << 30}, {"GiB", 1LL << 30}};
    if (!s || *s < '0' || *s > '9')
        return false;
    int64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (INT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (*s - '0');
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s, units[i].unit) != 0)
            continue;
        if (v > INT64_MAX / units[i].mult)
            return false;
        *out = v * units[i].mult;
        return true;
    }
    return false;
}
