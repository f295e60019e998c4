-- 008: who is running, and what the queue has done, cheaply.
--
-- skipq.hosts: one row per running host, written by its heartbeat thread
-- every round and deleted when it stops cleanly. A host is alive while its
-- heartbeat is younger than three of its own heartbeat intervals; a host
-- killed without a clean stop stays, not alive, until a host deletes rows
-- silent for a day. `serves` holds "queue/kind" pairs ('/' is not allowed
-- in names), so "does a live host serve this kind on this queue" is exact.
--
-- skipq.job_totals: finished jobs per (queue, kind) and outcome, advanced
-- incrementally by one host at a time (advisory lock) from the watermark in
-- skipq.job_totals_mark: rows with through_prev <= finished_at < through_new
-- are added, found through the BRIN index on finished_at. `skipq stats`
-- adds the rows finished since the watermark, so the totals it prints are
-- exact without reading all history, and survive retention (which deletes
-- only jobs finished before the watermark). The seed below
-- counts the history present when this migration runs.
CREATE TABLE skipq.hosts (
    id           text        PRIMARY KEY,  -- NAME:PID, the prefix of locked_by
    name         text        NOT NULL,
    hostname     text        NOT NULL,
    pid          int         NOT NULL,
    version      text        NOT NULL,
    threads      int         NOT NULL,
    queues       text[]      NOT NULL,
    kinds        text[]      NOT NULL,
    serves       text[]      NOT NULL,     -- 'queue/kind'
    heartbeat_ms bigint      NOT NULL CHECK (heartbeat_ms > 0),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION skipq.host_alive(heartbeat_at timestamptz, heartbeat_ms bigint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT heartbeat_at > now() - 3 * heartbeat_ms * interval '1 millisecond' $$;

-- Register (first = true: a new process, started now) or refresh a host.
CREATE FUNCTION skipq.host_beat(id text, name text, hostname text, pid int, version text, threads int,
                                serves text[], heartbeat_ms bigint, first boolean) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO skipq.hosts AS h (id, name, hostname, pid, version, threads, queues, kinds, serves, heartbeat_ms)
    SELECT host_beat.id, host_beat.name, host_beat.hostname, host_beat.pid, host_beat.version,
           host_beat.threads,
           ARRAY(SELECT DISTINCT split_part(s, '/', 1) FROM unnest(host_beat.serves) s ORDER BY 1),
           ARRAY(SELECT DISTINCT split_part(s, '/', 2) FROM unnest(host_beat.serves) s ORDER BY 1),
           host_beat.serves, host_beat.heartbeat_ms
    ON CONFLICT ON CONSTRAINT hosts_pkey DO UPDATE
       SET name = excluded.name, hostname = excluded.hostname, pid = excluded.pid,
           version = excluded.version, threads = excluded.threads, queues = excluded.queues,
           kinds = excluded.kinds, serves = excluded.serves, heartbeat_ms = excluded.heartbeat_ms,
           heartbeat_at = now(),
           started_at = CASE WHEN host_beat.first THEN now() ELSE h.started_at END
$$;

CREATE FUNCTION skipq.host_gone(id text) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ DELETE FROM skipq.hosts h WHERE h.id = host_gone.id $$;

CREATE TABLE skipq.job_totals (
    queue     text   NOT NULL,
    kind      text   NOT NULL,
    done      bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, kind)
);

-- One row: everything that finished before `through` is in job_totals.
CREATE TABLE skipq.job_totals_mark (
    one      boolean     PRIMARY KEY DEFAULT true CHECK (one),
    through  timestamptz NOT NULL,
    began_at timestamptz NOT NULL
);

INSERT INTO skipq.job_totals (queue, kind, done, dead, cancelled)
SELECT queue, kind, count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead'),
       count(*) FILTER (WHERE status = 'cancelled')
  FROM skipq.jobs WHERE status IN ('done', 'dead', 'cancelled') AND finished_at < now()
 GROUP BY queue, kind;
INSERT INTO skipq.job_totals_mark (through, began_at) VALUES (now(), now());

-- Advance the totals to now() - lag_ms, and never past the start of a
-- transaction still open in this database: a done marker is stamped with
-- its transaction's start (a transactional handler's can be minutes old
-- when it commits), so only what finished before every open transaction
-- began is final. (The function's owner sees other roles' sessions only as
-- a superuser or with pg_read_all_stats; the lag covers short ones anyway.)
-- Only one caller at a time does the work; the others get -1. Also forgets
-- hosts silent for a day. Returns the number of finished jobs added.
CREATE FUNCTION skipq.advance_totals(lag_ms bigint) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_mark timestamptz;
    new_mark timestamptz := now() - greatest(lag_ms, 0) * interval '1 millisecond';
    added bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(495946797171) THEN
        RETURN -1;
    END IF;
    SELECT least(new_mark, min(a.xact_start)) INTO new_mark FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL;
    SELECT m.through INTO old_mark FROM skipq.job_totals_mark m FOR UPDATE;
    IF old_mark IS NULL OR new_mark <= old_mark THEN
        RETURN 0;
    END IF;
    WITH f AS (
        SELECT j.queue, j.kind, count(*) FILTER (WHERE j.status = 'done') AS done,
               count(*) FILTER (WHERE j.status = 'dead') AS dead,
               count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
          FROM skipq.jobs j
         WHERE j.finished_at >= old_mark AND j.finished_at < new_mark
           AND j.status IN ('done', 'dead', 'cancelled')
         GROUP BY j.queue, j.kind
    ), up AS (
        INSERT INTO skipq.job_totals AS t (queue, kind, done, dead, cancelled)
        SELECT queue, kind, done, dead, cancelled FROM f
        ON CONFLICT (queue, kind) DO UPDATE
           SET done = t.done + excluded.done, dead = t.dead + excluded.dead,
               cancelled = t.cancelled + excluded.cancelled
    )
    SELECT coalesce(sum(f.done + f.dead + f.cancelled), 0) INTO added FROM f;
    UPDATE skipq.job_totals_mark SET through = new_mark;
    DELETE FROM skipq.hosts h WHERE h.heartbeat_at < now() - interval '1 day';
    RETURN added;
END
$$;

-- Recent executions (percentiles, throughput) by start time. Rows are
-- inserted in start order and started_at never changes, so a BRIN index is
-- tiny and costs the claim nothing.
CREATE INDEX job_executions_started_brin ON skipq.job_executions USING brin (started_at);

REVOKE ALL ON FUNCTION skipq.host_beat(text, text, text, int, text, int, text[], bigint, boolean),
                       skipq.host_gone(text), skipq.advance_totals(bigint) FROM PUBLIC;
