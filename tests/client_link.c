/*
 * client_link.c -- a program that links libskipq.so alone (no skipq_core,
 * no internal header), as an application would. It is linked with
 * --no-undefined and -z now, so every call of the public headers must be
 * exported by the library, and it checks what needs no database: the
 * run-time version matches the headers, and every status has a name.
 * Run by ctest as "client_link".
 */
#include <skipq/skipq.h>
#include <stdio.h>
#include <string.h>

/* Every call of the client API, so the link resolves each one. */
static void *const calls[] = {
    (void *)skipq_strerror,      (void *)skipq_enqueue,    (void *)skipq_enqueue_many,
    (void *)skipq_copy_begin,    (void *)skipq_copy_add,   (void *)skipq_copy_end,
    (void *)skipq_copy_abort,    (void *)skipq_migrate,    (void *)skipq_schema_version_required,
    (void *)skipq_schema_version, (void *)skipq_version,   (void *)skipq_version_number,
};

int main(void)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        if (!calls[i]) {
            fprintf(stderr, "client_link: call %zu is not resolved\n", i);
            failed = 1;
        }
    if (strcmp(skipq_version(), SKIPQ_VERSION) != 0 || skipq_version_number() != SKIPQ_VERSION_NUMBER) {
        fprintf(stderr, "client_link: the library says %s (%d), the headers %s (%d)\n", skipq_version(),
                skipq_version_number(), SKIPQ_VERSION, SKIPQ_VERSION_NUMBER);
        failed = 1;
    }
    for (int rc = SKIPQ_OK; rc <= SKIPQ_ENOTFOUND; rc++) {
        const char *s = skipq_strerror((skipq_rc)rc);
        if (!s || !*s) {
            fprintf(stderr, "client_link: status %d has no name\n", rc);
            failed = 1;
        }
    }
    if (skipq_schema_version_required() <= 0) {
        fprintf(stderr, "client_link: schema version %d\n", skipq_schema_version_required());
        failed = 1;
    }
    if (!failed)
        printf("client_link: libskipq %s, schema %d\n", skipq_version(), skipq_schema_version_required());
    return failed;
}
