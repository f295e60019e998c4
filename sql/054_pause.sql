-- 054: pause and resume a queue or a kind; the dashboard's index of dead jobs.
--
-- skipq.paused holds what operators paused (`skipq pause --queue Q`,
-- `--kind K`, or the dashboard). A row stops new claims of that queue, or of
-- that kind on every queue; jobs already running finish as usual, and
-- enqueues, cron ticks, retries and dependencies go on filling the queue.
-- Hosts read the set on each heartbeat round, as they read kind_limits, so
-- every host stops claiming within one heartbeat; pause() and resume() also
-- send NOTIFY skipq_jobs '!paused' so a host may refresh at once (no queue
-- name starts with '!', so hosts that know nothing of pausing ignore it).
--
-- The two functions are the only way in (SECURITY DEFINER: EXECUTE is the
-- one privilege that matters, and roles.sql grants it to no role of its
-- own; the schema owner has it). They check their arguments and say
-- whether anything changed, so pausing twice is not an error.
CREATE TABLE skipq.paused (
    scope     text        NOT NULL CHECK (scope IN ('queue', 'kind')),
    name      text        NOT NULL CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text        NOT NULL,
    PRIMARY KEY (scope, name)
);

CREATE FUNCTION skipq.pause_check(fn text, scope text, name text) RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF scope IS NULL OR scope NOT IN ('queue', 'kind') THEN
        RAISE EXCEPTION 'skipq.%: scope must be ''queue'' or ''kind'' (got %)', fn, coalesce(quote_literal(scope), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF name IS NULL OR name !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'skipq.%: a % name is 1 to 128 characters of A-Z a-z 0-9 _ . : - (got %)', fn, scope,
                        coalesce(quote_literal(pg_catalog.left(name, 140)), 'NULL')
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- true: paused now; false: it already was.
CREATE FUNCTION skipq.pause(scope text, name text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM skipq.pause_check('pause', pause.scope, pause.name);
    INSERT INTO skipq.paused (scope, name, paused_by) VALUES (pause.scope, pause.name, session_user)
        ON CONFLICT ON CONSTRAINT paused_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('skipq_jobs', '!paused');
    RETURN true;
END
$$;

-- true: resumed now; false: it was not paused.
CREATE FUNCTION skipq.resume(scope text, name text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM skipq.pause_check('resume', resume.scope, resume.name);
    DELETE FROM skipq.paused p WHERE p.scope = resume.scope AND p.name = resume.name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('skipq_jobs', '!paused');
    RETURN true;
END
$$;

-- Dead jobs, for the dashboard's dead page (grouped by kind and error,
-- listed newest first) and its per-kind counts. Partial: dead rows are few
-- next to done ones, and a row enters it only when it dies, so the claim
-- and the completions pay nothing for it.
CREATE INDEX jobs_dead ON skipq.jobs (kind, id) WHERE status = 'dead';
