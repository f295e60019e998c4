/*
 * fuzz_plugin_elf.c -- the plugin loader's check of a plugin file's ELF
 * structure (sq_plugin_elf_check, host/plugin.c), which reads headers,
 * program headers, the dynamic section and its strings from a file anyone
 * able to write a plugin path controls. The input is the file, in memory.
 *
 * Properties: no crash, leak or undefined behaviour, whatever the offsets
 * and sizes say; a file taken as loadable starts with the ELF magic.
 */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "host/plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("skipq-fuzz.so", MFD_CLOEXEC);
        FUZZ_REQUIRE(fd >= 0, "memfd_create");
    }
    FUZZ_REQUIRE(ftruncate(fd, 0) == 0, "ftruncate");
    FUZZ_REQUIRE(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size, "pwrite");
    const char *why = sq_plugin_elf_check(fd);
    if (!why)
        FUZZ_REQUIRE(size >= SELFMAG && memcmp(data, ELFMAG, SELFMAG) == 0, "a file without the ELF magic taken");
    else
        FUZZ_REQUIRE(why[0], "a file refused without a reason");
    return 0;
}
