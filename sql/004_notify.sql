-- 004: wake idle hosts when jobs become runnable, instead of waiting for their
-- next poll. One notification per statement and queue (a statement-level
-- trigger over the inserted rows), and PostgreSQL folds identical ones
-- within a transaction, so bulk enqueues do not pay per row. Only rows
-- runnable now are announced; delayed jobs are found by polling. The payload
-- is the queue name. Hosts treat a notification as a hint: polling remains
-- the path that guarantees progress.
CREATE FUNCTION skipq.notify_ready() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT n.queue FROM new_rows n WHERE n.status = 'pending' AND n.run_at <= now() LOOP
        PERFORM pg_notify('skipq_jobs', q);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_ready
    AFTER INSERT ON skipq.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION skipq.notify_ready();
