-- 052: nothing in schema skipq for PUBLIC, and a host's row for its own role.
--
-- 1. PostgreSQL grants EXECUTE on every new function to PUBLIC. Functions
--    here that were never revoked (valid_run_at, host_alive,
--    claim_allowance, the trigger functions) could be called by any role
--    that has USAGE on the schema. Every function now is executable only
--    by its owner and the roles sql/roles.sql names. (A trigger function
--    needs no EXECUTE to fire.) PostgreSQL cannot take PUBLIC's EXECUTE
--    away per schema by default privileges -- ALTER DEFAULT PRIVILEGES IN
--    SCHEMA only adds to the global defaults -- so `skipq migrate` repeats
--    this REVOKE after every run that applies a migration, and the
--    security_schema suite fails if any function is left to PUBLIC.
-- 2. skipq.hosts rows record the role that registered them (the session's
--    login role: a SECURITY DEFINER function sees itself as current_user).
--    host_beat() refreshes a row only for that role, or takes over a row
--    whose host is no longer alive; host_gone() deletes only that role's
--    row. Before, any worker role could delete or overwrite every host's
--    row. Rows written before this migration have no role and are claimed
--    by the next beat of their host.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skipq FROM PUBLIC;

ALTER TABLE skipq.hosts ADD COLUMN registered_by text;

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
END
$$;

CREATE OR REPLACE FUNCTION skipq.host_gone(id text) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM skipq.hosts h
     WHERE h.id = host_gone.id AND (h.registered_by IS NULL OR h.registered_by = session_user)
$$;
