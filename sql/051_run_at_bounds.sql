-- 051: run_at within fixed, sane bounds, whoever writes the row.
--
-- The enqueue functions refuse an infinite or far-off run_at, but a row
-- written directly -- the bulk role's COPY or INSERT, a worker's UPDATE --
-- was held by nothing: a run_at of '-infinity' made `skipq stats` fail for
-- everyone and froze the hosts' gauges. This CHECK holds every writer to
-- [1970-01-01, 2300-01-01) UTC. A CHECK must be immutable, so the bounds
-- are fixed instants, not now(); the functions keep their tighter rule (at
-- most 10 years ahead), and a host caps retry delays at 10 years, both well
-- inside it.
--
-- Rows already out of bounds are brought inside rather than refused, so an
-- upgrade never stops on them: a run_at before 1970 (-infinity included)
-- becomes 1970-01-01, the earliest allowed -- it was due, and stays first
-- in line; one from 2300 on (infinity included) becomes the last
-- microsecond before 2300 -- it was never going to run, and still is not
-- (cancel it if it should go). A WARNING names how many moved and the
-- first ids. Finding them reads the whole table once.
ALTER TABLE skipq.jobs ADD CONSTRAINT jobs_run_at_range
    CHECK (run_at >= '1970-01-01 00:00:00+00' AND run_at < '2300-01-01 00:00:00+00') NOT VALID;

DO $$
DECLARE
    ids bigint[];
BEGIN
    WITH m AS (
        UPDATE skipq.jobs j
           SET run_at = CASE WHEN j.run_at < '1970-01-01 00:00:00+00' THEN '1970-01-01 00:00:00+00'::timestamptz
                             ELSE '2299-12-31 23:59:59.999999+00'::timestamptz END
         WHERE NOT (j.run_at >= '1970-01-01 00:00:00+00' AND j.run_at < '2300-01-01 00:00:00+00')
        RETURNING j.id
    )
    SELECT array_agg(m.id ORDER BY m.id) INTO ids FROM m;
    IF ids IS NOT NULL THEN
        RAISE WARNING 'skipq migration 051: % job(s) had a run_at outside [1970, 2300) and were moved to the nearest bound: %',
            cardinality(ids), array_to_string(ids[1:20], ', ') || CASE WHEN cardinality(ids) > 20 THEN ', ...' ELSE '' END;
    END IF;
END
$$;

ALTER TABLE skipq.jobs VALIDATE CONSTRAINT jobs_run_at_range;
