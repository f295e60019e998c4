-- 060: an idle worker takes a new job from the enqueue itself.
--
-- A job enqueued while a worker thread sat idle used to wait for the
-- notification to reach its host, the thread to wake, and its claim -- a
-- write transaction on a server process that had been asleep -- to come
-- back. That claim was most of an idle host's start latency
-- (bench/README.md, "Where an idle host's wake-up goes"). Now an idle
-- thread registers in skipq.waiting, and the enqueue's own transaction
-- claims each new runnable job for one registered thread, as a claim
-- would, when it commits: it records the attempt in job_executions, marks
-- the job running under that thread's name with the lease of its kind,
-- takes the registration and sends '!h JOB EXECUTION WORKER'. The thread
-- then only reads the job, fenced by its execution id; the enqueue's commit
-- made the claim durable with the job.
--
-- The insert statements choose the jobs (notify_ready(): best first, by
-- priority, run_at and id, and no more per queue and kind than threads
-- wait for them); a deferred trigger hands them over at the commit, so
-- the lease counts from the commit, however long the transaction stayed
-- open, and a waiting thread's row is held only for the moment of the
-- commit. What is never handed over, and is left to the claim: a job that
-- is not runnable at once (delayed, blocked on its parents), one with an
-- ordering key, one of a kind with limits (their bookkeeping lives in the
-- claim), one of a paused queue or kind. A job meant for a thread that has
-- gone busy by the commit is announced per queue, as any job.
--
-- The registration holds no session state, so nothing waits on a dead
-- host: a thread's row is used only while its host counts as alive
-- (skipq.host_alive: a beat within three heartbeat intervals) and until
-- `until`, as long again after the thread's or its host's last write. Each
-- beat (host_beat()) renews its threads' rows; a thread keeps its row for
-- its life (updated in place), its host's stop removes it, and the rows of
-- hosts dead for a while go with the next registration. A job handed to a host that stopped
-- beating just before (frozen, cut off) waits for it to come back or for
-- its lease to end, as for a host that stopped mid-job. A job handed over
-- whose notification was lost (the host's listener was down at the commit)
-- is found by the listener's reconnect or by the thread's next look at its
-- registration.
--
-- Hand-overs are made only by READ COMMITTED transactions: at a higher
-- isolation level, the commit's SKIP LOCKED fails on a waiter row changed
-- since the transaction's snapshot (each beat changes them), and the
-- application's commit with it; such enqueues are announced as before.
--
-- Privileges: a worker role writes its registration only through
-- waiter_set() and waiter_unset() (table privileges would let it LOCK the
-- table and stall every enqueue), which check what they are given (a
-- registration can never make an enqueue's commit fail), and notify_ready()
-- and hand_off() run as the schema owner, because a bulk role's COPY fires
-- them with no right to job_executions. A worker role may register any
-- worker name, as its claims may record any name in locked_by: a role that
-- claims can already hold jobs it never runs. waiter_set() gives up at once
-- on a row a commit holds; waiter_unset() may wait for that commit (up to
-- 5 s), which holds the row only while it commits, never while an
-- application's transaction stays open.
CREATE TABLE skipq.waiting (
    worker text        PRIMARY KEY CHECK (length(worker) BETWEEN 1 AND 200),
    host   text        NOT NULL CHECK (left(worker, length(host) + 1) = host || ':'), -- skipq.hosts.id
    queue  text        NOT NULL,
    kinds  text[]      NOT NULL,
    leases bigint[]    NOT NULL,
    -- A time: the thread waits, until then. NULL: it does not (it took its
    -- registration back). -infinity: an enqueue took it, handing a job over.
    until  timestamptz,
    since  timestamptz NOT NULL DEFAULT now(), -- when the current registration began
    CHECK (cardinality(kinds) BETWEEN 1 AND 1000 AND cardinality(kinds) = cardinality(leases))
);

-- Register (or refresh) worker, a thread of `host` (skipq.hosts.id), as
-- waiting for jobs of `kinds` in `queue`,
-- with those kinds' leases in milliseconds, for valid_ms. answer: 'kept',
-- its row was there and is refreshed; 'new', there was none (if the caller
-- thought it had one, an enqueue handed it a job); 'busy', a commit holds
-- the row right now (handing the worker a job, or the host's beat), left
-- alone. since: when the registration began (NULL when busy): jobs handed
-- to the worker started after it.
CREATE FUNCTION skipq.waiter_set(worker text, host text, queue text, kinds text[], leases bigint[], valid_ms bigint)
RETURNS TABLE (answer text, since timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '20ms'
AS $$
DECLARE
    fresh boolean;
    began timestamptz;
BEGIN
    IF valid_ms IS NULL OR valid_ms < 1 OR valid_ms > 86400000 THEN
        RAISE EXCEPTION 'skipq.waiter_set: valid_ms must be 1 to 86400000, not %', valid_ms
            USING ERRCODE = '22023';
    END IF;
    -- Arrays as the host writes them: one dimension from 1, a lease for
    -- each kind, each within 10 years, so that no registration can make an
    -- enqueue's hand-over fail.
    IF array_ndims(waiter_set.kinds) IS DISTINCT FROM 1 OR array_lower(waiter_set.kinds, 1) <> 1
       OR array_ndims(waiter_set.leases) IS DISTINCT FROM 1 OR array_lower(waiter_set.leases, 1) <> 1
       OR array_position(waiter_set.kinds, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'skipq.waiter_set: kinds and leases must be one-dimensional arrays from 1, without NULL kinds'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM unnest(waiter_set.leases) l WHERE l IS NULL OR l < 1 OR l > 315360000000) THEN
        RAISE EXCEPTION 'skipq.waiter_set: every lease must be 1 ms to 10 years' USING ERRCODE = '22023';
    END IF;
    BEGIN
        -- Rows of threads of hosts gone for a while (killed, not stopped).
        DELETE FROM skipq.waiting x
         WHERE (x.until IS NULL OR x.until < clock_timestamp() - interval '10 minutes')
           AND NOT EXISTS (SELECT FROM skipq.hosts h WHERE h.id = x.host
                              AND skipq.host_alive(h.heartbeat_at, h.heartbeat_ms));
        -- A thread keeps its row for its life: each change is an update of
        -- columns no index holds, which PostgreSQL makes in place (HOT) and
        -- prunes as it goes, where a row per registration left as many dead
        -- rows and index entries for the next vacuum.
        INSERT INTO skipq.waiting AS x (worker, host, queue, kinds, leases, until)
        VALUES (waiter_set.worker, waiter_set.host, waiter_set.queue, waiter_set.kinds, waiter_set.leases,
                clock_timestamp() + waiter_set.valid_ms * interval '1 millisecond')
        ON CONFLICT ON CONSTRAINT waiting_pkey DO UPDATE
           SET host = excluded.host, queue = excluded.queue, kinds = excluded.kinds, leases = excluded.leases,
               until = excluded.until,
               since = CASE WHEN x.until IS NULL OR x.until = '-infinity' THEN now() ELSE x.since END
        RETURNING x.since = now(), x.since INTO fresh, began;
    EXCEPTION WHEN lock_not_available THEN
        RETURN QUERY SELECT 'busy', NULL::timestamptz;
        RETURN;
    END;
    RETURN QUERY SELECT CASE WHEN fresh THEN 'new' ELSE 'kept' END, began;
END
$$;

-- The worker is busy again: remove its row. 'removed'; 'gone': there was
-- none (an enqueue handed it a job since it registered); 'busy': a commit
-- holds the row right now (handing the worker a job, or the host's beat).
-- With wait, it waits up to 5 s for such a commit, which holds the row only
-- while it commits, and answers what the row became.
CREATE FUNCTION skipq.waiter_unset(worker text, wait boolean) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '20ms'
AS $$
BEGIN
    IF wait THEN
        PERFORM set_config('lock_timeout', '5s', true);
    END IF;
    UPDATE skipq.waiting x SET until = NULL
     WHERE x.worker = waiter_unset.worker AND x.until IS DISTINCT FROM '-infinity';
    RETURN CASE WHEN FOUND THEN 'removed' ELSE 'gone' END;
EXCEPTION WHEN lock_not_available THEN
    RETURN 'busy';
END
$$;

-- The worker's thread exits: its row goes. 'gone' if an enqueue had taken
-- it (the thread gives back what it was handed), else 'removed'. Waits up to
-- 5 s for a commit that holds the row.
CREATE FUNCTION skipq.waiter_gone(worker text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    was timestamptz;
BEGIN
    DELETE FROM skipq.waiting x WHERE x.worker = waiter_gone.worker RETURNING x.until INTO was;
    RETURN CASE WHEN was = '-infinity' THEN 'gone' ELSE 'removed' END;
EXCEPTION WHEN lock_not_available THEN
    RETURN 'busy';
END
$$;

-- The hand-overs a transaction will make when it commits: its inserts
-- choose the jobs (statement by statement, best first, no more per queue
-- and kind than threads wait for them), and a deferred trigger makes each
-- at the commit. So the claim's lease counts from the commit, not from an
-- insert whose transaction may stay open for long, and the waiting
-- thread's row is held only for the moment of the commit. Rows live only
-- inside their transaction.
-- Unlogged: its rows never outlive their transaction, so they need no WAL.
CREATE UNLOGGED TABLE skipq.handoffs (
    job_id bigint PRIMARY KEY,
    queue  text   NOT NULL,
    kind   text   NOT NULL
);

-- Its statements reach skipq.jobs by primary key. A plan made while the
-- table was (nearly) empty would scan it whole instead, and keep doing so
-- as the table grows, so sequential scans are off while it runs, as in the
-- host's own sessions; and JIT with them, whose threshold every plan then
-- crosses (compiling took 57 ms of each hand-over).
CREATE FUNCTION skipq.hand_off() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    j record;
    w record;
    eid bigint;
    at timestamptz;
BEGIN
    DELETE FROM skipq.handoffs h WHERE h.job_id = NEW.job_id;
    -- Still runnable as the claim would judge it: the transaction may have
    -- changed the job, or paused or limited its kind, since the insert.
    SELECT x.id, x.queue, x.kind, x.attempts INTO j FROM skipq.jobs x
     WHERE x.id = NEW.job_id AND x.status = 'pending' AND x.run_at <= now() AND x.ordering_key IS NULL
       AND NOT EXISTS (SELECT FROM skipq.kind_limits l WHERE l.kind = x.kind)
       AND NOT EXISTS (SELECT FROM skipq.paused p WHERE (p.scope = 'queue' AND p.name = x.queue)
                                                    OR (p.scope = 'kind' AND p.name = x.kind));
    IF NOT FOUND THEN
        -- Left out of its statement's announcement for this hand-over: a
        -- job still pending (a limit or a key set since) is announced now.
        PERFORM pg_notify('skipq_jobs', x.queue) FROM skipq.jobs x
          WHERE x.id = NEW.job_id AND x.status = 'pending' AND x.run_at <= now();
        RETURN NULL;
    END IF;
    SELECT x.worker, x.leases[array_position(x.kinds, j.kind)] AS ms INTO w
      FROM skipq.waiting x
     WHERE x.queue = j.queue AND j.kind = ANY (x.kinds) AND x.until > clock_timestamp()
       AND EXISTS (SELECT FROM skipq.hosts h WHERE h.id = x.host AND skipq.host_alive(h.heartbeat_at, h.heartbeat_ms))
     LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- The threads it was meant for went busy: announce it, as any job.
        PERFORM pg_notify('skipq_jobs', j.queue);
        RETURN NULL;
    END IF;
    at := clock_timestamp();
    INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at)
    VALUES (j.id, j.attempts + 1, w.worker, at) RETURNING id INTO eid;
    UPDATE skipq.jobs x
       SET status = 'running', attempts = j.attempts + 1, locked_by = w.worker, current_execution_id = eid,
           lease_expires_at = at + w.ms * interval '1 millisecond'
     WHERE x.id = j.id;
    UPDATE skipq.waiting x SET until = '-infinity' WHERE x.worker = w.worker;
    PERFORM pg_notify('skipq_jobs', '!h ' || j.id || ' ' || eid || ' ' || w.worker);
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER handoffs_at_commit AFTER INSERT ON skipq.handoffs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION skipq.hand_off();

CREATE OR REPLACE FUNCTION skipq.notify_ready() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    queued bigint[] := '{}';
    waiters bigint;
    chosen bigint;
BEGIN
    -- Only under READ COMMITTED: at a higher isolation level the commit's
    -- SKIP LOCKED would fail on a waiter row changed since the snapshot
    -- (each beat changes them), and with it the application's commit. A
    -- transaction that has chosen as many jobs as threads wait does not
    -- look again (one that enqueues row by row in a loop pays it once).
    IF current_setting('skipq.handoffs_full', true) IS DISTINCT FROM 'on'
       AND current_setting('transaction_isolation') = 'read committed' THEN
        -- Most inserts find nobody waiting: one look at a table of a row
        -- per thread.
        SELECT count(*) INTO waiters FROM skipq.waiting x WHERE x.until > clock_timestamp();
        IF waiters > 0 THEN
            WITH g AS (
                SELECT q.queue, q.kind, c.waiters
                  FROM (SELECT DISTINCT n.queue, n.kind FROM new_rows n
                         WHERE n.status = 'pending' AND n.run_at <= now() AND n.ordering_key IS NULL) q
                 CROSS JOIN LATERAL (SELECT count(*) AS waiters FROM skipq.waiting x
                                      WHERE x.queue = q.queue AND q.kind = ANY (x.kinds)
                                        AND x.until > clock_timestamp()) c
                 WHERE c.waiters > 0
                   AND NOT EXISTS (SELECT FROM skipq.kind_limits l WHERE l.kind = q.kind)
                   AND NOT EXISTS (SELECT FROM skipq.paused p
                                    WHERE (p.scope = 'queue' AND p.name = q.queue)
                                       OR (p.scope = 'kind' AND p.name = q.kind))
            ), picked AS (
                SELECT b.id, g.queue, g.kind FROM g CROSS JOIN LATERAL (
                    SELECT n.id FROM new_rows n
                     WHERE n.queue = g.queue AND n.kind = g.kind AND n.status = 'pending'
                       AND n.run_at <= now() AND n.ordering_key IS NULL
                     ORDER BY n.priority DESC, n.run_at, n.id LIMIT g.waiters) b
            ), ins AS (
                INSERT INTO skipq.handoffs (job_id, queue, kind) SELECT id, queue, kind FROM picked ORDER BY id
                RETURNING job_id
            )
            SELECT coalesce(array_agg(job_id), '{}') INTO queued FROM ins;
            chosen := coalesce(nullif(current_setting('skipq.handoffs_chosen', true), '')::bigint, 0)
                      + cardinality(queued);
            PERFORM set_config('skipq.handoffs_chosen', chosen::text, true);
            IF chosen >= waiters THEN
                PERFORM set_config('skipq.handoffs_full', 'on', true);
            END IF;
        END IF;
    END IF;
    FOR r IN SELECT n.queue, bool_or(n.run_at <= now() AND NOT n.id = ANY (queued)) AS ready,
                    min(n.run_at) FILTER (WHERE n.run_at > now()) AS due
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

-- A host's beat keeps its idle threads' registrations fresh, so a host
-- that stops beating (frozen, cut off) stops getting jobs handed to it
-- once they lapse.
CREATE OR REPLACE FUNCTION skipq.host_beat(id text, name text, hostname text, pid int, version text, threads int,
                                           serves text[], heartbeat_ms bigint, first boolean) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO skipq.hosts AS h (id, name, hostname, pid, version, threads, queues, kinds, serves, heartbeat_ms,
                                  registered_by)
    SELECT host_beat.id, host_beat.name, host_beat.hostname, host_beat.pid, host_beat.version,
           host_beat.threads,
           ARRAY(SELECT DISTINCT split_part(s, '/', 1) FROM unnest(host_beat.serves) s ORDER BY 1),
           ARRAY(SELECT DISTINCT split_part(s, '/', 2) FROM unnest(host_beat.serves) s ORDER BY 1),
           host_beat.serves, host_beat.heartbeat_ms, session_user
    ON CONFLICT ON CONSTRAINT hosts_pkey DO UPDATE
       SET name = excluded.name, hostname = excluded.hostname, pid = excluded.pid,
           version = excluded.version, threads = excluded.threads, queues = excluded.queues,
           kinds = excluded.kinds, serves = excluded.serves, heartbeat_ms = excluded.heartbeat_ms,
           heartbeat_at = now(), registered_by = excluded.registered_by,
           started_at = CASE WHEN host_beat.first OR h.registered_by IS DISTINCT FROM excluded.registered_by
                             THEN now() ELSE h.started_at END
     WHERE h.registered_by IS NULL OR h.registered_by = excluded.registered_by
        OR NOT skipq.host_alive(h.heartbeat_at, h.heartbeat_ms);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skipq.host_beat: host id "%" is registered by another role and still alive', host_beat.id
            USING ERRCODE = '42501';
    END IF;
    -- The host is alive: so are its idle threads' registrations, for as
    -- long as a host counts as alive after a beat. Rows a commit holds are
    -- passed over (it is handing that thread a job).
    UPDATE skipq.waiting w SET until = clock_timestamp() + 3 * host_beat.heartbeat_ms * interval '1 millisecond'
     WHERE w.worker IN (SELECT x.worker FROM skipq.waiting x
                         WHERE x.host = host_beat.id AND x.until > '-infinity'
                         FOR UPDATE SKIP LOCKED);
END
$$;

-- A host that stops (host_gone()) takes its threads' registrations with
-- its row, passing over any a commit holds (those it gives back itself).
CREATE OR REPLACE FUNCTION skipq.host_gone(id text) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM skipq.waiting w
     WHERE w.worker IN (SELECT x.worker FROM skipq.waiting x
                         WHERE x.host = host_gone.id
                           AND EXISTS (SELECT FROM skipq.hosts h
                                        WHERE h.id = host_gone.id
                                          AND (h.registered_by IS NULL OR h.registered_by = session_user))
                         FOR UPDATE SKIP LOCKED);
    DELETE FROM skipq.hosts h
     WHERE h.id = host_gone.id AND (h.registered_by IS NULL OR h.registered_by = session_user)
$$;

REVOKE EXECUTE ON FUNCTION skipq.waiter_set(text, text, text, text[], bigint[], bigint), skipq.waiter_unset(text, boolean),
                            skipq.waiter_gone(text), skipq.hand_off() FROM PUBLIC;
