/*
 * fuzz_ini.c -- the INI loader, through the only entry point the host and
 * the CLI use: sq_config_load() on a file. The input is written to a memory
 * file and loaded by its /proc/self/fd path.
 *
 * Properties: no crash, leak or undefined behaviour on any bytes; a file
 * that does not load is refused with a message that names the file (the
 * loader's "FILE:LINE: ..." or "FILE: ..."); a file that loads can be
 * checked for running and freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("skipq-fuzz.ini", MFD_CLOEXEC);
        FUZZ_REQUIRE(fd >= 0, "memfd_create");
        /* Mode 0600, as a real INI holding a password should be: no
         * warning about it on every input. */
        FUZZ_REQUIRE(fchmod(fd, 0600) == 0, "fchmod");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    FUZZ_REQUIRE(ftruncate(fd, 0) == 0, "ftruncate");
    FUZZ_REQUIRE(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size, "pwrite");

    char err[2048] = "";
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    if (!cfg) {
        FUZZ_REQUIRE(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':',
                     "a refused file's message does not start with FILE:");
        FUZZ_REQUIRE(strlen(err) > strlen(path) + 2, "a refused file's message says nothing");
        return 0;
    }
    err[0] = '\0';
    if (!sq_config_check_runnable(cfg, err, sizeof err))
        FUZZ_REQUIRE(err[0], "a file refused for running without a message");
    sq_config_free(cfg);
    return 0;
}
