-- 002: refuse bad input at the door, whoever enqueues.
--
-- Names: 1-128 characters of [A-Za-z0-9_.:-], so a kind or queue can be
-- logged, put in a config file or a metric label without quoting surprises.
-- Payloads: at most skipq.settings.max_payload_bytes (default 1 MiB) of JSON
-- text; jsonb itself refuses malformed JSON, NUL bytes ("\u0000") and, in a
-- UTF8 database, invalid UTF-8. Priorities, attempts and run_at have sane
-- bounds so a typo cannot park a job for a thousand years.

CREATE TABLE skipq.settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO skipq.settings (key, value) VALUES ('max_payload_bytes', '1048576');

-- NOT VALID: enforced for every new or updated row, without failing the
-- migration on rows written before it.
ALTER TABLE skipq.jobs
    ADD CONSTRAINT jobs_kind_name CHECK (kind ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID,
    ADD CONSTRAINT jobs_queue_name CHECK (queue ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID,
    ADD CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -1000000 AND 1000000) NOT VALID;

CREATE OR REPLACE FUNCTION skipq.enqueue(
    kind         text,
    payload      jsonb       DEFAULT '{}',
    queue        text        DEFAULT 'default',
    priority     int         DEFAULT 0,
    run_at       timestamptz DEFAULT now(),
    max_attempts int         DEFAULT 5
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    size_limit bigint;
    size bigint;
BEGIN
    IF kind IS NULL OR kind = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: kind must not be empty' USING ERRCODE = '22023';
    END IF;
    IF kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'skipq.enqueue: kind "%" is not 1-128 characters of letters, digits and _.:-',
            left(kind, 200) USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: queue must not be empty' USING ERRCODE = '22023';
    END IF;
    IF queue !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'skipq.enqueue: queue "%" is not 1-128 characters of letters, digits and _.:-',
            left(queue, 200) USING ERRCODE = '22023';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 100000 THEN
        RAISE EXCEPTION 'skipq.enqueue: max_attempts must be from 1 to 100000 (got %)', max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority < -1000000 OR priority > 1000000 THEN
        RAISE EXCEPTION 'skipq.enqueue: priority must be from -1000000 to 1000000 (got %)', priority
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND (run_at > now() + interval '10 years' OR run_at = 'infinity'
                               OR run_at = '-infinity') THEN
        RAISE EXCEPTION 'skipq.enqueue: run_at % is more than 10 years away', run_at
            USING ERRCODE = '22023';
    END IF;
    SELECT s.value::bigint INTO size_limit FROM skipq.settings s WHERE s.key = 'max_payload_bytes';
    size := octet_length(coalesce(payload, '{}')::text);
    IF size > coalesce(size_limit, 1048576) THEN
        RAISE EXCEPTION 'skipq.enqueue: payload is % bytes; the limit is % (skipq.settings max_payload_bytes)',
            size, coalesce(size_limit, 1048576) USING ERRCODE = '22023';
    END IF;
    INSERT INTO skipq.jobs (queue, kind, payload, priority, run_at, max_attempts)
    VALUES (enqueue.queue, enqueue.kind, coalesce(enqueue.payload, '{}'),
            enqueue.priority, coalesce(enqueue.run_at, now()), enqueue.max_attempts)
    RETURNING id INTO new_id;
    RETURN new_id;
END
$$;
