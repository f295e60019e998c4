/* host.h -- the state `skipq run` shares between its threads. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/db.h"

struct sq_config;
struct sq_plugins;
struct sq_host;
struct sq_metrics;
struct sq_kinds;

/* Longest wait between two reconnection attempts of a worker. */
#define SQ_RECONNECT_MAX_MS 10000

#define SQ_DUE_MAX 64 /* due times remembered per group */

/* One thread group: a queue and the kinds its threads claim. */
struct sq_group {
    const char *queue;
    const char **kinds; /* kinds with a handler, served by this group */
    size_t nkinds;
    char *kinds_array;  /* the same as a PostgreSQL text[] literal */
    char *leases_array; /* lease per kind (ms), int8[] literal */
    int threads;
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
};

/*
 * A job a worker holds: claimed, running, or finished with its outcome not
 * yet recorded. The heartbeat renews the leases of every occupied slot.
 * Fields are guarded by host->slots_lock, except `stop`.
 */
struct sq_slot {
    int64_t job_id; /* 0: free */
    int64_t execution_id;
    int64_t lease_ms;
    int64_t lease_deadline; /* monotonic ms: past it, assume the lease is lost */
    int64_t timeout_at;     /* monotonic ms of the kind's timeout; 0: none */
    bool timed_out;         /* past timeout_at: lease no longer renewed */
    bool returned;          /* handler returned: no timeout applies any more */
    bool finished;          /* outcome below waits for the next cycle */
    short outcome;          /* skipq_outcome, when finished */
    int64_t delay_ms;       /* retry delay, when finished */
    const char *error;      /* owned by the worker's pending list, when finished */
    atomic_int stop;        /* the handler should stop (lease lost, timeout, shutdown) */
};

struct sq_worker {
    struct sq_host *host;
    int index;
    struct sq_group *group;
    pthread_t thread;
    bool started;
    char name[16];
    char ident[160]; /* host:pid:tN, stored in locked_by and job_executions */
    struct sq_slot *slots; /* group->batch of them */
    int nslots;
    /* progress, for /healthz, the watchdog and the gauges */
    _Atomic int64_t beat;       /* monotonic ms when the thread last went round its loop */
    _Atomic int64_t down_since; /* monotonic ms the connection was lost; 0: connected */
    atomic_bool busy;           /* a handler is running */
    atomic_bool connected;
};

struct sq_host {
    const struct sq_config *cfg;
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
    pthread_cond_t wake;    /* worker exits */
    pthread_mutex_t slots_lock;

    struct sq_kinds *kinds;   /* one per registered kind */
    _Atomic int64_t poll_ms;  /* live copy of [host] poll_interval */
    struct sq_metrics *metrics; /* NULL: [metrics] off */
    atomic_bool workers_built;  /* workers[] is complete: other threads may read it */
    atomic_bool ready;          /* every thread connected once */
    _Atomic int64_t hb_beat, hb_down_since;
    atomic_bool hb_connected, listener_connected;
    atomic_bool deps_wake; /* an enqueue left children to settle: the heartbeat
                              thread runs sq_deps_round without waiting for its round */
};

/*
 * Are the host's threads making progress? A worker counts as stuck when it
 * is not running a handler and has not gone round its loop for stale_ms
 * beyond its poll interval; the heartbeat thread when it has not for
 * stale_ms. With check_db, a database unreachable for stale_ms also fails.
 * On false, `why` says what is wrong.
 */
bool sq_host_progress(struct sq_host *h, int64_t stale_ms, bool check_db, char *why, size_t whylen);
/* reload.c: SIGHUP. Re-read the INI file, apply what can change live, log
 * what needs a restart; a bad file changes nothing. */
void sq_host_reload(struct sq_host *h);

/* Entry point of `skipq run`. Returns the process exit code. */
int sq_host_run(struct sq_config *cfg, const char *db_flag);

/* worker.c: the job services behind sq_host_api */
#include "skipq/plugin.h"
void sq_job_verror(skipq_job *job, const char *fmt, va_list ap);
void sq_job_retry_in(skipq_job *job, int64_t delay_ms);
struct pg_conn *sq_job_conn(skipq_job *job);
int sq_job_should_stop(const skipq_job *job);
void sq_job_vlog(skipq_job *job, int level, const char *fmt, va_list ap);

/* worker.c */
void *sq_worker_main(void *arg);
void *sq_heartbeat_main(void *arg);
/* Sleep up to ms, or until the host is stopping / the group is woken / the
 * group's first due time comes (g may be NULL: only stopping wakes). */
void sq_host_wait(struct sq_host *h, struct sq_group *g, unsigned long seen_gen, int64_t ms);
/* Wake the idle threads of every group serving `queue` (NULL: all). */
void sq_host_wake(struct sq_host *h, const char *queue);
/* Jobs of `queue` (or of group g) fall due at monotonic ms `at`. */
void sq_host_due(struct sq_host *h, const char *queue, int64_t at);
void sq_group_due(struct sq_host *h, struct sq_group *g, int64_t at);
/* Wake everything: shutdown. */
void sq_host_stop(struct sq_host *h);

/* listen.c */
void *sq_listener_main(void *arg);

#endif
