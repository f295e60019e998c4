/*
 * probe.c -- the latency probe of skipq-bench: kind "probe" notes when its
 * handler started, and succeeds.
 *
 * Each handler start appends one line "JOB_ID MONOTONIC_NS" to the ledger
 * file, where MONOTONIC_NS is clock_gettime(CLOCK_MONOTONIC) read first thing
 * in the handler. skipq-bench runs on the same machine and reads the same
 * clock right after its enqueue committed, so the difference is the
 * pick-up latency. The file is opened once with O_APPEND and every line is a
 * single write(2), so lines from concurrent handler threads never interleave.
 *
 * INI:
 *     [plugin probe]
 *     path = /path/to/build/plugins/probe.so
 *     ledger = /tmp/probe-ledger.txt     ; required
 */
#include <skipq/plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct probe {
    int fd;
};

static skipq_outcome probe(skipq_job *job, void *userdata)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const struct probe *p = userdata;
    char line[64];
    int n = snprintf(line, sizeof line, "%" PRId64 " %" PRId64 "\n", job->id,
                     (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec);
    if (write(p->fd, line, (size_t)n) != n) {
        skipq_job_error(job, "probe: cannot append to the ledger (errno %d)", errno);
        return SKIPQ_FAIL; /* a missing line would be reported as a lost job */
    }
    return SKIPQ_DONE;
}

static int probe_init(skipq_plugin *p)
{
    const char *path = skipq_config(p, "ledger");
    if (!path || !*path) {
        skipq_plugin_log(p, SKIPQ_LOG_ERROR, "[plugin probe] needs ledger = FILE");
        return 1;
    }
    struct probe *st = malloc(sizeof *st);
    if (!st)
        return 1;
    st->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (st->fd < 0) {
        skipq_plugin_log(p, SKIPQ_LOG_ERROR, "cannot open ledger %s (errno %d)", path, errno);
        free(st);
        return 1;
    }
    skipq_set_state(p, st);
    return skipq_register(p, "probe", probe, st);
}

static void probe_shutdown(skipq_plugin *p)
{
    struct probe *st = skipq_state(p);
    if (st) {
        close(st->fd);
        free(st);
    }
}

SKIPQ_PLUGIN("probe", "1.0.0", probe_init, probe_shutdown)
