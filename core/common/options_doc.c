/*
 * options_doc.c -- the configuration reference, written from the option table.
 *
 * Why generated: a key's default, range and whether SIGHUP applies it used
 * to be written in the parser and again, by hand, in three documents, which
 * drifted. docs/configuration.md keeps its hand-written text around a part
 * between two markers that only `skipq config --reference FILE` writes, and
 * test_config fails when that part is not what the table gives.
 */
#include "common/options_doc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/options.h"

/* A table cell: '|' would end it. */
static void cell(FILE *out, const char *text)
{
    fputs("| ", out);
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', out);
        fputc(*p, out);
    }
    fputc(' ', out);
}

static const char *db_default(const char *key)
{
    for (const struct sq_db_default *d = sq_db_defaults; d->keyword; d++)
        if (strcmp(d->keyword, key) == 0)
            return d->value;
    return NULL;
}

static void show_number(const struct sq_option *o, int64_t v, char *buf, size_t n)
{
    char text[64];
    if (o->type == SQ_OPT_DURATION)
        sq_opt_format_duration(v, text, sizeof text);
    else if (o->type == SQ_OPT_SIZE)
        sq_opt_format_size(v, text, sizeof text);
    else if (o->type == SQ_OPT_BOOL)
        snprintf(text, sizeof text, "%s", v ? "on" : "off");
    else
        snprintf(text, sizeof text, "%lld", (long long)v);
    for (const struct sq_opt_choice *c = o->choices; c && c->name; c++)
        if (c->value == v && !c->alias) {
            snprintf(text, sizeof text, "%s", c->name);
            break;
        }
    snprintf(buf, n, "`%s`", text);
}

static void default_text(const struct sq_option *o, char *buf, size_t n)
{
    const char *db = o->type == SQ_OPT_LIBPQ ? db_default(o->key) : NULL;
    if (o->shown)
        snprintf(buf, n, "%s", o->shown);
    else if (o->flags & SQ_OPT_REQUIRED)
        snprintf(buf, n, "required");
    else if (sq_opt_type_numeric(o->type))
        show_number(o, o->def, buf, n);
    else if (o->def_str)
        snprintf(buf, n, "`%s`", o->def_str);
    else if (db)
        snprintf(buf, n, "`%s`", db);
    else
        snprintf(buf, n, "%s", o->type == SQ_OPT_LIBPQ ? "libpq's" : o->type == SQ_OPT_PASS ? "" : "none");
}

static void values_text(const struct sq_option *o, char *buf, size_t n)
{
    char lo[32], hi[32];
    size_t used = 0;
    buf[0] = '\0';
    switch (o->type) {
    case SQ_OPT_INT:
    case SQ_OPT_RATE:
        snprintf(buf, n, "%s%lld to %lld", o->type == SQ_OPT_RATE ? "N from " : "", (long long)o->min,
                 (long long)o->max);
        break;
    case SQ_OPT_DURATION:
        sq_opt_format_duration(o->min, lo, sizeof lo);
        if (o->min > 0)
            snprintf(buf, n, "at least `%s`", lo);
        break;
    case SQ_OPT_SIZE:
        sq_opt_format_size(o->min, lo, sizeof lo);
        sq_opt_format_size(o->max, hi, sizeof hi);
        snprintf(buf, n, "%s to %s", lo, hi);
        break;
    case SQ_OPT_BOOL:
        snprintf(buf, n, "`on`, `off`");
        break;
    case SQ_OPT_ENUM:
        for (const struct sq_opt_choice *c = o->choices; c->name && used < n; c++)
            if (!c->alias)
                used += (size_t)snprintf(buf + used, n - used, "%s`%s`", used ? ", " : "", c->name);
        break;
    case SQ_OPT_STRING:
        if (o->max)
            snprintf(buf, n, "%lld to %lld characters", (long long)o->min, (long long)o->max);
        else if (o->min)
            snprintf(buf, n, "not empty");
        break;
    case SQ_OPT_NAME:
    case SQ_OPT_LIST:
        snprintf(buf, n, "%s name%s", o->what, o->type == SQ_OPT_LIST ? "s" : "");
        break;
    default:
        break;
    }
}

/* A libpq keyword that says nothing but its default: listed with its
 * neighbours of the same default. */
static bool plain_libpq(const struct sq_option *o)
{
    return o->type == SQ_OPT_LIBPQ && !o->help && !o->shown;
}

static void row(FILE *out, const struct sq_option *o, const char *keys, const char *meaning)
{
    char def[160], values[160];
    default_text(o, def, sizeof def);
    values_text(o, values, sizeof values);
    cell(out, keys);
    cell(out, sq_opt_type_name(o->type));
    cell(out, def);
    cell(out, values);
    cell(out, o->flags & SQ_OPT_LIVE ? "**live**" : "restart");
    cell(out, meaning);
    fputs("|\n", out);
}

/* Rows from o on that plain_libpq() groups with it; their keys in `keys`. */
static size_t libpq_group(const struct sq_option *o, const struct sq_option *end, char *keys, size_t n)
{
    const char *def = db_default(o->key);
    size_t count = 0, used = 0;
    for (const struct sq_option *p = o; p < end && p->section == o->section && plain_libpq(p); p++) {
        const char *d = db_default(p->key);
        if ((d || def) && (!d || !def || strcmp(d, def) != 0))
            break;
        used += (size_t)snprintf(keys + used, used < n ? n - used : 0, "%s`%s`", count ? ", " : "", p->key);
        count++;
    }
    return count;
}

static void write_section(FILE *out, enum sq_opt_section s)
{
    const struct sq_opt_section_def *d = &sq_opt_sections[s];
    fprintf(out, "### `[%s%s]`\n\n%s\n\n", d->word, d->named ? " NAME" : "", d->help);
    fputs("| key | type | default | values | SIGHUP | meaning |\n|---|---|---|---|---|---|\n", out);
    const struct sq_option *end = sq_options + sq_noptions;
    for (const struct sq_option *o = sq_options; o < end; o++) {
        if (o->section != s)
            continue;
        char keys[600];
        if (plain_libpq(o)) {
            size_t n = libpq_group(o, end, keys, sizeof keys);
            row(out, o, keys,
                db_default(o->key) ? "libpq connection keyword; skipq's default unless set here"
                : n > 1            ? "libpq connection keywords"
                                   : "libpq connection keyword");
            o += n - 1;
            continue;
        }
        if (o->type == SQ_OPT_PASS)
            snprintf(keys, sizeof keys, "any other key");
        else
            snprintf(keys, sizeof keys, "`%s`", o->key);
        row(out, o, keys, o->help ? o->help : "");
    }
    fputc('\n', out);
}

static void write_types(FILE *out)
{
    fputs("### Values\n\n", out);
    for (int t = SQ_OPT_STRING; t <= SQ_OPT_PASS; t++)
        fprintf(out, "- **%s**: %s.\n", sq_opt_type_name((enum sq_opt_type)t), sq_opt_type_help((enum sq_opt_type)t));
    fputc('\n', out);
}

static void write_live(FILE *out)
{
    fputs("### What SIGHUP applies at once\n\n"
          "`skipq run` re-reads its file on SIGHUP (`systemctl reload skipq`). These keys apply at once; worker "
          "threads read them from atomics, so a reload never races with them:\n\n",
          out);
    for (size_t i = 0; i < sq_noptions; i++) {
        const struct sq_option *o = &sq_options[i];
        const struct sq_opt_section_def *d = &sq_opt_sections[o->section];
        if (o->flags & SQ_OPT_LIVE)
            fprintf(out, "- `[%s%s] %s`\n", d->word, d->named ? " NAME" : "", o->key);
    }
    fputs("\nEvery other difference needs a restart: the host logs a warning naming the key, on every reload "
          "until a restart (it compares with what it started with), and leaves the running setting alone. Values "
          "of `[database]` and `[plugin NAME]` keys are never logged: those sections are named as a whole. A file "
          "that does not load changes nothing: the error is logged with its `FILE:LINE` and the running settings "
          "stay.\n",
          out);
}

void sq_options_reference(FILE *out)
{
    fputs("## Keys\n\n"
          "Every key of the file, by section. **SIGHUP**: whether a running host applies a change at once "
          "(**live**) or needs a restart.\n\n",
          out);
    for (int s = 0; s < SQ_SECT_COUNT; s++)
        write_section(out, (enum sq_opt_section)s);
    write_types(out);
    write_live(out);
}

/* ---- the file -------------------------------------------------------------------------- */

static char *read_text(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!f || !mem) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    char buf[8192];
    for (size_t r; (r = fread(buf, 1, sizeof buf, f)) > 0;)
        fwrite(buf, 1, r, mem);
    if (ferror(f))
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
done:
    if (f)
        fclose(f);
    if (mem)
        fclose(mem);
    if (err[0]) {
        free(text);
        return NULL;
    }
    return text;
}

/* The text with a fresh reference between its markers; NULL with a message. */
static char *splice(const char *path, const char *text, char *err, size_t errlen)
{
    const char *begin = strstr(text, SQ_REFERENCE_BEGIN "\n");
    const char *end = begin ? strstr(begin, "\n" SQ_REFERENCE_END "\n") : NULL;
    if (!end) {
        snprintf(err, errlen, "%s: no \"%s\" line followed by a \"%s\" line", path, SQ_REFERENCE_BEGIN,
                 SQ_REFERENCE_END);
        return NULL;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&out, &len);
    if (!mem) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    fwrite(text, 1, (size_t)(begin - text), mem);
    fputs(SQ_REFERENCE_BEGIN "\n", mem);
    sq_options_reference(mem);
    fputs(end + 1, mem);
    fclose(mem);
    return out;
}

bool sq_options_reference_update(const char *path, bool write, char *err, size_t errlen)
{
    err[0] = '\0';
    char *text = read_text(path, err, errlen), *fresh = text ? splice(path, text, err, errlen) : NULL;
    bool ok = fresh != NULL, same = ok && strcmp(text, fresh) == 0;
    if (ok && !same && !write) {
        snprintf(err, errlen,
                 "%s is out of date with the option table (core/common/options.c): regenerate it with "
                 "`skipq config --reference %s`",
                 path, path);
        ok = false;
    } else if (ok && !same) {
        FILE *f = fopen(path, "wb");
        ok = f && fputs(fresh, f) >= 0;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok)
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
    }
    free(text);
    free(fresh);
    return ok;
}
