/* kinds.h -- each kind this host runs, resolved once at start-up. */
#ifndef SQ_KINDS_H
#define SQ_KINDS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sq_config;
struct sq_handler;
struct sq_plugins;

/* Upper bounds (seconds) of skipq_handler_duration_seconds; +Inf follows. */
#define SQ_DURATION_BUCKETS 14
extern const double sq_duration_bounds[SQ_DURATION_BUCKETS];

/*
 * One per kind a plugin registered, for the host's lifetime: its handler,
 * its lease, the live retry policy (SIGHUP rewrites it; workers read it per
 * job) and the counters /metrics reports. Everything that changes is
 * atomic: no lock on the job path.
 */
/* What a kind's jobs did here, for /metrics. A worker process counts into
 * a copy in memory it shares with its host (procs.c), which adds the
 * copies up: the totals stay exact across processes and their deaths. */
struct sq_kind_counts {
    atomic_ulong claimed, done, retried, dead, fenced, lost, cancelled, crashed;
    atomic_ulong duration_buckets[SQ_DURATION_BUCKETS + 1]; /* not cumulative; last is +Inf */
    atomic_ullong duration_sum_us;
};

struct sq_kind {
    const char *name;                 /* the registry's copy */
    const struct sq_handler *handler; /* the plugin's, for the host's lifetime */
    int index;                        /* in the table (sorted by name) */
    int64_t lease_ms;                 /* [kind] lease, else [host] lease (a restart changes it) */
    _Atomic int64_t backoff_base_ms, backoff_cap_ms, timeout_ms;
    atomic_int max_attempts; /* 0: schema default */
    atomic_int keep_done;    /* [kind] keep_done: 1, 0, or -1 when not set here */
    struct sq_kind_counts *n; /* &own, or a worker process's shared copy */
    struct sq_kind_counts own;
    atomic_bool paused; /* paused on every queue (skipq.paused), as pause.c last read it */
};

/* Every registered kind, sorted by name. */
struct sq_kinds;

/* Resolve every kind the plugins registered against cfg (NULL: out of
 * memory). Call after the registry is frozen. */
struct sq_kinds *sq_kinds_build(const struct sq_plugins *ps, const struct sq_config *cfg);
void sq_kinds_free(struct sq_kinds *ks);
size_t sq_kinds_count(const struct sq_kinds *ks);
struct sq_kind *sq_kinds_at(struct sq_kinds *ks, size_t i);
/* The kind named `name` (one binary search), or NULL. */
struct sq_kind *sq_kinds_find(struct sq_kinds *ks, const char *name);

/* Count into `shared` (a worker process: an array of count() entries in
 * memory shared with its host) instead of the kinds' own counters. */
void sq_kinds_count_into(struct sq_kinds *ks, struct sq_kind_counts *shared);
/* Also add the counters of `more` (count() entries: a worker process's
 * shared copy) whenever the counters are read (sq_kind_total). Before any
 * thread reads them. False: out of memory. */
bool sq_kinds_add_counts(struct sq_kinds *ks, const struct sq_kind_counts *more);
/* The counter at `off` (offsetof in struct sq_kind_counts) of kind i, summed
 * over this process and its worker processes. */
unsigned long long sq_kind_total(struct sq_kinds *ks, size_t i, size_t off);
/* A stable digest of the kinds' names: a worker process checks that its
 * plugins registered what its host's did. */
uint64_t sq_kinds_digest(const struct sq_kinds *ks);

/* Count a finished handler of k that ran for `us` microseconds. */
void sq_kind_observe(struct sq_kind *k, int64_t us);

/* Backoff for retry n (1-based) of a kind: exponential, capped, jittered. */
int64_t sq_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, uint32_t *seed);
/* The same with k's live policy (k NULL: the defaults). */
int64_t sq_kind_backoff(const struct sq_kind *k, int attempt, uint32_t *seed);

#endif
