-- 005: enqueue many jobs in one statement.
--
-- skipq.enqueue_many(jobs jsonb) takes a JSON array of objects
--   {"kind": "...", "payload": {...}, "queue": "...", "priority": 0,
--    "run_at": "2026-01-01T00:00:00Z", "delay_ms": 0, "max_attempts": 5}
-- where only "kind" is required, and returns the new ids in input order.
-- It applies the same rules as skipq.enqueue(), checked for the whole batch
-- before anything is written, and names the first offending element (0-based)
-- and field. One INSERT for the batch: one statement-level NOTIFY per queue.
-- Does t read as a finite timestamp at most 10 years ahead? (A bad value is
-- a refusal naming the element, not a cast error naming nothing.)
CREATE FUNCTION skipq.valid_run_at(t text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ts timestamptz;
BEGIN
    ts := t::timestamptz;
    RETURN isfinite(ts) AND ts <= now() + interval '10 years';
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

CREATE FUNCTION skipq.enqueue_many(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    size_limit bigint;
    bad record;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'skipq.enqueue_many: jobs must be a JSON array of objects' USING ERRCODE = '22023';
    END IF;
    SELECT s.value::bigint INTO size_limit FROM skipq.settings s WHERE s.key = 'max_payload_bytes';
    size_limit := coalesce(size_limit, 1048576);

    SELECT i - 1 AS idx, problem INTO bad FROM (
        SELECT i,
            CASE
            WHEN jsonb_typeof(j) <> 'object' THEN 'is not an object'
            WHEN jsonb_typeof(j -> 'kind') IS DISTINCT FROM 'string'
                 OR (j ->> 'kind') !~ '^[A-Za-z0-9_.:-]{1,128}$'
                THEN 'kind must be 1-128 characters of letters, digits and _.:-'
            WHEN j ? 'queue' AND (jsonb_typeof(j -> 'queue') <> 'string'
                 OR (j ->> 'queue') !~ '^[A-Za-z0-9_.:-]{1,128}$')
                THEN 'queue must be 1-128 characters of letters, digits and _.:-'
            WHEN j ? 'priority' AND (jsonb_typeof(j -> 'priority') <> 'number'
                 OR (j ->> 'priority') !~ '^-?[0-9]{1,7}$'
                 OR (j ->> 'priority')::int NOT BETWEEN -1000000 AND 1000000)
                THEN 'priority must be a whole number from -1000000 to 1000000'
            WHEN j ? 'max_attempts' AND (jsonb_typeof(j -> 'max_attempts') <> 'number'
                 OR (j ->> 'max_attempts') !~ '^[0-9]{1,6}$'
                 OR (j ->> 'max_attempts')::int NOT BETWEEN 1 AND 100000)
                THEN 'max_attempts must be a whole number from 1 to 100000'
            WHEN j ? 'delay_ms' AND (jsonb_typeof(j -> 'delay_ms') <> 'number'
                 OR (j ->> 'delay_ms') !~ '^[0-9]{1,12}$'
                 OR (j ->> 'delay_ms')::bigint > 315360000000)
                THEN 'delay_ms must be a whole number of milliseconds, at most 10 years'
            WHEN j ? 'run_at' AND j ? 'delay_ms' THEN 'give run_at or delay_ms, not both'
            WHEN j ? 'run_at' AND (jsonb_typeof(j -> 'run_at') <> 'string'
                 OR NOT skipq.valid_run_at(j ->> 'run_at'))
                THEN 'run_at must be a timestamp no more than 10 years ahead'
            WHEN octet_length(coalesce(j -> 'payload', '{}'::jsonb)::text) > size_limit
                THEN format('payload is %s bytes; the limit is %s',
                            octet_length((j -> 'payload')::text), size_limit)
            END AS problem
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(j, i)
    ) checks WHERE problem IS NOT NULL ORDER BY i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skipq.enqueue_many: job %: %', bad.idx, bad.problem USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT i,
               j ->> 'kind' AS kind,
               coalesce(j -> 'payload', '{}'::jsonb) AS payload,
               coalesce(j ->> 'queue', 'default') AS queue,
               coalesce((j ->> 'priority')::int, 0) AS priority,
               CASE WHEN j ? 'run_at' THEN (j ->> 'run_at')::timestamptz
                    ELSE now() + coalesce((j ->> 'delay_ms')::bigint, 0) * interval '1 millisecond' END AS run_at,
               coalesce((j ->> 'max_attempts')::int, 5) AS max_attempts
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(j, i)
    ), ins AS (
        INSERT INTO skipq.jobs (queue, kind, payload, priority, run_at, max_attempts)
        SELECT queue, kind, payload, priority, run_at, max_attempts FROM input ORDER BY i
        RETURNING id
    )
    SELECT id FROM ins ORDER BY id;
END
$$;
