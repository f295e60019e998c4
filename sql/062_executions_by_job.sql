-- 062: skipq.job_executions is keyed by (job_id, id), one b-tree instead of two.
--
-- Why: every claim inserts an execution row, and every outcome whose new
-- row version leaves the page (most of a busy drain's) writes it again in
-- each of the table's b-trees. There were two: the primary key on id, and
-- job_executions_job on job_id, which history, retention and the delete
-- cascade read. Every statement that reaches an execution by its id also
-- knows its job (jobs.current_execution_id is read on the job's row, and
-- the host carries both), so one index on (job_id, id) serves both and
-- each of those writes is one leaf insert shorter. A drain of 20,000 jobs
-- with the job_id index dropped ran 3-7 % faster in every one of four
-- alternated rounds (bench/README.md, "One b-tree for the audit row").
-- A lookup by execution id alone (ad hoc) no longer has an index: name the
-- job too (`WHERE job_id = $1 AND id = $2`).
--
-- The new key is built inside the migration's transaction, which holds the
-- table's lock meanwhile: seconds for millions of rows, during which claims
-- wait.
ALTER TABLE skipq.job_executions
    DROP CONSTRAINT job_executions_pkey,
    ADD CONSTRAINT job_executions_pkey PRIMARY KEY (job_id, id);
DROP INDEX skipq.job_executions_job;

-- The done row's execution, reached by its job as well (its key).
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
        RETURNING j.id AS jid, j.current_execution_id AS eid, j.queue, j.kind
    ), e AS (
        UPDATE skipq.job_executions x
           SET status = 'done', finished_at = now(), error = NULL, queue = d.queue, kind = d.kind
          FROM d WHERE x.job_id OPERATOR(pg_catalog.=) d.jid AND x.id OPERATOR(pg_catalog.=) d.eid
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
