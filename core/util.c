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

const char *sq_utf8_invalid(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_seq(p);
        if (n == 0)
            return (const char *)p;
        p += n;
    }
    return NULL;
}

/* A C1 control (U+0080-U+009F) spelled in UTF-8 at p, or 0. */
static unsigned c1_control(const unsigned char *p)
{
    return p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F ? p[1] : 0;
}

void sq_json_string(FILE *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    while (*p) {
        size_t n = utf8_seq(p);
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7F)
            fprintf(out, "\\u%04x", *p);
        else if (n == 2 && c1_control(p))
            fprintf(out, "\\u%04x", c1_control(p));
        else if (n == 0)
            fputs("\\ufffd", out); /* not text: JSON cannot carry the byte */
        else
            fwrite(p, 1, n, out);
        p += n ? n : 1;
    }
    fputc('"', out);
}

void sq_json_raw(FILE *out, const char *json)
{
    for (const unsigned char *p = (const unsigned char *)json; *p; p++) {
        if (*p == 0x7F)
            fputs("\\u007f", out);
        else if (c1_control(p))
            fprintf(out, "\\u%04x", c1_control(p++));
        else
            fputc(*p, out);
    }
}

/*
 * The visible form of the character at p, for a terminal: the character
 * itself when it is printable UTF-8; \n, \r, \t; \xHH for other C0
 * controls (ESC among them), DEL and each byte of invalid UTF-8; \u0080 to
 * \u009f for C1 controls (U+009B is CSI to many terminals). Backslashes
 * stay as they are: the aim is a terminal no text can drive, not a
 * reversible encoding (--json is that). Returns the bytes of p consumed;
 * buf gets at most 7 bytes and a NUL.
 */
static size_t visible_char(const unsigned char *p, char buf[8])
{
    size_t n = utf8_seq(p);
    if (*p == '\n' || *p == '\r' || *p == '\t')
        snprintf(buf, 8, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
    else if (*p < 0x20 || *p == 0x7F || n == 0)
        snprintf(buf, 8, "\\x%02x", *p);
    else if (n == 2 && c1_control(p))
        snprintf(buf, 8, "\\u%04x", c1_control(p));
    else {
        memcpy(buf, p, n);
        buf[n] = '\0';
        return n;
    }
    return n == 2 && c1_control(p) ? 2 : 1;
}

/* Columns of a visible form: one per character (wide characters count
 * one; alignment is best effort, safety is not). */
static size_t columns(const char *v)
{
    size_t c = 0;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        c += (*p & 0xC0) != 0x80;
    return c;
}

size_t sq_text_width(const char *s)
{
    size_t w = 0;
    char buf[8];
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        p += visible_char(p, buf);
        w += columns(buf);
    }
    return w;
}

size_t sq_fput_text(FILE *out, const char *s, size_t max, size_t pad)
{
    size_t w = 0;
    char buf[8];
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t used = visible_char(p, buf), c = columns(buf);
        if (w + c > max)
            break;
        fputs(buf, out);
        w += c;
        p += used;
    }
    for (size_t i = w; i < pad; i++)
        fputc(' ', out);
    return w;
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
