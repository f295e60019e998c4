/*
 * queue.c -- every statement of the job protocol, in one place.
 *
 * DESIGN
 * - Claim is one statement, so one round trip and one short transaction:
 *   pick (FOR NO KEY UPDATE SKIP LOCKED, in a MATERIALIZED CTE so the
 *   planner cannot re-run it), insert the job_executions rows, and mark the
 *   jobs running with attempts + 1. The attempt is counted when the job is
 *   claimed, so a handler that kills the process still uses up an attempt and
 *   a poison job ends dead instead of looping.
 *   NO KEY UPDATE, not UPDATE: a foreign key that references a job (an
 *   application's table may have one) takes KEY SHARE on the job row, which
 *   FOR UPDATE SKIP LOCKED would silently skip.
 * - Every write a worker makes after the claim is fenced on
 *   (id, current_execution_id, status = 'running'). A worker whose lease
 *   expired and whose job was reclaimed changes nothing: 0 rows.
 * - Time is the database's: now() everywhere, never the host clock.
 * - Every statement has a name in enum sq_stmt; the table `statements`
 *   gives its text. They are prepared once per session (sq_queue_prepare),
 *   and must be prepared again after a reconnect -- all but the rare ones
 *   (the fencing read-backs), which always go unnamed. Behind a pooler in
 *   transaction mode a session is not ours between statements, so there
 *   (sq_queue_use_unnamed) every statement goes as an unnamed one with the
 *   same text instead: run_stmt() is the one place that chooses.
 * - Outcomes are written by one statement, OUTCOMES_SQL: in each cycle
 *   (sent with the next claim) and on its own, where a single completion
 *   is a batch of one. OUTCOMES_DROPPING_SQL is its form for a batch of
 *   done jobs that all may leave skipq.jobs (keep_done = off).
 *
 * SCHEMA-QUALIFIED SQL (here and in every statement skipq sends)
 * Built-in functions, operators and types are named by schema:
 * pg_catalog.now(), a OPERATOR(pg_catalog.=) b, $1::pg_catalog.int8[],
 * pg_catalog.interval '1 millisecond'. Why: PostgreSQL resolves an
 * unqualified name along the session's search_path, and prefers pg_catalog
 * only among equally good matches. Under the default path ("$user", public)
 * a role that may create in public can plant an exact match, say
 * public.*(bigint, interval), that beats the built-in (which needs a cast)
 * and runs as whoever runs skipq -- a superuser running `skipq top`, say.
 * Under a path the database owner set to "public, pg_catalog" even a
 * duplicate of an exact built-in wins. Direct sessions are pinned to
 * search_path = pg_catalog, pg_temp when they start (db.c), but behind a
 * pooler in transaction mode nothing can be set on a session, and the
 * statements run on whatever path the server's settings give: only
 * qualified names are safe there. So:
 * - operators hide in syntax too: IN (...) and = ANY, BETWEEN, CASE x WHEN,
 *   IS DISTINCT FROM, NULLIF, LIKE and JOIN ... USING all look `=` (or
 *   `<`, `~~`) up by name. Write x OPERATOR(pg_catalog.=) ANY (ARRAY[...])
 *   for an IN list, CASE WHEN x OPERATOR(pg_catalog.=) ... for CASE x WHEN,
 *   JOIN ... ON for USING;
 * - OPERATOR(...) binds as "any other operator": looser than + - * /, left
 *   to right, tighter than comparisons. Parenthesise arithmetic operands;
 * - syntax that the parser turns into pg_catalog calls itself is safe as
 *   it is: coalesce, least, greatest, extract(... FROM ...), AT TIME ZONE,
 *   a multi-argument unnest in FROM (written here as ROWS FROM (...)), and
 *   the keyword types int, numeric, interval, timestamp;
 * - names in schema skipq are qualified as they always were, and every
 *   function there pins its own search_path.
 * The plans are those of the unqualified text: the names resolve to the
 * same objects.
 */
#include "host/queue.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/db.h"

/*
 * Renew leases without ever waiting: a row locked right now is being
 * completed by its own worker or swept by another host, so it is skipped
 * ('k': still this execution's as of the snapshot, outcome unknown) rather
 * than waited for -- waiting here deadlocked against batched completions.
 * 'x' rows were extended; an execution in neither set is no longer ours.
 */
static const char HEARTBEAT_SQL[] =
    "WITH h AS MATERIALIZED ("
    "  SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($2::pg_catalog.int8[]),"
    "                           pg_catalog.unnest($3::pg_catalog.int8[])) AS h(id, eid, ms)"
    /* Each job read by primary key, with no test of status in the scan: a
     * generic plan would otherwise read every running job through jobs_lease
     * (see "How these statements reach rows", below). Status is tested
     * above the scans: on the row locked, and in `seen`, a fence the test
     * cannot be pushed through. */
    "), lk AS MATERIALIZED ("
    "  SELECT j.id, h.ms, j.status FROM skipq.jobs j JOIN h ON h.id OPERATOR(pg_catalog.=) j.id"
    "   WHERE j.current_execution_id OPERATOR(pg_catalog.=) h.eid"
    "   ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED"
    "), up AS ("
    "  UPDATE skipq.jobs j SET lease_expires_at = pg_catalog.now() OPERATOR(pg_catalog.+)"
    "                                             (lk.ms OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond')"
    "    FROM lk WHERE j.id OPERATOR(pg_catalog.=) lk.id AND lk.status OPERATOR(pg_catalog.=) 'running'"
    "  RETURNING j.current_execution_id AS eid"
    "), seen AS MATERIALIZED ("
    "  SELECT h.eid, j.status FROM h JOIN skipq.jobs j ON j.id OPERATOR(pg_catalog.=) h.id"
    "   WHERE j.current_execution_id OPERATOR(pg_catalog.=) h.eid"
    ")"
    " SELECT 'x', eid FROM up"
    " UNION ALL"
    " SELECT 'k', eid FROM seen WHERE status OPERATOR(pg_catalog.=) 'running'";

/* Rows whose worker is mid-completion are locked, so skipped: the worker
 * decides. The re-check under the row lock sees a lease extended meanwhile. */
static const char REAP_SQL[] =
    "WITH stale AS MATERIALIZED ("
    "  SELECT id, current_execution_id AS eid, attempts OPERATOR(pg_catalog.>=) max_attempts AS spent"
    "    FROM skipq.jobs"
    "   WHERE status OPERATOR(pg_catalog.=) 'running' AND lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.now()"
    "   ORDER BY lease_expires_at LIMIT $1"
    "   FOR NO KEY UPDATE SKIP LOCKED"
    "), lost AS ("
    "  UPDATE skipq.job_executions e SET status = 'lost', finished_at = pg_catalog.now(),"
    "         error = 'lease expired: the worker stopped renewing it (crashed, hung or cut off)'"
    "    FROM stale WHERE e.job_id OPERATOR(pg_catalog.=) stale.id AND e.id OPERATOR(pg_catalog.=) stale.eid"
    "     AND e.status OPERATOR(pg_catalog.=) 'running'"
    "  RETURNING e.id)"
    " UPDATE skipq.jobs j"
    "    SET status = CASE WHEN stale.spent THEN 'dead' ELSE 'pending' END,"
    "        finished_at = CASE WHEN stale.spent THEN pg_catalog.now() END,"
    "        lease_expires_at = NULL,"
    "        last_error = pg_catalog.format('lease expired on attempt %s of %s (worker %s)',"
    "                                       j.attempts, j.max_attempts, coalesce(j.locked_by, '?'))"
    "   FROM stale WHERE j.id OPERATOR(pg_catalog.=) stale.id"
    " RETURNING j.kind";

/* An attempt cut short by a shutdown does not use up the job's budget: the
 * execution row stays (attempts == number of executions) and max_attempts
 * grows by one. As in the outcomes, the fence reads the rows lk locked,
 * not the scan ("How these statements reach rows", below, says why). */
static const char RELEASE_SQL[] =
    "WITH lk AS MATERIALIZED ("
    "  SELECT h.id, h.eid, j.status, j.current_execution_id AS holder"
    "    FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($2::pg_catalog.int8[]))"
    "         AS h(id, eid)"
    "    JOIN skipq.jobs j ON j.id OPERATOR(pg_catalog.=) h.id"
    "   ORDER BY j.id FOR NO KEY UPDATE OF j"
    "), r AS ("
    "  UPDATE skipq.jobs j SET status = 'pending', run_at = pg_catalog.now(), lease_expires_at = NULL,"
    "         max_attempts = j.max_attempts OPERATOR(pg_catalog.+) 1,"
    "         last_error = 'interrupted: the host shut down before the handler finished'"
    "    FROM lk h WHERE j.id OPERATOR(pg_catalog.=) h.id"
    "     AND h.holder OPERATOR(pg_catalog.=) h.eid AND h.status OPERATOR(pg_catalog.=) 'running'"
    "  RETURNING j.id, h.eid)"
    " UPDATE skipq.job_executions e SET status = 'interrupted', finished_at = pg_catalog.now(),"
    "        error = 'interrupted: the host shut down before the handler finished'"
    "   FROM r WHERE e.job_id OPERATOR(pg_catalog.=) r.id AND e.id OPERATOR(pg_catalog.=) r.eid"
    " RETURNING e.id";

/*
 * One round trip and one transaction per worker cycle: record the
 * outcomes of the jobs the worker finished (id, execution id, outcome 0
 * done / 1 retry / 2 fail / 3 crashed -- a retry whose execution says its
 * worker process died, written by the supervisor (procs.c) --, retry delay
 * ms, error) -- each fenced on (id, current_execution_id, status =
 * 'running') -- and then claim up to $5 more, within a budget of payload
 * bytes (sq_queue_claim is this with no outcomes).
 * The claim: pick (FOR NO KEY UPDATE SKIP LOCKED in a MATERIALIZED CTE),
 * insert the execution rows, mark the jobs running.
 * Rows tagged 'f' are the outcomes that applied (absent: fenced); rows
 * tagged 'c' are the new claims.
 *
 * Two statements in one pipeline, not one statement (sq_queue_cycle): the
 * outcomes (OUTCOMES_SQL), then the claim (CLAIM_NEXT_SQL), with one Sync,
 * so one commit. The pick must read a snapshot taken after the outcomes
 * were written. In one statement it read the statement's snapshot, taken
 * before a batch of outcomes that can take tens of milliseconds, and in
 * that time other sessions claim and commit the very jobs it would pick
 * first. Those still look pending to it, so SKIP LOCKED does not skip
 * them: it follows each to its newest version, locks that (a job another
 * worker now runs), finds it no longer pending and passes on -- keeping
 * the lock until it commits. Every such job cost a row lock and a recheck,
 * and the worker running it then waited for this transaction before it
 * could record its outcome. Three sessions draining a deep queue wrote
 * 0.5 to 0.8 more WAL records per job that way (bench/README.md). A
 * group that serves limited kinds sends its claim (CLAIM_LIMITED_SQL) the
 * same way.
 *
 * How these statements reach rows of skipq.jobs by id. The host's
 * sessions plan them once, generically (session.c), so the planner never
 * knows how many ids an array holds and guesses a handful; every shape
 * here stays cheap whatever the true count:
 * - a list of ids is read with "id = ANY(array)" on the primary key (a
 *   hash join against a CTE once scanned the whole table instead);
 * - or one set of rows (the arrays unnested) is joined to the table by
 *   primary key, one probe per row. (A pooled session plans with the true
 *   counts, and may hash a small table whole instead: the planner turns to
 *   probes as the table grows, at about 200,000 jobs for a batch of
 *   1,000.) Unnested arrays, not a CTE read directly, when the CTE's rows
 *   come from skipq.jobs: the planner sizes such a CTE from the table's
 *   statistics (the claim's `ins`, from its pick: a tenth of the pending
 *   jobs), so it may merge the CTE with the whole table instead, while a
 *   function scan is a handful of rows whatever the statistics say. Never
 *   two such sets and the table in one join: a nested loop then reads one
 *   set again for every row of the other (batch x batch). Nor "id =
 *   ANY(array)" beside a join on id: each probe then sorts the whole array
 *   again, or, when the planner believes the set holds one row, reads every
 *   id of the array for each one (the claim did that while the statistics
 *   said almost every job was done: a batch of 1,000 read 1,000 index
 *   entries per job, and a burst drained at 3,089 jobs/s instead of about
 *   30,000; bench/README.md);
 * - and, next to those, no test of status that a partial index's
 *   predicate implies (jobs_lease: status = 'running'): the plan may then
 *   read every running job to find the batch's. The outcomes and the
 *   heartbeat test status on the rows they locked, not in the scan. (The
 *   statements that look for running jobs as such, the lease sweep and
 *   the recovery, read jobs_lease on purpose; the pick reads jobs_ready.)
 *
 * Jobs with an ordering_key run one at a time per key, in id order. The
 * pick's NOT EXISTS keeps all but the first unfinished job of a key out,
 * but it reads the statement's snapshot, which can be stale: a claim that
 * committed after this statement began is invisible to it, and so is a
 * job of the key that an older transaction committed late. So the
 * exclusion is decided by a row lock instead: the claim takes the key's
 * row in skipq.ordering_keys (ON CONFLICT waits for an uncommitted taker
 * and then sees the latest committed row, not the snapshot), and only the
 * job named there may run. The row goes when that job ends (trigger
 * jobs_ended, sql/009); a job waiting to retry keeps it. Rows picked but
 * refused stay pending. Jobs without a key skip both steps: one IS NULL
 * test each. A key is held per queue (sql/050): both steps look only at
 * the claiming queue's jobs and rows.
 *
 * The claims share everything but the pick: CLAIM_SQL, CLAIM_NEXT_SQL and
 * CLAIM_ONE_SQL for groups that serve no limited kind, CLAIM_LIMITED_SQL
 * and CLAIM_LIMITED_NEXT_SQL (below) for groups that do.
 *
 * The outcome statement ($1..$5: ids, execution ids, outcomes, retry
 * delays, errors) claims nothing. A single completion is a batch of one:
 * the autocommit completion, the done marker inside a handler's
 * transaction (which then commits with the handler's writes), and
 * shutdown's recording of outcomes whose handlers had returned. It runs
 * before the claim of its cycle, and takes its row locks (the only ones a
 * cycle waits for) first: the claim's SKIP LOCKED pick never waits but may
 * keep locks on rows it rejected, and claiming first deadlocked two cycles
 * against each other.
 *
 * A done job of a kind that does not keep done jobs (skipq.kind_options,
 * [kind] keep_done = off) leaves skipq.jobs instead of being updated: a
 * delete writes no new row version, no index entry and no lock record for
 * a new page (sql/058: about 15 % of the server's work per job). `fin`
 * decides which on the rows it locked (`drops`: done, of such a kind, and
 * nothing that needs the row: an ordering key or dependents, whose release
 * runs from the update, or a uniqueness window), and skipq.finish_dropping()
 * deletes them and closes their executions; `upd` and `exe` do the rest.
 * The two touch disjoint rows, so their order within the statement does not
 * matter. (A batch whose jobs are all done, of kinds this host drops, goes
 * to OUTCOMES_DROPPING_SQL instead, which deletes before it locks.)
 */
/* The outcome arrays as rows f, one per job. */
#define OUTCOMES_INPUT(ids, eids, outcomes, delays, errors) \
    "    FROM ROWS FROM (pg_catalog.unnest(" ids "::pg_catalog.int8[])," \
    " pg_catalog.unnest(" eids "::pg_catalog.int8[])," \
    "                    pg_catalog.unnest(" outcomes "::pg_catalog.int2[])," \
    " pg_catalog.unnest(" delays "::pg_catalog.int8[])," \
    "                    pg_catalog.unnest(" errors "::pg_catalog.text[]))" \
    "         AS f(id, eid, outcome, delay_ms, err)"
#define OUTCOMES_OF(ids, eids, outcomes, delays, errors) \
    /* Row locks in id order: every multi-row writer of running jobs takes \
     * them this way (or skips locked rows), so they cannot deadlock. The \
     * fence reads the version locked here, the newest, which no one else \
     * can change before this transaction ends. (The statement begins \
     * "WITH fin" whatever it holds, or "WITH gone" in the form for a \
     * batch that drops: the tests and operators who look for a worker's \
     * cycle in pg_stat_activity know it by that.) */ \
    "WITH fin AS MATERIALIZED (" \
    "  SELECT f.id, f.eid, f.outcome, f.delay_ms, f.err, j.status, j.current_execution_id AS holder," \
    "         (f.outcome OPERATOR(pg_catalog.=) 0 AND j.ordering_key IS NULL AND NOT j.has_dependents" \
    "          AND j.unique_until IS NULL AND j.kind OPERATOR(pg_catalog.=) ANY (ARRAY(" \
    "            SELECT o.kind FROM skipq.kind_options o WHERE NOT o.keep_done))) AS drops" \
    OUTCOMES_INPUT(ids, eids, outcomes, delays, errors) \
    "    JOIN skipq.jobs j ON j.id OPERATOR(pg_catalog.=) f.id" \
    "   ORDER BY j.id FOR NO KEY UPDATE OF j" \
    "), gone AS MATERIALIZED (" \
    "  SELECT g.job_id, g.execution_id FROM skipq.finish_dropping(" \
    "    ARRAY(SELECT id FROM fin WHERE drops AND holder OPERATOR(pg_catalog.=) eid" \
    "                               AND status OPERATOR(pg_catalog.=) 'running' ORDER BY id)," \
    "    ARRAY(SELECT eid FROM fin WHERE drops AND holder OPERATOR(pg_catalog.=) eid" \
    "                                AND status OPERATOR(pg_catalog.=) 'running' ORDER BY id)) g" \
    /* A one-time filter: no call at all when nothing drops. */ \
    "   WHERE EXISTS (SELECT 1 FROM fin WHERE drops)" \
    OUTCOMES_APPLY
/* What the outcomes do to the rows `fin` locked and did not drop: `upd`
 * the jobs, `exe` their executions (OUTCOMES_DROPPING_SQL shares it). */
#define OUTCOMES_APPLY \
    "), upd AS (" \
    "  UPDATE skipq.jobs j SET" \
    "     status = CASE WHEN f.outcome OPERATOR(pg_catalog.=) 0 THEN 'done'" \
    "                   WHEN f.outcome OPERATOR(pg_catalog.=) 2 OR j.attempts OPERATOR(pg_catalog.>=) j.max_attempts" \
    "                   THEN 'dead' ELSE 'pending' END," \
    "     run_at = CASE WHEN f.outcome OPERATOR(pg_catalog.<>) 0 AND f.outcome OPERATOR(pg_catalog.<>) 2" \
    "                       AND j.attempts OPERATOR(pg_catalog.<) j.max_attempts" \
    "                   THEN pg_catalog.now() OPERATOR(pg_catalog.+)" \
    "                        (f.delay_ms OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond')" \
    "                   ELSE j.run_at END," \
    "     finished_at = CASE WHEN f.outcome OPERATOR(pg_catalog.<>) 0 AND f.outcome OPERATOR(pg_catalog.<>) 2" \
    "                             AND j.attempts OPERATOR(pg_catalog.<) j.max_attempts" \
    "                        THEN NULL ELSE pg_catalog.now() END," \
    "     lease_expires_at = NULL," \
    "     last_error = CASE WHEN f.outcome OPERATOR(pg_catalog.=) 0 THEN j.last_error ELSE f.err END" \
    "   FROM fin f WHERE j.id OPERATOR(pg_catalog.=) f.id" \
    "     AND f.holder OPERATOR(pg_catalog.=) f.eid AND f.status OPERATOR(pg_catalog.=) 'running' AND NOT f.drops" \
    "  RETURNING j.id, f.eid, j.status, f.err, f.outcome" \
    "), exe AS (" \
    "  UPDATE skipq.job_executions e" \
    "     SET status = CASE WHEN u.status OPERATOR(pg_catalog.=) 'done' THEN 'done'" \
    "                       WHEN u.outcome OPERATOR(pg_catalog.=) 3 THEN 'crashed'" \
    "                       WHEN u.status OPERATOR(pg_catalog.=) 'dead' THEN 'dead' ELSE 'retry' END," \
    "         finished_at = pg_catalog.now()," \
    "         error = CASE WHEN u.status OPERATOR(pg_catalog.=) 'done' THEN NULL ELSE u.err END" \
    "    FROM upd u WHERE e.job_id OPERATOR(pg_catalog.=) u.id AND e.id OPERATOR(pg_catalog.=) u.eid" \
    /* A crashed attempt reads as what became of its job: dead or retry. */ \
    "  RETURNING e.job_id, e.id," \
    "            CASE WHEN e.status OPERATOR(pg_catalog.<>) 'crashed' THEN e.status" \
    "                 WHEN u.status OPERATOR(pg_catalog.=) 'dead' THEN 'dead' ELSE 'retry' END AS status"

/*
 * Which pending jobs (alias j) a claim may take, best first.
 * - A cycle that records no outcome commits without waiting for the WAL
 *   flush (set_config(..., true) is transaction-local, so the next cycle is
 *   unaffected). If the server crashes before the flush, the claim is
 *   undone and the job is pending again -- the same as a host crashing
 *   mid-job, which the at-least-once contract covers. Every outcome still
 *   waits: its WAL comes later and a flush covers everything before it.
 * - Serial keys, step 1: only the first unfinished job of its key.
 */
#define CYCLE_RUNNABLE_WITH(commit) \
    "j.status OPERATOR(pg_catalog.=) 'pending' AND j.queue OPERATOR(pg_catalog.=) $1" \
    " AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()" \
    commit \
    " AND (j.ordering_key IS NULL OR NOT EXISTS (" \
    "      SELECT 1 FROM skipq.jobs e WHERE e.queue OPERATOR(pg_catalog.=) j.queue" \
    "         AND e.ordering_key OPERATOR(pg_catalog.=) j.ordering_key AND e.id OPERATOR(pg_catalog.<) j.id" \
    "         AND e.status OPERATOR(pg_catalog.=) ANY (ARRAY['blocked', 'pending', 'running'])))"
#define CYCLE_COMMIT_MODE(sync) " AND (SELECT pg_catalog.set_config('synchronous_commit', " sync ", true)) IS NOT NULL"
#define CYCLE_RUNNABLE_SYNC(sync) CYCLE_RUNNABLE_WITH(CYCLE_COMMIT_MODE(sync))
#define CYCLE_ORDER " ORDER BY priority DESC, run_at, id"

/* What a picked job weighs against the claim's byte budget: its payload
 * as the host will receive it. */
#define CLAIM_BYTES "pg_catalog.octet_length(j.payload::pg_catalog.text) AS bytes"

/* started: when the attempts are recorded as started, and their leases
 * counted from. It is read on the clock, after the statement's snapshot,
 * not now(): now() is when the transaction began, and a cycle's claim runs
 * after its outcomes, which may have waited for row locks meanwhile. A job
 * whose key a later transaction released (an earlier start, so an earlier
 * now()) would then be recorded as started before the job it follows had
 * ended. After the snapshot, every end the claim saw had committed first.
 * budget: the claim's byte budget parameter. `fit` keeps the picked jobs,
 * best first, while their payloads add up to at most the budget, and
 * always the first: the rest of the pick stays pending (its row locks go at
 * commit), so what one claim brings into the host's memory is bounded by
 * the budget plus one payload, whatever the batch (the worker then asks for
 * as many as fitted, so little is picked in vain). When the whole pick fits
 * -- the usual case -- the first branch takes it and the running sum (a
 * sort of the pick) is never computed. Serial keys, step 2: take the key's
 * row in this queue, or keep it when this job already holds it (a retry);
 * see the comment above. */
#define CYCLE_FIT(budget) \
    "), fit AS (" \
    "  SELECT id, attempts, ordering_key FROM pick" \
    "   WHERE (SELECT pg_catalog.sum(bytes) FROM pick) OPERATOR(pg_catalog.<=) " budget "::pg_catalog.int8" \
    "  UNION ALL" \
    "  SELECT id, attempts, ordering_key FROM (" \
    "    SELECT id, attempts, ordering_key, pg_catalog.sum(bytes) OVER w AS upto," \
    "           pg_catalog.row_number() OVER w AS n FROM pick" \
    "     WHERE (SELECT pg_catalog.sum(bytes) FROM pick) OPERATOR(pg_catalog.>) " budget "::pg_catalog.int8" \
    "    WINDOW w AS (ORDER BY priority DESC, run_at, id ROWS UNBOUNDED PRECEDING)) b" \
    "   WHERE b.upto OPERATOR(pg_catalog.<=) " budget "::pg_catalog.int8 OR b.n OPERATOR(pg_catalog.=) 1"
/* A claim of one job always fits: its `fit` is the pick itself. */
#define CYCLE_FIT_ONE "), fit AS (SELECT id, attempts, ordering_key FROM pick"
#define CLAIM_STARTED "(SELECT pg_catalog.clock_timestamp())" /* once per statement */
/* How `claimed` reaches the jobs `ins` started (see "How these statements
 * reach rows of skipq.jobs by id" above). A batch: `ins` unnested as arrays
 * sorted alike, one probe per job, by execution id: `ins` numbered them in
 * the pick's order, best first, and the host runs a claim's jobs in the
 * order its rows arrive. One job: the array of one id is the probe itself,
 * and the idle claim keeps its smallest plan. */
#define CLAIM_REACH_ONE \
    "    FROM ins WHERE j.id OPERATOR(pg_catalog.=) ins.job_id" \
    "     AND j.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM fit))"
#define CLAIM_INS_ARRAY(col) "pg_catalog.unnest(ARRAY(SELECT " col " FROM ins ORDER BY id))"
#define CLAIM_REACH_PROBES \
    "    FROM ROWS FROM (" CLAIM_INS_ARRAY("job_id") ", " CLAIM_INS_ARRAY("id") ", " CLAIM_INS_ARRAY("attempt") ", " \
    CLAIM_INS_ARRAY("started_at") ") AS ins(job_id, id, attempt, started_at)" \
    "   WHERE j.id OPERATOR(pg_catalog.=) ins.job_id"
#define CYCLE_CLAIM(started, reach) \
    "), turn AS (" \
    "  INSERT INTO skipq.ordering_keys AS k (queue, ordering_key, job_id)" \
    "  SELECT DISTINCT ON (ordering_key) $1::pg_catalog.text, ordering_key, id FROM fit" \
    "   WHERE ordering_key IS NOT NULL ORDER BY ordering_key, id" \
    "  ON CONFLICT (queue, ordering_key) DO UPDATE SET job_id = k.job_id" \
    "   WHERE k.job_id OPERATOR(pg_catalog.=) EXCLUDED.job_id" \
    "  RETURNING k.job_id" \
    "), ins AS (" \
    "  INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at)" \
    "  SELECT id, attempts OPERATOR(pg_catalog.+) 1, $4, " started " FROM fit" \
    "   WHERE ordering_key IS NULL OR id OPERATOR(pg_catalog.=) ANY (SELECT job_id FROM turn)" \
    "  RETURNING id, job_id, attempt, started_at" \
    "), claimed AS (" \
    "  UPDATE skipq.jobs j" \
    "     SET status = 'running', attempts = ins.attempt, locked_by = $4, current_execution_id = ins.id," \
    "         lease_expires_at = ins.started_at OPERATOR(pg_catalog.+) (pg_catalog.interval '1 millisecond'" \
    "           OPERATOR(pg_catalog.*) (SELECT l.ms FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.text[])," \
    "                                                               pg_catalog.unnest($3::pg_catalog.int8[]))" \
    "                                    AS l(kind, ms) WHERE l.kind OPERATOR(pg_catalog.=) j.kind LIMIT 1))" \
    reach \
    "  RETURNING j.id, ins.id AS eid, j.kind, j.payload::pg_catalog.text AS payload, ins.attempt, j.max_attempts" \
    ")"

/* A claim's rows ('c'); the outcome statement's are 'f' rows. */
#define CLAIMED_ROWS " SELECT 'c', id, eid, kind, payload, attempt, max_attempts, NULL FROM claimed"

#define OUTCOMES_ROWS \
    " SELECT 'f', job_id, id, NULL, NULL, NULL, NULL, status FROM exe" \
    " UNION ALL SELECT 'f', job_id, execution_id, NULL, NULL, NULL, NULL, 'done' FROM gone"

static const char OUTCOMES_SQL[] = OUTCOMES_OF("$1", "$2", "$3", "$4", "$5") ")" OUTCOMES_ROWS;

/*
 * The outcomes when every one is done and of a kind this host drops
 * ([kind] keep_done = off; sq_outcomes.dropping): the usual case of a
 * queue that keeps no done jobs. `fin` would lock each row only for
 * finish_dropping() to delete it in the same statement: one lock record
 * and one more probe of jobs_pkey per job, about 7 % of the WAL records and
 * 5-10 % of the server's CPU in a tuned drain (bench/README.md). So the jobs go to
 * finish_dropping() first, which checks on each row all that `fin` would
 * (this execution, still running, nothing that needs the row, and the
 * kind's keep_done in skipq.kind_options) and deletes under the delete's
 * own row lock. What it leaves -- a job with an ordering key or
 * dependents, one no longer this execution's, a kind another host set to
 * keep its done jobs -- goes through `fin`, `upd` and `exe` as in
 * OUTCOMES_SQL; when it leaves nothing, `fin` reads no row at all.
 * Both passes lock in id order. A writer that waits for several running
 * jobs' locks (only a cancel does, from `skipq cancel` or the dashboard)
 * could meet this statement's second pass holding a row of the first:
 * PostgreSQL would then end one of the two with a deadlock error, and
 * neither loses anything (the worker logs it and records the batch one by
 * one; the operator runs the cancel again). It takes a cancel naming a
 * dropped job and a kept one of the same batch while it is recorded.
 */
#define OUTCOMES_DROPPING_ARRAY(col, ids, eids, outcomes) \
    "ARRAY(SELECT f." col " FROM ROWS FROM (pg_catalog.unnest(" ids "::pg_catalog.int8[])," \
    " pg_catalog.unnest(" eids "::pg_catalog.int8[]), pg_catalog.unnest(" outcomes "::pg_catalog.int2[]))" \
    " AS f(id, eid, outcome) WHERE f.outcome OPERATOR(pg_catalog.=) 0 ORDER BY f.id)"
#define OUTCOMES_DROPPING_OF(ids, eids, outcomes, delays, errors) \
    "WITH gone AS MATERIALIZED (" \
    "  SELECT g.job_id, g.execution_id FROM skipq.finish_dropping(" \
    "    " OUTCOMES_DROPPING_ARRAY("id", ids, eids, outcomes) ", " \
    OUTCOMES_DROPPING_ARRAY("eid", ids, eids, outcomes) ") g" \
    "), fin AS MATERIALIZED (" \
    "  SELECT f.id, f.eid, f.outcome, f.delay_ms, f.err, j.status, j.current_execution_id AS holder, false AS drops" \
    OUTCOMES_INPUT(ids, eids, outcomes, delays, errors) \
    "    JOIN skipq.jobs j ON j.id OPERATOR(pg_catalog.=) f.id" \
    /* A one-time filter: no scan at all when every job was dropped. */ \
    "   WHERE (SELECT pg_catalog.count(*) FROM gone) OPERATOR(pg_catalog.<)" \
    "         pg_catalog.cardinality(" ids "::pg_catalog.int8[])" \
    "     AND NOT EXISTS (SELECT FROM gone WHERE gone.job_id OPERATOR(pg_catalog.=) f.id)" \
    "   ORDER BY j.id FOR NO KEY UPDATE OF j" \
    OUTCOMES_APPLY

static const char OUTCOMES_DROPPING_SQL[] = OUTCOMES_DROPPING_OF("$1", "$2", "$3", "$4", "$5") ")" OUTCOMES_ROWS;

/*
 * The claim with no outcomes to record ($1-$5, and the budget as $6): what
 * an idle thread sends when woken, where every statement node saved is
 * latency. The result has only claimed rows.
 */
#define CLAIM_BATCH_SQL(commit) \
    "WITH pick AS MATERIALIZED (" \
    "  SELECT id, attempts, ordering_key, priority, run_at, " CLAIM_BYTES " FROM skipq.jobs j" \
    "   WHERE " CYCLE_RUNNABLE_WITH(commit) " AND j.kind OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])" \
    CYCLE_ORDER \
    "   LIMIT $5" \
    "   FOR NO KEY UPDATE SKIP LOCKED" \
    CYCLE_FIT("$6") \
    CYCLE_CLAIM(CLAIM_STARTED, CLAIM_REACH_PROBES) \
    CLAIMED_ROWS
static const char CLAIM_SQL[] = CLAIM_BATCH_SQL(CYCLE_COMMIT_MODE("'off'"));

/*
 * CLAIM_SQL as the second statement of a cycle's transaction, sent right
 * behind OUTCOMES_SQL in one pipeline (sq_queue_cycle): one round trip and
 * one commit, as one statement would be, but the pick reads a snapshot
 * taken after the outcomes were written, not before. It leaves
 * synchronous_commit alone: the transaction holds outcomes, whose commit
 * must wait for the flush.
 */
static const char CLAIM_NEXT_SQL[] = CLAIM_BATCH_SQL("");

/*
 * CLAIM_SQL for one job ($1-$4, LIMIT 1): the claim of a thread that has
 * just woken from idle, the one statement on the latency path. A single job
 * needs no byte budget, so it skips that step (and the payload's size).
 */
static const char CLAIM_ONE_SQL[] =
    "WITH pick AS MATERIALIZED ("
    "  SELECT id, attempts, ordering_key FROM skipq.jobs j"
    "   WHERE " CYCLE_RUNNABLE_SYNC("'off'") " AND j.kind OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])"
    CYCLE_ORDER
    "   LIMIT 1"
    "   FOR NO KEY UPDATE SKIP LOCKED"
    CYCLE_FIT_ONE
    CYCLE_CLAIM(CLAIM_STARTED, CLAIM_REACH_ONE)
    CLAIMED_ROWS;

/*
 * The claim with per-kind limits ($1-$5, the budget as $6).
 * skipq.claim_allowance() locks the skipq.kind_limits rows of the limited
 * kinds among $2 (serialising their claims across hosts until this
 * transaction commits; row locks, which only skipq's own roles may take,
 * not advisory keys, which any role could hold: sql/053) and says how many
 * of each may start now: max_running minus those running (the outcome
 * statement before it in the cycle has already ended the jobs it
 * records), and what is left of the current rate window.
 * Unlimited kinds are picked as in CLAIM_SQL; each limited kind at most its
 * allowance; the best $5 of both are claimed, recorded as started at the
 * moment the allowance was granted (after the kind locks), and `rt` counts
 * them into the rate window of that moment -- so concurrency and rate can
 * be audited exactly from job_executions.started_at. Lock order is job
 * rows (the outcome statement), then kind rows in kind order, everywhere.
 * As with CLAIM_SQL, the claim with no outcome before it commits without
 * waiting for the flush, and the one after outcomes (_NEXT) leaves that
 * alone.
 */
#define CLAIM_LIMITED_BATCH_SQL(commit) \
    "WITH lim AS MATERIALIZED (" \
    "  SELECT a.kind, a.allowed, a.at" \
    "    FROM skipq.claim_allowance($2::pg_catalog.text[], NULL::pg_catalog.int8[]) AS a" \
    "), free AS MATERIALIZED (" \
    "  SELECT id, attempts, priority, run_at, ordering_key, " CLAIM_BYTES " FROM skipq.jobs j" \
    "   WHERE " CYCLE_RUNNABLE_WITH(commit) " AND j.kind OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])" \
    "     AND NOT (j.kind OPERATOR(pg_catalog.=) ANY (SELECT kind FROM lim))" \
    /* A one-time filter: with every kind limited, no scan at all (it \
     * would read every pending job of the queue to find none). */ \
    "     AND EXISTS (SELECT 1 FROM pg_catalog.unnest($2::pg_catalog.text[]) AS k(kind)" \
    "                  WHERE NOT (k.kind OPERATOR(pg_catalog.=) ANY (SELECT kind FROM lim)))" \
    CYCLE_ORDER \
    "   LIMIT $5 FOR NO KEY UPDATE SKIP LOCKED" \
    "), held AS MATERIALIZED (" \
    "  SELECT p.id, p.attempts, p.priority, p.run_at, p.ordering_key, p.bytes FROM lim CROSS JOIN LATERAL (" \
    "    SELECT id, attempts, priority, run_at, ordering_key, " CLAIM_BYTES " FROM skipq.jobs j" \
    "     WHERE " CYCLE_RUNNABLE_WITH(commit) " AND j.kind OPERATOR(pg_catalog.=) lim.kind" \
    CYCLE_ORDER \
    "     LIMIT least(lim.allowed, $5) FOR NO KEY UPDATE SKIP LOCKED) p" \
    "), pick AS MATERIALIZED (" \
    "  SELECT id, attempts, ordering_key, priority, run_at, bytes" \
    "    FROM (SELECT * FROM free UNION ALL SELECT * FROM held) c" \
    CYCLE_ORDER \
    "  LIMIT $5" \
    CYCLE_FIT("$6") \
    CYCLE_CLAIM("coalesce((SELECT at FROM lim LIMIT 1), " CLAIM_STARTED ")", CLAIM_REACH_PROBES) \
    ", rt AS (" \
    "  UPDATE skipq.kind_limits l" \
    "     SET window_count = CASE WHEN l.window_start OPERATOR(pg_catalog.=) pg_catalog.date_trunc(l.rate_unit, a.at)" \
    "                             THEN l.window_count OPERATOR(pg_catalog.+) n.n ELSE n.n END," \
    "         window_start = pg_catalog.date_trunc(l.rate_unit, a.at)" \
    "    FROM (SELECT kind, pg_catalog.count(*)::pg_catalog.int4 AS n FROM claimed GROUP BY kind) n" \
    "    JOIN lim a ON a.kind OPERATOR(pg_catalog.=) n.kind" \
    "   WHERE l.kind OPERATOR(pg_catalog.=) n.kind AND l.rate IS NOT NULL" \
    ")" \
    CLAIMED_ROWS
static const char CLAIM_LIMITED_SQL[] = CLAIM_LIMITED_BATCH_SQL(CYCLE_COMMIT_MODE("'off'"));
static const char CLAIM_LIMITED_NEXT_SQL[] = CLAIM_LIMITED_BATCH_SQL("");

/*
 * Retention: delete up to $3 jobs in status $1 finished more than $2 ms ago
 * and already in skipq.job_totals (their executions cascade). Only the host
 * holding the 'retention' row of skipq.housekeeping deletes; the others get
 * -1 rows back and skip this round. (A row lock, not an advisory key: only
 * skipq's own roles may lock the row, sql/053. No row, no got: -1.)
 */
static const char RETAIN_SQL[] =
    "WITH l AS MATERIALIZED (SELECT true AS got FROM skipq.housekeeping h"
    "                         WHERE h.task OPERATOR(pg_catalog.=) 'retention' FOR NO KEY UPDATE OF h SKIP LOCKED),"
    " d AS ("
    "  DELETE FROM skipq.jobs WHERE id OPERATOR(pg_catalog.=) ANY ("
    "    SELECT id FROM skipq.jobs"
    "     WHERE status OPERATOR(pg_catalog.=) $1"
    "       AND finished_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-)"
    "             ($2::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond'))"
    "       AND finished_at OPERATOR(pg_catalog.<) (SELECT through FROM skipq.job_totals_mark)" /* counted first */
    "       AND (SELECT got FROM l)"
    "     LIMIT $3 FOR UPDATE SKIP LOCKED)"
    "  RETURNING 1)"
    " SELECT CASE WHEN (SELECT got FROM l) THEN (SELECT pg_catalog.count(*) FROM d) ELSE -1 END";

/*
 * Retention of the jobs that left skipq.jobs as they finished done (sql/058:
 * their done execution carries the queue, and only it): the executions of
 * up to $2 such jobs that finished more than $1 ms ago (a retried attempt
 * before the done one goes with it), under the same 'retention' row lock.
 * The done executions are found through the BRIN index on started_at (an
 * attempt finishes after it starts), the rest by job_id.
 */
static const char RETAIN_LEFT_SQL[] =
    "WITH l AS MATERIALIZED (SELECT true AS got FROM skipq.housekeeping h"
    "                         WHERE h.task OPERATOR(pg_catalog.=) 'retention' FOR NO KEY UPDATE OF h SKIP LOCKED),"
    " c AS MATERIALIZED (SELECT pg_catalog.now() OPERATOR(pg_catalog.-)"
    "                           ($1::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond') AS t),"
    " p AS MATERIALIZED ("
    "  SELECT e.job_id FROM skipq.job_executions e"
    "   WHERE e.started_at OPERATOR(pg_catalog.<) (SELECT t FROM c)"
    "     AND e.finished_at OPERATOR(pg_catalog.<) (SELECT t FROM c)"
    "     AND e.queue IS NOT NULL AND e.status OPERATOR(pg_catalog.=) 'done'"
    "     AND (SELECT got FROM l)"
    "   LIMIT $2),"
    " d AS (DELETE FROM skipq.job_executions x WHERE x.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT job_id FROM p)))"
    " SELECT CASE WHEN (SELECT got FROM l) THEN (SELECT pg_catalog.count(*) FROM p) ELSE -1 END";

/*
 * After a lost connection: jobs still 'running' under this worker's name
 * ($1) that it is not holding ($2: the ones whose outcomes it still has to
 * record) were claimed by a cycle whose reply never arrived. The worker never
 * ran them, so they go back to pending at once, and the attempt is not
 * charged (max_attempts + 1, as for a shutdown). Rows locked right now (the
 * lost statement may still be running on the server) are skipped: their
 * leases expire as before. A row lk locks has passed its test in its
 * newest version (taking the lock tests it again), so the update needs no
 * test of its own.
 */
static const char RECOVER_SQL[] =
    "WITH lk AS MATERIALIZED ("
    "  SELECT j.id FROM skipq.jobs j"
    "   WHERE j.status OPERATOR(pg_catalog.=) 'running' AND j.locked_by OPERATOR(pg_catalog.=) $1"
    "     AND NOT (j.id OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.int8[]))"
    "   ORDER BY j.id FOR NO KEY UPDATE OF j SKIP LOCKED"
    "), r AS ("
    "  UPDATE skipq.jobs j SET status = 'pending', run_at = pg_catalog.now(), lease_expires_at = NULL,"
    "         max_attempts = j.max_attempts OPERATOR(pg_catalog.+) 1,"
    "         last_error = $3"
    "    FROM lk WHERE j.id OPERATOR(pg_catalog.=) lk.id"
    "  RETURNING j.id, j.current_execution_id AS eid)"
    " UPDATE skipq.job_executions e SET status = 'interrupted', finished_at = pg_catalog.now(), error = $3"
    "   FROM r WHERE e.job_id OPERATOR(pg_catalog.=) r.id AND e.id OPERATOR(pg_catalog.=) r.eid"
    " RETURNING e.id";

/*
 * Hand-over at enqueue (sql/060_handoff.sql). An idle thread registers
 * through skipq.waiter_set() ($1 worker, $2 its host's id, $3 queue, $4
 * kinds, $5 their leases in ms, $6 how long the registration holds), takes
 * it back through skipq.waiter_unset() ($2: wait for a commit that holds
 * it) when it claims work of its own, and removes its row through
 * skipq.waiter_gone() as it exits. Each answers in a word (see the
 * migration); none waits on an application's open transaction.
 */
static const char WAITER_SET_SQL[] =
    "SELECT answer, since FROM skipq.waiter_set($1, $2, $3, $4::pg_catalog.text[], $5::pg_catalog.int8[],"
    " $6::pg_catalog.int8)";
static const char WAITER_UNSET_SQL[] = "SELECT skipq.waiter_unset($1, $2::pg_catalog.bool)";
static const char WAITER_GONE_SQL[] = "SELECT skipq.waiter_gone($1)";

/*
 * The jobs an enqueue handed to worker $1: `c` finds the candidates, `h`
 * keeps those running under its name, not among $3 (the jobs it holds),
 * at most $4, with the lease they were handed with. The enqueue counted
 * that lease from its commit, so a job reaches its thread with little of
 * it gone; one with less than half left (a commit that waited long for a
 * standby, a thread slow to wake) gets a whole lease again first, with a
 * write fenced like an outcome (`lk` locks the row first, so the test of
 * its status sees a sweep that came between): a sweep that took the job
 * meanwhile leaves nothing to renew, and the job is not returned. The
 * usual job is only read: no write, no commit to wait for; its row says
 * what is left of its lease, so that the host stops its handler in time
 * if renewing fails. The clock is read once, so every job is either
 * renewed or returned as it is. The rows come in the claim's layout.
 * HANDED_SQL takes the jobs named in $2 (the notifications'), by primary
 * key: `c` is materialized so that the status test cannot send the plan
 * through jobs_lease, which holds every host's running jobs, and every
 * other row is reached by primary key, one probe each (see "How these
 * statements reach rows of skipq.jobs by id" above). HANDED_ANY_SQL takes
 * every job running under the worker's name whose attempt started at $5
 * or later (since it registered), when a notification may have been
 * lost: rare, and sent unnamed.
 */
#define HANDED_OF(candidates, since) \
    "WITH c AS MATERIALIZED (" \
    "  SELECT j.id, j.status, j.locked_by, j.current_execution_id AS eid, j.lease_expires_at AS ends," \
    "         (SELECT e.started_at FROM skipq.job_executions e" \
    "           WHERE e.job_id OPERATOR(pg_catalog.=) j.id" \
    "             AND e.id OPERATOR(pg_catalog.=) j.current_execution_id) AS started," \
    "         j.kind, j.payload::pg_catalog.text AS payload, j.attempts, j.max_attempts FROM skipq.jobs j" \
    "   WHERE " candidates \
    "), h AS MATERIALIZED (" \
    /* The clock read once: a job is renewed, or returned as it is. */ \
    "  SELECT c.*, t.now, c.ends OPERATOR(pg_catalog.<) (t.now OPERATOR(pg_catalog.+)" \
    "                  ((c.ends OPERATOR(pg_catalog.-) c.started) OPERATOR(pg_catalog./) 2)) AS renews" \
    "    FROM c, (SELECT pg_catalog.clock_timestamp() AS now) t" \
    "   WHERE c.status OPERATOR(pg_catalog.=) 'running' AND c.locked_by OPERATOR(pg_catalog.=) $1" \
    "     AND NOT (c.id OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.int8[]))" since \
    "   ORDER BY c.id LIMIT $4" \
    "), lk AS MATERIALIZED (" \
    "  SELECT j.id, j.status, j.current_execution_id AS eid FROM skipq.jobs j" \
    "   WHERE j.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT h.id FROM h WHERE h.renews))" \
    "   ORDER BY j.id FOR NO KEY UPDATE OF j" \
    "), renew AS (" \
    "  UPDATE skipq.jobs j" \
    "     SET lease_expires_at = h.now OPERATOR(pg_catalog.+) (h.ends OPERATOR(pg_catalog.-) h.started)" \
    "    FROM lk JOIN h ON h.id OPERATOR(pg_catalog.=) lk.id" \
    "   WHERE j.id OPERATOR(pg_catalog.=) lk.id AND lk.status OPERATOR(pg_catalog.=) 'running'" \
    "     AND lk.eid OPERATOR(pg_catalog.=) h.eid" \
    "  RETURNING j.id" \
    ")" \
    /* What is left of the lease, in ms, when it is not renewed. */ \
    " SELECT 'c', h.id, h.eid, h.kind, h.payload, h.attempts, h.max_attempts," \
    "        CASE WHEN NOT h.renews THEN pg_catalog.ceil(pg_catalog.date_part('epoch'," \
    "             h.ends OPERATOR(pg_catalog.-) h.now) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8 END" \
    "   FROM h" \
    "  WHERE NOT h.renews OR h.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT id FROM renew))" \
    "  ORDER BY h.id"
static const char HANDED_SQL[] = HANDED_OF("j.id OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.int8[])", "");
static const char HANDED_ANY_SQL[] =
    HANDED_OF("j.status OPERATOR(pg_catalog.=) 'running' AND j.locked_by OPERATOR(pg_catalog.=) $1"
              " AND $2::pg_catalog.int8[] IS NOT NULL",
              " AND c.started OPERATOR(pg_catalog.>=) $5::pg_catalog.timestamptz");

/*
 * Fencing read-backs, asked only on rare paths (so sent unnamed, never
 * prepared). EXECUTION_STATUS_SQL: what an execution ended as -- after a
 * fenced outcome, to tell "cancelled under the handler" from "taken over",
 * and after a retried outcome, "committed by the try whose reply was lost"
 * from "fenced" (see complete.c). COMMITTED_DONE_SQL: after the connection
 * died during a handler transaction's COMMIT, whether its done marker
 * landed.
 */
static const char EXECUTION_STATUS_SQL[] =
    "SELECT status FROM skipq.job_executions"
    " WHERE job_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.=) $2";
/* A server process of our own role only (ending another role's would fail,
 * and is none of ours); false when it is still there after the wait. */
static const char END_BACKEND_SQL[] =
    "SELECT pg_catalog.pg_terminate_backend(a.pid, $2::pg_catalog.int8) FROM pg_catalog.pg_stat_activity a"
    " WHERE a.pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4 AND a.usename OPERATOR(pg_catalog.=) CURRENT_USER";
static const char COMMITTED_DONE_SQL[] =
    "SELECT 1 FROM skipq.job_executions WHERE id OPERATOR(pg_catalog.=) $2"
    " AND job_id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'done'";

/* Every statement of the protocol, by what it does. */
enum sq_stmt {
    SQ_STMT_RETAIN,
    SQ_STMT_RETAIN_LEFT,
    SQ_STMT_OUTCOMES,
    SQ_STMT_OUTCOMES_DROPPING,
    SQ_STMT_HEARTBEAT,
    SQ_STMT_REAP,
    SQ_STMT_RELEASE,
    SQ_STMT_RECOVER,
    SQ_STMT_CLAIM_LIMITED,
    SQ_STMT_CLAIM_LIMITED_NEXT,
    SQ_STMT_CLAIM,
    SQ_STMT_CLAIM_ONE,
    SQ_STMT_CLAIM_NEXT,
    SQ_STMT_WAITER_SET,
    SQ_STMT_WAITER_UNSET,
    SQ_STMT_WAITER_GONE,
    SQ_STMT_HANDED,
    SQ_STMT_HANDED_ANY,
    SQ_STMT_EXECUTION_STATUS,
    SQ_STMT_COMMITTED_DONE,
    SQ_STMT_END_BACKEND,
    SQ_STMT_COUNT
};

/* name: the prepared statement's (it shows in pg_stat_statements and in
 * errors); rare: always sent unnamed, never prepared. */
static const struct {
    const char *name;
    const char *sql;
    bool rare;
} statements[SQ_STMT_COUNT] = {
    [SQ_STMT_RETAIN] = {"sq_retain", RETAIN_SQL, false},
    [SQ_STMT_RETAIN_LEFT] = {"sq_retain_left", RETAIN_LEFT_SQL, false},
    [SQ_STMT_OUTCOMES] = {"sq_outcomes", OUTCOMES_SQL, false},
    [SQ_STMT_OUTCOMES_DROPPING] = {"sq_outcomes_dropping", OUTCOMES_DROPPING_SQL, false},
    [SQ_STMT_HEARTBEAT] = {"sq_heartbeat", HEARTBEAT_SQL, false},
    [SQ_STMT_REAP] = {"sq_reap", REAP_SQL, false},
    [SQ_STMT_RELEASE] = {"sq_release", RELEASE_SQL, false},
    [SQ_STMT_RECOVER] = {"sq_recover", RECOVER_SQL, false},
    [SQ_STMT_CLAIM_LIMITED] = {"sq_claim_limited", CLAIM_LIMITED_SQL, false},
    [SQ_STMT_CLAIM_LIMITED_NEXT] = {"sq_claim_limited_next", CLAIM_LIMITED_NEXT_SQL, false},
    [SQ_STMT_CLAIM] = {"sq_claim", CLAIM_SQL, false},
    [SQ_STMT_CLAIM_ONE] = {"sq_claim_one", CLAIM_ONE_SQL, false},
    [SQ_STMT_CLAIM_NEXT] = {"sq_claim_next", CLAIM_NEXT_SQL, false},
    [SQ_STMT_WAITER_SET] = {"sq_waiter_set", WAITER_SET_SQL, false},
    [SQ_STMT_WAITER_UNSET] = {"sq_waiter_unset", WAITER_UNSET_SQL, false},
    [SQ_STMT_WAITER_GONE] = {"sq_waiter_gone", WAITER_GONE_SQL, true},
    [SQ_STMT_HANDED] = {"sq_handed", HANDED_SQL, false},
    [SQ_STMT_HANDED_ANY] = {"sq_handed_any", HANDED_ANY_SQL, true},
    [SQ_STMT_EXECUTION_STATUS] = {"sq_execution_status", EXECUTION_STATUS_SQL, true},
    [SQ_STMT_COMMITTED_DONE] = {"sq_committed_done", COMMITTED_DONE_SQL, true},
    [SQ_STMT_END_BACKEND] = {"sq_end_backend", END_BACKEND_SQL, true},
};

/* Set once at start-up, before any thread runs a statement. */
static bool unnamed;

/* The claims' byte budget: set at start-up, and by a reload while workers
 * claim. */
static _Atomic int64_t claim_bytes = SQ_CLAIM_BYTES_DEFAULT;

void sq_queue_use_unnamed(bool on)
{
    unnamed = on;
}

void sq_queue_set_claim_bytes(int64_t bytes)
{
    atomic_store(&claim_bytes, bytes > 0 ? bytes : SQ_CLAIM_BYTES_DEFAULT);
}

int64_t sq_queue_claim_bytes(void)
{
    return atomic_load(&claim_bytes);
}

/* Run statement s: prepared, or with its text as an unnamed statement
 * (parsed and planned each time, but nothing left in the session). */
static PGresult *run_stmt(PGconn *conn, enum sq_stmt s, int nparams, const char *const *params)
{
    if (!unnamed && !statements[s].rare)
        return PQexecPrepared(conn, statements[s].name, nparams, params, NULL, NULL, 0);
    return PQexecParams(conn, statements[s].sql, nparams, NULL, params, NULL, NULL, 0);
}

/* run_stmt's choice, for a statement sent into a pipeline. */
static bool send_stmt(PGconn *conn, enum sq_stmt s, int nparams, const char *const *params)
{
    if (!unnamed && !statements[s].rare)
        return PQsendQueryPrepared(conn, statements[s].name, nparams, params, NULL, NULL, 0);
    return PQsendQueryParams(conn, statements[s].sql, nparams, NULL, params, NULL, NULL, 0);
}

/* The result of the next statement of a pipeline, and the NULL that ends
 * it. NULL when the connection failed before a result came. Each statement
 * has one result; a few more are passed over, never waited for forever. */
static PGresult *pipeline_result(PGconn *conn)
{
    PGresult *res = PQgetResult(conn), *end;
    for (int extra = 0; res && extra < 4 && (end = PQgetResult(conn)) != NULL; extra++)
        PQclear(end);
    return res;
}

/* Leave pipeline mode, reading first what is left of the pipeline after a
 * failure. A session that still cannot leave it would refuse every later
 * statement (seen after the server went away mid-pipeline, with the
 * connection not yet marked bad), so it is recorded as lost: the caller
 * makes another. */
static void leave_pipeline(PGconn *conn)
{
    for (int i = 0; i < 8 && !PQexitPipelineMode(conn); i++)
        PQclear(PQgetResult(conn));
    if (!PQexitPipelineMode(conn))
        sq_db_note_lost();
}

/*
 * Two statements, a then b, in one pipeline with one Sync: one round trip,
 * and one transaction (the extended protocol commits at the Sync), so b
 * sees a's writes and both commit or neither does. Each statement takes
 * its own snapshot. If a fails, b is not run: *rb is then NULL, and err
 * says what a met. If the commit fails, both are NULL. Results are the
 * caller's to clear.
 */
static bool run_pair(PGconn *conn, enum sq_stmt a, int na, const char *const *pa, enum sq_stmt b, int nb,
                     const char *const *pb, PGresult **ra, PGresult **rb, char *err, size_t errlen)
{
    *ra = *rb = NULL;
    if (!PQenterPipelineMode(conn)) {
        sq_db_error(conn, NULL, err, errlen);
        return false;
    }
    bool ok = send_stmt(conn, a, na, pa) && send_stmt(conn, b, nb, pb) && PQpipelineSync(conn);
    if (!ok)
        sq_db_error(conn, NULL, err, errlen);
    if (ok) {
        *ra = sq_db_check(conn, pipeline_result(conn), err, errlen);
        *rb = sq_db_check(conn, pipeline_result(conn), *ra ? err : NULL, errlen);
        /* The Sync is the commit, and both statements' rows come back
         * before it: the pair succeeded only if the Sync did. A commit can
         * fail after them -- a deferred check, or the session ended while
         * the commit waited for a standby (a switchover's shutdown): then
         * the outcomes are not recorded, whatever the rows said, and the
         * caller treats the cycle as failed (or its reply as lost). */
        PGresult *sync = PQgetResult(conn); /* PGRES_PIPELINE_SYNC; an error, or NULL once the connection failed */
        bool committed = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
        if (*ra && *rb && !committed)
            sq_db_error(conn, sync, err, errlen);
        PQclear(sync);
        ok = *ra && *rb && committed;
    }
    leave_pipeline(conn);
    if (!ok) {
        PQclear(*ra);
        PQclear(*rb);
        *ra = *rb = NULL;
    }
    return ok;
}

bool sq_queue_prepare(PGconn *conn, char *err, size_t errlen)
{
    if (unnamed)
        return true;
    for (size_t i = 0; i < SQ_STMT_COUNT; i++) {
        if (statements[i].rare)
            continue;
        char msg[512];
        PGresult *res = sq_db_check(conn, PQprepare(conn, statements[i].name, statements[i].sql, 0, NULL), msg,
                                    sizeof msg);
        if (!res) {
            snprintf(err, errlen, "could not prepare %s: %s", statements[i].name, msg);
            return false;
        }
        PQclear(res);
    }
    return true;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

void sq_claimed_clear(struct sq_claimed *c)
{
    free(c->kind);
    free(c->payload);
    memset(c, 0, sizeof *c);
}

/* Copy a claimed row (id, execution id, kind, payload, attempt, max
 * attempts, starting at column `col`) out of a result. */
static bool read_claimed(const PGresult *res, int row, int col, struct sq_claimed *c)
{
    c->id = strtoll(PQgetvalue(res, row, col), NULL, 10);
    c->execution_id = strtoll(PQgetvalue(res, row, col + 1), NULL, 10);
    c->kind = dup_n(PQgetvalue(res, row, col + 2), (size_t)PQgetlength(res, row, col + 2));
    c->payload_len = (size_t)PQgetlength(res, row, col + 3);
    c->payload = dup_n(PQgetvalue(res, row, col + 3), c->payload_len);
    c->attempt = atoi(PQgetvalue(res, row, col + 4));
    c->max_attempts = atoi(PQgetvalue(res, row, col + 5));
    c->lease_ms = PQgetisnull(res, row, col + 6) ? 0 : strtoll(PQgetvalue(res, row, col + 6), NULL, 10);
    return c->kind && c->payload;
}

/* The claims are committed but cannot be held: their leases will expire and
 * the sweep will hand them out again. */
static int claimed_oom(struct sq_claimed *out, int n, char *err, size_t errlen)
{
    for (int k = 0; k < n; k++)
        sq_claimed_clear(&out[k]);
    snprintf(err, errlen, "out of memory reading claimed jobs");
    return -1;
}

int sq_queue_claim(PGconn *conn, const char *queue, const char *kinds_array, const char *leases_array,
                   const char *worker, int limit, struct sq_claimed *out, char *err, size_t errlen)
{
    const struct sq_outcomes none = {0};
    return sq_queue_cycle(conn, queue, kinds_array, leases_array, worker, limit, false, &none, out, NULL, err,
                          errlen);
}

/* What sq_text_array() writes for v[0..n), with its NUL: at most. */
static size_t text_array_size(const char *const *v, size_t n)
{
    size_t len = 3;
    for (size_t i = 0; i < n; i++)
        len += 2 * strlen(v[i]) + 3;
    return len;
}

static void text_array_write(char *s, const char *const *v, size_t n)
{
    size_t o = 0;
    s[o++] = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            s[o++] = ',';
        s[o++] = '"';
        for (const char *p = v[i]; *p; p++) {
            if (*p == '"' || *p == '\\')
                s[o++] = '\\';
            s[o++] = *p;
        }
        s[o++] = '"';
    }
    s[o++] = '}';
    s[o] = '\0';
}

/* The outcome arrays of OUTCOMES_SQL ($1..$5), as PostgreSQL array literals. */
struct outcome_params {
    char *ids, *execs, *outcomes, *delays, *errors;
};

static bool outcome_params(const struct sq_outcomes *done, struct outcome_params *p)
{
    int64_t *outcome64 = malloc((done->n ? done->n : 1) * sizeof *outcome64);
    p->ids = sq_int8_array(done->ids, done->n);
    p->execs = sq_int8_array(done->execs, done->n);
    p->delays = sq_int8_array(done->delays, done->n);
    p->errors = sq_text_array((const char *const *)done->errors, done->n);
    p->outcomes = NULL;
    if (outcome64) {
        for (size_t i = 0; i < done->n; i++)
            outcome64[i] = done->outcomes[i];
        p->outcomes = sq_int8_array(outcome64, done->n);
    }
    free(outcome64);
    return p->ids && p->execs && p->delays && p->errors && p->outcomes;
}

static void outcome_params_free(struct outcome_params *p)
{
    free(p->ids);
    free(p->execs);
    free(p->delays);
    free(p->errors);
    free(p->outcomes);
}

/* What an outcome became, from the status of its execution row. */
static enum sq_complete applied_as(const char *st)
{
    return st[0] == 'd' && st[1] == 'o' ? SQ_COMPLETE_DONE : st[0] == 'd' ? SQ_COMPLETE_DEAD : SQ_COMPLETE_RETRY;
}

/* Which outcome statement records `done`. */
static enum sq_stmt outcomes_stmt(const struct sq_outcomes *done)
{
    return done->n > 0 && done->dropping == done->n ? SQ_STMT_OUTCOMES_DROPPING : SQ_STMT_OUTCOMES;
}

/*
 * The outcomes by execution id, so that the 'f' rows of a cycle find their
 * outcomes in log time: matched one by one, the 1,000 rows of a full cycle
 * made a million comparisons on the host (in a tuned drain the host's CPU
 * per job went from 2.75-3.54 to 2.6-2.8 us without them).
 */
struct by_exec {
    int64_t eid;
    size_t i;
};

static int by_exec_cmp(const void *a, const void *b)
{
    int64_t x = ((const struct by_exec *)a)->eid, y = ((const struct by_exec *)b)->eid;
    return (x > y) - (x < y);
}

/* NULL when out of memory: read_applied() then searches linearly. */
static struct by_exec *by_exec_new(const struct sq_outcomes *done)
{
    struct by_exec *ix = malloc((done->n ? done->n : 1) * sizeof *ix);
    if (!ix)
        return NULL;
    for (size_t i = 0; i < done->n; i++)
        ix[i] = (struct by_exec){done->execs[i], i};
    qsort(ix, done->n, sizeof *ix, by_exec_cmp);
    return ix;
}

/* An 'f' row (of OUTCOMES_SQL): mark the outcome of its execution applied. */
static void read_applied(const PGresult *res, int row, const struct sq_outcomes *done, const struct by_exec *ix,
                         char *applied)
{
    int64_t eid = strtoll(PQgetvalue(res, row, 2), NULL, 10);
    char as = (char)applied_as(PQgetvalue(res, row, 7));
    if (!ix) {
        for (size_t i = 0; i < done->n; i++)
            if (done->execs[i] == eid)
                applied[i] = as;
        return;
    }
    const struct by_exec key = {eid, 0};
    const struct by_exec *hit = bsearch(&key, ix, done->n, sizeof *ix, by_exec_cmp);
    if (!hit)
        return;
    while (hit > ix && hit[-1].eid == eid)
        hit--;
    for (; hit < ix + done->n && hit->eid == eid; hit++)
        applied[hit->i] = as;
}

int sq_queue_record(PGconn *conn, const struct sq_outcomes *done, char *applied, char *err, size_t errlen)
{
    struct outcome_params p;
    int rc = -1;
    if (!outcome_params(done, &p)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    const char *params[5] = {p.ids, p.execs, p.outcomes, p.delays, p.errors};
    PGresult *res = sq_db_check(conn, run_stmt(conn, outcomes_stmt(done), 5, params), err, errlen);
    if (!res)
        goto out;
    for (size_t i = 0; i < done->n; i++)
        applied[i] = SQ_COMPLETE_FENCED;
    struct by_exec *ix = by_exec_new(done);
    for (int r = 0; r < PQntuples(res); r++)
        read_applied(res, r, done, ix, applied);
    free(ix);
    PQclear(res);
    rc = 0;
out:
    outcome_params_free(&p);
    return rc;
}

/* The longest error a batch of one carries without an allocation. */
#define ONE_ERROR_MAX 2048

/*
 * A single completion: OUTCOMES_SQL with a batch of one, its array
 * literals written on the stack (no allocation unless the error is long).
 * outcome: 0 done, 1 retry, 2 fail (skipq_outcome's values).
 */
static enum sq_complete record_one(PGconn *conn, int64_t id, int64_t execution_id, int outcome, int64_t delay_ms,
                                   const char *error, char *err, size_t errlen)
{
    char ids[24], execs[24], outcomes[8], delays[24], stack[2 * ONE_ERROR_MAX + 3];
    snprintf(ids, sizeof ids, "{%" PRId64 "}", id);
    snprintf(execs, sizeof execs, "{%" PRId64 "}", execution_id);
    snprintf(outcomes, sizeof outcomes, "{%d}", outcome);
    snprintf(delays, sizeof delays, "{%" PRId64 "}", delay_ms);
    const char *one[1] = {error ? error : ""};
    size_t need = text_array_size(one, 1);
    char *errors = need <= sizeof stack ? stack : malloc(need);
    if (!errors) {
        snprintf(err, errlen, "out of memory");
        return SQ_COMPLETE_ERROR;
    }
    text_array_write(errors, one, 1);
    const char *params[5] = {ids, execs, outcomes, delays, errors};
    PGresult *res = sq_db_check(conn, run_stmt(conn, SQ_STMT_OUTCOMES, 5, params), err, errlen);
    if (errors != stack)
        free(errors);
    if (!res)
        return SQ_COMPLETE_ERROR;
    enum sq_complete r = PQntuples(res) == 1 ? applied_as(PQgetvalue(res, 0, 7)) : SQ_COMPLETE_FENCED;
    PQclear(res);
    return r;
}

enum sq_complete sq_queue_done(PGconn *conn, int64_t id, int64_t execution_id, char *err, size_t errlen)
{
    return record_one(conn, id, execution_id, 0, 0, "", err, errlen);
}

enum sq_complete sq_queue_fail(PGconn *conn, int64_t id, int64_t execution_id, bool permanent, int64_t delay_ms,
                               const char *error, char *err, size_t errlen)
{
    return record_one(conn, id, execution_id, permanent ? 2 : 1, delay_ms < 0 ? 0 : delay_ms, error, err, errlen);
}

int sq_queue_cycle(PGconn *conn, const char *queue, const char *kinds_array, const char *leases_array,
                   const char *worker, int limit, bool limited, const struct sq_outcomes *done,
                   struct sq_claimed *out, char *applied, char *err, size_t errlen)
{
    char lim[16], budget[24];
    snprintf(lim, sizeof lim, "%d", limit);
    snprintf(budget, sizeof budget, "%" PRId64, atomic_load(&claim_bytes));
    bool after = done->n > 0;
    struct outcome_params p = {0};
    PGresult *res[2] = {NULL, NULL};
    struct by_exec *ix = NULL;
    int n = -1;
    if (after && !outcome_params(done, &p)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    const char *outcomes[5] = {p.ids, p.execs, p.outcomes, p.delays, p.errors};
    const char *claim_params[6] = {queue, kinds_array, leases_array, worker, lim, budget};
    enum sq_stmt claim = limited ? (after ? SQ_STMT_CLAIM_LIMITED_NEXT : SQ_STMT_CLAIM_LIMITED)
                         : after ? SQ_STMT_CLAIM_NEXT
                         : limit == 1 ? SQ_STMT_CLAIM_ONE
                                      : SQ_STMT_CLAIM;
    int nclaim = claim == SQ_STMT_CLAIM_ONE ? 4 : 6; /* sq_claim_one takes no budget */
    if (after && limit == 0) /* nothing to claim: a LIMIT 0 claim would still lock a limited group's kinds */
        res[0] = sq_db_check(conn, run_stmt(conn, outcomes_stmt(done), 5, outcomes), err, errlen);
    else if (after)
        run_pair(conn, outcomes_stmt(done), 5, outcomes, claim, nclaim, claim_params, &res[0], &res[1], err, errlen);
    else
        res[0] = sq_db_check(conn, run_stmt(conn, claim, nclaim, claim_params), err, errlen);
    if (!res[0])
        goto out;
    for (size_t i = 0; applied && i < done->n; i++)
        applied[i] = SQ_COMPLETE_FENCED;
    ix = after ? by_exec_new(done) : NULL;
    n = 0;
    for (int k = 0; k < 2 && res[k] && n >= 0; k++) {
        for (int r = 0; r < PQntuples(res[k]) && n >= 0; r++) {
            if (PQgetvalue(res[k], r, 0)[0] == 'f')
                read_applied(res[k], r, done, ix, applied);
            else if (!read_claimed(res[k], r, 1, &out[n++]))
                n = claimed_oom(out, n, err, errlen);
        }
    }
out:
    free(ix);
    PQclear(res[0]);
    PQclear(res[1]);
    outcome_params_free(&p);
    return n;
}

/* A retention statement's count: deleted rows, -1 when another host holds
 * the 'retention' row, -2 on error. */
static int retain_count(PGconn *conn, enum sq_stmt stmt, int n, const char *const *params, char *err,
                        size_t errlen)
{
    PGresult *res = sq_db_check(conn, run_stmt(conn, stmt, n, params), err, errlen);
    if (!res)
        return -2;
    int count = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return count;
}

int sq_queue_retain(PGconn *conn, const char *status, int64_t age_ms, int limit, char *err, size_t errlen)
{
    char a[24], l[16];
    snprintf(a, sizeof a, "%" PRId64, age_ms);
    snprintf(l, sizeof l, "%d", limit);
    const char *params[3] = {status, a, l};
    return retain_count(conn, SQ_STMT_RETAIN, 3, params, err, errlen);
}

int sq_queue_retain_left(PGconn *conn, int64_t age_ms, int limit, char *err, size_t errlen)
{
    char a[24], l[16];
    snprintf(a, sizeof a, "%" PRId64, age_ms);
    snprintf(l, sizeof l, "%d", limit);
    const char *params[2] = {a, l};
    return retain_count(conn, SQ_STMT_RETAIN_LEFT, 2, params, err, errlen);
}

char *sq_text_array(const char *const *v, size_t n)
{
    char *s = malloc(text_array_size(v, n));
    if (s)
        text_array_write(s, v, n);
    return s;
}

int sq_queue_heartbeat(PGconn *conn, const int64_t *ids, const int64_t *execs, const int64_t *lease_ms, size_t n,
                       char *state, char *err, size_t errlen)
{
    char *a = sq_int8_array(ids, n), *b = sq_int8_array(execs, n), *c = sq_int8_array(lease_ms, n);
    int count = -1;
    if (!a || !b || !c) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    const char *params[3] = {a, b, c};
    PGresult *res = sq_db_check(conn, run_stmt(conn, SQ_STMT_HEARTBEAT, 3, params), err, errlen);
    if (!res)
        goto out;
    for (size_t i = 0; i < n; i++)
        state[i] = SQ_LEASE_LOST;
    count = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        bool ext = PQgetvalue(res, r, 0)[0] == 'x';
        int64_t eid = strtoll(PQgetvalue(res, r, 1), NULL, 10);
        for (size_t i = 0; i < n; i++) {
            if (execs[i] != eid)
                continue;
            if (ext) {
                state[i] = SQ_LEASE_EXTENDED;
                count++;
            } else if (state[i] == SQ_LEASE_LOST) {
                state[i] = SQ_LEASE_BUSY;
            }
        }
    }
    PQclear(res);
out:
    free(a);
    free(b);
    free(c);
    return count;
}

static int exec_count(PGconn *conn, enum sq_stmt stmt, int nparams, const char *const *params, char *err,
                      size_t errlen)
{
    PGresult *res = sq_db_check(conn, run_stmt(conn, stmt, nparams, params), err, errlen);
    if (!res)
        return -1;
    int n = PQntuples(res);
    PQclear(res);
    return n;
}

int sq_queue_reap(PGconn *conn, int limit, char *err, size_t errlen)
{
    return sq_queue_reap_kinds(conn, limit, NULL, NULL, err, errlen);
}

int sq_queue_reap_kinds(PGconn *conn, int limit, void (*each)(void *arg, const char *kind), void *arg, char *err,
                        size_t errlen)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *params[1] = {lim};
    PGresult *res = sq_db_check(conn, run_stmt(conn, SQ_STMT_REAP, 1, params), err, errlen);
    if (!res)
        return -1;
    int n = PQntuples(res);
    for (int i = 0; each && i < n; i++)
        each(arg, PQgetvalue(res, i, 0));
    PQclear(res);
    return n;
}

int sq_queue_recover(PGconn *conn, const char *worker, const int64_t *held, size_t n, char *err, size_t errlen)
{
    return sq_queue_give_back(conn, worker, held, n, "interrupted: the reply to its claim was lost with the connection",
                              err, errlen);
}

int sq_queue_give_back(PGconn *conn, const char *worker, const int64_t *held, size_t n, const char *why, char *err,
                       size_t errlen)
{
    char *a = sq_int8_array(held, n);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *params[3] = {worker, a, why};
    int count = exec_count(conn, SQ_STMT_RECOVER, 3, params, err, errlen);
    free(a);
    return count;
}

int sq_queue_end_backend(PGconn *conn, int pid, int wait_ms, char *err, size_t errlen)
{
    char p[16], w[16];
    snprintf(p, sizeof p, "%d", pid);
    snprintf(w, sizeof w, "%d", wait_ms);
    const char *params[2] = {p, w};
    PGresult *res = sq_db_check(conn, run_stmt(conn, SQ_STMT_END_BACKEND, 2, params), err, errlen);
    if (!res)
        return -1;
    bool gone = PQntuples(res) == 0 || strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return gone ? 1 : 0;
}

int sq_queue_release(PGconn *conn, const int64_t *ids, const int64_t *execs, size_t n, char *err, size_t errlen)
{
    char *a = sq_int8_array(ids, n), *b = sq_int8_array(execs, n);
    int count = -1;
    if (a && b) {
        const char *params[2] = {a, b};
        count = exec_count(conn, SQ_STMT_RELEASE, 2, params, err, errlen);
    } else {
        snprintf(err, errlen, "out of memory");
    }
    free(a);
    free(b);
    return count;
}

/* An execution's status (as text into st), or false when it cannot be read. */
static bool execution_status(PGconn *conn, int64_t id, int64_t execution_id, char *st, size_t stlen)
{
    char a[24], b[24];
    snprintf(a, sizeof a, "%" PRId64, id);
    snprintf(b, sizeof b, "%" PRId64, execution_id);
    const char *params[2] = {a, b};
    PGresult *res = run_stmt(conn, SQ_STMT_EXECUTION_STATUS, 2, params);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    if (ok)
        snprintf(st, stlen, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return ok;
}

enum sq_complete sq_queue_recorded(PGconn *conn, int64_t id, int64_t execution_id)
{
    char st[16];
    if (!execution_status(conn, id, execution_id, st, sizeof st))
        return SQ_COMPLETE_FENCED;
    return strcmp(st, "done") == 0    ? SQ_COMPLETE_DONE
           : strcmp(st, "retry") == 0 ? SQ_COMPLETE_RETRY
           : strcmp(st, "dead") == 0  ? SQ_COMPLETE_DEAD
                                      : SQ_COMPLETE_FENCED;
}

bool sq_queue_cancelled(PGconn *conn, int64_t id, int64_t execution_id)
{
    char st[16];
    if (!conn || PQstatus(conn) != CONNECTION_OK)
        return false;
    return execution_status(conn, id, execution_id, st, sizeof st) && strcmp(st, "cancelled") == 0;
}

bool sq_queue_committed_done(PGconn *conn, int64_t id, int64_t execution_id)
{
    char a[24], b[24];
    snprintf(a, sizeof a, "%" PRId64, id);
    snprintf(b, sizeof b, "%" PRId64, execution_id);
    const char *params[2] = {a, b};
    PGresult *res = run_stmt(conn, SQ_STMT_COMMITTED_DONE, 2, params);
    bool done = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    PQclear(res);
    return done;
}

static enum sq_waiter waiter_answer(PGconn *conn, enum sq_stmt stmt, int n, const char *const *params,
                                    char *since, size_t sincelen, char *err, size_t errlen)
{
    PGresult *res = sq_db_check(conn, run_stmt(conn, stmt, n, params), err, errlen);
    if (!res)
        return SQ_WAITER_ERROR;
    static const struct {
        const char *word;
        enum sq_waiter w;
    } words[] = {{"kept", SQ_WAITER_KEPT},       {"new", SQ_WAITER_NEW},   {"busy", SQ_WAITER_BUSY},
                 {"removed", SQ_WAITER_REMOVED}, {"gone", SQ_WAITER_GONE}};
    enum sq_waiter w = SQ_WAITER_ERROR;
    const char *v = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(v, words[i].word) == 0)
            w = words[i].w;
    if (w == SQ_WAITER_ERROR)
        snprintf(err, errlen, "unexpected answer \"%s\" from %s", v, statements[stmt].name);
    if (since)
        snprintf(since, sincelen, "%s", PQntuples(res) == 1 && PQnfields(res) > 1 ? PQgetvalue(res, 0, 1) : "");
    PQclear(res);
    return w;
}

enum sq_waiter sq_queue_waiter_set(PGconn *conn, const char *worker, const char *host, const char *queue,
                                   const char *kinds_array, const char *leases_array, int64_t valid_ms, char *since,
                                   size_t sincelen, char *err, size_t errlen)
{
    char valid[24];
    snprintf(valid, sizeof valid, "%" PRId64, valid_ms);
    const char *params[6] = {worker, host, queue, kinds_array, leases_array, valid};
    return waiter_answer(conn, SQ_STMT_WAITER_SET, 6, params, since, sincelen, err, errlen);
}

enum sq_waiter sq_queue_waiter_unset(PGconn *conn, const char *worker, bool wait, char *err, size_t errlen)
{
    const char *params[2] = {worker, wait ? "true" : "false"};
    return waiter_answer(conn, SQ_STMT_WAITER_UNSET, 2, params, NULL, 0, err, errlen);
}

enum sq_waiter sq_queue_waiter_gone(PGconn *conn, const char *worker, char *err, size_t errlen)
{
    const char *params[1] = {worker};
    return waiter_answer(conn, SQ_STMT_WAITER_GONE, 1, params, NULL, 0, err, errlen);
}

int sq_queue_handed(PGconn *conn, const char *worker, const int64_t *ids, size_t nids, const char *since,
                    const int64_t *held, size_t nheld, struct sq_claimed *out, int cap, char *err, size_t errlen)
{
    char *a = ids ? sq_int8_array(ids, nids) : sq_int8_array(held, 0);
    char *b = sq_int8_array(held, nheld);
    char lim[16];
    snprintf(lim, sizeof lim, "%d", cap);
    int n = -1;
    PGresult *res = NULL;
    if (!a || !b) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    const char *params[5] = {worker, a, b, lim, since};
    res = sq_db_check(conn, run_stmt(conn, ids ? SQ_STMT_HANDED : SQ_STMT_HANDED_ANY, ids ? 4 : 5, params), err,
                      errlen);
    if (!res)
        goto out;
    n = 0;
    for (int r = 0; r < PQntuples(res) && r < cap && n >= 0; r++)
        if (!read_claimed(res, r, 1, &out[n++]))
            n = claimed_oom(out, n, err, errlen);
out:
    PQclear(res);
    free(a);
    free(b);
    return n;
}
