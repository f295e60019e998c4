-- 059: skipq.finish_dropping() checks the kind's keep_done itself.
--
-- Why: a host whose done jobs are all of kinds it runs with keep_done = off
-- now hands them to finish_dropping() before locking them (queue.c,
-- OUTCOMES_DROPPING_SQL): the lock the outcome statement took only to read
-- each row, and then deleted it, was one WAL record and one more index
-- probe per job. Which kinds drop their done jobs is skipq.kind_options'
-- to say, not the host's (the last host to write a kind's row sets it), so
-- the delete now asks it on each row, as the outcome statement did when it
-- alone decided. For a caller that decided already (058's outcome
-- statement, hosts of the previous version) the test is the same one again.
CREATE OR REPLACE FUNCTION skipq.finish_dropping(ids bigint[], eids bigint[])
RETURNS TABLE (job_id bigint, execution_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(cardinality(ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM set_config('skipq.keep_executions', 'on', true);
    RETURN QUERY
    WITH d AS (
        DELETE FROM skipq.jobs j
         USING ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(eids)) AS f(id, eid)
         WHERE j.id OPERATOR(pg_catalog.=) f.id AND j.current_execution_id OPERATOR(pg_catalog.=) f.eid
           AND j.status OPERATOR(pg_catalog.=) (SELECT 'running'::text)
           AND j.ordering_key IS NULL AND NOT j.has_dependents AND j.unique_until IS NULL
           AND j.kind OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT o.kind FROM skipq.kind_options o WHERE NOT o.keep_done))
        RETURNING j.current_execution_id AS eid, j.queue, j.kind
    ), e AS (
        UPDATE skipq.job_executions x
           SET status = 'done', finished_at = now(), error = NULL, queue = d.queue, kind = d.kind
          FROM d WHERE x.id OPERATOR(pg_catalog.=) d.eid
        RETURNING x.job_id, x.id
    ), t AS (
        INSERT INTO skipq.done_counts (queue, kind, at, n)
        SELECT d.queue, d.kind, now(), count(*) FROM d GROUP BY d.queue, d.kind
    )
    SELECT e.job_id, e.id FROM e;
    PERFORM set_config('skipq.keep_executions', '', true);
END
$$;
REVOKE ALL ON FUNCTION skipq.finish_dropping(bigint[], bigint[]) FROM PUBLIC;
