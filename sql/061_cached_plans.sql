-- 061: two functions on the enqueue's path keep their plans for the session.
--
-- Why: both were LANGUAGE sql functions with their own search_path, and
-- PostgreSQL never inlines a function with a SET clause; it parses and
-- plans such a function's body again in every statement that calls it.
-- - skipq.enqueue(), the wrapper applications call, planned its call of
--   enqueue_ex() on every enqueue.
-- - skipq.host_alive() is called by the hand-over at an enqueue's commit
--   (060) for the thread it picks, so every enqueue that handed a job over
--   planned it inside its commit; so did every registration and beat.
-- PL/pgSQL keeps the plan of each statement for the session and evaluates
-- a lone expression without the executor. Same rules, signatures, defaults
-- and rights (CREATE OR REPLACE keeps the grants).
CREATE OR REPLACE FUNCTION skipq.host_alive(heartbeat_at timestamptz, heartbeat_ms bigint) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN host_alive.heartbeat_at > now() - 3 * host_alive.heartbeat_ms * interval '1 millisecond';
END
$$;

CREATE OR REPLACE FUNCTION skipq.enqueue(
    kind         text,
    payload      jsonb       DEFAULT '{}',
    queue        text        DEFAULT 'default',
    priority     int         DEFAULT 0,
    run_at       timestamptz DEFAULT now(),
    max_attempts int         DEFAULT NULL,
    unique_key   text        DEFAULT NULL,
    unique_for   interval    DEFAULT NULL,
    ordering_key text        DEFAULT NULL,
    depends_on   bigint[]    DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT e.id FROM skipq.enqueue_ex(enqueue.kind, enqueue.payload, enqueue.queue, enqueue.priority,
                                              enqueue.run_at, enqueue.max_attempts, enqueue.unique_key,
                                              enqueue.unique_for, enqueue.ordering_key, enqueue.depends_on) AS e);
END
$$;
