/* ctl.h -- the control pipe from a host to each of its worker processes. */
#ifndef SQ_CTL_H
#define SQ_CTL_H

#include <stddef.h>
#include <stdint.h>

struct sq_host;

/* What the host tells a worker process. */
enum sq_ctl_type {
    SQ_CTL_WAKE = 'w',    /* new jobs: claim now */
    SQ_CTL_DUE = 'd',     /* arg: monotonic ms at which a job of the queue falls due */
    SQ_CTL_PAUSED = 'p',  /* skipq.paused changed: read it again */
    SQ_CTL_LIMITED = 'l', /* arg: the group serves a limited kind (1) or not (0) */
};

/* One message: 16 bytes, so a write to the pipe is whole or nothing. */
struct sq_ctl {
    int64_t type; /* enum sq_ctl_type */
    int64_t arg;
};

/* Tell every worker process of group g (by index); nothing unless g is a
 * process group of this host. A full pipe drops the message: the process finds the
 * work at its next poll. */
void sq_ctl_send(struct sq_host *h, size_t g, enum sq_ctl_type type, int64_t arg);

#endif
