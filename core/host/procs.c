/*
 * procs.c -- [queue] isolation = process: the host supervises worker
 * processes the way PostgreSQL's postmaster supervises its backends.
 *
 * WHY
 * Handlers are native code. In a thread, a NULL dereference, an abort() in
 * a library, a stack overflow or a leak takes the whole host down, and
 * every job every thread held waits for its lease. In a process of its
 * own, it takes one process and one attempt.
 *
 * DESIGN
 * - Each of a process group's `threads` is a worker process: the host
 *   re-executes its own binary (posix_spawn, so nothing of the host's
 *   threads and locks is inherited; `skipq run` sees SKIPQ_WORKER_PROCESS
 *   and runs wproc.c). The worker process loads the plugins itself: their
 *   init runs, and the threads it starts live, where the handlers run. The
 *   host loaded them first, with the same permission, ELF and ABI checks,
 *   so a bad plugin stops the host at start-up instead of a crash loop.
 * - Memory shared with each worker process (a memfd mapped by both) holds
 *   what the host must know when the process dies or hangs: its slots
 *   (the jobs it holds, which handler runs, its outcomes not yet recorded),
 *   the robust mutex guarding them, its progress, and its kind counters.
 *   The host's heartbeat renews the leases of those slots like any other
 *   (slots.c), so a worker process needs one connection, not two, and
 *   /metrics adds the counters up (kinds.c), exact across deaths.
 * - A death is noticed at once (SIGCHLD through a signalfd, on this
 *   thread). The host then, in one session of its own: ends the dead
 *   process's server session if it still runs (a claim it was making must
 *   not commit after the give-back), records the outcomes
 *   that had returned, marks the attempt that was running `crashed` with the
 *   cause (it goes back to pending after the kind's backoff, or dead on its
 *   last attempt), and gives back uncharged every other job running under
 *   the process's name (claimed and not started, or claimed by a cycle
 *   whose reply died with it). A replacement starts after a backoff that
 *   doubles with consecutive crashes (50 ms up to 10 s), so a crash loop
 *   does not spin; a process that exits because of a limit, or one that had
 *   finished jobs, is replaced at once.
 * - Limits, checked every 50 ms: a handler past its kind's timeout is asked
 *   to stop and killed SQ_KILL_AFTER_MS later; a process over max_memory
 *   is killed while a handler runs, or told to exit between jobs; a process
 *   that makes no progress outside a handler for long (a database call
 *   that never returns: a middlebox can swallow bytes and still answer
 *   keepalives) is killed and replaced. max_jobs_per_worker is counted by
 *   the worker process, which exits on its own.
 * - The host tells its worker processes what its listener and heartbeat
 *   learn (new jobs, due times, pauses, limits) through a pipe each: a
 *   16-byte message is written whole or not at all, and a pipe that is
 *   full only means the process finds the work at its next poll. A process
 *   whose pipe reads end-of-file has lost its host and stops.
 * - Stopping: SIGTERM to every worker process, which stops claiming and
 *   finishes its handlers; when the grace period is over host.c kills
 *   them and releases what they held, as it does for threads.
 */
#include "host/procs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/ctl.h"
#include "host/kinds.h"
#include "host/queue.h"
#include "host/session.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"

extern char **environ;

#define TICK_MS 50
#define MEMORY_EVERY_MS 100
#define RESPAWN_MIN_MS 50
#define RESPAWN_MAX_MS 10000
/* A worker process that went this long without a crash has a clean record. */
#define STREAK_RESET_MS 10000
/* How long a death's record waits for the dead process's session to end. */
#define END_BACKEND_WAIT_MS 2000

/* ---- the shared block of one worker process -------------------------------------------------- */

struct shm_head {
    pthread_mutex_t lock;
    struct sq_worker_live live;
    uint64_t digest;
};

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

size_t sq_shm_stride(size_t nkinds, int nslots)
{
    return align64(sizeof(struct shm_head)) + align64(nkinds * sizeof(struct sq_kind_counts)) +
           align64((size_t)nslots * sizeof(struct sq_slot));
}

void sq_shm_view(void *block, size_t nkinds, struct sq_shm_view *v)
{
    struct shm_head *head = block;
    char *p = (char *)block + align64(sizeof *head);
    v->lock = &head->lock;
    v->live = &head->live;
    v->digest = &head->digest;
    v->counts = (struct sq_kind_counts *)p;
    v->slots = (struct sq_slot *)(p + align64(nkinds * sizeof(struct sq_kind_counts)));
}

/* ---- the host's side -------------------------------------------------------------------------- */

struct sq_proc {
    struct sq_worker *w;
    size_t offset;         /* of its block in the mapping */
    pid_t pid;             /* 0: not running */
    int64_t started_at;    /* monotonic ms */
    int64_t respawn_at;    /* when pid is 0: start a replacement then */
    int streak;            /* consecutive crashes */
    bool term_sent;        /* asked to exit (stop, or max_memory between jobs) */
    bool retired;          /* stopping: gone, not replaced */
    char kill_why[256];    /* set before the host kills it: the cause recorded */
};

struct sq_procs {
    struct sq_host *h;
    int memfd;
    void *base;
    size_t size;
    size_t nkinds;
    struct sq_proc *v;
    int n;
    pthread_mutex_t lock; /* pids, for the signal senders */
    pthread_t thread;
    bool started;
    atomic_bool killing;  /* the grace period is over: deaths are host.c's to release */
    int sigfd;
    char exe[PATH_MAX];
    char *config_path, *db_flag;
    PGconn *conn;          /* the host's session for deaths (session()) */
    int64_t conn_retry_at; /* when to make it again after a loss */
    int64_t conn_step;     /* its reconnect backoff, as a worker's */
    uint32_t conn_seed;
    unsigned long conn_seen; /* sq_host_reconnect_gen at the last attempt */
    bool conn_down;          /* the loss was logged; the recovery will be */
    int64_t next_memory;
    long page;
};

/* ---- starting one ----------------------------------------------------------------------------- */

/* Fill the block of p as the worker process will find it. */
static void reset_block(struct sq_procs *ps, struct sq_proc *p)
{
    struct sq_worker_live *l = p->w->live;
    atomic_store(&l->beat, sq_now_ms());
    atomic_store(&l->down_since, 0);
    atomic_store(&l->busy, false);
    atomic_store(&l->running, 0);
    atomic_store(&l->connected, false);
    atomic_store(&l->jobs, 0);
    atomic_store(&l->recycle, false);
    (void)ps;
}

static int dup_high(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 100);
}

/*
 * Start the worker process of p. Its fds 3 and 4 are the shared memory and
 * the read end of its control pipe (dup'ed high first, so no dup2 of the
 * spawn clobbers the other), and SKIPQ_WORKER_PROCESS says where its block
 * lies: "memfd_size:offset:worker_index:group_index".
 */
static bool spawn_one(struct sq_procs *ps, struct sq_proc *p)
{
    struct sq_host *h = ps->h;
    int pipefd[2] = {-1, -1}, hi_mem = -1, hi_ctl = -1;
    char spec[160], *env_entry = NULL;
    char **envp = NULL;
    bool ok = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_init = false, attr_init = false;
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        goto fail;
    fcntl(pipefd[1], F_SETFL, fcntl(pipefd[1], F_GETFL) | O_NONBLOCK);
    if ((hi_mem = dup_high(ps->memfd)) < 0 || (hi_ctl = dup_high(pipefd[0])) < 0)
        goto fail;
    size_t group = (size_t)(p->w->group - h->groups);
    snprintf(spec, sizeof spec, "%zu:%zu:%d:%zu", ps->size, p->offset, p->w->index, group);
    if (asprintf(&env_entry, "%s=%s", SQ_WPROC_ENV, spec) < 0) {
        env_entry = NULL;
        goto fail;
    }
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    if (!(envp = calloc(nenv + 2, sizeof *envp)))
        goto fail;
    size_t e = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], SQ_WPROC_ENV "=", sizeof SQ_WPROC_ENV) != 0)
            envp[e++] = environ[i];
    envp[e++] = env_entry;
    /* A host serving one of several databases hands its worker the same cut
     * of the file, so that group and worker indexes agree. */
    const char *database = sq_config_view_database(h->cfg);
    char *argv[8] = {ps->exe, "run", "-c", ps->config_path};
    int a = 4;
    if (database) {
        argv[a++] = "--database";
        argv[a++] = (char *)database;
    }
    if (ps->db_flag) {
        argv[a++] = "--db";
        argv[a++] = ps->db_flag;
    }
    argv[a] = NULL;
    posix_spawn_file_actions_init(&fa);
    fa_init = true;
    posix_spawn_file_actions_adddup2(&fa, hi_mem, 3);
    posix_spawn_file_actions_adddup2(&fa, hi_ctl, 4);
    posix_spawnattr_init(&attr);
    attr_init = true;
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    reset_block(ps, p);
    pid_t pid;
    /* /proc/self/exe, not the path: a package upgrade may have replaced the
     * file since the host started, and a worker must be the host's own
     * binary (the shared memory's layout is its). The kernel keeps the
     * running image reachable there even when the file is gone. */
    int r = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv, envp);
    if (r != 0) {
        errno = r;
        goto fail;
    }
    pthread_mutex_lock(&ps->lock);
    p->pid = pid;
    pthread_mutex_unlock(&ps->lock);
    pthread_mutex_lock(&h->ctl_lock);
    p->w->ctl = pipefd[1];
    pthread_mutex_unlock(&h->ctl_lock);
    pipefd[1] = -1;
    p->started_at = sq_now_ms();
    p->term_sent = false;
    p->kill_why[0] = '\0';
    log_debug("%s: worker process started (pid %d)", p->w->name, (int)pid);
    /* What the heartbeat thread learnt before this process existed. */
    sq_ctl_send(h, (size_t)(p->w->group - h->groups), SQ_CTL_LIMITED, atomic_load(&p->w->group->limited));
    ok = true;
fail:
    if (!ok)
        log_error("%s: cannot start a worker process: %s", p->w->name, strerror(errno));
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    free(envp);
    free(env_entry);
    if (hi_mem >= 0)
        close(hi_mem);
    if (hi_ctl >= 0)
        close(hi_ctl);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    return ok;
}

/* ---- a death ---------------------------------------------------------------------------------- */

static void describe_status(int status, char *out, size_t len)
{
    if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        if (abbrev)
            snprintf(out, len, "killed by SIG%s", abbrev);
        else
            snprintf(out, len, "killed by signal %d", WTERMSIG(status));
    } else {
        snprintf(out, len, "exit status %d", WEXITSTATUS(status));
    }
}

/* What a dead worker process held: its outcomes and its crashed attempts,
 * recorded in one statement (each fenced, as a worker's own would be). */
struct death {
    struct sq_outcomes o;
    int *kinds;     /* kind index of each outcome */
    int crashed;    /* outcomes that are crashes (3) */
    int64_t first_job;
    int first_attempt, first_kind;
};

static bool death_alloc(struct death *d, int n)
{
    memset(d, 0, sizeof *d);
    size_t c = (size_t)(n > 0 ? n : 1);
    d->o.ids = calloc(c, sizeof *d->o.ids);
    d->o.execs = calloc(c, sizeof *d->o.execs);
    d->o.outcomes = calloc(c, sizeof *d->o.outcomes);
    d->o.delays = calloc(c, sizeof *d->o.delays);
    d->o.errors = calloc(c, sizeof *d->o.errors);
    d->kinds = calloc(c, sizeof *d->kinds);
    return d->o.ids && d->o.execs && d->o.outcomes && d->o.delays && d->o.errors && d->kinds;
}

static void death_free(struct death *d)
{
    for (size_t i = 0; d->o.errors && i < d->o.n; i++)
        free(d->o.errors[i]);
    free(d->o.ids);
    free(d->o.execs);
    free(d->o.outcomes);
    free(d->o.delays);
    free(d->o.errors);
    free(d->kinds);
}

/* Take what the slots of a dead process say, and free them. */
static void collect(struct sq_procs *ps, struct sq_proc *p, const char *cause, struct death *d, uint32_t *seed)
{
    struct sq_worker *w = p->w;
    struct sq_kinds *ks = ps->h->kinds;
    sq_slots_lock(w);
    for (int k = 0; k < w->nslots; k++) {
        struct sq_slot *sl = &w->slots[k];
        if (!sl->job_id || (!sl->finished && !sl->started_at))
            continue; /* free, or claimed and never started: given back */
        size_t i = d->o.n;
        struct sq_kind *kr = sl->kind >= 0 && (size_t)sl->kind < ps->nkinds ? sq_kinds_at(ks, (size_t)sl->kind) : NULL;
        d->o.ids[i] = sl->job_id;
        d->o.execs[i] = sl->execution_id;
        if (sl->finished) {
            d->o.outcomes[i] = sl->outcome;
            d->o.delays[i] = sl->delay_ms;
            d->o.errors[i] = strdup(sl->error);
        } else {
            d->o.outcomes[i] = 3;
            d->o.delays[i] = sq_kind_backoff(kr, sl->attempt, seed);
            d->o.errors[i] = strdup(cause);
            if (!d->crashed++) {
                d->first_job = sl->job_id;
                d->first_attempt = sl->attempt;
                d->first_kind = sl->kind;
            }
        }
        d->kinds[i] = sl->kind;
        if (d->o.errors[i])
            d->o.n++;
    }
    for (int k = 0; k < w->nslots; k++)
        w->slots[k].job_id = 0;
    sq_slots_unlock(w);
}

/* The host's own session, for deaths: made at start, again after a loss
 * (keep_session), and on need if it is not there. An outage is logged once
 * and the recovery once, as for every other session of the host. */
static PGconn *session(struct sq_procs *ps)
{
    char err[512];
    if (ps->conn && PQstatus(ps->conn) == CONNECTION_OK)
        return ps->conn;
    if (ps->conn)
        sq_session_close(&ps->h->sup, &ps->conn);
    ps->conn_seen = sq_host_reconnect_gen(ps->h);
    /* Cut like a worker's when a call gets no reply (reply_timeout). */
    ps->conn = sq_session_open_for(ps->h, &ps->h->sup, err, sizeof err);
    if (!ps->conn) {
        if (!ps->conn_down)
            log_warn("worker processes: cannot reach the database to record deaths (leases will bring the jobs "
                     "back), retrying with backoff up to %ds: %s",
                     SQ_RECONNECT_MAX_MS / 1000, err);
        ps->conn_down = true;
        ps->conn_retry_at = sq_now_ms() + sq_reconnect_backoff(&ps->conn_step, &ps->conn_seed);
        return NULL;
    }
    if (ps->conn_down) {
        log_info("worker processes: connected to the database again");
        sq_host_reconnected(ps->h);
    }
    ps->conn_down = false;
    ps->conn_step = SQ_RECONNECT_MIN_MS;
    return ps->conn;
}

/*
 * Keep the session for deaths up between deaths. Its loss shows on its
 * socket (the server closed it), seen here at once; it is made again with
 * a worker's backoff, or as soon as another session of this host got
 * through. So after an outage the first death is recorded without waiting
 * for a connection, and the host's sessions are all back together.
 */
static void keep_session(struct sq_procs *ps, bool readable, int64_t now)
{
    if (ps->conn && readable) {
        PGnotify *n;
        bool lost = !PQconsumeInput(ps->conn) || PQstatus(ps->conn) != CONNECTION_OK;
        while ((n = PQnotifies(ps->conn)))
            PQfreemem(n);
        if (lost) {
            sq_session_close(&ps->h->sup, &ps->conn);
            ps->conn_retry_at = now; /* the first attempt at once, as a worker's */
        }
    }
    if (ps->conn || atomic_load(&ps->h->stopping))
        return;
    if (now >= ps->conn_retry_at || sq_host_reconnect_gen(ps->h) != ps->conn_seen)
        session(ps);
}

static void count_applied(struct sq_procs *ps, const struct death *d, const char *applied)
{
    struct sq_kinds *ks = ps->h->kinds;
    for (size_t i = 0; i < d->o.n; i++) {
        int ki = d->kinds[i];
        if (ki < 0 || (size_t)ki >= ps->nkinds)
            continue;
        struct sq_kind_counts *c = sq_kinds_at(ks, (size_t)ki)->n;
        enum sq_complete r = (enum sq_complete)applied[i];
        if (d->o.outcomes[i] == 3 && r != SQ_COMPLETE_FENCED)
            atomic_fetch_add(&c->crashed, 1);
        if (r == SQ_COMPLETE_DONE)
            atomic_fetch_add(&c->done, 1);
        else if (r == SQ_COMPLETE_RETRY && d->o.outcomes[i] != 3)
            atomic_fetch_add(&c->retried, 1);
        else if (r == SQ_COMPLETE_DEAD)
            atomic_fetch_add(&c->dead, 1);
    }
}

/*
 * The dead process's session may still be running its last statement: a
 * server process learns that its client died only when it next reads or
 * writes. A claim that commits after the give-back below would leave jobs
 * running under a name nobody renews -- back only when their leases
 * expire. So that session is ended first: a claim still running rolls
 * back, one that committed is given back. Behind a pooler the process id
 * is not the server's, and the leases stay the only way back.
 */
static void end_backend(struct sq_procs *ps, struct sq_worker *w, PGconn *conn)
{
    char err[512];
    int pid = atomic_exchange(&w->live->backend_pid, 0);
    if (!conn || pid <= 0 || ps->h->cfg->database.pooled)
        return;
    int r = sq_queue_end_backend(conn, pid, END_BACKEND_WAIT_MS, err, sizeof err);
    if (r < 0)
        log_warn("%s: could not end its dead worker process's session (leases will bring back what it claims): %s",
                 w->name, err);
    else if (r == 0)
        log_warn("%s: its dead worker process's session (server pid %d) is still running after %dms; leases will "
                 "bring back what it claims",
                 w->name, pid, END_BACKEND_WAIT_MS);
}

/* Record what the dead process held and give back what it never ran. */
static void record_death(struct sq_procs *ps, struct sq_proc *p, pid_t pid, const char *cause, bool crash)
{
    struct sq_host *h = ps->h;
    struct sq_worker *w = p->w;
    struct death d;
    uint32_t seed = (uint32_t)(sq_now_ms() ^ (uint32_t)pid);
    char err[512], ident[sizeof w->ident], what[400] = "";
    if (!death_alloc(&d, w->nslots)) {
        log_error("%s: out of memory recording a death; leases will bring its jobs back", w->name);
        death_free(&d);
        return;
    }
    collect(ps, p, cause, &d, &seed);
    snprintf(ident, sizeof ident, "%s:%d:%s", h->name, (int)pid, w->name);
    PGconn *conn = session(ps);
    end_backend(ps, w, conn);
    char *applied = calloc(d.o.n ? d.o.n : 1, 1);
    if (conn && applied && d.o.n && sq_queue_record(conn, &d.o, applied, err, sizeof err) < 0)
        log_error("%s: could not record what its dead worker process held (leases will bring it back): %s", w->name,
                  err);
    else if (conn && applied)
        count_applied(ps, &d, applied);
    if (d.crashed) {
        const struct sq_kind *k = d.first_kind >= 0 && (size_t)d.first_kind < ps->nkinds
                                      ? sq_kinds_at(h->kinds, (size_t)d.first_kind)
                                      : NULL;
        snprintf(what, sizeof what, " while running job %" PRId64 " (%s, attempt %d): attempt recorded as crashed",
                 d.first_job, k ? k->name : "?", d.first_attempt);
    }
    int back = conn ? sq_queue_give_back(conn, ident, NULL, 0,
                                         "interrupted: its worker process died before the handler started", err,
                                         sizeof err)
                    : -1;
    if (back < 0 && conn) {
        log_warn("%s: could not give back the jobs its dead worker process had claimed (leases will): %s", w->name,
                 err);
        /* Closed, or one that can never write (a standby: 25006): make
         * another before the next death needs it (keep_session). */
        if (sq_db_conn_lost(conn, NULL))
            sq_session_close(&h->sup, &ps->conn);
    }
    if (crash)
        log_error("%s (pid %d): %s%s%s", w->name, (int)pid, cause, what,
                  back > 0 ? "; gave back its unstarted jobs" : "");
    if (back > 0)
        sq_host_wake(h, w->group->queue);
    for (size_t i = 0; conn && applied && i < d.o.n; i++)
        if (d.o.outcomes[i] == 3 && applied[i] == SQ_COMPLETE_RETRY)
            sq_group_due(h, w->group, sq_now_ms() + d.o.delays[i]);
    free(applied);
    death_free(&d);
}

/* Retire p (stopping) or schedule its replacement. */
static void after_death(struct sq_procs *ps, struct sq_proc *p, bool crash, bool had_jobs)
{
    struct sq_host *h = ps->h;
    int64_t now = sq_now_ms();
    if (atomic_load(&h->stopping)) {
        p->retired = true;
        pthread_mutex_lock(&h->lock);
        atomic_fetch_sub(&h->running, 1);
        pthread_cond_broadcast(&h->wake);
        pthread_mutex_unlock(&h->lock);
        return;
    }
    if (!crash || had_jobs || now - p->started_at >= STREAK_RESET_MS)
        p->streak = crash ? 1 : 0;
    else
        p->streak++;
    int64_t wait = 0;
    if (p->streak > 0) {
        wait = RESPAWN_MIN_MS;
        for (int i = 1; i < p->streak && wait < RESPAWN_MAX_MS; i++)
            wait *= 2;
        if (wait > RESPAWN_MAX_MS)
            wait = RESPAWN_MAX_MS;
    }
    if (p->streak > 1)
        log_warn("%s: %d crashes in a row; next worker process in %" PRId64 "ms", p->w->name, p->streak, wait);
    p->respawn_at = now + wait;
}

static void on_death(struct sq_procs *ps, struct sq_proc *p, int status)
{
    pid_t pid = p->pid;
    pthread_mutex_lock(&ps->lock);
    p->pid = 0;
    pthread_mutex_unlock(&ps->lock);
    pthread_mutex_lock(&ps->h->ctl_lock);
    close(p->w->ctl);
    p->w->ctl = -1;
    pthread_mutex_unlock(&ps->h->ctl_lock);
    struct sq_worker_live *l = p->w->live;
    atomic_store(&l->busy, false);
    atomic_store(&l->running, 0);
    atomic_store(&l->connected, false);
    atomic_store(&l->beat, 0);
    if (atomic_load(&ps->killing)) {
        p->retired = true; /* host.c releases what it held */
        return;
    }
    char cause[300];
    if (p->kill_why[0])
        sq_strlcpy(cause, p->kill_why, sizeof cause);
    else
        describe_status(status, cause, sizeof cause);
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    bool running = false;
    sq_slots_lock(p->w);
    for (int k = 0; k < p->w->nslots; k++)
        running = running || (p->w->slots[k].job_id && p->w->slots[k].started_at && !p->w->slots[k].finished);
    sq_slots_unlock(p->w);
    bool had_jobs = atomic_load(&l->jobs) > 0;
    /* Exiting on purpose: a limit, or a stop (SIGTERM, its host gone). */
    bool meant = clean && !running && (atomic_load(&l->recycle) || p->term_sent);
    bool crash = !meant || p->kill_why[0];
    if (meant && atomic_load(&l->recycle) && !atomic_load(&ps->h->stopping))
        log_info("%s (pid %d): exited after %lu job(s) (a limit): replacing it", p->w->name, (int)pid,
                 atomic_load(&l->jobs));
    record_death(ps, p, pid, cause, crash);
    after_death(ps, p, crash, had_jobs);
}

static void reap(struct sq_procs *ps)
{
    for (int i = 0; i < ps->n; i++) {
        struct sq_proc *p = &ps->v[i];
        int status;
        if (p->pid > 0 && waitpid(p->pid, &status, WNOHANG) == p->pid)
            on_death(ps, p, status);
    }
}

/* ---- limits ----------------------------------------------------------------------------------- */

static void kill_for(struct sq_proc *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kill_for(struct sq_proc *p, const char *fmt, ...)
{
    if (p->kill_why[0])
        return; /* already on its way */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->kill_why, sizeof p->kill_why, fmt, ap);
    va_end(ap);
    log_warn("%s (pid %d): %s: killing it", p->w->name, (int)p->pid, p->kill_why);
    kill(p->pid, SIGKILL);
}

static void check_timeouts(struct sq_proc *p, int64_t now)
{
    struct sq_worker *w = p->w;
    int64_t over = 0;
    sq_slots_lock(w);
    for (int k = 0; k < w->nslots; k++) {
        struct sq_slot *sl = &w->slots[k];
        if (!sl->job_id || !sl->started_at || sl->returned || !sl->timeout_at || now < sl->timeout_at)
            continue;
        /* As the heartbeat's snapshot would at its next round: the attempt
         * has failed ("timed out"), whatever the handler returns now. */
        sl->timed_out = true;
        atomic_store(&sl->stop, 1);
        if (now >= sl->timeout_at + SQ_KILL_AFTER_MS)
            over = sl->timeout_at - sl->started_at;
    }
    sq_slots_unlock(w);
    if (over)
        kill_for(p, "timed out after %" PRId64 "ms: the handler did not return within %dms of being asked to stop",
                 over, SQ_KILL_AFTER_MS);
}

/* Resident bytes of pid, or -1. */
static int64_t resident(struct sq_procs *ps, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    long long size, rss;
    int n = f ? fscanf(f, "%lld %lld", &size, &rss) : 0;
    if (f)
        fclose(f);
    return n == 2 ? (int64_t)rss * ps->page : -1;
}

static void check_memory(struct sq_procs *ps, struct sq_proc *p)
{
    int64_t max = p->w->group->max_memory, rss;
    if (!max || (rss = resident(ps, p->pid)) <= max)
        return;
    if (atomic_load(&p->w->live->busy)) {
        kill_for(p, "exceeded max_memory: %" PRId64 " MiB resident, limit %" PRId64 " MiB", rss >> 20, max >> 20);
    } else if (!p->term_sent) {
        log_info("%s (pid %d): %" PRId64 " MiB resident, over max_memory (%" PRId64 " MiB): recycling it", p->w->name,
                 (int)p->pid, rss >> 20, max >> 20);
        atomic_store(&p->w->live->recycle, true);
        p->term_sent = true;
        kill(p->pid, SIGTERM);
    }
}

static void check_stuck(struct sq_procs *ps, struct sq_proc *p, int64_t now)
{
    struct sq_worker_live *l = p->w->live;
    int64_t beat = atomic_load(&l->beat), poll = atomic_load(&ps->h->poll_ms);
    int64_t deadline = ps->h->cfg->reply_timeout_ms;
    /* As for a thread (session.c): beyond a poll interval, and bounded
     * while reconnecting by the backoff and one connection attempt. */
    int64_t allowance = deadline + poll * 11 / 10 +
                        (atomic_load(&l->down_since) ? SQ_RECONNECT_MAX_MS + SQ_CONNECT_ATTEMPT_MS : 0);
    if (deadline && !atomic_load(&l->busy) && beat && now - beat > allowance)
        kill_for(p, "no reply from the database for %" PRId64 "s (reply_timeout %" PRId64 "ms)",
                 (now - beat - poll * 11 / 10) / 1000, deadline);
}

static void check_limits(struct sq_procs *ps, int64_t now)
{
    bool memory = now >= ps->next_memory;
    if (memory)
        ps->next_memory = now + MEMORY_EVERY_MS;
    for (int i = 0; i < ps->n; i++) {
        struct sq_proc *p = &ps->v[i];
        if (p->pid <= 0 || p->kill_why[0])
            continue;
        check_timeouts(p, now);
        if (memory)
            check_memory(ps, p);
        check_stuck(ps, p, now);
    }
}

/* ---- the supervising thread ------------------------------------------------------------------- */

static bool all_retired(struct sq_procs *ps)
{
    for (int i = 0; i < ps->n; i++)
        if (!ps->v[i].retired)
            return false;
    return true;
}

/* Stopping: ask every process to finish; retire those not running. */
static void stop_all(struct sq_procs *ps)
{
    for (int i = 0; i < ps->n; i++) {
        struct sq_proc *p = &ps->v[i];
        if (p->pid > 0 && !p->term_sent) {
            p->term_sent = true;
            kill(p->pid, SIGTERM);
        } else if (p->pid <= 0 && !p->retired) {
            after_death(ps, p, false, false);
        }
    }
}

static void drain_sigfd(int fd)
{
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si)
        ;
}

static void *supervise(void *arg)
{
    struct sq_procs *ps = arg;
    struct sq_host *h = ps->h;
    sq_host_log_thread(h, "procs");
    /* The session deaths are recorded on, made now: the first crash is then
     * recorded as fast as the next ones. */
    session(ps);
    for (int i = 0; i < ps->n; i++)
        if (!spawn_one(ps, &ps->v[i]))
            ps->v[i].respawn_at = sq_now_ms() + RESPAWN_MAX_MS;
    while (!all_retired(ps)) {
        atomic_store(&h->sup_beat, sq_now_ms());
        struct pollfd pfd[2] = {{.fd = ps->sigfd, .events = POLLIN},
                                {.fd = ps->conn ? PQsocket(ps->conn) : -1, .events = POLLIN}};
        if (poll(pfd, 2, TICK_MS) > 0 && (pfd[0].revents & POLLIN))
            drain_sigfd(ps->sigfd);
        reap(ps);
        keep_session(ps, pfd[1].revents != 0, sq_now_ms());
        if (atomic_load(&ps->killing)) {
            struct timespec ts = {0, 5 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        int64_t now = sq_now_ms();
        if (atomic_load(&h->stopping)) {
            stop_all(ps);
            continue;
        }
        check_limits(ps, now);
        for (int i = 0; i < ps->n; i++) {
            struct sq_proc *p = &ps->v[i];
            if (p->pid <= 0 && now >= p->respawn_at && !spawn_one(ps, p))
                p->respawn_at = now + RESPAWN_MAX_MS;
        }
    }
    atomic_store(&h->sup_beat, 0);
    if (ps->conn)
        sq_session_close(&h->sup, &ps->conn);
    return NULL;
}

/* ---- set-up and the host's calls -------------------------------------------------------------- */

static bool map_shared(struct sq_procs *ps, size_t stride, char *err, size_t errlen)
{
    ps->size = stride * (size_t)ps->n;
    ps->memfd = memfd_create("skipq-workers", MFD_CLOEXEC);
    if (ps->memfd < 0 || ftruncate(ps->memfd, (off_t)ps->size) != 0) {
        snprintf(err, errlen, "cannot create the memory shared with worker processes: %s", strerror(errno));
        return false;
    }
    ps->base = mmap(NULL, ps->size, PROT_READ | PROT_WRITE, MAP_SHARED, ps->memfd, 0);
    if (ps->base == MAP_FAILED) {
        ps->base = NULL;
        snprintf(err, errlen, "cannot map the memory shared with worker processes: %s", strerror(errno));
        return false;
    }
    return true;
}

static bool init_block(struct sq_procs *ps, struct sq_proc *p, uint64_t digest)
{
    struct sq_shm_view v;
    sq_shm_view((char *)ps->base + p->offset, ps->nkinds, &v);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    bool ok = pthread_mutex_init(v.lock, &a) == 0;
    pthread_mutexattr_destroy(&a);
    *v.digest = digest;
    p->w->slots_lock = v.lock;
    p->w->live = v.live;
    p->w->slots = v.slots;
    return ok && sq_kinds_add_counts(ps->h->kinds, v.counts);
}

bool sq_procs_setup(struct sq_host *h, const char *db_flag, char *err, size_t errlen)
{
    int n = 0, maxslots = 1;
    for (int i = 0; i < h->nworkers; i++)
        if (h->workers[i].group->process) {
            n++;
            if (h->workers[i].nslots > maxslots)
                maxslots = h->workers[i].nslots;
        }
    if (n == 0)
        return true;
    struct sq_procs *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->v = calloc((size_t)n, sizeof *ps->v)))
        goto oom;
    h->procs = ps;
    ps->h = h;
    ps->n = n;
    ps->memfd = -1;
    ps->sigfd = -1;
    ps->conn_step = SQ_RECONNECT_MIN_MS;
    ps->conn_seed = (uint32_t)(sq_now_ms() ^ ((int64_t)getpid() << 12));
    ps->page = sysconf(_SC_PAGESIZE);
    pthread_mutex_init(&ps->lock, NULL);
    ps->nkinds = sq_kinds_count(h->kinds);
    ssize_t len = readlink("/proc/self/exe", ps->exe, sizeof ps->exe - 1);
    if (len <= 0) {
        snprintf(err, errlen, "cannot find this program's path to start worker processes: %s", strerror(errno));
        return false;
    }
    ps->exe[len] = '\0'; /* for argv[0] and ps(1); the image comes from /proc/self/exe */
    ps->config_path = realpath(h->cfg->path, NULL);
    ps->db_flag = db_flag ? strdup(db_flag) : NULL;
    if (!ps->config_path || (db_flag && !ps->db_flag)) {
        snprintf(err, errlen, "%s: %s", h->cfg->path, strerror(errno));
        return false;
    }
    size_t stride = sq_shm_stride(ps->nkinds, maxslots);
    if (!map_shared(ps, stride, err, errlen))
        return false;
    uint64_t digest = sq_kinds_digest(h->kinds);
    for (int i = 0, k = 0; i < h->nworkers; i++) {
        if (!h->workers[i].group->process)
            continue;
        struct sq_proc *p = &ps->v[k];
        p->w = &h->workers[i];
        p->offset = stride * (size_t)k++;
        if (!init_block(ps, p, digest))
            goto oom;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if ((ps->sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        snprintf(err, errlen, "signalfd: %s", strerror(errno));
        return false;
    }
    return true;
oom:
    snprintf(err, errlen, "out of memory");
    return false;
}

bool sq_procs_start(struct sq_host *h)
{
    struct sq_procs *ps = h->procs;
    if (!ps)
        return true;
    if (pthread_create(&ps->thread, NULL, supervise, ps) != 0)
        return false;
    ps->started = true;
    return true;
}

void sq_procs_signal(struct sq_host *h, int sig)
{
    struct sq_procs *ps = h->procs;
    if (!ps)
        return;
    pthread_mutex_lock(&ps->lock);
    for (int i = 0; i < ps->n; i++)
        if (ps->v[i].pid > 0)
            kill(ps->v[i].pid, sig);
    pthread_mutex_unlock(&ps->lock);
}

static bool any_alive(struct sq_procs *ps)
{
    pthread_mutex_lock(&ps->lock);
    bool any = false;
    for (int i = 0; i < ps->n; i++)
        any = any || ps->v[i].pid > 0;
    pthread_mutex_unlock(&ps->lock);
    return any;
}

void sq_procs_kill(struct sq_host *h, bool wait)
{
    struct sq_procs *ps = h->procs;
    if (!ps)
        return;
    atomic_store(&ps->killing, true);
    sq_procs_signal(h, SIGKILL);
    int64_t until = sq_now_ms() + 1000;
    while (wait && ps->started && any_alive(ps) && sq_now_ms() < until) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void sq_procs_free(struct sq_host *h)
{
    struct sq_procs *ps = h->procs;
    if (!ps)
        return;
    if (ps->started)
        pthread_join(ps->thread, NULL);
    for (int i = 0; i < ps->n; i++)
        if (ps->v[i].w->ctl >= 0)
            close(ps->v[i].w->ctl);
    /* The workers' slots, locks and progress live in the mapping. */
    for (int i = 0; i < h->nworkers; i++)
        if (h->workers[i].group->process)
            h->workers[i].slots = NULL;
    if (ps->base)
        munmap(ps->base, ps->size);
    if (ps->memfd >= 0)
        close(ps->memfd);
    if (ps->sigfd >= 0)
        close(ps->sigfd);
    pthread_mutex_destroy(&ps->lock);
    free(ps->config_path);
    free(ps->db_flag);
    free(ps->v);
    free(ps);
    h->procs = NULL;
}
