/*
 * kinds.c -- one struct per kind, resolved once at start-up.
 *
 * The plugins' registry maps a kind to its handler; the INI's [kind]
 * sections give its lease and retry policy; /metrics counts what its jobs
 * did. All three meet here, in one struct per kind built before any thread
 * starts, so a worker finds everything about a claimed job's kind with one
 * binary search (the table is sorted by name, as the registry is) and reads
 * it without a lock: the fixed parts never change, and the parts SIGHUP may
 * rewrite (reload.c) and the counters are atomics.
 */
#include "host/kinds.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "host/plugin.h"

struct sq_kinds {
    struct sq_kind *v;
    size_t n;
    const struct sq_kind_counts **more; /* worker processes' copies */
    size_t nmore;
};

const double sq_duration_bounds[SQ_DURATION_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                        1,     2.5,  5,     10,   30,  60,   300};

/* Set a kind's live policy from cfg's [kind] section (or the defaults). */
static void policy_set(struct sq_kind *k, const struct sq_config *cfg)
{
    const struct sq_kind_conf *kc = sq_config_kind(cfg, k->name);
    atomic_store(&k->backoff_base_ms, kc ? kc->backoff_base_ms : SQ_DEFAULT_BACKOFF_BASE_MS);
    atomic_store(&k->backoff_cap_ms, kc ? kc->backoff_cap_ms : SQ_DEFAULT_BACKOFF_CAP_MS);
    atomic_store(&k->timeout_ms, kc ? kc->timeout_ms : 0);
    atomic_store(&k->max_attempts, kc ? kc->max_attempts : 0);
    atomic_store(&k->keep_done, kc ? kc->keep_done : -1);
}

struct sq_kinds *sq_kinds_build(const struct sq_plugins *ps, const struct sq_config *cfg)
{
    const char *const *all;
    size_t n = sq_plugins_kinds(ps, &all);
    struct sq_kinds *ks = calloc(1, sizeof *ks);
    if (!ks || !(ks->v = calloc(n ? n : 1, sizeof *ks->v))) {
        free(ks);
        return NULL;
    }
    ks->n = n;
    for (size_t i = 0; i < n; i++) {
        ks->v[i].name = all[i];
        ks->v[i].index = (int)i;
        ks->v[i].n = &ks->v[i].own;
        ks->v[i].handler = sq_plugins_find(ps, all[i]);
        const struct sq_kind_conf *kc = sq_config_kind(cfg, all[i]);
        ks->v[i].lease_ms = kc && kc->lease_ms ? kc->lease_ms : cfg->lease_ms;
        policy_set(&ks->v[i], cfg);
    }
    return ks;
}

void sq_kinds_free(struct sq_kinds *ks)
{
    if (ks) {
        free(ks->v);
        free(ks->more);
    }
    free(ks);
}

void sq_kinds_count_into(struct sq_kinds *ks, struct sq_kind_counts *shared)
{
    for (size_t i = 0; i < ks->n; i++)
        ks->v[i].n = &shared[i];
}

bool sq_kinds_add_counts(struct sq_kinds *ks, const struct sq_kind_counts *more)
{
    const struct sq_kind_counts **m = realloc(ks->more, (ks->nmore + 1) * sizeof *m);
    if (!m)
        return false;
    m[ks->nmore++] = more;
    ks->more = m;
    return true;
}

static unsigned long long counter_at(const struct sq_kind_counts *c, size_t off)
{
    if (off == offsetof(struct sq_kind_counts, duration_sum_us))
        return atomic_load_explicit((const atomic_ullong *)((const char *)c + off), memory_order_relaxed);
    return atomic_load_explicit((const atomic_ulong *)((const char *)c + off), memory_order_relaxed);
}

unsigned long long sq_kind_total(struct sq_kinds *ks, size_t i, size_t off)
{
    unsigned long long t = counter_at(ks->v[i].n, off);
    for (size_t m = 0; m < ks->nmore; m++)
        t += counter_at(&ks->more[m][i], off);
    return t;
}

uint64_t sq_kinds_digest(const struct sq_kinds *ks)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the names, NUL-separated */
    for (size_t i = 0; i < ks->n; i++)
        for (const char *p = ks->v[i].name;; p++) {
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
            if (!*p)
                break;
        }
    return h;
}

size_t sq_kinds_count(const struct sq_kinds *ks)
{
    return ks->n;
}

struct sq_kind *sq_kinds_at(struct sq_kinds *ks, size_t i)
{
    return &ks->v[i];
}

static int cmp_name(const void *key, const void *k)
{
    return strcmp(key, ((const struct sq_kind *)k)->name);
}

struct sq_kind *sq_kinds_find(struct sq_kinds *ks, const char *name)
{
    return bsearch(name, ks->v, ks->n, sizeof *ks->v, cmp_name);
}

void sq_kind_observe(struct sq_kind *k, int64_t us)
{
    if (us < 0)
        us = 0;
    double s = (double)us / 1e6;
    int b = 0;
    while (b < SQ_DURATION_BUCKETS && s > sq_duration_bounds[b])
        b++;
    atomic_fetch_add_explicit(&k->n->duration_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->n->duration_sum_us, (unsigned long long)us, memory_order_relaxed);
}

int64_t sq_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, uint32_t *seed)
{
    int64_t d = base_ms;
    for (int i = 1; i < attempt && d < cap_ms; i++)
        d *= 2;
    if (d > cap_ms)
        d = cap_ms;
    /* Equal jitter: half fixed, half random, so retries of jobs that failed
     * together spread out but never come back sooner than half the delay. */
    int64_t half = d / 2;
    return half + (half > 0 ? (int64_t)(rand_r(seed) % (unsigned)(half + 1 > 0x7fffffff ? 0x7fffffff : half + 1)) : 0);
}

int64_t sq_kind_backoff(const struct sq_kind *k, int attempt, uint32_t *seed)
{
    return sq_backoff_ms(attempt, k ? atomic_load(&k->backoff_base_ms) : SQ_DEFAULT_BACKOFF_BASE_MS,
                         k ? atomic_load(&k->backoff_cap_ms) : SQ_DEFAULT_BACKOFF_CAP_MS, seed);
}
