/* ndjson.h -- one line of an `enqueue --file` input, checked and trimmed. */
#ifndef SQ_NDJSON_H
#define SQ_NDJSON_H

#include <stddef.h>

/* Longest line taken: jsonb's own limit, which also keeps a batch of lines
 * within an int. */
#define SQ_NDJSON_MAX_LINE 0x0FFFFFFF

/*
 * Check one line as read (len bytes from getline, NUL bytes included,
 * line[len] == '\0') and trim it in place: the line without surrounding
 * white space ("" for a blank line), or NULL with *bad saying what is wrong
 * (too long, a NUL byte, invalid UTF-8, naming the byte). Whether the line
 * is one JSON object is for the server to say (cli/main.c).
 */
char *sq_ndjson_line(char *line, size_t len, char *bad, size_t badlen);

#endif
