/*
 * pause.c -- how a host follows skipq.paused (sql/054_pause.sql).
 *
 * An operator pauses a queue (no kind of it is claimed) or a kind (not
 * claimed on any queue) with `skipq pause` or the dashboard. Jobs already
 * running finish and their outcomes are recorded as usual; only new claims
 * stop. Enqueues, retries and cron ticks go on filling the queue.
 *
 * DESIGN
 * - The heartbeat thread reads the set (a handful of rows) on each round,
 *   as it reads skipq.kind_limits, so every host stops claiming within one
 *   heartbeat; skipq.pause() and resume() also NOTIFY '!paused', on which
 *   the listener has the heartbeat thread read it at once (listen.c).
 * - The claim statements take the group's kinds as a text[] parameter, so
 *   a paused kind is simply left out of the array the group claims with:
 *   no extra query and no change to the statements. A group with nothing
 *   left to claim (its queue paused, or every kind of it) does not send a
 *   claim at all: its threads wait as when there is no work, and still
 *   record the outcomes of what they hold.
 * - The hot path stays lock-free: a worker loads claims_none and claim_gen
 *   on each cycle, and only when claim_gen moved does it copy the new
 *   arrays under host->lock. The heartbeat thread frees the old arrays
 *   under that lock, so no worker ever reads freed memory.
 * - A resume (or fewer kinds paused) wakes the group's idle threads, so
 *   claims restart without waiting for their poll.
 */
#include "host/pause.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/kinds.h"
#include "host/queue.h"
#include "host/ctl.h"
#include "host/state.h"
#include "host/wake.h"

/* Nothing but column names: see "SCHEMA-QUALIFIED SQL" in queue.c. */
static const char PAUSED_SQL[] = "SELECT scope, name FROM skipq.paused";

static bool is_paused(PGresult *res, const char *scope, const char *name)
{
    for (int r = 0; r < PQntuples(res); r++)
        if (strcmp(PQgetvalue(res, r, 0), scope) == 0 && strcmp(PQgetvalue(res, r, 1), name) == 0)
            return true;
    return false;
}

static bool same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/*
 * The arrays of g's kinds that are not paused: *kinds NULL when none is
 * paused (the group's own arrays apply), and *left the number not paused.
 * False: out of memory.
 */
static bool unpaused_kinds(struct sq_host *h, struct sq_group *g, PGresult *res, char **kinds, char **leases,
                           size_t *left)
{
    const char **names = calloc(g->nkinds, sizeof *names);
    int64_t *lease = calloc(g->nkinds, sizeof *lease);
    size_t n = 0;
    bool ok = names && lease;
    for (size_t k = 0; ok && k < g->nkinds; k++) {
        if (is_paused(res, "kind", g->kinds[k]))
            continue;
        const struct sq_kind *kr = sq_kinds_find(h->kinds, g->kinds[k]);
        names[n] = g->kinds[k];
        lease[n++] = kr ? kr->lease_ms : h->cfg->lease_ms; /* kr: always (host.c resolved them) */
    }
    *kinds = *leases = NULL;
    *left = n;
    if (ok && n > 0 && n < g->nkinds) {
        *kinds = sq_text_array(names, n);
        *leases = sq_int8_array(lease, n);
        ok = *kinds && *leases;
    }
    free(names);
    free(lease);
    return ok;
}

static void log_group(const struct sq_group *g, bool was_none, bool none, bool queue_paused, const char *kinds)
{
    if (none && !was_none)
        log_info("queue \"%s\": %s; no new claims until it is resumed", g->queue,
                 queue_paused ? "paused" : "every kind it serves here is paused");
    else if (!none && was_none)
        log_info("queue \"%s\": resumed; claiming %s", g->queue, kinds ? kinds : g->kinds_array);
    else if (!none)
        log_info("queue \"%s\": a kind was paused or resumed; claiming %s", g->queue,
                 kinds ? kinds : g->kinds_array);
}

/* Bring group g up to date with the paused set `res`. False: out of memory. */
static bool refresh_group(struct sq_host *h, struct sq_group *g, PGresult *res)
{
    char *kinds, *leases;
    size_t left;
    if (!unpaused_kinds(h, g, res, &kinds, &leases, &left)) {
        free(kinds);
        free(leases);
        return false;
    }
    bool queue_paused = is_paused(res, "queue", g->queue);
    bool none = queue_paused || left == 0;
    atomic_store(&g->queue_paused, queue_paused);
    pthread_mutex_lock(&h->lock);
    bool was_none = atomic_load(&g->claims_none);
    bool changed = !same(kinds, g->claim_kinds);
    if (changed) {
        free(g->claim_kinds);
        free(g->claim_leases);
        g->claim_kinds = kinds;
        g->claim_leases = leases;
        kinds = leases = NULL;
        atomic_fetch_add(&g->claim_gen, 1);
    }
    atomic_store(&g->claims_none, none);
    pthread_mutex_unlock(&h->lock);
    free(kinds);
    free(leases);
    if (was_none != none || changed)
        sq_ctl_send(h, (size_t)(g - h->groups), SQ_CTL_PAUSED, 0); /* its worker processes read skipq.paused again */
    if (was_none != none || (changed && !none)) {
        log_group(g, was_none, none, queue_paused, g->claim_kinds);
        if (!none)
            sq_host_wake(h, g->queue); /* claims restart now, not at the next poll */
    }
    return true;
}

bool sq_pause_refresh(struct sq_host *h, PGconn *conn, char *err, size_t errlen)
{
    PGresult *res = sq_db_query(conn, PAUSED_SQL, 0, NULL, err, errlen);
    if (!res)
        return false;
    for (size_t i = 0; i < sq_kinds_count(h->kinds); i++) {
        struct sq_kind *k = sq_kinds_at(h->kinds, i);
        atomic_store(&k->paused, is_paused(res, "kind", k->name));
    }
    bool ok = true;
    for (size_t g = 0; g < h->ngroups; g++)
        ok = refresh_group(h, &h->groups[g], res) && ok;
    PQclear(res);
    if (!ok)
        snprintf(err, errlen, "out of memory");
    return ok;
}

bool sq_pause_claims(struct sq_host *h, struct sq_group *g, struct sq_claim_kinds *mine)
{
    if (atomic_load(&g->claims_none))
        return false;
    if (atomic_load(&g->claim_gen) == mine->gen)
        return true;
    /* Under the lock the three fields agree: a group that has just lost
     * its last kind has claim_kinds NULL ("all") with claims_none set. */
    pthread_mutex_lock(&h->lock);
    bool none = atomic_load(&g->claims_none);
    char *kinds = g->claim_kinds ? strdup(g->claim_kinds) : NULL;
    char *leases = g->claim_leases ? strdup(g->claim_leases) : NULL;
    bool ok = (kinds != NULL) == (g->claim_kinds != NULL) && (leases != NULL) == (g->claim_leases != NULL);
    unsigned long gen = atomic_load(&g->claim_gen);
    pthread_mutex_unlock(&h->lock);
    if (none || !ok) { /* out of memory: claim nothing rather than a kind that may be paused */
        free(kinds);
        free(leases);
        return false;
    }
    sq_claim_kinds_free(mine);
    mine->kinds = kinds;
    mine->leases = leases;
    mine->gen = gen;
    return true;
}

void sq_claim_kinds_free(struct sq_claim_kinds *mine)
{
    free(mine->kinds);
    free(mine->leases);
    mine->kinds = mine->leases = NULL;
}

void sq_pause_free(struct sq_host *h)
{
    for (size_t g = 0; g < h->ngroups; g++) {
        free(h->groups[g].claim_kinds);
        free(h->groups[g].claim_leases);
        h->groups[g].claim_kinds = h->groups[g].claim_leases = NULL;
    }
}
