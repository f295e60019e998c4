-- 053: skipq's mutual exclusions are row locks on skipq's own rows.
--
-- Hosts used advisory lock keys to serialise the claims of a limited kind
-- (claim_allowance, 020) and to let one host at a time run retention, the
-- totals (advance_totals, 008) and priority aging of a queue. Advisory locks
-- need no privilege: any role that could connect -- an application role
-- with only skipq_enqueuer -- could take a key and keep it, and every
-- host's claims of that kind waited for as long as it liked, or every host
-- skipped that housekeeping for good. A row lock (SELECT ... FOR UPDATE,
-- FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE) needs UPDATE on the table or
-- on one of its columns, which only skipq's owner and the worker role have
-- on these tables (sql/roles.sql), so only they can hold them now:
--
-- - claim_allowance() locks the skipq.kind_limits rows of the limited
--   kinds it is asked about, in kind order, FOR NO KEY UPDATE: that
--   conflicts with itself and with the updates hosts make to those rows
--   (the rate window, a new limit), so claims of a kind are serialised
--   exactly as before, held to the end of the claim's transaction.
-- - skipq.housekeeping holds one row per task that one host at a time
--   does: 'retention', 'totals', and 'aging/QUEUE' for each queue that a
--   host ages (the first such host adds its row). A host takes its row
--   FOR NO KEY UPDATE SKIP LOCKED; if another host holds it, it skips this
--   round, as it did when it could not get the advisory lock.
--
-- `skipq migrate` keeps an advisory key only until the schema exists (see
-- core/client/migrate.c).
CREATE TABLE skipq.housekeeping (
    task     text    PRIMARY KEY
             CHECK (task IN ('retention', 'totals') OR task ~ '^aging/[A-Za-z0-9_.:-]{1,128}$'),
    -- No meaning to skipq. PostgreSQL lets a role lock a row only if it may
    -- update the table or one of its columns; the roles that take these
    -- locks are granted UPDATE on this column alone, so they can neither
    -- rename a task nor lock the whole table (sql/roles.sql).
    lockable boolean NOT NULL DEFAULT true
);
INSERT INTO skipq.housekeeping (task) VALUES ('retention'), ('totals');

-- As in 020, but the locks are the kinds' rows. Lock first, count after:
-- the row locks (one per limited kind, in kind order, held to the end of
-- the caller's transaction) serialise the claims of a kind, and the count
-- runs in a statement of its own, whose snapshot is taken after the locks
-- and so sees every claim committed by the previous holder. (A count in
-- the claim statement itself would use a snapshot from before the lock
-- wait and could admit too many.) A kind whose row goes while a claim
-- waits for it is not locked, and not counted either: it is no longer
-- limited.
CREATE OR REPLACE FUNCTION skipq.claim_allowance(kinds text[], finishing bigint[])
RETURNS TABLE (kind text, allowed int, at timestamptz)
LANGUAGE plpgsql VOLATILE ROWS 2
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM FROM skipq.kind_limits l
      WHERE l.kind OPERATOR(pg_catalog.=) ANY (kinds)
      ORDER BY l.kind
        FOR NO KEY UPDATE OF l;
    t := pg_catalog.clock_timestamp();
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

-- As in 008, but one caller at a time by the 'totals' row.
CREATE OR REPLACE FUNCTION skipq.advance_totals(lag_ms bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_mark timestamptz;
    new_mark timestamptz := now() - greatest(lag_ms, 0) * interval '1 millisecond';
    added bigint;
BEGIN
    PERFORM FROM skipq.housekeeping h
      WHERE h.task OPERATOR(pg_catalog.=) 'totals'
        FOR NO KEY UPDATE OF h SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    SELECT least(new_mark, min(a.xact_start)) INTO new_mark FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL;
    SELECT m.through INTO old_mark FROM skipq.job_totals_mark m FOR UPDATE;
    IF old_mark IS NULL OR new_mark <= old_mark THEN
        RETURN 0;
    END IF;
    WITH f AS (
        SELECT j.queue, j.kind, count(*) FILTER (WHERE j.status = 'done') AS done,
               count(*) FILTER (WHERE j.status = 'dead') AS dead,
               count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
          FROM skipq.jobs j
         WHERE j.finished_at >= old_mark AND j.finished_at < new_mark
           AND j.status IN ('done', 'dead', 'cancelled')
         GROUP BY j.queue, j.kind
    ), up AS (
        INSERT INTO skipq.job_totals AS t (queue, kind, done, dead, cancelled)
        SELECT queue, kind, done, dead, cancelled FROM f
        ON CONFLICT (queue, kind) DO UPDATE
           SET done = t.done + excluded.done, dead = t.dead + excluded.dead,
               cancelled = t.cancelled + excluded.cancelled
    )
    SELECT coalesce(sum(f.done + f.dead + f.cancelled), 0) INTO added FROM f;
    UPDATE skipq.job_totals_mark SET through = new_mark;
    DELETE FROM skipq.hosts h WHERE h.heartbeat_at < now() - interval '1 day';
    RETURN added;
END
$$;
