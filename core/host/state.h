/*
 * state.h -- what the threads of `skipq run` share: the host, its thread
 * groups, its workers and the slots of the jobs they hold.
 *
 * The runtime's own files (host.c, worker.c, heartbeat.c, complete.c,
 * slots.c, session.c, wake.c, pause.c) read and write these fields under the rules
 * noted beside them; the services around the runtime (metrics, the host
 * registry, the scheduler, the listener, reload) go through the accessors
 * of state.c.
 */
#ifndef SQ_STATE_H
#define SQ_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/db.h"

struct sq_config;
struct sq_plugins;
struct sq_host;
struct sq_metrics;
struct sq_kinds;
struct sq_procs;

/* Longest wait between two reconnection attempts of a session (a worker's
 * or the listener's; session.c, listen.c). Short, because the first session
 * of a host back on the database wakes the others anyway, but a lone
 * session only learns that the database is back by trying: measured under a
 * failover, a 10 s cap made claims resume up to 10 s after the new primary
 * took writes. */
#define SQ_RECONNECT_MAX_MS 2000
#define SQ_RECONNECT_MIN_MS 100
/* What /healthz and the watchdog allow one connection attempt: skipq's
 * default connect_timeout (db.c) for one unreachable host. */
#define SQ_CONNECT_ATTEMPT_MS 10000

#define SQ_DUE_MAX 64 /* due times remembered per group */

/* One thread group: a queue and the kinds its threads claim. */
struct sq_group {
    const char *queue;
    const char **kinds; /* kinds with a handler, served by this group */
    size_t nkinds;
    char *kinds_array;  /* the same as a PostgreSQL text[] literal */
    char *leases_array; /* lease per kind (ms), int8[] literal */
    int threads;        /* handlers running at once */
    int connections;    /* workers (sessions) they are shared among */
    int batch;          /* most jobs one thread claims at once */
    pthread_cond_t wake; /* idle threads of this group wait here (host->lock) */
    atomic_ulong wake_gen; /* bumped by every wake, so one that lands while a
                              thread is claiming is not lost */
    atomic_bool limited;   /* serves a kind in skipq.kind_limits: claim through
                              the limit check (scheduler.c keeps it current) */
    /* Monotonic ms at which jobs of this queue that the host knows of fall
     * due (its own retries, delayed jobs announced by NOTIFY), soonest
     * first; guarded by host->lock. An idle thread wakes for the first one
     * instead of at its next poll. Beyond SQ_DUE_MAX the latest are dropped
     * and left to the poll. */
    int64_t due[SQ_DUE_MAX];
    int ndue;
    /* Pausing (pause.c): the heartbeat thread rewrites these from
     * skipq.paused. A worker reads claims_none and claim_gen (two atomic
     * loads) on every cycle, and copies claim_kinds/claim_leases under
     * host->lock only when claim_gen has moved. */
    atomic_bool queue_paused; /* the queue is paused (for /metrics) */
    atomic_bool claims_none;  /* the queue, or every kind of the group, is paused */
    atomic_ulong claim_gen;   /* bumped whenever claim_kinds changes */
    char *claim_kinds;        /* the kinds not paused, text[] literal; NULL: all of
                                 them (kinds_array); host->lock */
    char *claim_leases;       /* their leases, int8[] literal; host->lock */
    bool process;             /* [queue] isolation = process: its workers are processes (procs.c) */
    int max_jobs;             /* max_jobs_per_worker; 0: none */
    int64_t max_memory;       /* bytes; 0: none */
};

#define SQ_SLOT_ERROR 512 /* bytes of a finished job's error a slot keeps */

/*
 * A job a worker holds: claimed, running, or finished with its outcome not
 * yet recorded. The heartbeat renews the leases of every occupied slot.
 * Fields are guarded by the worker's slots_lock, except `stop`. Nothing in
 * a slot points into a process's memory: in process mode (procs.c) the
 * slots live in memory shared by the worker process and the host, which
 * renews their leases and, when the process dies, reads what it held.
 */
struct sq_slot {
    int64_t job_id; /* 0: free */
    int64_t execution_id;
    int64_t lease_ms;
    int64_t lease_deadline; /* monotonic ms: past it, assume the lease is lost */
    int64_t started_at;     /* monotonic ms the handler started; 0: not started */
    int64_t timeout_at;     /* monotonic ms of the kind's timeout; 0: none */
    int attempt;            /* the job's attempt (for the backoff of a crash) */
    int kind;               /* index in the host's kinds; -1: not registered */
    bool timed_out;         /* past timeout_at: lease no longer renewed */
    bool returned;          /* handler returned: no timeout applies any more */
    bool finished;          /* outcome below waits for the next cycle */
    short outcome;          /* skipq_outcome, when finished */
    int64_t delay_ms;       /* retry delay, when finished */
    char error[SQ_SLOT_ERROR]; /* when finished (truncated copy) */
    atomic_int stop;        /* the handler should stop (lease lost, timeout, shutdown) */
    _Atomic int64_t stop_at; /* monotonic ms the shutdown grace ends; 0: not stopping */
};

/* A worker's progress, for /healthz, the watchdog, the gauges -- and, in
 * process mode, for the host that watches the worker process. */
struct sq_worker_live {
    _Atomic int64_t beat;       /* monotonic ms when the thread last went round its loop */
    _Atomic int64_t down_since; /* monotonic ms the connection was lost; 0: connected */
    atomic_bool busy;           /* a handler is running; with a pool, the worker waits on its handlers */
    atomic_int running;         /* handlers running now (several with a pool): the busy gauge */
    atomic_bool connected;
    atomic_int backend_pid;     /* the server process of the worker's session; 0: none */
    atomic_ulong jobs;          /* handlers run (max_jobs_per_worker) */
    atomic_bool recycle;        /* process mode: the process exits on purpose (a limit) */
};

/* Hand-overs a thread keeps the ids of until it reads them; beyond, it
 * looks for them by its name. */
#define SQ_HANDED_MAX 16

struct sq_worker {
    struct sq_host *host;
    int index;
    struct sq_group *group;
    pthread_t thread;
    bool started;
    char name[16];
    char ident[160]; /* host:pid:wN, stored in locked_by and job_executions */
    struct sq_slot *slots; /* nslots of them: group->batch, or SQ_POOL_PARTS claims' worth with handler threads */
    int nslots;
    int handlers; /* threads running its jobs: 1, the worker's own; more: a pool (pool.c) */
    pthread_mutex_t *slots_lock; /* the host's; process mode: robust, process-shared */
    struct sq_worker_live *live;
    /* The socket of the worker's session, so that a call with no reply can
     * be cut from outside (sq_session_cut); -1: none. conn_lock keeps the
     * descriptor from being closed and reused under the cut. */
    pthread_mutex_t conn_lock;
    int sock;
    int64_t cut_at; /* monotonic ms of the last cut (main thread only) */
    int ctl;        /* process mode: write end of its control pipe (ctl.c); -1; host->ctl_lock */
    /* Jobs an enqueue handed to this thread (sql/060_handoff.sql), as the
     * listener heard of them: their ids, and `handed_lost` when some may
     * have gone unheard (the listener was away, or the list was full).
     * Under host->lock; `handed` says there is something to look at. */
    atomic_bool handed;
    bool handed_lost;
    int nhanded;
    int64_t handed_ids[SQ_HANDED_MAX];
};

struct sq_host {
    const struct sq_config *cfg; /* with several databases, a view of the file: this host's database */
    /* One of several databases served by this process: its name, for logs
     * and metric labels; NULL when the file declares one database. */
    const char *database;
    /* Several databases: this one could not be reached at start-up, so a
     * thread of its own (host.c) retries and starts its threads once it
     * answers; until then the main thread leaves this host alone. */
    atomic_bool deferred;
    atomic_bool start_failed; /* its threads could not be started late: the process stops */
    pthread_t starter;
    bool starter_started;
    struct sq_plugins *plugins;
    struct sq_dbparams params;
    struct sq_dbparams listen_params; /* the listener's: listen_conninfo, else params' */
    struct sq_group *groups;
    size_t ngroups;
    struct sq_worker *workers;
    int nworkers;
    pthread_t heartbeat;
    bool heartbeat_started;
    pthread_t listener;
    bool listener_started;
    char name[96];

    atomic_bool stopping;   /* no new claims */
    atomic_int running;     /* worker threads still alive */
    pthread_mutex_t lock;   /* with each group's `wake`, and `wake`: idle waits and shutdown */
    pthread_cond_t wake;    /* worker exits; a session reconnected */
    pthread_mutex_t slots_lock; /* the slots of the worker threads */
    struct sq_worker_live *lives; /* thread workers' progress (process workers': shared memory) */
    struct sq_procs *procs;     /* the worker processes this host supervises; NULL: none */
    pthread_mutex_t ctl_lock;   /* the workers' ctl descriptors */
    bool in_child;              /* this process is a worker process (wproc.c), not a host */

    struct sq_kinds *kinds;   /* one per registered kind */
    _Atomic int64_t poll_ms;  /* live copy of [host] poll_interval */
    struct sq_metrics *metrics; /* NULL: [metrics] off */
    atomic_bool workers_built;  /* workers[] is complete: other threads may read it */
    atomic_bool ready;          /* every thread connected once */
    _Atomic int64_t hb_beat, hb_down_since;
    struct sq_worker hb;        /* the heartbeat thread's session, as sq_session_cut sees it (conn_lock, sock) */
    struct sq_worker sup;       /* the same for the session procs.c records deaths on */
    _Atomic int64_t sup_beat;   /* monotonic ms the supervising thread last went round its loop */
    atomic_bool hb_connected, listener_connected;
    atomic_bool deps_wake; /* an enqueue left children to settle: the heartbeat
                              thread runs sq_deps_round without waiting for its round */
    atomic_bool paused_wake; /* a '!paused' notification: the heartbeat thread
                                reads skipq.paused without waiting for its round */
    atomic_ulong reconnect_gen; /* bumped (under lock, with a broadcast on `wake`)
                                   whenever a session of the host is made again:
                                   the threads waiting to reconnect try at once */
};

/* ---- accessors (state.c), for the services around the runtime ---- */

const struct sq_config *sq_host_config(const struct sq_host *h);
/* Name the calling thread in log lines, with the host's database when the
 * process serves several. */
void sq_host_log_thread(const struct sq_host *h, const char *name);
/* The database this host serves when the process serves several (for
 * labels); NULL when it serves one. */
const char *sq_host_database(const struct sq_host *h);
/* Waiting for its database since start-up (several databases only). */
bool sq_host_deferred(const struct sq_host *h);
/* Where the heartbeat thread stores its ready-job samples (metrics.c). */
void sq_host_set_metrics(struct sq_host *h, struct sq_metrics *m);
/* The host's name ([host] name, else the machine's). */
const char *sq_host_name(const struct sq_host *h);
/* Where sessions connect: the workers' and the listener's. */
struct sq_dbparams *sq_host_dbparams(struct sq_host *h);
struct sq_dbparams *sq_host_listen_params(struct sq_host *h);
/* Every kind this host runs (kinds.h), with its counters. */
struct sq_kinds *sq_host_kinds(const struct sq_host *h);
struct sq_plugins *sq_host_plugins(const struct sq_host *h);
/* The threads of all groups (jobs that can run at once): more than the
 * workers when threads share sessions. */
int sq_host_nthreads(const struct sq_host *h);
/* Thread groups, by index: their queue and the kinds they serve. */
size_t sq_host_ngroups(const struct sq_host *h);
const char *sq_host_group_queue(const struct sq_host *h, size_t g);
size_t sq_host_group_kinds(const struct sq_host *h, size_t g, const char *const **kinds);
/* Group g serves a kind with limits (claims through the limit check) or
 * not; returns what it was. */
bool sq_host_group_set_limited(struct sq_host *h, size_t g, bool limited);
/* The live [host] poll_interval (SIGHUP rewrites it). */
_Atomic int64_t *sq_host_poll_ms(struct sq_host *h);
bool sq_host_stopping(const struct sq_host *h);
/* Every thread has connected once. */
bool sq_host_ready(const struct sq_host *h);
/* Threads of all groups, how many run a handler now, and how many database
 * sessions of the host are up (workers, heartbeat, listener). */
void sq_host_threads(const struct sq_host *h, int *workers, int *busy, int *sessions);
void sq_host_set_listener_connected(struct sq_host *h, bool up);
/* An enqueue left children to settle: the heartbeat thread runs the
 * dependency round without waiting for its next round. */
void sq_host_want_deps(struct sq_host *h);
/* Take that request (true if there was one). */
bool sq_host_take_deps(struct sq_host *h);
/* A queue or a kind was paused or resumed (or a notification saying so
 * may have been missed): the heartbeat thread reads skipq.paused again
 * without waiting for its next round; take that request. */
void sq_host_want_paused(struct sq_host *h);
bool sq_host_take_paused(struct sq_host *h);
/* Group g's queue is paused, as the host last read skipq.paused. */
bool sq_host_group_paused(const struct sq_host *h, size_t g);
/*
 * Are the host's threads making progress? A worker counts as stuck when it
 * is not running a handler and has not gone round its loop for stale_ms
 * beyond its poll interval; the heartbeat thread when it has not for
 * stale_ms. With check_db, a database unreachable for stale_ms also fails.
 * On false, `why` says what is wrong.
 */
bool sq_host_progress(struct sq_host *h, int64_t stale_ms, bool check_db, char *why, size_t whylen);

#endif
