/*
 * replay.c -- a main() for a fuzz target without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file named, or in a directory named,
 * on the command line. ctest runs each target over its seed corpus this way
 * (tests "fuzz_NAME", label nodb), in the release, ASan+UBSan and TSan
 * builds, so a regression input kept in tests/fuzz/corpus fails the plain
 * suite too, not only a fuzzing run.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while (m && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    if (!m || fclose(m) != 0) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
    free(buf);
    return 0;
}

/* Every regular file of dir, in name order; *count receives how many. */
static int run_dir(const char *dir, int *count)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), failed = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot read %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            failed |= run_file(path);
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv)
{
    int failed = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            failed |= run_dir(argv[i], &count);
        } else {
            failed |= run_file(argv[i]);
            count++;
        }
    }
    if (count == 0) {
        fprintf(stderr, "usage: %s FILE|DIR...: no input given or found\n", argv[0]);
        return 2;
    }
    printf("replay: %d input(s), %s\n", count, failed ? "some unreadable" : "all passed");
    return failed;
}
