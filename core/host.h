/* host.h -- the state `skipq run` shares between its threads. */
#ifndef SQ_HOST_H
#define SQ_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "db.h"

struct sq_config;
struct sq_plugins;
struct sq_host;

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
};

struct sq_host {
    const struct sq_config *cfg;
    struct sq_plugins *plugins;
    struct sq_dbparams params;
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
};

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
/* Sleep up to ms, or until the host is stopping / the group is woken
 * (g may be NULL: only stopping wakes). */
void sq_host_wait(struct sq_host *h, struct sq_group *g, unsigned long seen_gen, int64_t ms);
/* Wake the idle threads of every group serving `queue` (NULL: all). */
void sq_host_wake(struct sq_host *h, const char *queue);
/* Wake everything: shutdown. */
void sq_host_stop(struct sq_host *h);

/* listen.c */
void *sq_listener_main(void *arg);
/* Backoff for retry n (1-based) of a kind: exponential, capped, jittered. */
int64_t sq_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, uint32_t *seed);

#endif
