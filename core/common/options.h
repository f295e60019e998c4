/*
 * options.h -- every key of the INI file, declared once.
 *
 * A key used to be spelled in the parser, given its default where the
 * struct was set up, checked again in validation, compared in reload.c and
 * described in three documents. Now one row of sq_options[] says all of it:
 * its section, its type (which picks the parser and the exact refusal
 * message), where the value is stored (an offset into the section's
 * struct), its default, its range, whether SIGHUP applies it to a running
 * host, and one line of help. config.c parses and frees through the rows,
 * reload.c diffs through them, and `skipq config --reference` writes
 * docs/configuration.md from them.
 */
#ifndef SQ_OPTIONS_H
#define SQ_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The sections, in the order the file, the docs and reload.c's log walk them. */
enum sq_opt_section {
    SQ_SECT_DATABASE, /* struct sq_config */
    SQ_SECT_HOST,     /* struct sq_config */
    SQ_SECT_RETENTION, /* struct sq_config */
    SQ_SECT_METRICS,  /* struct sq_config */
    SQ_SECT_PLUGIN,   /* [plugin NAME]: struct sq_plugin_conf */
    SQ_SECT_QUEUE,    /* [queue NAME]: struct sq_group_conf */
    SQ_SECT_KIND,     /* [kind NAME]: struct sq_kind_conf */
    SQ_SECT_CRON,     /* [cron NAME]: struct sq_cron_conf */
    SQ_SECT_COUNT
};

/* What a named section missing from the file means to a running host. */
enum sq_opt_absent {
    SQ_ABSENT_NONE,     /* no such queue, plugin or schedule: SIGHUP reports it added or removed */
    SQ_ABSENT_DEFAULTS, /* the defaults (a kind without [kind NAME]) */
};

struct sq_opt_section_def {
    const char *word;       /* "host", or "queue" of [queue NAME] */
    bool named;             /* [word NAME] */
    size_t size;            /* of one struct of a named section */
    size_t line_offset;     /* of its `int line` (section header's line); SIZE_MAX: none kept */
    const char *bad_name;   /* named: why a NAME is refused */
    enum sq_opt_absent absent;
    const char *help;       /* for the reference */
};

enum sq_opt_type {
    SQ_OPT_STRING,   /* char *; min/max bound its length when max or min is set */
    SQ_OPT_NAME,     /* char *: a `what` name (letters, digits, _.:-, 1-128) */
    SQ_OPT_INT,      /* int, from min to max */
    SQ_OPT_BOOL,     /* bool: on or off (also yes/no, true/false, 1/0) */
    SQ_OPT_DURATION, /* int64_t milliseconds, at least min */
    SQ_OPT_SIZE,     /* int64_t bytes, from min to max */
    SQ_OPT_ENUM,     /* int or bool: one of `choices` */
    SQ_OPT_RATE,     /* int N from min to max, and at `aux` a const char * unit: N/s or N/min */
    SQ_OPT_LIST,     /* char ** of `what` names, count (size_t) at `aux`; NULL: key absent */
    SQ_OPT_LIBPQ,    /* a libpq keyword: appended to a struct sq_kv list, count at `aux`, in file order */
    SQ_OPT_PASS,     /* any other key of the section, appended like LIBPQ: handed to a plugin */
};

enum {
    SQ_OPT_LIVE = 1 << 0,     /* SIGHUP applies it to a running host (reload.c: where to) */
    SQ_OPT_REQUIRED = 1 << 1, /* a section without it is refused: "[cron x] has no schedule" */
    SQ_OPT_ANYCASE = 1 << 2,  /* ENUM: choices match in any case */
};

struct sq_opt_choice {
    const char *name;
    int value;
    bool alias; /* accepted, not documented */
};

struct sq_option;
/* An extra check (and side effects) before the value is stored; on false,
 * the message is in err. */
typedef bool sq_opt_check_fn(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                             size_t errlen);

struct sq_option {
    enum sq_opt_section section;
    const char *key; /* "*" for SQ_OPT_PASS */
    enum sq_opt_type type;
    size_t offset;   /* of the field in the section's struct */
    size_t size;     /* of that field */
    size_t aux;      /* LIST, LIBPQ, PASS: offset of the size_t count; RATE: of the unit */
    int64_t def;     /* default of a number, bool or enum */
    const char *def_str; /* default of a string */
    const char *shown;   /* the default as the reference shows it, when the value alone says too little */
    int64_t min, max;    /* range (see the types) */
    const struct sq_opt_choice *choices; /* ENUM: NULL-terminated */
    const char *what;    /* NAME, LIST: what the names are; ENUM: a refused value "is not ..." */
    const char *libpq;   /* LIBPQ: the keyword handed to libpq, when not the key */
    sq_opt_check_fn *check;
    unsigned flags;
    const char *help;
};

extern const struct sq_option sq_options[];
extern const size_t sq_noptions;
extern const struct sq_opt_section_def sq_opt_sections[SQ_SECT_COUNT];

/* The section whose word is `word` and that is named or not; -1: none. */
int sq_opt_section_find(const char *word, bool named);
/* "[database], [host], ... or [cron NAME]": every section, for messages. */
void sq_opt_section_list(char *buf, size_t n);
/* The row of `key` in section s (not the "*" row); NULL: not declared. */
const struct sq_option *sq_option_find(enum sq_opt_section s, const char *key);
/* The "*" row of section s, if its keys pass through; NULL otherwise. */
const struct sq_option *sq_option_pass(enum sq_opt_section s);
/* True for the first row of its section at its offset: rows sharing a list
 * (the libpq keys) are compared and freed through this one. */
bool sq_option_owns(const struct sq_option *o);

/* Fill a section's struct (zeroed) with every default. False: out of memory. */
bool sq_options_defaults(enum sq_opt_section s, void *obj);
/* Parse `value` for row o into obj; `sect` is the section as written
 * ("queue mail") for the message. False with "[sect] key: ..." in err. */
bool sq_option_set(const struct sq_option *o, void *obj, const char *sect, const char *key, const char *value,
                   char *err, size_t errlen);
/* Free what rows of section s own in obj (not obj itself). */
void sq_options_free(enum sq_opt_section s, void *obj);
/* Does row o hold the same value in a and b? */
bool sq_option_same(const struct sq_option *o, const void *a, const void *b);
/* The value of a number, bool or enum row. */
int64_t sq_option_int(const struct sq_option *o, const void *obj);

/* A type stored as a number in a bool, int or int64_t field (sq_option_int). */
bool sq_opt_type_numeric(enum sq_opt_type t);
/* A type's name in the reference, and what its values look like. */
const char *sq_opt_type_name(enum sq_opt_type t);
const char *sq_opt_type_help(enum sq_opt_type t);

/* 1500 -> "1500ms", 60000 -> "1m": the largest unit that is exact. */
void sq_opt_format_duration(int64_t ms, char *buf, size_t n);
/* 1 -> "1 byte", 33554432 -> "32MiB". */
void sq_opt_format_size(int64_t bytes, char *buf, size_t n);

#endif
