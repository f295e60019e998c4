/*
 * ndjson.c -- the check `skipq enqueue --file` makes on each line before
 * the server sees it. A NUL byte ends a C string, so a line holding one
 * would silently lose what follows it; invalid UTF-8 would reach the
 * server as text it refuses with no line number. Both are refused here,
 * naming the byte, so the error can say FILE:LINE. Apart from main.c so
 * the line check can be fuzzed alone (tests/fuzz/fuzz_enqueue_file.c).
 */
#include "cli/ndjson.h"

#include <stdio.h>
#include <string.h>

#include "common/util.h"

char *sq_ndjson_line(char *line, size_t len, char *bad, size_t badlen)
{
    if (len > SQ_NDJSON_MAX_LINE) {
        snprintf(bad, badlen, "the line is longer than %d bytes", SQ_NDJSON_MAX_LINE);
        return NULL;
    }
    const char *nul = memchr(line, '\0', len);
    const char *inv = nul ? NULL : sq_utf8_invalid(line);
    if (nul)
        snprintf(bad, badlen, "a NUL byte at byte %zu (each line must be one JSON object in UTF-8 text)",
                 (size_t)(nul - line) + 1);
    else if (inv)
        snprintf(bad, badlen, "invalid UTF-8 at byte %zu (each line must be one JSON object in UTF-8 text)",
                 (size_t)(inv - line) + 1);
    return nul || inv ? NULL : sq_trim(line);
}
