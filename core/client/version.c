/*
 * version.c -- the version of the libskipq actually loaded. A program
 * compares it with the SKIPQ_VERSION of the headers it was built with: a
 * shared library can be replaced under a built program, a macro cannot.
 */
#include "skipq/version.h"

const char *skipq_version(void)
{
    return SKIPQ_VERSION;
}

int skipq_version_number(void)
{
    return SKIPQ_VERSION_NUMBER;
}
