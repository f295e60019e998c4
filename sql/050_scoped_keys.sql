-- 050: keys one producer cannot use against another, and an enqueue that
-- locks no job but its own.
--
-- Scopes. A unique key is held per kind: "invoice:42" of kind
-- invoice.render and "invoice:42" of kind invoice.mail are two keys, so a
-- producer enqueueing one kind can neither suppress nor find another kind's
-- jobs by key (as unique jobs are in River and Oban: a kind is one handler,
-- and "the same job" means the same handler's). An ordering key is held per
-- queue: jobs of several kinds in one queue can still run in one serial
-- order (a real use: apply, then notify, then archive an account's entries),
-- while a key held in one queue never holds up another queue's jobs.
-- Producers that share a kind (unique) or a queue (ordering) share its keys;
-- give tenants their own kinds or queues, or prefix their keys.
--
-- Dependencies without locks. 009 locked every parent named in depends_on
-- until the enqueuing transaction ended, so an enqueuer that kept its
-- transaction open held other producers' jobs: a pending parent was not
-- claimed, a running parent's outcome waited and its lease lapsed. Now the
-- enqueue only reads its parents: a dead or cancelled one makes the child
-- dead, all done makes it pending, anything else blocked. A blocked child
-- is also written to skipq.dependency_inbox, and the hosts settle what a
-- plain read cannot see -- a parent that ended after the read, before the
-- child committed, ran its end without finding the child (and a parent not
-- yet flagged has_dependents runs no end trigger at all). On every
-- heartbeat, and at once when woken by the enqueue's notification (payload
-- '!deps' on skipq_jobs, which a host that predates this reads as a queue
-- it does not serve), a host calls skipq.settle_dependencies(): it takes
-- inbox rows (SKIP LOCKED: one host per row), locks each child and its
-- unfinished parents without waiting (a row locked by someone else is
-- simply left for the next round), flags those parents has_dependents, and
-- then, reading them under that lock (an ended parent is final and only
-- read), kills or releases the child -- or leaves it blocked,
-- now registered, for the parents' end trigger (jobs_ended) to release as
-- before. The trigger stays the fast path: a child registered before its
-- parents end is released in the parent's own transaction.
--
-- Bounded batches. enqueue_many() refuses more than max_batch_jobs elements
-- (default 10,000) or a batch of more than max_batch_bytes (default
-- 64 MiB, measured as jsonb) in one call, naming the limit and the setting.
--
-- run_at. The enqueue functions refuse a run_at before 1970 as well (the
-- table's own bounds come in 051).

-- ---- unique keys per kind ------------------------------------------------------------
CREATE UNIQUE INDEX jobs_unique_kind ON skipq.jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND (status IN ('blocked', 'pending', 'running') OR unique_until IS NOT NULL);
DROP INDEX skipq.jobs_unique;
ALTER INDEX skipq.jobs_unique_kind RENAME TO jobs_unique;

-- ---- ordering keys per queue ---------------------------------------------------------
CREATE INDEX jobs_ordering_queue ON skipq.jobs (queue, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status IN ('blocked', 'pending', 'running');
DROP INDEX skipq.jobs_ordering;
ALTER INDEX skipq.jobs_ordering_queue RENAME TO jobs_ordering;

-- Each held key takes the queue of the job that holds it. A row whose job
-- no longer exists held nothing any more.
ALTER TABLE skipq.ordering_keys ADD COLUMN queue text;
UPDATE skipq.ordering_keys k SET queue = j.queue FROM skipq.jobs j WHERE j.id = k.job_id;
DELETE FROM skipq.ordering_keys k WHERE k.queue IS NULL;
ALTER TABLE skipq.ordering_keys
    ALTER COLUMN queue SET NOT NULL,
    DROP CONSTRAINT ordering_keys_pkey,
    ADD CONSTRAINT ordering_keys_pkey PRIMARY KEY (queue, ordering_key);

-- ---- dependencies: the inbox and its settlement --------------------------------------
CREATE TABLE skipq.dependency_inbox (
    job_id bigint PRIMARY KEY
);
ALTER TABLE skipq.dependency_inbox SET (autovacuum_vacuum_scale_factor = 0.02,
                                        autovacuum_analyze_scale_factor = 0.02);

-- Settle up to `batch` children of the inbox; returns how many were taken
-- off it (registered, released or killed). Never waits for a job row: a
-- child, or a parent that has not ended, locked by someone right now stays
-- for the next round. A parent that has ended is only read: its end is
-- final (a redriven parent does not bring back a child it killed, as at
-- enqueue).
CREATE FUNCTION skipq.settle_dependencies(batch int) RETURNS int
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    kids bigint[];
    held bigint[];
    c record;
    why text;
    settled int := 0;
BEGIN
    SELECT array_agg(x.job_id) INTO kids FROM (
        SELECT i.job_id FROM skipq.dependency_inbox i ORDER BY i.job_id
         LIMIT greatest(batch, 1) FOR UPDATE SKIP LOCKED) x;
    IF kids IS NULL THEN
        RETURN 0;
    END IF;
    -- A child that is gone (deleted by hand) has nothing to settle.
    DELETE FROM skipq.dependency_inbox i
     WHERE i.job_id = ANY(kids) AND NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = i.job_id);
    GET DIAGNOSTICS settled = ROW_COUNT;
    -- The children and their unfinished parents, in id order, skipping rows
    -- locked right now. Each later statement reads them as they are now.
    SELECT array_agg(l.id) INTO held FROM (
        SELECT j.id FROM skipq.jobs j
         WHERE j.id = ANY(kids || ARRAY(SELECT DISTINCT p FROM skipq.jobs k, unnest(k.depends_on) AS p
                                         WHERE k.id = ANY(kids)))
           AND (j.id = ANY(kids) OR j.status IN ('blocked', 'pending', 'running'))
         ORDER BY j.id FOR NO KEY UPDATE SKIP LOCKED) l;
    held := coalesce(held, '{}');
    FOR c IN SELECT k.id, k.queue, k.status, k.depends_on FROM skipq.jobs k
              WHERE k.id = ANY(kids) AND k.id = ANY(held)
                AND NOT EXISTS (SELECT 1 FROM skipq.jobs p
                                 WHERE p.id = ANY(k.depends_on) AND NOT (p.id = ANY(held))
                                   AND p.status IN ('blocked', 'pending', 'running'))
              ORDER BY k.id LOOP
        IF c.status = 'blocked' THEN
            UPDATE skipq.jobs p SET has_dependents = true
             WHERE p.id = ANY(c.depends_on) AND p.id = ANY(held) AND NOT p.has_dependents;
            SELECT format('parent job %s %s', p.id, CASE p.status WHEN 'dead' THEN 'is dead' ELSE 'was cancelled' END)
              INTO why FROM skipq.jobs p
             WHERE p.id = ANY(c.depends_on) AND p.status IN ('dead', 'cancelled') ORDER BY p.id LIMIT 1;
            IF why IS NOT NULL THEN
                UPDATE skipq.jobs k SET status = 'dead', finished_at = now(), last_error = why
                 WHERE k.id = c.id AND k.status = 'blocked';
            ELSIF NOT EXISTS (SELECT 1 FROM skipq.jobs p WHERE p.id = ANY(c.depends_on) AND p.status <> 'done') THEN
                UPDATE skipq.jobs k SET status = 'pending' WHERE k.id = c.id AND k.status = 'blocked';
                PERFORM pg_notify('skipq_jobs', c.queue);
            END IF;
        END IF;
        DELETE FROM skipq.dependency_inbox i WHERE i.job_id = c.id;
        settled := settled + 1;
    END LOOP;
    RETURN settled;
END
$$;
REVOKE ALL ON FUNCTION skipq.settle_dependencies(int) FROM PUBLIC;

-- ---- the end trigger: ordering keys per queue ----------------------------------------
CREATE OR REPLACE FUNCTION skipq.job_ended() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    child record;
    why text;
BEGIN
    IF NEW.ordering_key IS NOT NULL THEN
        DELETE FROM skipq.ordering_keys k
         WHERE k.queue = NEW.queue AND k.ordering_key = NEW.ordering_key AND k.job_id = NEW.id;
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

-- ---- limits of enqueue_many ----------------------------------------------------------
INSERT INTO skipq.settings (key, value) VALUES ('max_batch_jobs', '10000'), ('max_batch_bytes', '67108864')
    ON CONFLICT (key) DO NOTHING;

-- Finite, from 1970, at most 10 years ahead.
CREATE OR REPLACE FUNCTION skipq.valid_run_at(t text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ts timestamptz;
BEGIN
    ts := t::timestamptz;
    RETURN isfinite(ts) AND ts >= '1970-01-01 00:00:00+00' AND ts <= now() + interval '10 years';
EXCEPTION WHEN others THEN
    RETURN false;
END
$$;

-- ---- enqueue_ex: scoped unique keys, parents read and not locked ---------------------
CREATE OR REPLACE FUNCTION skipq.enqueue_ex(
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
    IF run_at IS NOT NULL AND run_at < '1970-01-01 00:00:00+00' THEN
        RAISE EXCEPTION 'skipq.enqueue: run_at % is before 1970', run_at USING ERRCODE = '22023';
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

    -- Parents: read, never locked (see the top of this file). What this
    -- read cannot see -- a parent ending before this transaction commits --
    -- the hosts settle from the inbox.
    IF parents IS NOT NULL THEN
        SELECT d INTO missing FROM unnest(parents) AS d
         WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = d) ORDER BY d LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'skipq.enqueue: depends_on: no job with id %', missing USING ERRCODE = '22023';
        END IF;
        SELECT format('parent job %s %s', j.id, CASE j.status WHEN 'dead' THEN 'is dead' ELSE 'was cancelled' END)
          INTO why FROM skipq.jobs j
         WHERE j.id = ANY(parents) AND j.status IN ('dead', 'cancelled') ORDER BY j.id LIMIT 1;
        IF why IS NOT NULL THEN
            st := 'dead';
        ELSIF EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = ANY(parents) AND j.status <> 'done') THEN
            st := 'blocked';
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
        -- Someone holds the key in this kind. A new statement, a new
        -- snapshot: the holder the INSERT waited for is visible now.
        SELECT j.id, j.status IN ('blocked', 'pending', 'running') OR j.unique_until > now() AS holds
          INTO holder FROM skipq.jobs j
         WHERE j.kind = enqueue_ex.kind AND j.unique_key = enqueue_ex.unique_key
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

    IF st = 'blocked' AND NOT existing THEN
        INSERT INTO skipq.dependency_inbox (job_id) VALUES (id);
        PERFORM pg_notify('skipq_jobs', '!deps');
    END IF;
END
$$;

-- ---- enqueue_many: bounded, run_at from 1970 -----------------------------------------
CREATE OR REPLACE FUNCTION skipq.enqueue_many(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    size_limit bigint;
    max_jobs bigint;
    max_bytes bigint;
    bad record;
    e record;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'skipq.enqueue_many: jobs must be a JSON array of objects' USING ERRCODE = '22023';
    END IF;
    SELECT max(s.value::bigint) FILTER (WHERE s.key = 'max_payload_bytes'),
           max(s.value::bigint) FILTER (WHERE s.key = 'max_batch_jobs'),
           max(s.value::bigint) FILTER (WHERE s.key = 'max_batch_bytes')
      INTO size_limit, max_jobs, max_bytes
      FROM skipq.settings s WHERE s.key IN ('max_payload_bytes', 'max_batch_jobs', 'max_batch_bytes');
    size_limit := coalesce(size_limit, 1048576);
    max_jobs := coalesce(max_jobs, 10000);
    max_bytes := coalesce(max_bytes, 67108864);
    IF jsonb_array_length(jobs) > max_jobs THEN
        RAISE EXCEPTION 'skipq.enqueue_many: % jobs in one call; the limit is % (skipq.settings max_batch_jobs)',
            jsonb_array_length(jobs), max_jobs USING ERRCODE = '22023';
    END IF;
    IF pg_column_size(jobs) > max_bytes THEN
        RAISE EXCEPTION 'skipq.enqueue_many: the batch is % bytes as jsonb; the limit is % (skipq.settings max_batch_bytes)',
            pg_column_size(jobs), max_bytes USING ERRCODE = '22023';
    END IF;

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
                THEN 'run_at must be a timestamp from 1970 to no more than 10 years ahead'
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
