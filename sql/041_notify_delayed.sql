-- 041: announce delayed jobs too. A job inserted with run_at in the future
-- used to be found only by the next poll after it fell due (up to
-- [host] poll_interval late). Now an insert statement also sends, per queue,
-- when the earliest of its delayed jobs falls due: the payload
-- 'QUEUE +MS', MS milliseconds from the moment the trigger ran. Hosts keep
-- a short list of such times per queue and wake one idle thread when each
-- comes (see core/worker.c). A queue name never holds a space, so a host
-- that predates this reads 'QUEUE +MS' as a queue it does not serve and
-- ignores it. One pass over the inserted rows serves both announcements.
CREATE OR REPLACE FUNCTION skipq.notify_ready() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT n.queue, bool_or(n.run_at <= now()) AS ready, min(n.run_at) FILTER (WHERE n.run_at > now()) AS due
               FROM new_rows n WHERE n.status = 'pending' GROUP BY n.queue LOOP
        IF r.ready THEN
            PERFORM pg_notify('skipq_jobs', r.queue);
        END IF;
        IF r.due IS NOT NULL THEN
            PERFORM pg_notify('skipq_jobs', r.queue || ' +' ||
                              greatest(0, ceil(extract(epoch FROM r.due - clock_timestamp()) * 1000))::bigint);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
