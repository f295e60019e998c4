/*
 * wproc.c -- a worker process: one worker of a [queue] isolation = process
 * group, started and watched by its host (procs.c).
 *
 * It is `skipq run` again, told by SKIPQ_WORKER_PROCESS which worker it is
 * and where its part of the shared memory lies. It reads the same INI file,
 * loads the plugins itself (their init runs here, where their handlers
 * will), checks that they registered the kinds its host's did, and runs the
 * one worker loop of worker.c on one connection -- with its slots, their
 * lock, its progress and its kind counters in the shared memory, so the
 * host renews its leases, counts its jobs, and knows what it held when it
 * dies. It has no heartbeat, listener, scheduler or metrics of its own:
 * its host has them, and tells it over the control pipe what they learn.
 *
 * Signals: SIGTERM (from its host, or systemd's whole cgroup) stops claims
 * and lets the handler finish; SIGHUP re-reads the INI file's live keys as
 * a host does; SIGINT is ignored (a terminal's Ctrl-C reaches the host,
 * which stops its workers). End-of-file on the control pipe means the host
 * is gone: the process stops as on SIGTERM, rather than run on unwatched.
 * Its exit status tells its host what happened: 0 stopped or recycled (a
 * limit), anything else a failure to start.
 */
#include "host/wproc.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/host.h"
#include "host/kinds.h"
#include "host/plugin.h"
#include "host/ctl.h"
#include "host/procs.h"
#include "host/queue.h"
#include "host/reload.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"
#include "skipq/plugin.h"
#include "host/worker.h"

#define SHM_FD 3
#define CTL_FD 4

struct spec {
    size_t size, offset;
    int index;
    size_t group;
};

static bool parse_spec(const char *s, struct spec *sp)
{
    char tail;
    return sscanf(s, "%zu:%zu:%d:%zu%c", &sp->size, &sp->offset, &sp->index, &sp->group, &tail) == 4;
}

/* The control pipe: what the host's listener and heartbeat learn. */
static void *control_main(void *arg)
{
    struct sq_host *h = arg;
    struct sq_group *g = h->workers[0].group;
    sq_host_log_thread(h, "ctl");
    for (;;) {
        struct sq_ctl m;
        ssize_t n = read(CTL_FD, &m, sizeof m);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof m) {
            if (!atomic_load(&h->stopping))
                log_warn("%s: the host process is gone: stopping", h->workers[0].name);
            sq_host_stop(h);
            return NULL;
        }
        switch (m.type) {
        case SQ_CTL_WAKE:
            sq_host_wake(h, NULL);
            break;
        case SQ_CTL_DUE:
            sq_group_due(h, g, m.arg);
            break;
        case SQ_CTL_PAUSED:
            sq_host_want_paused(h);
            sq_host_wake(h, NULL);
            break;
        case SQ_CTL_LIMITED:
            atomic_store(&g->limited, m.arg != 0);
            break;
        default:
            break;
        }
    }
}

/* One worker, in the shared block: its slots, lock, progress and counters. */
static bool build_worker(struct sq_host *h, void *block, const struct spec *sp, char *err, size_t errlen)
{
    struct sq_shm_view v;
    sq_shm_view(block, sq_kinds_count(h->kinds), &v);
    if (*v.digest != sq_kinds_digest(h->kinds)) {
        snprintf(err, errlen, "the plugins registered other kinds than the host's did (were plugin files or the INI "
                              "file changed since the host started?)");
        return false;
    }
    sq_kinds_count_into(h->kinds, v.counts);
    if (!(h->workers = calloc(1, sizeof *h->workers)))
        return false;
    h->nworkers = 1;
    struct sq_worker *w = &h->workers[0];
    w->host = h;
    w->index = sp->index;
    w->group = &h->groups[sp->group];
    snprintf(w->name, sizeof w->name, "w%d", sp->index);
    snprintf(w->ident, sizeof w->ident, "%s:%d:%s", h->name, (int)getpid(), w->name);
    w->nslots = w->group->batch;
    w->handlers = 1;
    w->slots = v.slots;
    w->slots_lock = v.lock;
    w->live = v.live;
    pthread_mutex_init(&w->conn_lock, NULL);
    w->sock = -1;
    atomic_store(&h->workers_built, true);
    atomic_store(&h->running, 1);
    return true;
}

/*
 * Take signals until the worker thread has ended. Once stopping (SIGTERM,
 * or its host gone) the process keeps the stop contract as a host does
 * (plugin.h): shutdown_grace for its handler, then should-stop and
 * SKIPQ_STOP_WINDOW_MS to return in; then it releases what it still holds
 * and exits, so a worker whose host was killed never runs on unwatched.
 * With its host alive, the host does the same to the same slots at about
 * the same moments and kills it: the release is fenced, so whichever comes
 * second changes nothing.
 */
static void signal_loop(struct sq_host *h, const sigset_t *set)
{
    int64_t deadline = 0;
    bool told = false;
    while (atomic_load(&h->running) > 0) {
        struct timespec tick = {0, 50 * 1000000L};
        siginfo_t info;
        int sig = sigtimedwait(set, &info, &tick);
        if (sig == SIGHUP)
            sq_host_reload(h);
        else if (sig == SIGTERM)
            sq_host_stop(h);
        if (!atomic_load(&h->stopping))
            continue;
        if (!deadline) {
            deadline = sq_now_ms() + h->cfg->grace_ms;
            sq_slots_stopping(h, deadline);
        }
        if (sq_now_ms() >= deadline && !told) {
            told = true;
            if (sq_slots_tell_stop(h))
                deadline = sq_now_ms() + SKIPQ_STOP_WINDOW_MS;
        }
        if (sq_now_ms() >= deadline && atomic_load(&h->running) > 0) {
            sq_host_release_running(h);
            fflush(stderr);
            _exit(0); /* the handler still runs plugin code: do not unload it under it */
        }
    }
}

static _Noreturn void run(struct sq_config *cfg, const char *db_flag, const char *spec_text)
{
    struct sq_host host = {.cfg = cfg,
                           .in_child = true,
                           .database = sq_config_view_database(cfg)};
    struct sq_host *h = &host;
    struct spec sp;
    char err[1024] = "";
    int rc = 2;
    void *base = MAP_FAILED;
    sigset_t set;
    sq_host_block_signals(&set);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    unsetenv("NOTIFY_SOCKET"); /* only the host speaks to systemd */
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->slots_lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    sq_log_set_level(cfg->log_level);
    atomic_store(&h->poll_ms, cfg->poll_ms);
    sq_host_name_init(h);
    if (!parse_spec(spec_text, &sp)) {
        log_error("%s=\"%s\": not what a host sets; `skipq run` starts worker processes itself", SQ_WPROC_ENV,
                  spec_text);
        goto out;
    }
    char name[16];
    snprintf(name, sizeof name, "w%d", sp.index);
    sq_host_log_thread(h, name);
    base = mmap(NULL, sp.size, PROT_READ | PROT_WRITE, MAP_SHARED, SHM_FD, 0);
    close(SHM_FD);
    if (base == MAP_FAILED || sp.group >= cfg->ngroups) {
        log_error("worker process: cannot map the memory shared with the host: %s", strerror(errno));
        goto out;
    }
    if (!sq_dbparams_build(&h->params, cfg, db_flag, "skipq")) {
        log_error("out of memory");
        goto out;
    }
    sq_queue_use_unnamed(cfg->database.pooled);
    sq_queue_set_claim_bytes(cfg->claim_bytes);
    if (!(h->plugins = sq_plugins_load(cfg, err, sizeof err)) || !(h->kinds = sq_kinds_build(h->plugins, cfg)) ||
        !sq_host_build_groups(h, err, sizeof err) ||
        !build_worker(h, (char *)base + sp.offset, &sp, err, sizeof err)) {
        log_error("worker process w%d: %s", sp.index, err[0] ? err : "out of memory");
        goto out;
    }
    sq_host_want_paused(h); /* read skipq.paused on the first connection */
    pthread_t ctl, worker;
    if (pthread_create(&ctl, NULL, control_main, h) != 0 ||
        pthread_create(&worker, NULL, sq_worker_main, &h->workers[0]) != 0) {
        log_error("worker process w%d: cannot start its threads", sp.index);
        goto out;
    }
    pthread_detach(ctl);
    signal_loop(h, &set);
    pthread_join(worker, NULL);
    sq_plugins_unload(h->plugins); /* the plugins' shutdown, as in a host */
    rc = 0;
out:
    /* The process ends here, with its control thread still blocked on the
     * pipe: nothing returns to the caller's frees. */
    fflush(stderr);
    _exit(rc);
}

void sq_wproc_run_if_asked(struct sq_config *cfg, const char *db_flag)
{
    const char *env = getenv(SQ_WPROC_ENV);
    if (!env)
        return;
    char *spec = strdup(env);
    unsetenv(SQ_WPROC_ENV); /* not for what its plugins start */
    if (!spec)
        _exit(1);
    run(cfg, db_flag, spec);
}
