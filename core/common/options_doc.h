/* options_doc.h -- the configuration reference, written from the option table. */
#ifndef SQ_OPTIONS_DOC_H
#define SQ_OPTIONS_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The lines around the generated part of docs/configuration.md. */
#define SQ_REFERENCE_BEGIN                                                                                         \
    "<!-- BEGIN generated from core/common/options.c by `skipq config --reference docs/configuration.md`; "     \
    "edit the table, not this -->"
#define SQ_REFERENCE_END "<!-- END generated -->"

/* Write the reference (markdown, without the markers). */
void sq_options_reference(FILE *out);

/*
 * Put a fresh reference between the markers of the markdown file at path,
 * keeping the hand-written text around them. With write false, only check:
 * false with "PATH is out of date ..." (and the command that regenerates
 * it) when the file's reference differs. False with a message on any
 * other failure.
 */
bool sq_options_reference_update(const char *path, bool write, char *err, size_t errlen);

#endif
