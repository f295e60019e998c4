-- 040: make the audit row cheaper to write. Every job attempt inserts one
-- skipq.job_executions row when it is claimed and updates it once when it
-- ends, so what that table costs per row is paid by every job.
--
-- 1. job_executions_one_open (at most one 'running' row per job) named
--    status in its predicate, and PostgreSQL never makes an update HOT when
--    a column an index depends on changes: every completion wrote a new
--    entry into each of the table's indexes. What it guarded is already
--    guaranteed where the rows are written: a claim inserts the row while it
--    holds the job's row lock and points jobs.current_execution_id at it,
--    and every outcome is fenced on that id, so a second open row cannot be
--    made and a stale one cannot be closed.
-- 2. With free room on each page, the completion's new row version goes on
--    the same page as the old one (a HOT update: no index entries at all).
--    Rows are inserted in claim order and finished soon after, so the room
--    left by the fill factor is reused as the page's old versions are pruned.
-- 3. The foreign key to skipq.jobs ran a lookup of the job for every
--    inserted row, inside the statement that had just locked that job to
--    make the row. Its ON DELETE CASCADE is kept as a statement-level
--    trigger: deleting jobs (retention, by hand) still deletes their history
--    in the same statement. TRUNCATE no longer reaches job_executions; name
--    both tables.
DROP INDEX skipq.job_executions_one_open;

ALTER TABLE skipq.job_executions SET (fillfactor = 75);

ALTER TABLE skipq.job_executions DROP CONSTRAINT job_executions_job_id_fkey;

CREATE FUNCTION skipq.jobs_deleted() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- By index, whatever the planner guesses about the transition table.
    DELETE FROM skipq.job_executions WHERE job_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION skipq.jobs_deleted() FROM PUBLIC;

CREATE TRIGGER jobs_deleted
    AFTER DELETE ON skipq.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION skipq.jobs_deleted();
