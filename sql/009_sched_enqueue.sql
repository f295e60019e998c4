-- 009: enqueue-time scheduling: unique jobs, per-key serial order, and
-- dependencies between jobs.
--
-- Unique jobs. A job with a unique_key holds that key while it is blocked,
-- pending or running; enqueueing again with the key returns the holder's id
-- instead of adding a job. With unique_for, the key is held until
-- unique_until (enqueue time + unique_for) as well, even after the job has
-- finished. A partial unique index is the arbiter, so concurrent enqueuers
-- cannot both add a job: the loser of INSERT ... ON CONFLICT DO NOTHING
-- waits for the winner's transaction and then finds its row.
--
-- Serial order. Jobs with the same ordering_key run one at a time, in
-- enqueue (id) order. The claim only considers the first blocked, pending or
-- running job of a key (index jobs_ordering), and takes the key's row in
-- skipq.ordering_keys with INSERT ... ON CONFLICT DO UPDATE ... WHERE
-- job_id = this job: a row lock that, unlike a snapshot read, cannot be
-- fooled by a claim that committed after the claiming statement started.
-- The row names the job that holds the key; it is deleted when that job
-- ends (done, dead or cancelled; trigger jobs_ended), so a job waiting to
-- retry keeps the key.
--
-- Dependencies. A job enqueued with depends_on waits in status 'blocked',
-- which the claim never reads, until every parent is done; a parent that
-- ends dead or cancelled makes it dead, naming the parent. Parents must
-- already exist, so the graph cannot have a cycle. Parents are flagged
-- has_dependents; only their ends run the release (trigger jobs_ended), so
-- jobs without dependents and without an ordering_key pay nothing beyond
-- the trigger's WHEN test.

ALTER TABLE skipq.jobs
    ADD COLUMN unique_key     text,
    ADD COLUMN unique_until   timestamptz,
    ADD COLUMN ordering_key   text,
    ADD COLUMN depends_on     bigint[],
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;

ALTER TABLE skipq.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE skipq.jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('blocked', 'pending', 'running', 'done', 'dead', 'cancelled'));
ALTER TABLE skipq.jobs
    ADD CONSTRAINT jobs_unique_key_length CHECK (length(unique_key) BETWEEN 1 AND 256),
    ADD CONSTRAINT jobs_ordering_key_length CHECK (length(ordering_key) BETWEEN 1 AND 256);

CREATE UNIQUE INDEX jobs_unique ON skipq.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND (status IN ('blocked', 'pending', 'running') OR unique_until IS NOT NULL);

CREATE INDEX jobs_ordering ON skipq.jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('blocked', 'pending', 'running');

-- Blocked children by parent: only blocked rows are in it.
CREATE INDEX jobs_blocked_on ON skipq.jobs USING gin (depends_on)
    WHERE status = 'blocked';

-- Which job holds each ordering key: the one running it, or the one waiting
-- to retry after running it.
CREATE TABLE skipq.ordering_keys (
    ordering_key text   PRIMARY KEY,
    job_id       bigint NOT NULL
);
ALTER TABLE skipq.ordering_keys SET (autovacuum_vacuum_scale_factor = 0.02,
                                     autovacuum_analyze_scale_factor = 0.02);

-- A job with an ordering key or dependents ended: free its key, and settle
-- its blocked children. Each child is locked before its parents are read,
-- and each read is a fresh snapshot (READ COMMITTED), so two parents
-- finishing at once cannot both miss the other: the second to lock the
-- child sees the first one done. Children freed or killed wake their
-- queue's idle hosts, as does the freed key.
CREATE FUNCTION skipq.job_ended() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    child record;
    why text;
BEGIN
    IF NEW.ordering_key IS NOT NULL THEN
        DELETE FROM skipq.ordering_keys k WHERE k.ordering_key = NEW.ordering_key AND k.job_id = NEW.id;
        PERFORM pg_notify('skipq_jobs', NEW.queue);
    END IF;
    IF NOT NEW.has_dependents THEN
        RETURN NULL;
    END IF;
    why := CASE NEW.status WHEN 'done' THEN NULL
                           WHEN 'cancelled' THEN format('parent job %s was cancelled', NEW.id)
                           ELSE format('parent job %s is dead', NEW.id) END;
    FOR child IN
        SELECT c.id FROM skipq.jobs c
         WHERE c.depends_on @> ARRAY[NEW.id] AND c.status = 'blocked'
         ORDER BY c.id FOR NO KEY UPDATE
    LOOP
        IF why IS NOT NULL THEN
            UPDATE skipq.jobs c SET status = 'dead', finished_at = now(), last_error = why
             WHERE c.id = child.id AND c.status = 'blocked';
        ELSE
            UPDATE skipq.jobs c SET status = 'pending'
             WHERE c.id = child.id AND c.status = 'blocked'
               AND NOT EXISTS (SELECT 1 FROM skipq.jobs p
                                WHERE p.id = ANY(c.depends_on) AND p.status <> 'done');
        END IF;
        IF FOUND THEN
            PERFORM pg_notify('skipq_jobs', q.queue) FROM skipq.jobs q WHERE q.id = child.id;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_ended
    AFTER UPDATE OF status ON skipq.jobs
    FOR EACH ROW
    WHEN ((NEW.ordering_key IS NOT NULL OR NEW.has_dependents)
          AND NEW.status IN ('done', 'dead', 'cancelled') AND OLD.status <> NEW.status)
    EXECUTE FUNCTION skipq.job_ended();

DROP FUNCTION skipq.enqueue(text, jsonb, text, int, timestamptz, int);

-- The whole enqueue, returning whether the id is a new job or the holder of
-- unique_key. skipq.enqueue() is this without the flag.
CREATE FUNCTION skipq.enqueue_ex(
    kind         text,
    payload      jsonb       DEFAULT '{}',
    queue        text        DEFAULT 'default',
    priority     int         DEFAULT 0,
    run_at       timestamptz DEFAULT now(),
    max_attempts int         DEFAULT 5,
    unique_key   text        DEFAULT NULL,
    unique_for   interval    DEFAULT NULL,
    ordering_key text        DEFAULT NULL,
    depends_on   bigint[]    DEFAULT NULL,
    OUT id       bigint,
    OUT existing boolean
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    size_limit bigint;
    size bigint;
    parents bigint[];
    missing bigint;
    parent record;
    st text := 'pending';
    why text;
    holder record;
BEGIN
    IF kind IS NULL OR kind = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: kind must not be empty' USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' THEN
        RAISE EXCEPTION 'skipq.enqueue: queue must not be empty' USING ERRCODE = '22023';
    END IF;
    IF kind !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'skipq.enqueue: kind "%" is not 1-128 characters of letters, digits and _.:-',
            left(kind, 200) USING ERRCODE = '22023';
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
    IF run_at IS NOT NULL AND (NOT isfinite(run_at) OR run_at > now() + interval '10 years') THEN
        RAISE EXCEPTION 'skipq.enqueue: run_at % is more than 10 years away', run_at
            USING ERRCODE = '22023';
    END IF;
    SELECT s.value::bigint INTO size_limit FROM skipq.settings s WHERE s.key = 'max_payload_bytes';
    size := octet_length(coalesce(payload, '{}')::text);
    IF size > coalesce(size_limit, 1048576) THEN
        RAISE EXCEPTION 'skipq.enqueue: payload is % bytes; the limit is % (skipq.settings max_payload_bytes)',
            size, coalesce(size_limit, 1048576) USING ERRCODE = '22023';
    END IF;
    IF unique_key IS NOT NULL AND length(unique_key) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'skipq.enqueue: unique_key must be 1-256 characters (got %)', length(unique_key)
            USING ERRCODE = '22023';
    END IF;
    IF unique_for IS NOT NULL AND (unique_key IS NULL OR unique_for <= interval '0'
                                   OR unique_for > interval '10 years') THEN
        RAISE EXCEPTION 'skipq.enqueue: unique_for must go with a unique_key and be more than 0 and at most 10 years (got %)',
            unique_for USING ERRCODE = '22023';
    END IF;
    IF ordering_key IS NOT NULL AND length(ordering_key) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'skipq.enqueue: ordering_key must be 1-256 characters (got %)', length(ordering_key)
            USING ERRCODE = '22023';
    END IF;
    IF depends_on IS NOT NULL THEN
        IF array_position(depends_on, NULL) IS NOT NULL OR cardinality(depends_on) > 1000 THEN
            RAISE EXCEPTION 'skipq.enqueue: depends_on must list at most 1000 job ids, none null'
                USING ERRCODE = '22023';
        END IF;
        SELECT array_agg(DISTINCT d ORDER BY d) INTO parents FROM unnest(depends_on) AS d;
    END IF;

    -- Parents: locked in id order (and, under the lock, read as they are
    -- now), so a parent cannot end unseen between this check and the
    -- commit; its end waits for this transaction and then finds the child.
    IF parents IS NOT NULL THEN
        FOR parent IN SELECT j.id, j.status FROM skipq.jobs j WHERE j.id = ANY(parents)
                       ORDER BY j.id FOR NO KEY UPDATE LOOP
            IF parent.status IN ('dead', 'cancelled') AND why IS NULL THEN
                why := format('parent job %s %s', parent.id,
                              CASE parent.status WHEN 'dead' THEN 'is dead' ELSE 'was cancelled' END);
            ELSIF parent.status <> 'done' AND st = 'pending' THEN
                st := 'blocked';
            END IF;
        END LOOP;
        SELECT d INTO missing FROM unnest(parents) AS d
         WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = d) ORDER BY d LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'skipq.enqueue: depends_on: no job with id %', missing USING ERRCODE = '22023';
        END IF;
        IF why IS NOT NULL THEN
            st := 'dead';
        END IF;
    END IF;

    LOOP
        INSERT INTO skipq.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, status,
                                     finished_at, last_error, unique_key, unique_until, ordering_key, depends_on)
        VALUES (enqueue_ex.queue, enqueue_ex.kind, coalesce(enqueue_ex.payload, '{}'), enqueue_ex.priority,
                coalesce(enqueue_ex.run_at, now()), enqueue_ex.max_attempts, st,
                CASE WHEN st = 'dead' THEN now() END, why, enqueue_ex.unique_key,
                now() + enqueue_ex.unique_for, enqueue_ex.ordering_key, parents)
        ON CONFLICT DO NOTHING
        RETURNING j.id INTO id;
        IF id IS NOT NULL THEN
            existing := false;
            EXIT;
        END IF;
        -- Someone holds the key. A new statement, a new snapshot: the
        -- holder the INSERT waited for is visible now.
        SELECT j.id, j.status IN ('blocked', 'pending', 'running') OR j.unique_until > now() AS holds
          INTO holder FROM skipq.jobs j
         WHERE j.unique_key = enqueue_ex.unique_key
           AND (j.status IN ('blocked', 'pending', 'running') OR j.unique_until IS NOT NULL);
        IF FOUND AND holder.holds THEN
            id := holder.id;
            existing := true;
            EXIT;
        END IF;
        IF FOUND THEN
            -- Finished, and its window has passed: it no longer holds the key.
            UPDATE skipq.jobs j SET unique_until = NULL
             WHERE j.id = holder.id AND j.status NOT IN ('blocked', 'pending', 'running')
               AND j.unique_until <= now();
        END IF;
        -- Otherwise the holder ended between the two statements: try again.
    END LOOP;

    IF parents IS NOT NULL AND NOT existing THEN
        UPDATE skipq.jobs j SET has_dependents = true WHERE j.id = ANY(parents) AND NOT j.has_dependents;
    END IF;
END
$$;

CREATE FUNCTION skipq.enqueue(
    kind         text,
    payload      jsonb       DEFAULT '{}',
    queue        text        DEFAULT 'default',
    priority     int         DEFAULT 0,
    run_at       timestamptz DEFAULT now(),
    max_attempts int         DEFAULT 5,
    unique_key   text        DEFAULT NULL,
    unique_for   interval    DEFAULT NULL,
    ordering_key text        DEFAULT NULL,
    depends_on   bigint[]    DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.id FROM skipq.enqueue_ex(kind, payload, queue, priority, run_at, max_attempts,
                                      unique_key, unique_for, ordering_key, depends_on) AS e
$$;

-- enqueue_many() takes the new keys too: "unique_key", "unique_for_ms",
-- "ordering_key" and "depends_on" (an array of job ids). A batch that uses
-- none of them keeps the one-INSERT path; one that does is enqueued element
-- by element through enqueue_ex(), in order, and returns for a held unique
-- key the holder's id.
CREATE OR REPLACE FUNCTION skipq.enqueue_many(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    size_limit bigint;
    bad record;
    e record;
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
            WHEN j ? 'unique_key' AND (jsonb_typeof(j -> 'unique_key') <> 'string'
                 OR length(j ->> 'unique_key') NOT BETWEEN 1 AND 256)
                THEN 'unique_key must be a string of 1-256 characters'
            WHEN j ? 'unique_for_ms' AND (NOT j ? 'unique_key' OR jsonb_typeof(j -> 'unique_for_ms') <> 'number'
                 OR (j ->> 'unique_for_ms') !~ '^[0-9]{1,12}$'
                 OR (j ->> 'unique_for_ms')::bigint NOT BETWEEN 1 AND 315360000000)
                THEN 'unique_for_ms must go with a unique_key and be a whole number of milliseconds from 1 to 10 years'
            WHEN j ? 'ordering_key' AND (jsonb_typeof(j -> 'ordering_key') <> 'string'
                 OR length(j ->> 'ordering_key') NOT BETWEEN 1 AND 256)
                THEN 'ordering_key must be a string of 1-256 characters'
            WHEN j ? 'depends_on' AND (jsonb_typeof(j -> 'depends_on') <> 'array'
                 OR jsonb_array_length(j -> 'depends_on') > 1000
                 OR EXISTS (SELECT 1 FROM jsonb_array_elements(j -> 'depends_on') AS d(v)
                             WHERE jsonb_typeof(d.v) <> 'number' OR d.v::text !~ '^[0-9]{1,18}$'))
                THEN 'depends_on must be an array of at most 1000 job ids'
            WHEN j ? 'depends_on' AND EXISTS (
                    SELECT 1 FROM jsonb_array_elements_text(j -> 'depends_on') AS d(v)
                     WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs x WHERE x.id = d.v::bigint))
                THEN (SELECT format('depends_on: no job with id %s', d.v)
                        FROM jsonb_array_elements_text(j -> 'depends_on') AS d(v)
                       WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs x WHERE x.id = d.v::bigint) LIMIT 1)
            END AS problem
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(j, i)
    ) checks WHERE problem IS NOT NULL ORDER BY i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skipq.enqueue_many: job %: %', bad.idx, bad.problem USING ERRCODE = '22023';
    END IF;

    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(jobs) AS e(j)
                    WHERE j ?| ARRAY['unique_key', 'ordering_key', 'depends_on']) THEN
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
        RETURN;
    END IF;

    FOR e IN SELECT j FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(j, i) ORDER BY i LOOP
        RETURN NEXT (SELECT x.id FROM skipq.enqueue_ex(
            e.j ->> 'kind',
            coalesce(e.j -> 'payload', '{}'::jsonb),
            coalesce(e.j ->> 'queue', 'default'),
            coalesce((e.j ->> 'priority')::int, 0),
            CASE WHEN e.j ? 'run_at' THEN (e.j ->> 'run_at')::timestamptz
                 ELSE now() + coalesce((e.j ->> 'delay_ms')::bigint, 0) * interval '1 millisecond' END,
            coalesce((e.j ->> 'max_attempts')::int, 5),
            e.j ->> 'unique_key',
            (e.j ->> 'unique_for_ms')::bigint * interval '1 millisecond',
            e.j ->> 'ordering_key',
            (SELECT array_agg(d.v::bigint) FROM jsonb_array_elements_text(e.j -> 'depends_on') AS d(v))) AS x);
    END LOOP;
END
$$;
