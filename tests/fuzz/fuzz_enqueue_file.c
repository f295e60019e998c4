/*
 * fuzz_enqueue_file.c -- `skipq enqueue --file`'s line reader: the input is
 * read line by line with getline, as the CLI reads a file, and each line
 * goes through sq_ndjson_line (cli/ndjson.c), the check made before the
 * server sees it.
 *
 * Properties: no crash or undefined behaviour; a refused line has a
 * message and really holds a NUL byte or invalid UTF-8; a taken line is a
 * part of the line as read, holds no NUL byte, is valid UTF-8 and has no
 * surrounding white space.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ndjson.h"
#include "common/util.h"
#include "fuzz.h"

static void check_line(char *line, size_t len)
{
    bool has_nul = memchr(line, '\0', len) != NULL;
    char bad[512] = "";
    char *t = sq_ndjson_line(line, len, bad, sizeof bad);
    if (!t) {
        FUZZ_REQUIRE(bad[0], "a line refused without a message");
        FUZZ_REQUIRE(has_nul || sq_utf8_invalid(line), "a line of UTF-8 text without NUL refused");
        return;
    }
    FUZZ_REQUIRE(!has_nul, "a line holding a NUL byte taken");
    size_t n = strlen(t);
    FUZZ_REQUIRE(t >= line && t + n <= line + len, "the taken text is not part of the line");
    FUZZ_REQUIRE(!sq_utf8_invalid(t), "the taken text is not UTF-8");
    FUZZ_REQUIRE(n == 0 || (!isspace((unsigned char)t[0]) && !isspace((unsigned char)t[n - 1])),
                 "the taken text is not trimmed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    FILE *f = fmemopen((void *)data, size, "r");
    FUZZ_REQUIRE(f, "fmemopen");
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        /* An exact copy: getline's buffer is larger than the line, so a read
         * past its NUL would go unseen by ASan there. */
        char *exact = malloc((size_t)got + 1);
        FUZZ_REQUIRE(exact, "malloc");
        memcpy(exact, line, (size_t)got + 1);
        check_line(exact, (size_t)got);
        free(exact);
    }
    free(line);
    fclose(f);
    return 0;
}
