-- 057: a handler's output, kept on its attempt's execution row.
--
-- A handler (plugin ABI 1.1) may hand the host one JSON value as the
-- attempt's result (skipq_job_output): the host checks it is JSON of at most
-- 64 KiB and writes it here after the attempt's outcome, whatever the
-- outcome, so a job's result need not go to a table of its own. Read it
-- with `skipq jobs show ID` or in SQL:
--
--     SELECT output FROM skipq.job_executions WHERE job_id = $1 ORDER BY id DESC LIMIT 1;
--
-- The bound below is jsonb's rendering, a little longer than the text the
-- host accepted (jsonb adds a space after ',' and ':'), so it never refuses
-- what the host let through and still bounds what a worker role can write.
-- NOT VALID: the column is new (all NULL), so there is nothing to scan.
ALTER TABLE skipq.job_executions ADD COLUMN output jsonb;
ALTER TABLE skipq.job_executions ADD CONSTRAINT job_executions_output_size
    CHECK (pg_catalog.octet_length(output::pg_catalog.text) OPERATOR(pg_catalog.<=) 196608) NOT VALID;
