/*
 * ctl.c -- the control pipe from a host to each of its worker processes.
 *
 * A worker process (wproc.c) has no listener or heartbeat of its own: its
 * host's learn for it -- new jobs, the due time of a retry or a delayed
 * job, a pause, a kind limit -- and wake.c, pause.c and state.c pass each
 * on here, to the processes of the group concerned. Writes never block:
 * the pipe is non-blocking, and a message that does not fit is dropped,
 * which only delays the work to the process's next poll. The descriptors
 * change when procs.c replaces a process, under host->ctl_lock.
 */
#include "host/ctl.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "host/state.h"

void sq_ctl_send(struct sq_host *h, size_t gi, enum sq_ctl_type type, int64_t arg)
{
    const struct sq_group *g = &h->groups[gi];
    if (!h->procs || !g->process)
        return;
    struct sq_ctl m = {.type = type, .arg = arg};
    pthread_mutex_lock(&h->ctl_lock);
    for (int i = 0; i < h->nworkers; i++) {
        struct sq_worker *w = &h->workers[i];
        if (w->group == g && w->ctl >= 0 && write(w->ctl, &m, sizeof m) < 0 && errno != EAGAIN)
            log_debug("%s: control pipe: %s", w->name, strerror(errno));
    }
    pthread_mutex_unlock(&h->ctl_lock);
}
