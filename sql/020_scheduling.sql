-- 020: cron schedules, per-kind limits and priority aging.
--
-- cron_state: one row per [cron NAME] section. last_tick is the latest tick
-- already enqueued (or, for a new schedule, the moment it was first seen).
-- A host enqueues ticks only with a compare-and-set on last_tick in the same
-- statement, so racing hosts can never enqueue a tick twice.
CREATE TABLE skipq.cron_state (
    name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    schedule   text        NOT NULL,
    timezone   text        NOT NULL,
    last_tick  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- kind_limits: global limits of a kind, whatever host claims it. The running
-- count is never stored: it is counted from the running jobs under a lock,
-- so every way a job leaves running (done, retry, dead, lease expiry,
-- release at shutdown, cancel) frees its slot with nothing to keep in step.
-- The rate is a fixed window of the database clock: at most `rate` claims
-- per whole second (or minute) -- window_start/window_count.
CREATE TABLE skipq.kind_limits (
    kind         text        PRIMARY KEY CHECK (kind ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    max_running  int         CHECK (max_running >= 1),
    rate         int         CHECK (rate >= 1),
    rate_unit    text        CHECK (rate_unit IN ('second', 'minute')),
    window_start timestamptz,
    window_count int         NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate IS NULL) = (rate_unit IS NULL)),
    CHECK (max_running IS NOT NULL OR rate IS NOT NULL)
);

-- Priority aging raises `priority` of jobs that waited; the priority they
-- were enqueued with is kept here (NULL: never aged).
ALTER TABLE skipq.jobs ADD COLUMN base_priority int;

-- How many jobs of each limited kind in `kinds` the caller may claim now
-- (kinds without a row are not returned: unlimited), and `at`, the moment
-- the caller was admitted: claims through this function record it as their
-- started_at and count it into the rate window, so both can be audited
-- exactly from job_executions. `finishing` are the executions whose
-- outcomes the calling statement records: they are leaving running, so they
-- do not count.
--
-- Lock first, count after: the advisory locks (one per limited kind, in a
-- fixed order, held to the end of the caller's transaction) serialise the
-- claims of a kind, and the count runs in a statement of its own, whose
-- snapshot is taken after the lock and so sees every claim committed by
-- the previous holder. (A count in the claim statement itself would use a
-- snapshot from before the lock wait and could admit too many.)
--
-- ROWS 2: a group serves a few limited kinds. With the default estimate of
-- 1000 rows the claim statement's estimated cost crosses jit_above_cost and
-- every claim paid for JIT compilation (100 ms and more).
CREATE FUNCTION skipq.claim_allowance(kinds text[], finishing bigint[])
RETURNS TABLE (kind text, allowed int, at timestamptz)
LANGUAGE plpgsql VOLATILE ROWS 2
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(495946, s.h)
       FROM (SELECT DISTINCT hashtext(l.kind) AS h FROM skipq.kind_limits l
              WHERE l.kind = ANY(kinds) ORDER BY 1) s;
    t := clock_timestamp();
    RETURN QUERY
    SELECT l.kind,
           greatest(0, least(
               coalesce(l.max_running - (SELECT count(*) FROM skipq.jobs j
                                          WHERE j.status = 'running' AND j.kind = l.kind
                                            AND NOT (j.current_execution_id = ANY(coalesce(finishing, '{}')))),
                        2147483647),
               CASE WHEN l.rate IS NULL THEN 2147483647
                    WHEN l.window_start = date_trunc(l.rate_unit, t) THEN l.rate - l.window_count
                    ELSE l.rate END))::int,
           t
      FROM skipq.kind_limits l
     WHERE l.kind = ANY(kinds);
END
$$;
