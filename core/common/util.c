/* util.c -- see util.h. Kept tiny: anything with a concept goes elsewhere. */
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* "nan", "inf", "infinity" in any case, alone or before a unit: the words
 * strtod() would take for numbers that are not. */
static bool not_a_number_word(const char *s)
{
    return strncasecmp(s, "nan", 3) == 0 || strncasecmp(s, "inf", 3) == 0;
}

/*
 * The number parsers below check the text against a plain grammar before
 * any conversion: strtod() and strtoll() accept hex, "nan", "infinity" and
 * leading blanks, and a non-finite or huge double converted to an integer
 * is undefined behaviour. Each returns NULL when s parses, else what is
 * wrong with it, as a phrase that follows the quoted value.
 */
const char *sq_parse_int_why(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s)
        return "is empty";
    const char *p = s + (*s == '-');
    if (*p == '+')
        return "is not a whole number (write it without '+')";
    if (not_a_number_word(p))
        return "is not a number";
    size_t digits = strspn(p, "0123456789");
    if (digits == 0)
        return "is not a number";
    if (p[digits] != '\0')
        return "is not a whole number";
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < min || v > max)
        return "is out of range";
    *out = v;
    return NULL;
}

bool sq_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    return sq_parse_int_why(s, min, max, out) == NULL;
}

/* Length of the number that starts s: digits with an optional fraction
 * and exponent (1, 1.5, .5, 2e3), no sign; 0 if there is none. */
static size_t decimal_length(const char *s)
{
    size_t n = strspn(s, "0123456789"), frac = 0;
    if (s[n] == '.')
        frac = strspn(s + n + 1, "0123456789") + 1;
    if (n == 0 && frac <= 1)
        return 0;
    n += frac;
    if (s[n] == 'e' || s[n] == 'E') {
        size_t sign = s[n + 1] == '+' || s[n + 1] == '-';
        size_t exp = strspn(s + n + 1 + sign, "0123456789");
        if (exp > 0)
            n += 1 + sign + exp;
    }
    return n;
}

const char *sq_parse_duration_why(const char *s, int64_t *out)
{
    if (!s || !*s)
        return "is empty";
    if (*s == '-' || *s == '+')
        return "is not a duration (durations take no sign)";
    if (not_a_number_word(s))
        return "is not a number";
    size_t n = decimal_length(s);
    if (n == 0 || n >= 64)
        return "is not a duration (use e.g. 500ms, 30s, 5m, 1h)";
    const char *unit = s + n;
    double mult;
    if (*unit == '\0' || strcmp(unit, "s") == 0)
        mult = 1000;
    else if (strcmp(unit, "ms") == 0)
        mult = 1;
    else if (strcmp(unit, "m") == 0 || strcmp(unit, "min") == 0)
        mult = 60000;
    else if (strcmp(unit, "h") == 0)
        mult = 3600000;
    else if (strcmp(unit, "d") == 0)
        mult = 86400000;
    else
        return "is not a duration (the unit must be ms, s, m, h or d; e.g. 500ms, 30s, 5m, 1h)";
    char num[64];
    memcpy(num, s, n);
    num[n] = '\0';
    double v = strtod(num, NULL); /* only digits, '.', 'e' and a sign here */
    if (!isfinite(v) || v > (double)SQ_MAX_DURATION_MS / mult)
        return "is too long (maximum " SQ_MAX_DURATION_TEXT ")";
    *out = (int64_t)(v * mult + 0.5);
    return NULL;
}

bool sq_parse_duration_ms(const char *s, int64_t *out)
{
    return sq_parse_duration_why(s, out) == NULL;
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
