/*
 * fuzz.h -- the entry point every fuzz target defines. libFuzzer calls it
 * with each input it makes (scripts/fuzz.sh); replay.c calls it with each
 * file of a corpus, in every build of the test suite. A target aborts when
 * a property fails, so both report the input that broke it.
 */
#ifndef SKIPQ_FUZZ_H
#define SKIPQ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort with a message naming the broken property. */
#define FUZZ_REQUIRE(cond, what)                                                                         \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz: %s:%d: %s\n", __FILE__, __LINE__, what);                              \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#endif
