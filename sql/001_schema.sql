-- 001: the job table, the audit table of attempts, and skipq.enqueue().
--
-- Everything lives in schema skipq. Every function pins its search_path so a
-- caller's search_path can never redirect what it touches.

CREATE TABLE skipq.jobs (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue                text        NOT NULL,
    kind                 text        NOT NULL,
    payload              jsonb       NOT NULL DEFAULT '{}',
    priority             int         NOT NULL DEFAULT 0,
    status               text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'dead', 'cancelled')),
    attempts             int         NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts         int         NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    run_at               timestamptz NOT NULL DEFAULT now(),
    created_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    lease_expires_at     timestamptz,
    locked_by            text,
    current_execution_id bigint,
    last_error           text,
    CHECK (status <> 'running' OR (lease_expires_at IS NOT NULL AND current_execution_id IS NOT NULL))
);

-- The claim reads only this index: one queue, best priority first, then the
-- earliest run_at, then FIFO. Finished rows are not in it, so the claim costs
-- the same however much history the table holds.
CREATE INDEX jobs_ready ON skipq.jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';

-- The lease sweep reads only running rows.
CREATE INDEX jobs_lease ON skipq.jobs (lease_expires_at)
    WHERE status = 'running';

CREATE TABLE skipq.job_executions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The foreign key takes FOR KEY SHARE on the job row when an attempt is
    -- inserted; claims therefore lock with FOR NO KEY UPDATE, which does not
    -- conflict with it (FOR UPDATE would silently skip such rows).
    job_id      bigint      NOT NULL REFERENCES skipq.jobs (id) ON DELETE CASCADE,
    attempt     int         NOT NULL CHECK (attempt >= 1),
    worker      text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    status      text        NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'done', 'retry', 'dead', 'lost', 'interrupted')),
    error       text
);

CREATE INDEX job_executions_job ON skipq.job_executions (job_id);

-- At most one open attempt per job, whatever a bug elsewhere might try.
CREATE UNIQUE INDEX job_executions_one_open ON skipq.job_executions (job_id)
    WHERE status = 'running';

CREATE FUNCTION skipq.enqueue(
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
BEGIN
    IF kind IS NULL OR kind = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: kind must not be empty'
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: queue must not be empty'
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'skipq.enqueue: max_attempts must be at least 1 (got %)', max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL THEN
        RAISE EXCEPTION 'skipq.enqueue: priority must not be null'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO skipq.jobs (queue, kind, payload, priority, run_at, max_attempts)
    VALUES (enqueue.queue, enqueue.kind, coalesce(enqueue.payload, '{}'),
            enqueue.priority, coalesce(enqueue.run_at, now()), enqueue.max_attempts)
    RETURNING id INTO new_id;
    RETURN new_id;
END
$$;

-- Queue tables churn: vacuum them early and often.
ALTER TABLE skipq.jobs SET (autovacuum_vacuum_scale_factor = 0.02,
                            autovacuum_analyze_scale_factor = 0.02);
