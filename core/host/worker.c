/*
 * worker.c -- the worker loop: claim, dispatch, record the outcomes.
 *
 * DESIGN
 * - A worker thread owns one PGconn for its whole life (re-made after a
 *   loss). Each cycle is one round trip (sq_queue_cycle): record the
 *   outcomes of the jobs it just ran and claim the next ones -- one at a
 *   time, or, when the backlog is deep, up to the group's `batch` (the claim
 *   size doubles while claims come back full and quick, falls back when they
 *   come back short, and shrinks to what fits CLAIM_BUDGET_US when the last
 *   claim's jobs took longer to run, so a thread never hoards jobs it cannot
 *   start soon while other threads and hosts could). When nothing
 *   is runnable it waits poll_interval on the host's condition variable,
 *   which shutdown broadcasts, a notification of new jobs wakes, and the
 *   group's list of due times (its own retries, announced delayed jobs)
 *   cuts short for one thread when the first of them comes (wake.c).
 * - Hand-overs (handoff.c): before it waits, an idle thread registers as
 *   waiting, and an enqueue that commits meanwhile claims its job for it;
 *   the thread, woken alone, reads the job and runs it like a claimed one.
 *   Jobs handed to it come first, once the outcomes it holds are recorded.
 *   A thread that claims work of its own takes its registration back first.
 * - Paused (pause.c): a group whose queue or every kind is paused sends no
 *   claim and waits as when there is no work, still recording the outcomes
 *   of the jobs it holds; otherwise it claims only the kinds not paused.
 * - Dispatch: a claimed job's kind is looked up once (kinds.c: handler,
 *   lease, live policy, counters) and the job takes a slot, which holds
 *   its lease until its outcome is recorded (slots.c). The handler gets a
 *   skipq_job whose services are jobapi.c's. Its outcome waits in the
 *   pending list for the next cycle or, when the handler used the job's
 *   transaction, commits here with the handler's writes (complete.c).
 * - A connection failure never ends a thread: it reconnects with capped
 *   backoff (session.c), then gives back the jobs a cycle whose reply was
 *   lost may have claimed, and carries its pending outcomes over.
 * - Stopping: no new claims; claimed jobs not yet started go back at once;
 *   the thread ends when its pending outcomes are recorded.
 */
#include "host/worker.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/complete.h"
#include "host/handoff.h"
#include "host/jobapi.h"
#include "host/kinds.h"
#include "host/pause.h"
#include "host/plugin.h"
#include "host/pool.h"
#include "host/queue.h"
#include "host/session.h"
#include "host/slots.h"
#include "host/state.h"
#include "host/wake.h"

/* Who runs a job: the worker's own thread on its session, or a handler
 * thread of its pool on a session of the thread's own, made on need. */
struct runner {
    struct sq_worker *owner; /* whose session connp is (reconnects, logs) */
    PGconn **connp;
    struct sq_pool *pool; /* NULL: the worker's thread, alone */
    uint32_t *seed;
};

/* A handler thread's session, made when its handler first needs one. */
static PGconn *open_session(struct sq_worker *owner, char *err, size_t errlen)
{
    return sq_session_open_for(owner->host, owner, err, errlen);
}

/* Done with a claimed job outside the pending list. A pool's worker reads
 * its claimed jobs under the pool's lock (held_ids) while handlers run. */
static void forget(const struct runner *r, struct sq_claimed *c)
{
    if (r->pool)
        sq_pool_lock(r->pool);
    sq_claimed_clear(c);
    if (r->pool)
        sq_pool_unlock(r->pool);
}

/*
 * Run the job held in slot k. Its outcome either goes to `pend` (recorded,
 * with its slot freed, by the next cycle) or, for a handler that used the
 * job's transaction, is committed here with the handler's writes.
 */
static void run_job(struct sq_worker *w, const struct runner *r, int k, struct sq_claimed *c, struct sq_kind *kr,
                    struct sq_pending *pend)
{
    PGconn **connp = r->connp;
    struct sq_slot *slot = &w->slots[k];
    const struct sq_handler *hd = kr ? kr->handler : NULL;
    int64_t timeout_ms = kr ? atomic_load(&kr->timeout_ms) : 0;
    if (atomic_load(&slot->stop)) {
        log_warn("job %" PRId64 " (%s): lease lost before the handler started; not running it", c->id, c->kind);
        sq_slot_clear(w, k);
        forget(r, c);
        return;
    }
    struct sq_job_ctx ctx = {
        .pub = {.api = &sq_host_api,
                .id = c->id,
                .execution_id = c->execution_id,
                .queue = w->group->queue,
                .kind = c->kind,
                .payload = c->payload,
                .payload_len = c->payload_len,
                .attempt = c->attempt,
                .max_attempts = c->max_attempts},
        .slot = slot,
        .conn = *connp,
        .lazy = r->pool ? connp : NULL,
        .lazy_owner = r->owner,
        .open = open_session,
        .retry_ms = -1,
    };
    sq_slot_start(w, k, timeout_ms);

    skipq_outcome out;
    if (!hd) { /* cannot happen: the claim filters on registered kinds */
        snprintf(ctx.error, sizeof ctx.error, "no handler registered for kind \"%s\"", c->kind);
        out = SKIPQ_RETRY;
    } else {
        if (!r->pool)
            atomic_store(&w->live->busy, true);
        int64_t t0 = sq_now_us();
        atomic_fetch_add(&w->live->running, 1);
        out = hd->fn(&ctx.pub, hd->userdata);
        atomic_fetch_sub(&w->live->running, 1);
        if (kr)
            sq_kind_observe(kr, sq_now_us() - t0);
        atomic_store(&w->live->beat, sq_now_ms());
        if (!r->pool)
            atomic_store(&w->live->busy, false);
        atomic_fetch_add(&w->live->jobs, 1);
        if (out != SKIPQ_DONE && out != SKIPQ_RETRY && out != SKIPQ_FAIL) {
            snprintf(ctx.error, sizeof ctx.error, "handler returned %d, which is not a skipq_outcome", (int)out);
            out = SKIPQ_RETRY;
        }
    }
    if (sq_slot_returned(w, k) && out != SKIPQ_FAIL) {
        /* Past its timeout the attempt has failed, whatever the handler
         * says: its lease was no longer renewed and the job may already run
         * elsewhere. */
        snprintf(ctx.error, sizeof ctx.error, "timed out after %" PRId64 "ms", timeout_ms);
        out = SKIPQ_RETRY;
    }
    if (out != SKIPQ_DONE && !ctx.error[0])
        snprintf(ctx.error, sizeof ctx.error, "handler returned %s without an error message",
                 out == SKIPQ_FAIL ? "SKIPQ_FAIL" : "SKIPQ_RETRY");

    if (ctx.conn_broken) {
        sq_job_output_save(&ctx, NULL);
        if (*connp)
            sq_session_close(r->owner, connp);
        ctx.lazy = NULL; /* the output is not saved on a new session either */
    } else if (ctx.in_txn) {
        enum sq_complete rc = sq_complete_in_txn(r->owner, connp, c, &out, ctx.error, sizeof ctx.error);
        sq_job_output_save(&ctx, *connp);
        if (rc != SQ_COMPLETE_ERROR) {
            sq_complete_log(kr, *connp, c, rc, ctx.error);
            sq_slot_clear(w, k);
            forget(r, c);
            return;
        }
    }
    sq_job_output_save(&ctx, *connp); /* before the outcome: no-op if saved above */
    int64_t delay = ctx.retry_ms;
    if (delay < 0)
        delay = sq_kind_backoff(kr, c->attempt, r->seed);
    if (r->pool)
        sq_pool_lock(r->pool); /* the pending list is the batch's, shared by its handler threads */
    size_t i = sq_pending_add(pend, c, kr, out, delay, ctx.error);
    sq_slot_finish(w, k, (short)out, pend->o.delays[i], pend->o.errors[i]);
    if (r->pool)
        sq_pool_unlock(r->pool);
}

/* Shutdown began with claimed jobs not started: give them back now. */
static void release_unstarted(struct sq_worker *w, PGconn *conn, struct sq_claimed *jobs, int n)
{
    int64_t *ids = calloc((size_t)n, sizeof *ids), *execs = calloc((size_t)n, sizeof *execs);
    char err[512];
    for (int i = 0; ids && execs && i < n; i++) {
        ids[i] = jobs[i].id;
        execs[i] = jobs[i].execution_id;
    }
    if (ids && execs && conn && sq_queue_release(conn, ids, execs, (size_t)n, err, sizeof err) < 0)
        log_warn("%s: could not release %d unstarted job(s); their leases will expire: %s", w->name, n, err);
    for (int i = 0; i < n; i++)
        sq_claimed_clear(&jobs[i]);
    free(ids);
    free(execs);
}

/*
 * A cycle that died with its connection may have committed a claim whose
 * reply never came: those jobs are running under this worker's name, which
 * will never run them. Give them back now rather than when their leases
 * expire, uncharged (a job with max_attempts = 1 would otherwise end dead
 * without having run). False when the connection was lost again.
 */
static bool recover_lost_claims(struct sq_worker *w, PGconn **connp, const int64_t *held, size_t nheld)
{
    char err[512];
    int n = sq_queue_recover(*connp, w->ident, held, nheld, err, sizeof err);
    if (n > 0)
        log_info("%s: gave back %d job(s) claimed just before the connection was lost", w->name, n);
    if (n >= 0)
        return true;
    if (sq_db_conn_lost(*connp, NULL)) {
        sq_session_close(w, connp);
        return false;
    }
    log_warn("%s: could not give back jobs claimed before the connection was lost; their leases will expire: %s",
             w->name, err);
    return true;
}

/*
 * How long one claim's jobs may take to run, first handler start to last
 * return. A claimed job waits behind its siblings on one thread, holding its
 * lease, while other threads and hosts may sit idle; the budget bounds that
 * wait (and so how unevenly slow jobs are shared) to about 100 ms -- short
 * against a human's patience and a poll interval, long against the ~1 ms
 * round trip a claim costs, which it still amortises to about 1 %.
 */
#define CLAIM_BUDGET_US 100000

/*
 * The size of the next claim, from the last one (`n` jobs of `limit` asked
 * for, run in `elapsed_us`). By depth: empty -> 1, short -> n, full -> twice
 * as many, up to `cap`. By time: a claim that took longer than the budget
 * scales the next to about what fits in it (at least 1), so slow jobs are
 * claimed one at a time and the claim grows again only while full and quick.
 */
static int next_limit(int limit, int n, int cap, int64_t elapsed_us)
{
    if (n == 0)
        return 1;
    if (elapsed_us > CLAIM_BUDGET_US) {
        int64_t fit = (int64_t)n * CLAIM_BUDGET_US / elapsed_us;
        return fit < 1 ? 1 : (int)fit;
    }
    if (n == limit)
        return limit * 2 < cap ? limit * 2 : cap;
    return n;
}

/* A poll interval, +-10% so a host's idle threads do not poll in lockstep. */
static int64_t poll_jittered_ms(struct sq_host *h, uint32_t *seed)
{
    int64_t poll = atomic_load(&h->poll_ms);
    return poll * 9 / 10 + rand_r(seed) % (poll / 5 + 1);
}

/* Nothing to claim: wait a poll interval, or until the group is woken
 * (gen: its wake count read before the claim, so a wake since is not
 * lost). */
static void idle_wait(struct sq_host *h, struct sq_group *g, unsigned long gen, uint32_t *seed)
{
    sq_host_wait(h, g, gen, poll_jittered_ms(h, seed));
}

/* A worker process that has run max_jobs_per_worker jobs stops claiming,
 * records what it holds and exits; its host replaces it at once. Jobs not
 * yet started of the last claim went back above only if stopping came
 * first: the limit is checked between claims, so none is left behind. */
static void recycle_at_limit(struct sq_worker *w)
{
    struct sq_host *h = w->host;
    int max = w->group->max_jobs;
    if (!h->in_child || max <= 0 || atomic_load(&w->live->jobs) < (unsigned long)max || atomic_load(&h->stopping))
        return;
    log_info("%s: ran %lu job(s), max_jobs_per_worker is %d: exiting to be replaced", w->name,
             atomic_load(&w->live->jobs), max);
    atomic_store(&w->live->recycle, true);
    sq_host_stop(h);
}

static void worker_exit(struct sq_host *h)
{
    pthread_mutex_lock(&h->lock);
    atomic_fetch_sub(&h->running, 1);
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

/* ---- a worker with a pool of handler threads ([queue] connections < threads) ---- */

/*
 * One of the worker's claims in flight (SQ_POOL_PARTS of them): while the
 * handler threads run the oldest, the session records another's outcomes
 * and claims its next jobs, so the handlers never wait for a round trip
 * while the backlog is deep. Each part has its own slots (base, base + cap),
 * pending list and jobs.
 *
 * Why more than two: a part is recorded and claimed again only once its
 * last job has returned, and its jobs start as threads come free, so their
 * returns spread over a while. With two parts, every thread must find the
 * other part's jobs and then this part's new ones within one job's time of
 * the straggler; on a busy machine (a 3 ms cycle beside 5 ms handlers) the
 * threads waited (83 % of the ideal at 128 threads, 95 % with three). A
 * third part gives them a second job's time. It is claimed only while jobs
 * are short (a part was done within CLAIM_BUDGET_US of its claim), so slow
 * jobs are not hoarded three claims deep by one host while others could
 * start them.
 */
struct part {
    struct sq_worker *w;
    struct sq_pool *pool;
    int base;
    struct sq_claimed *claimed;
    struct sq_kind **kinds;
    struct sq_pending pend;
    struct sq_batch b;
    int asked;        /* the claim's limit */
    bool active;      /* b is in the pool, not yet waited for */
    int64_t start_us; /* when b went into the pool */
};

static void run_pooled(struct sq_hand *hd, struct sq_batch *b, int i)
{
    struct part *x = b->arg;
    struct runner r = {.owner = &hd->session, .connp = &hd->conn, .pool = x->pool, .seed = &hd->seed};
    run_job(x->w, &r, x->base + i, &x->claimed[i], x->kinds[i], &x->pend);
}

static bool part_init(struct part *x, struct sq_worker *w, int base, int cap)
{
    memset(x, 0, sizeof *x);
    x->w = w;
    x->base = base;
    x->b.arg = x;
    x->claimed = calloc((size_t)cap, sizeof *x->claimed);
    x->kinds = calloc((size_t)cap, sizeof *x->kinds);
    bool ok = x->claimed && x->kinds && sq_pending_init(&x->pend, cap);
    x->pend.slot_base = base;
    return ok;
}

static void part_free(struct part *x)
{
    free(x->claimed);
    free(x->kinds);
    sq_pending_free(&x->pend);
}

/*
 * The size of the next claim of a part that held x->b.n jobs for
 * elapsed_us. By depth, as a thread's claim (next_limit), but by time only
 * beyond one job per handler thread: up to that many jobs start at once, so
 * none waits behind a sibling; more wait their turn in the pool, holding
 * their leases, and are claimed only while the part ran within the claim
 * budget -- scaled, when it did not, to about what fits in it. Why more
 * than one per thread at all: each claim walks from the head of the ready
 * index past the entries of every job claimed since the last vacuum (dead
 * entries stay until VACUUM removes them; autovacuum visits a database once
 * a minute), so a burst drained 64 jobs per claim read 1,400 index and heap
 * pages per claim by its end. Fewer, larger claims walk it less often
 * (bench/README.md, "Claims larger than the pool").
 */
static int part_limit(const struct part *x, int cap, int64_t elapsed_us)
{
    int by_depth = next_limit(x->asked, x->b.n, cap, 0);
    int by_time = next_limit(x->asked, x->b.n, cap, elapsed_us); /* never above by_depth */
    int one_each = by_depth < x->w->handlers ? by_depth : x->w->handlers;
    return by_time > one_each ? by_time : one_each;
}

/* Wait for x's jobs; once the host stops, give back those never started.
 * Returns the size of the next claim; *elapsed_us: how long x was in the
 * pool. */
static int part_finish(struct part *x, PGconn *conn, int cap, int64_t *elapsed_us)
{
    struct sq_worker *w = x->w;
    atomic_store(&w->live->busy, true); /* waiting on handlers, not on the database */
    int taken = sq_pool_wait(x->pool, &x->b);
    atomic_store(&w->live->busy, false);
    atomic_store(&w->live->beat, sq_now_ms());
    *elapsed_us = sq_now_us() - x->start_us;
    x->active = false;
    if (taken < x->b.n) {
        release_unstarted(w, conn, x->claimed + taken, x->b.n - taken);
        sq_slots_clear(w, x->base + taken, x->b.n - taken);
    }
    return part_limit(x, cap, *elapsed_us);
}

/* Does any part but x hold jobs: running, or outcomes to record? */
static bool others_hold(const struct part *pt, const struct part *x)
{
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        if (&pt[i] != x && (pt[i].active || pt[i].pend.o.n))
            return true;
    return false;
}

/*
 * Which part to serve next, with at most `allowed` parts running
 * (parts_allowed):
 * - one that is not running with outcomes still to record (its cycle
 *   failed): at once;
 * - as many running as allowed: the oldest whose jobs are done. Oldest,
 *   not first in the array: on a busy machine parts 0 and 1 are often both
 *   done by the time the session comes back, and picking by index left the
 *   third part's outcomes unrecorded (and its jobs' slots held) for up to
 *   750 ms -- and, measured as a slow part, it cut the parts allowed to
 *   two (parts_allowed), which kept the pipeline short;
 * - fewer running, some free: the backlog was drained (a short claim), so
 *   wait for a running part's jobs -- but give up when new jobs are
 *   announced or a poll interval passes, as an idle thread would, and serve
 *   a free part then, so the threads left free beside a long job take new
 *   work at once instead of when it ends. Stopping: the running parts only;
 * - none running: cur.
 */
static int next_part(struct part *pt, int cur, int allowed, unsigned long *seen, uint32_t *seed)
{
    struct sq_worker *w = pt[0].w;
    struct sq_batch *running[SQ_POOL_PARTS];
    int idx[SQ_POOL_PARTS], n = 0, free_part = -1;
    for (int i = 0; i < SQ_POOL_PARTS; i++) {
        if (pt[i].active) {
            int k = n++; /* insert by when it went into the pool, oldest first */
            for (; k > 0 && pt[idx[k - 1]].start_us > pt[i].start_us; k--) {
                running[k] = running[k - 1];
                idx[k] = idx[k - 1];
            }
            running[k] = &pt[i].b;
            idx[k] = i;
        } else if (pt[i].pend.o.n) {
            return i;
        } else if (free_part < 0) {
            free_part = i;
        }
    }
    if (n == 0)
        return cur;
    int64_t until = INT64_MAX;
    const atomic_ulong *gen = NULL;
    if (free_part >= 0 && n < allowed && !atomic_load(&w->host->stopping)) {
        until = sq_now_ms() + poll_jittered_ms(w->host, seed); /* as an idle thread waits */
        gen = &w->group->wake_gen;
    }
    atomic_store(&w->live->busy, true); /* waiting on handlers, not on the database */
    int first = sq_pool_wait_any(pt[0].pool, running, n, until, gen, *seen);
    atomic_store(&w->live->busy, false);
    atomic_store(&w->live->beat, sq_now_ms());
    return first >= 0 ? idx[first] : free_part;
}

/* How many parts may run at once: all while jobs are short, two once a
 * part took longer than the claim budget (one running, one claimed ahead). */
static int parts_allowed(int64_t elapsed_us)
{
    return elapsed_us > CLAIM_BUDGET_US ? 2 : SQ_POOL_PARTS;
}

static int parts_running(const struct part *pt)
{
    int n = 0;
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        n += pt[i].active;
    return n;
}

/* A part to claim into at once, while the backlog is deep: a free one,
 * unless `allowed` parts run already. -1: none. */
static int part_ahead(const struct part *pt, int allowed)
{
    if (parts_running(pt) >= allowed)
        return -1;
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        if (!pt[i].active)
            return i;
    return -1;
}

/* The jobs this worker holds besides those a lost cycle of x may have
 * claimed: every part's outcomes and the other parts' claimed jobs (an id
 * may appear twice: a returned job is in both). */
static size_t held_ids(struct part *pt, const struct part *x, int64_t *ids)
{
    size_t n = 0;
    sq_pool_lock(x->pool); /* running parts' handlers move jobs into their pending lists */
    for (int p = 0; p < SQ_POOL_PARTS; p++) {
        const struct part *y = &pt[p];
        for (size_t i = 0; i < y->pend.o.n; i++)
            ids[n++] = y->pend.o.ids[i];
        for (int i = 0; y != x && y->active && i < y->b.n; i++)
            if (y->claimed[i].id)
                ids[n++] = y->claimed[i].id;
    }
    sq_pool_unlock(x->pool);
    return n;
}

static void *pool_main(struct sq_worker *w)
{
    struct sq_host *h = w->host;
    struct sq_group *g = w->group;
    uint32_t seed = (uint32_t)(time(NULL) ^ (getpid() << 8) ^ (uint32_t)w->index * 2654435761u);
    char err[512];
    sq_host_log_thread(w->host, w->name);
    int cap = w->group->batch; /* per part: the part's arrays and slots */
    struct part pt[SQ_POOL_PARTS];
    int64_t *held = calloc((size_t)w->nslots * 2, sizeof *held); /* outcomes and claims of every part */
    bool ok = held != NULL;
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        ok = part_init(&pt[i], w, i * cap, cap) && ok; /* every one, for part_free */
    struct sq_pool *pool = ok ? sq_pool_start(w, w->handlers, run_pooled) : NULL;
    if (!pool) {
        log_error("%s: out of memory, or no thread for its %d handlers", w->name, w->handlers);
        goto out;
    }
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        pt[i].pool = pool;
    PGconn *conn = NULL;
    int limit = 1, cur = 0;
    int64_t elapsed_us = 0; /* how long the last part finished was in the pool */
    unsigned long seen = 0; /* the group's wake count at the last claim */
    bool reply_lost = false, claim_ahead = false;
    struct sq_claim_kinds ck = {0};
    for (;;) {
        atomic_store(&w->live->beat, sq_now_ms());
        if (!claim_ahead)
            cur = next_part(pt, cur, parts_allowed(elapsed_us), &seen, &seed);
        claim_ahead = false;
        struct part *x = &pt[cur];
        if (x->active)
            limit = part_finish(x, conn, cap, &elapsed_us);
        bool stopping = atomic_load(&h->stopping);
        bool busy = others_hold(pt, x); /* their lists are their handlers' while they run */
        if (stopping && x->pend.o.n == 0) {
            if (busy)
                continue;
            break;
        }
        bool idle = x->pend.o.n == 0 && !busy;
        if (!conn && !(conn = sq_session_reconnect(w, idle)))
            break;
        if (reply_lost && !recover_lost_claims(w, &conn, held, held_ids(pt, x, held)))
            continue;
        reply_lost = false;
        unsigned long gen = seen = atomic_load(&g->wake_gen);
        bool claims = !stopping && sq_pause_claims(h, g, &ck);
        /* Jobs turned slow with every part running: x only records its
         * outcomes, so no more than parts_allowed() parts hold jobs. */
        bool room = parts_running(pt) < parts_allowed(elapsed_us);
        if (!stopping && !(claims && room) && x->pend.o.n == 0) {
            if (busy)
                continue;
            limit = 1;
            idle_wait(h, g, gen, &seed);
            continue;
        }
        int ask = claims && room ? limit : 0;
        int n = sq_queue_cycle(conn, g->queue, ck.kinds ? ck.kinds : g->kinds_array,
                               ck.kinds ? ck.leases : g->leases_array, w->ident, ask, atomic_load(&g->limited),
                               &x->pend.o, x->claimed, x->pend.applied, err, sizeof err);
        if (n < 0) {
            if (sq_db_conn_lost(conn, NULL)) {
                log_warn("%s: connection lost: %s", w->name, err);
                sq_session_close(w, &conn);
                sq_session_mark(w, false);
                x->pend.retried = x->pend.o.n > 0;
                reply_lost = true;
                continue;
            }
            log_error("%s: claim failed: %s", w->name, err);
            sq_pending_flush_one_by_one(w, &conn, &x->pend);
            sq_host_wait(h, NULL, 0, atomic_load(&h->poll_ms));
            continue;
        }
        sq_pending_report(w, conn, &x->pend);
        sq_slots_clear(w, x->base, cap);
        sq_pending_clear(&x->pend);
        if (n == 0) {
            if (room)
                limit = 1; /* not when x only recorded outcomes to make room */
            if (!busy && !stopping)
                idle_wait(h, g, gen, &seed); /* else: record the other parts' jobs when they are done */
            continue;
        }
        for (int k = 0; k < n; k++) {
            struct sq_kind *kr = x->kinds[k] = sq_kinds_find(h->kinds, x->claimed[k].kind);
            if (kr)
                atomic_fetch_add_explicit(&kr->n->claimed, 1, memory_order_relaxed);
            sq_slot_take(w, x->base + k, &x->claimed[k], kr ? kr->index : -1, kr ? kr->lease_ms : h->cfg->lease_ms);
        }
        x->b.n = n;
        x->asked = ask;
        x->active = true;
        x->start_us = sq_now_us();
        sq_pool_submit(pool, &x->b);
        /* A full claim means a deep backlog: claim the next jobs now, while
         * these run. A short one drained it: wait for jobs to finish first
         * (or for new jobs, next_part). */
        int ahead = n == ask ? part_ahead(pt, parts_allowed(elapsed_us)) : -1;
        if (ahead >= 0) {
            cur = ahead;
            claim_ahead = true;
        }
    }
    if (conn)
        sq_session_close(w, &conn);
    sq_claim_kinds_free(&ck);
out:
    atomic_store(&w->live->connected, false);
    sq_pool_free(pool);
    for (int i = 0; i < SQ_POOL_PARTS; i++)
        part_free(&pt[i]);
    free(held);
    worker_exit(h);
    return NULL;
}

/*
 * Run the n jobs a claim (or a hand-over) brought, in order, each in its
 * slot; their outcomes go to pend. Stopping, the jobs not yet started go
 * back at once. Returns how long they took (us).
 */
static int64_t run_batch(struct sq_worker *w, PGconn **connp, uint32_t *seed, struct sq_claimed *claimed,
                         struct sq_kind **kinds, int n, struct sq_pending *pend)
{
    struct sq_host *h = w->host;
    for (int k = 0; k < n; k++) {
        struct sq_kind *kr = kinds[k] = sq_kinds_find(h->kinds, claimed[k].kind);
        if (kr)
            atomic_fetch_add_explicit(&kr->n->claimed, 1, memory_order_relaxed);
        int64_t lease = kr ? kr->lease_ms : h->cfg->lease_ms;
        if (claimed[k].lease_ms > 0 && claimed[k].lease_ms < lease)
            lease = claimed[k].lease_ms; /* handed over with less than a whole lease left */
        sq_slot_take(w, k, &claimed[k], kr ? kr->index : -1, lease);
    }
    int k = 0;
    int64_t t0 = sq_now_us();
    struct runner self = {.owner = w, .connp = connp, .seed = seed};
    for (; k < n && !atomic_load(&h->stopping); k++)
        run_job(w, &self, k, &claimed[k], kinds[k], pend);
    int64_t elapsed = sq_now_us() - t0;
    if (k < n) {
        release_unstarted(w, *connp, claimed + k, n - k);
        for (int i = k; i < n; i++)
            sq_slot_clear(w, i);
    }
    recycle_at_limit(w);
    return elapsed;
}

void *sq_worker_main(void *arg)
{
    struct sq_worker *w = arg;
    if (w->handlers > 1)
        return pool_main(w);
    struct sq_host *h = w->host;
    struct sq_group *g = w->group;
    uint32_t seed = (uint32_t)(time(NULL) ^ (getpid() << 8) ^ (uint32_t)w->index * 2654435761u);
    char err[512];
    sq_host_log_thread(w->host, w->name);
    int cap = w->nslots;
    struct sq_claimed *claimed = calloc((size_t)cap, sizeof *claimed);
    struct sq_kind **kinds = calloc((size_t)cap, sizeof *kinds); /* claimed[k]'s */
    struct sq_pending pend;
    memset(&pend, 0, sizeof pend);
    if (!claimed || !kinds || !sq_pending_init(&pend, cap)) {
        log_error("%s: out of memory", w->name);
        free(claimed);
        free(kinds);
        sq_pending_free(&pend);
        worker_exit(h);
        return NULL;
    }
    PGconn *conn = NULL;
    int limit = 1;
    bool reply_lost = false; /* a cycle died with its connection: it may have claimed */
    struct sq_claim_kinds ck = {0}; /* the kinds to claim, when some are paused */
    struct sq_handoff ho = {0};     /* its registration for hand-overs at enqueue */
    for (;;) {
        atomic_store(&w->live->beat, sq_now_ms());
        bool stopping = atomic_load(&h->stopping);
        if (stopping && pend.o.n == 0)
            break;
        /* With outcomes to record, keep trying even while stopping: the
         * main thread ends the process when the grace period is over. */
        if (!conn && !(conn = sq_session_reconnect(w, pend.o.n == 0)))
            break;
        if (reply_lost && ho.registered) {
            /* The lost cycle was an idle thread's claim: what it may have
             * claimed runs under its name like what an enqueue handed it
             * meanwhile, and is read the same way, not given back. */
            ho.look = true;
            reply_lost = false;
        }
        if (reply_lost && !recover_lost_claims(w, &conn, pend.o.ids, pend.o.n))
            continue;
        reply_lost = false;
        /* A worker process has no heartbeat thread: it reads skipq.paused
         * itself, at start and when its host says it changed. */
        if (h->in_child && sq_host_take_paused(h) && !sq_pause_refresh(h, conn, err, sizeof err))
            log_warn("%s: cannot read the paused queues and kinds (what was paused stays paused): %s", w->name, err);
        unsigned long gen = atomic_load(&g->wake_gen); /* before the pause check: a resume's wake is not lost */
        bool claims = !stopping && sq_pause_claims(h, g, &ck);
        /* Jobs an enqueue handed to this thread: they run under its name
         * already, so they come first -- once the outcomes it holds are
         * recorded (their slots are the ones the handed jobs take). */
        bool handed = !stopping && sq_handoff_pending(w, &ho);
        if (handed && pend.o.n == 0) {
            int n = sq_handoff_take(w, &ho, conn, claimed, cap, err, sizeof err);
            if (n > 0) {
                run_batch(w, &conn, &seed, claimed, kinds, n, &pend);
                continue;
            }
            if (n < 0 && sq_db_conn_lost(conn, NULL)) { /* a read: it claimed nothing, and looks again */
                log_warn("%s: connection lost: %s", w->name, err);
                sq_session_close(w, &conn);
                sq_session_mark(w, false);
                continue;
            }
            if (n < 0)
                log_warn("%s: could not read the jobs handed to it (they are looked for again): %s", w->name, err);
            handed = false;
        }
        const char *kinds_now = ck.kinds ? ck.kinds : g->kinds_array;
        const char *leases_now = ck.kinds ? ck.leases : g->leases_array;
        if (!stopping && !claims && pend.o.n == 0) {
            /* Paused, with no outcome to record: nothing to send. */
            sq_handoff_pause(w, &ho, conn);
            limit = next_limit(limit, 0, cap, 0);
            idle_wait(h, g, gen, &seed);
            continue;
        }
        int n = sq_queue_cycle(conn, g->queue, kinds_now, leases_now, w->ident, claims && !handed ? limit : 0,
                               atomic_load(&g->limited), &pend.o, claimed, pend.applied, err, sizeof err);
        if (n < 0) {
            if (sq_db_conn_lost(conn, NULL)) {
                log_warn("%s: connection lost: %s", w->name, err);
                sq_session_close(w, &conn);
                sq_session_mark(w, false);
                pend.retried = pend.o.n > 0;
                reply_lost = true;
                continue;
            }
            log_error("%s: claim failed: %s", w->name, err);
            sq_pending_flush_one_by_one(w, &conn, &pend);
            sq_host_wait(h, NULL, 0, atomic_load(&h->poll_ms));
            continue;
        }
        sq_pending_report(w, conn, &pend);
        sq_slots_clear(w, 0, w->nslots); /* before the strings the slots point to */
        sq_pending_clear(&pend);
        if (n == 0) {
            if (handed)
                continue; /* its outcomes are recorded: now the jobs handed to it */
            limit = next_limit(limit, 0, cap, 0);
            if (!stopping && claims) {
                sq_handoff_idle(w, &ho, conn, kinds_now, leases_now);
                sq_worker_wait(w, gen, poll_jittered_ms(h, &seed));
            } else if (!stopping) {
                idle_wait(h, g, gen, &seed);
            }
            continue;
        }
        /* Before its own jobs run: no enqueue hands it more meanwhile (and
         * what one did joins this batch). */
        int claimed_n = n;
        n = sq_handoff_claimed(w, &ho, conn, claimed, n, cap);
        limit = next_limit(limit, claimed_n, cap, run_batch(w, &conn, &seed, claimed, kinds, n, &pend));
    }
    sq_handoff_exit(w, &ho, conn);
    if (conn)
        sq_session_close(w, &conn);
    atomic_store(&w->live->connected, false);
    sq_claim_kinds_free(&ck);
    free(claimed);
    free(kinds);
    sq_pending_free(&pend);
    worker_exit(h);
    return NULL;
}
