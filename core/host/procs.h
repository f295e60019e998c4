/* procs.h -- [queue] isolation = process: the host's side of its worker processes. */
#ifndef SQ_PROCS_H
#define SQ_PROCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sq_host;

/* `skipq run` started by a host has this in its environment: which worker
 * it is and where its part of the shared memory lies (wproc.c). */
#define SQ_WPROC_ENV "SKIPQ_WORKER_PROCESS"

/* A handler still running this long after its kind's timeout asked it to
 * stop has its worker process killed. */
#define SQ_KILL_AFTER_MS 1000

/*
 * Before any thread starts: map the memory the host shares with its worker
 * processes and point each process worker's slots, slot lock, progress and
 * kind counters into it. Nothing to do (true) without a process group.
 * `db_flag` is handed to each worker process (--db).
 */
bool sq_procs_setup(struct sq_host *h, const char *db_flag, char *err, size_t errlen);
/* Start the supervising thread, which starts the worker processes. */
bool sq_procs_start(struct sq_host *h);
/* Pass a signal (SIGHUP) on to every worker process. */
void sq_procs_signal(struct sq_host *h, int sig);
/* The grace period is over (or a second signal came): kill every worker
 * process now and, with `wait`, wait (up to a second) until each is
 * reaped, so the slots they held can be released by the caller. */
void sq_procs_kill(struct sq_host *h, bool wait);
/* After the host stopped: join the supervising thread and unmap. */
void sq_procs_free(struct sq_host *h);


/* ---- the memory a host shares with each worker process ---- */

struct sq_kind_counts;
struct sq_slot;
struct sq_worker_live;
/* Where worker process `wi`'s parts lie in the shared mapping at `base`. */
struct sq_shm_view {
    void *lock; /* pthread_mutex_t */
    struct sq_worker_live *live;
    uint64_t *digest;
    struct sq_kind_counts *counts;
    struct sq_slot *slots;
};
/* Bytes one worker's block takes, for nkinds kinds and nslots slots. */
size_t sq_shm_stride(size_t nkinds, int nslots);
void sq_shm_view(void *block, size_t nkinds, struct sq_shm_view *v);

#endif
