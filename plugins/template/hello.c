/*
 * hello.c -- the out-of-tree plugin template: copy this directory, rename
 * the plugin and its kind, and write your handler. It builds against an
 * installed skipq, never a source tree: `make` (pkg-config skipq-plugin) or
 * `cmake -S . -B build && cmake --build build` (find_package(skipq)).
 *
 * Kind "hello" (or the section's `kind` key): logs the greeting (the
 * section's `greeting` key, default "hello") with the job's payload and
 * succeeds. The contract -- outcomes, errors, the job's transaction,
 * stopping -- is skipq-plugin(7) and <skipq/plugin.h>.
 *
 * INI:
 *     [plugin hello]
 *     path = /usr/lib/x86_64-linux-gnu/skipq/hello.so
 *     greeting = bonjour
 */
#include <skipq/plugin.h>

static skipq_outcome hello(skipq_job *job, void *userdata)
{
    const char *greeting = userdata;
    if (skipq_job_should_stop(job))
        return SKIPQ_RETRY; /* the lease is lost or the host is stopping: leave the job to a later attempt */
    skipq_job_log(job, SKIPQ_LOG_INFO, "%s: job %lld, attempt %d of %d, payload %s", greeting,
                  (long long)job->id, job->attempt, job->max_attempts, job->payload);
    return SKIPQ_DONE;
}

static int hello_init(skipq_plugin *p)
{
    const char *kind = skipq_config(p, "kind");
    const char *greeting = skipq_config(p, "greeting");
    return skipq_register(p, kind ? kind : "hello", hello, (void *)(greeting ? greeting : "hello"));
}

SKIPQ_PLUGIN("hello", "1.0.0", hello_init, NULL)
