-- 058: done jobs may leave skipq.jobs as they finish ([kind NAME] keep_done
-- = off), their audit rows kept.
--
-- Why: a job that ends done is updated once more, and in PostgreSQL an
-- update writes a whole new row version: a new tuple (status is in the
-- partial indexes' predicates, so never a HOT update), a new primary-key
-- entry, and a lock record when the new version goes on another page. A
-- delete writes none of that. Measured on the tuned drain: about 15 % less
-- server CPU and WAL per job (bench/README.md, "Done jobs leave the table").
-- Many queues never look at a done job again; their history is who ran it,
-- when and how it went, which job_executions already holds.
--
-- How:
-- - skipq.kind_options says which kinds drop their done jobs. Hosts write
--   it from [kind NAME] keep_done (at start and on SIGHUP; the last host to
--   write a kind's row sets it), as they do kind_defaults.
-- - The outcome statement hands the done jobs of those kinds to
--   skipq.finish_dropping(), which deletes each job row and closes its
--   execution in one statement. Jobs the row still matters for keep the
--   update: an ordering key (its release runs from the update, trigger
--   jobs_ended), dependents (the same) and a uniqueness window
--   (unique_until: the row is the window); dead and cancelled jobs are
--   never dropped.
-- - The execution keeps what the job row said: queue and kind are written
--   on it (NULL on executions whose job row stays), so statistics, `skipq
--   jobs show` and retention still know whose it was.
-- - skipq.done_counts gets one row per queue and kind per statement: the
--   totals of `skipq stats` (advance_totals) and its done-in-the-last-hour
--   read them for jobs no longer in skipq.jobs. Append-only, so concurrent
--   workers never wait for each other on it.
-- - The jobs_deleted cascade (040) skips the delete that finish_dropping
--   makes: the point is to keep those executions.
-- - A job named in depends_on that has left the table counts as done: its
--   done execution says it left (enqueue_ex, enqueue_many; the hosts'
--   settlement already counts a parent that is gone as no obstacle).

CREATE TABLE skipq.kind_options (
    kind       text        PRIMARY KEY CHECK (kind ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    keep_done  boolean     NOT NULL,
    set_by     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE skipq.job_executions ADD COLUMN queue text, ADD COLUMN kind text;

CREATE TABLE skipq.done_counts (
    queue text        NOT NULL,
    kind  text        NOT NULL,
    at    timestamptz NOT NULL,
    n     bigint      NOT NULL CHECK (n > 0)
);
CREATE INDEX done_counts_at ON skipq.done_counts (at);

-- Whether a deleted job's executions go with it: not when finish_dropping
-- deletes it (a transaction-local setting that it alone sets and clears;
-- whoever else sets it only keeps rows that would have gone).
CREATE OR REPLACE FUNCTION skipq.jobs_deleted() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('skipq.keep_executions', true) = 'on' THEN
        RETURN NULL;
    END IF;
    -- By index, whatever the planner guesses about the transition table.
    DELETE FROM skipq.job_executions WHERE job_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;

-- ids, eids: running jobs and their current executions that ended done and
-- whose kind drops done jobs (the caller, the outcome statement, decided
-- that on the rows it had locked). Each is checked again here on the row:
-- still running this execution, and nothing that needs the row. Returns
-- the (job, execution) pairs it finished. Definer's rights: the worker role
-- may not delete jobs, only finish its own this way.
-- The jobs are read by primary key, one probe per pair. Status is compared
-- with a subquery's value, which the planner cannot match to the predicate
-- of jobs_lease (status = 'running'): compared with the constant, a generic
-- plan read every running job through that index instead.
CREATE FUNCTION skipq.finish_dropping(ids bigint[], eids bigint[])
RETURNS TABLE (job_id bigint, execution_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(cardinality(ids), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM set_config('skipq.keep_executions', 'on', true);
    RETURN QUERY
    WITH d AS (
        DELETE FROM skipq.jobs j
         USING ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(eids)) AS f(id, eid)
         WHERE j.id OPERATOR(pg_catalog.=) f.id AND j.current_execution_id OPERATOR(pg_catalog.=) f.eid
           AND j.status OPERATOR(pg_catalog.=) (SELECT 'running'::text)
           AND j.ordering_key IS NULL AND NOT j.has_dependents AND j.unique_until IS NULL
        RETURNING j.current_execution_id AS eid, j.queue, j.kind
    ), e AS (
        UPDATE skipq.job_executions x
           SET status = 'done', finished_at = now(), error = NULL, queue = d.queue, kind = d.kind
          FROM d WHERE x.id OPERATOR(pg_catalog.=) d.eid
        RETURNING x.job_id, x.id
    ), t AS (
        INSERT INTO skipq.done_counts (queue, kind, at, n)
        SELECT d.queue, d.kind, now(), count(*) FROM d GROUP BY d.queue, d.kind
    )
    SELECT e.job_id, e.id FROM e;
    PERFORM set_config('skipq.keep_executions', '', true);
END
$$;
REVOKE ALL ON FUNCTION skipq.finish_dropping(bigint[], bigint[]) FROM PUBLIC;

-- Every outcome statement reads kind_options, so a host running as
-- skipq_worker would fail to record any outcome until roles.sql ran again:
-- where the roles exist already, they get what roles.sql gives them here.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_worker') THEN
        GRANT SELECT ON skipq.kind_options, skipq.done_counts TO skipq_worker;
        GRANT INSERT (kind, keep_done, set_by), UPDATE (keep_done, set_by, updated_at)
            ON skipq.kind_options TO skipq_worker;
        GRANT EXECUTE ON FUNCTION skipq.finish_dropping(bigint[], bigint[]) TO skipq_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_reader') THEN
        GRANT SELECT ON skipq.kind_options, skipq.done_counts TO skipq_reader;
    END IF;
END
$$;

-- The totals also fold done_counts, by the same watermark as the jobs
-- (a count's `at` is its transaction's start, as finished_at is), and
-- drop the counts both folded and older than the hour `skipq stats` shows.
CREATE OR REPLACE FUNCTION skipq.advance_totals(lag_ms bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_mark timestamptz;
    new_mark timestamptz := now() - greatest(lag_ms, 0) * interval '1 millisecond';
    added bigint;
BEGIN
    PERFORM FROM skipq.housekeeping h
      WHERE h.task OPERATOR(pg_catalog.=) 'totals'
        FOR NO KEY UPDATE OF h SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    SELECT least(new_mark, min(a.xact_start)) INTO new_mark FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL;
    SELECT m.through INTO old_mark FROM skipq.job_totals_mark m FOR UPDATE;
    IF old_mark IS NULL OR new_mark <= old_mark THEN
        RETURN 0;
    END IF;
    WITH f AS (
        SELECT x.queue, x.kind, sum(x.done) AS done, sum(x.dead) AS dead, sum(x.cancelled) AS cancelled FROM (
            SELECT j.queue, j.kind, count(*) FILTER (WHERE j.status = 'done') AS done,
                   count(*) FILTER (WHERE j.status = 'dead') AS dead,
                   count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
              FROM skipq.jobs j
             WHERE j.finished_at >= old_mark AND j.finished_at < new_mark
               AND j.status IN ('done', 'dead', 'cancelled')
             GROUP BY j.queue, j.kind
            UNION ALL
            SELECT c.queue, c.kind, sum(c.n), 0, 0
              FROM skipq.done_counts c
             WHERE c.at >= old_mark AND c.at < new_mark
             GROUP BY c.queue, c.kind) x
         GROUP BY x.queue, x.kind
    ), up AS (
        INSERT INTO skipq.job_totals AS t (queue, kind, done, dead, cancelled)
        SELECT queue, kind, done, dead, cancelled FROM f
        ON CONFLICT (queue, kind) DO UPDATE
           SET done = t.done + excluded.done, dead = t.dead + excluded.dead,
               cancelled = t.cancelled + excluded.cancelled
    )
    SELECT coalesce(sum(f.done + f.dead + f.cancelled), 0) INTO added FROM f;
    UPDATE skipq.job_totals_mark SET through = new_mark;
    DELETE FROM skipq.done_counts c WHERE c.at < least(new_mark, now() - interval '1 hour');
    DELETE FROM skipq.hosts h WHERE h.heartbeat_at < now() - interval '1 day';
    RETURN added;
END
$$;

-- ---- depends_on: a parent that left the table done counts as done -------------------
-- Whether job `id` finished done and left skipq.jobs: its done execution
-- carries the queue (only such executions do). By index on job_id.
CREATE FUNCTION skipq.left_done(id bigint) RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM skipq.job_executions e
                    WHERE e.job_id = left_done.id AND e.queue IS NOT NULL AND e.status = 'done')
$$;
REVOKE ALL ON FUNCTION skipq.left_done(bigint) FROM PUBLIC;

-- enqueue_ex (as in 056), the parents' check through left_done().
CREATE OR REPLACE FUNCTION skipq.enqueue_ex(
    kind         text,
    payload      jsonb       DEFAULT '{}',
    queue        text        DEFAULT 'default',
    priority     int         DEFAULT 0,
    run_at       timestamptz DEFAULT now(),
    max_attempts int         DEFAULT NULL,
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
    IF max_attempts < 1 OR max_attempts > 100000 THEN
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
         WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs j WHERE j.id = d)
           AND NOT skipq.left_done(d) ORDER BY d LIMIT 1;
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

-- enqueue_many (as in 056), the parents' check through left_done().
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
                     WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs x WHERE x.id = d.v::bigint)
                       AND NOT skipq.left_done(d.v::bigint))
                THEN (SELECT format('depends_on: no job with id %s', d.v)
                        FROM jsonb_array_elements_text(j -> 'depends_on') AS d(v)
                       WHERE NOT EXISTS (SELECT 1 FROM skipq.jobs x WHERE x.id = d.v::bigint)
                         AND NOT skipq.left_done(d.v::bigint) LIMIT 1)
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
                   coalesce((j ->> 'max_attempts')::int, d.max_attempts, 5) AS max_attempts
              FROM jsonb_array_elements(jobs) WITH ORDINALITY AS el(j, i)
              LEFT JOIN skipq.kind_defaults d ON d.kind = el.j ->> 'kind'
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
            (e.j ->> 'max_attempts')::int,
            e.j ->> 'unique_key',
            (e.j ->> 'unique_for_ms')::bigint * interval '1 millisecond',
            e.j ->> 'ordering_key',
            (SELECT array_agg(d.v::bigint) FROM jsonb_array_elements_text(e.j -> 'depends_on') AS d(v))) AS x);
    END LOOP;
END
$$;
