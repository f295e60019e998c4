/*
 * noop.c -- the smallest useful plugin: kind "noop" succeeds at once.
 *
 * Shows: the SKIPQ_PLUGIN declaration, registering a handler in init, and a
 * handler that touches nothing (so the host holds no transaction open for
 * it). The benchmarks drain jobs of this kind.
 *
 * INI:
 *     [plugin noop]
 *     path = /usr/lib/x86_64-linux-gnu/skipq/noop.so
 *     kind = noop        ; optional: register under another kind name
 */
#include <skipq/plugin.h>

static skipq_outcome noop(skipq_job *job, void *userdata)
{
    (void)job;
    (void)userdata;
    return SKIPQ_DONE;
}

static int noop_init(skipq_plugin *p)
{
    const char *kind = skipq_config(p, "kind");
    return skipq_register(p, kind ? kind : "noop", noop, NULL);
}

SKIPQ_PLUGIN("noop", "1.0.0", noop_init, NULL)
