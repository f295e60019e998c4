-- roles.sql -- least-privilege roles for skipq. Not a migration: roles are
-- cluster-wide and need CREATEROLE. Apply once per database, after
-- `skipq migrate`, as a superuser or the schema owner with CREATEROLE:
--
--     psql -d app -f sql/roles.sql
--     CREATE ROLE app_web LOGIN IN ROLE skipq_enqueuer;     -- your app
--     CREATE ROLE jobs_host LOGIN IN ROLE skipq_worker;     -- skipq run
--
-- skipq_enqueuer: may call skipq.enqueue(), enqueue_ex() and enqueue_many(), nothing
--                 else in schema skipq.
-- skipq_bulk:     may COPY jobs straight into skipq.jobs (skipq_copy_begin()
--                 in libskipq, the fastest way in). For trusted producers:
--                 the library checks every row, but a client that writes
--                 rows itself is held only by the table's constraints (names,
--                 priority, attempts, valid JSON), not by the payload size
--                 limit in skipq.settings.
-- skipq_worker:   may claim, heartbeat, complete and sweep jobs (and
--                 enqueue follow-up jobs), read stats; may not delete jobs
--                 (only let a job it finishes as done leave the table,
--                 through skipq.finish_dropping()), change payloads, or
--                 alter the schema.
-- skipq_reader:   may read what `skipq stats`, `top`, `jobs`, `cron`,
--                 `limits` and `skipq web` show, and nothing else: no write,
--                 no function that writes (`skipq web` connected as it
--                 hides and refuses retry, cancel, pause and resume).
-- The schema owner keeps everything else (migrations, DDL, retention).
-- Re-running this file is safe.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_enqueuer') THEN
        CREATE ROLE skipq_enqueuer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_bulk') THEN
        CREATE ROLE skipq_bulk NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_worker') THEN
        CREATE ROLE skipq_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'skipq_reader') THEN
        CREATE ROLE skipq_reader NOLOGIN;
    END IF;
END
$$;

REVOKE ALL ON SCHEMA skipq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA skipq FROM PUBLIC;
REVOKE ALL ON FUNCTION skipq.enqueue(text, jsonb, text, int, timestamptz, int, text, interval, text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION skipq.enqueue_ex(text, jsonb, text, int, timestamptz, int, text, interval, text, bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION skipq.enqueue_many(jsonb) FROM PUBLIC;

GRANT USAGE ON SCHEMA skipq TO skipq_enqueuer, skipq_worker, skipq_bulk;
GRANT EXECUTE ON FUNCTION skipq.enqueue(text, jsonb, text, int, timestamptz, int, text, interval, text, bigint[]),
                          skipq.enqueue_ex(text, jsonb, text, int, timestamptz, int, text, interval, text, bigint[]),
                          skipq.enqueue_many(jsonb)
    TO skipq_enqueuer, skipq_worker;

-- The worker's statements: claim (SELECT ... FOR NO KEY UPDATE needs UPDATE),
-- completions, heartbeat, lease sweep, release; stats and version checks.
GRANT SELECT ON skipq.jobs, skipq.job_executions, skipq.schema_migrations, skipq.settings
    TO skipq_worker;
-- The claim takes and keeps the ordering key of the job it claims. Column
-- privileges, not table ones, here and for the scheduling tables below:
-- LOCK TABLE counts only table-level INSERT/UPDATE, so with them a worker
-- could take ACCESS EXCLUSIVE and stall every host's claims.
REVOKE INSERT, UPDATE ON skipq.ordering_keys FROM skipq_worker;
GRANT SELECT ON skipq.ordering_keys TO skipq_worker;
GRANT INSERT (queue, ordering_key, job_id), UPDATE (job_id) ON skipq.ordering_keys TO skipq_worker;
GRANT UPDATE (status, attempts, run_at, finished_at, lease_expires_at, locked_by,
              current_execution_id, last_error, max_attempts)
    ON skipq.jobs TO skipq_worker;
GRANT INSERT (job_id, attempt, worker, started_at) ON skipq.job_executions TO skipq_worker;
GRANT UPDATE (status, finished_at, error) ON skipq.job_executions TO skipq_worker;

-- The bulk path: the six columns a COPY writes, and the payload limit.
GRANT INSERT (queue, kind, payload, priority, run_at, max_attempts) ON skipq.jobs TO skipq_bulk;
GRANT SELECT ON skipq.settings TO skipq_bulk;
-- The host registry and the finished-job totals (008): written only through
-- these functions, read by stats.
GRANT EXECUTE ON FUNCTION skipq.host_beat(text, text, text, int, text, int, text[], bigint, boolean),
                          skipq.host_gone(text), skipq.advance_totals(bigint), skipq.host_alive(timestamptz, bigint)
    TO skipq_worker;
GRANT SELECT ON skipq.hosts, skipq.job_totals, skipq.job_totals_mark TO skipq_worker;

-- Cron, per-kind limits and priority aging (020): hosts register schedules
-- and limits from their INI files, advance cron ticks (enqueueing the
-- tick's job), count claims into rate windows and raise aged priorities.
-- Known limit: a host with [cron] sections inserts each tick's job into
-- skipq.jobs itself, which skipq_worker may not do; run such hosts as the
-- schema owner, or grant INSERT (queue, kind, payload, priority, run_at,
-- max_attempts) ON skipq.jobs to their role.
REVOKE INSERT, UPDATE ON skipq.cron_state, skipq.kind_limits FROM skipq_worker;
GRANT SELECT ON skipq.cron_state, skipq.kind_limits TO skipq_worker;
GRANT INSERT (name, schedule, timezone, last_tick), UPDATE (schedule, timezone, last_tick, updated_at)
    ON skipq.cron_state TO skipq_worker;
GRANT INSERT (kind, max_running, rate, rate_unit),
      UPDATE (max_running, rate, rate_unit, updated_at, window_start, window_count)
    ON skipq.kind_limits TO skipq_worker;
GRANT UPDATE (priority, base_priority) ON skipq.jobs TO skipq_worker;
GRANT EXECUTE ON FUNCTION skipq.claim_allowance(text[], bigint[]) TO skipq_worker;

-- Housekeeping (053): one host at a time retains, advances the totals or
-- ages a queue, by locking that task's row of skipq.housekeeping (a host
-- that ages a queue adds the queue's row the first time). A row lock needs
-- UPDATE on some column: here the one column that means nothing, so the
-- worker can lock rows but neither rename a task nor LOCK the table.
GRANT SELECT ON skipq.housekeeping TO skipq_worker;
GRANT INSERT (task), UPDATE (lockable) ON skipq.housekeeping TO skipq_worker;

-- Dependencies (050): hosts settle children whose parents a plain read
-- at enqueue could not see end, through this SECURITY DEFINER function.
GRANT EXECUTE ON FUNCTION skipq.settle_dependencies(int) TO skipq_worker;

-- What the worker role is trusted with, and why it keeps it: it may
-- complete, fail or retry any job and write any execution row's outcome
-- (the claim writes audit rows in the same statement that takes the job,
-- and moving that behind a function would cost the hot path), and it can
-- hold row locks on jobs it may claim. So a worker role can already lose
-- or stall any job: it is trusted for the queue's integrity and
-- availability, not with DDL, deletes, payloads or other roles' host rows.
-- Nothing in schema skipq is left to PUBLIC (migration 052).

-- Pause and resume (054): hosts read the paused set; only the schema owner
-- (or a role it grants EXECUTE on skipq.pause/resume) changes it.
GRANT SELECT ON skipq.paused TO skipq_worker;

-- The read-only role: SELECT on what the read-only commands and the
-- dashboard read, and host_alive() (a pure function of its arguments).
-- Nothing that writes: no INSERT/UPDATE/DELETE, no enqueue, no
-- pause/resume, no SECURITY DEFINER function that changes a row.
GRANT USAGE ON SCHEMA skipq TO skipq_reader;
GRANT SELECT ON skipq.jobs, skipq.job_executions, skipq.hosts, skipq.job_totals, skipq.job_totals_mark,
                skipq.cron_state, skipq.kind_limits, skipq.ordering_keys, skipq.paused,
                skipq.schema_migrations, skipq.settings
    TO skipq_reader;
GRANT EXECUTE ON FUNCTION skipq.host_alive(timestamptz, bigint) TO skipq_reader;

-- Per-kind defaults (056): every role that inserts jobs reads them (the
-- BEFORE INSERT trigger that fills a NULL max_attempts runs with the
-- inserter's rights); hosts write the rows of the kinds they run. Column
-- privileges, as for kind_limits: no table-level INSERT/UPDATE, so no LOCK
-- TABLE that would stall every enqueue.
REVOKE INSERT, UPDATE ON skipq.kind_defaults FROM skipq_worker;
GRANT SELECT ON skipq.kind_defaults TO skipq_worker, skipq_bulk, skipq_reader;
GRANT INSERT (kind, max_attempts, set_by), UPDATE (max_attempts, set_by, updated_at)
    ON skipq.kind_defaults TO skipq_worker;

-- Handler output (057): the host writes an attempt's output on its
-- execution row; readers see it with the rest of the row.
GRANT UPDATE (output) ON skipq.job_executions TO skipq_worker;

-- Done jobs that leave skipq.jobs (058): hosts write the kinds' keep_done
-- (column privileges, as for kind_defaults) and finish such jobs through
-- skipq.finish_dropping(), which deletes only running jobs it finishes as
-- done, keeping their executions: the worker role still may not DELETE.
-- Stats read the counts of those jobs.
REVOKE INSERT, UPDATE ON skipq.kind_options FROM skipq_worker;
GRANT SELECT ON skipq.kind_options, skipq.done_counts TO skipq_worker, skipq_reader;
GRANT INSERT (kind, keep_done, set_by), UPDATE (keep_done, set_by, updated_at)
    ON skipq.kind_options TO skipq_worker;
GRANT EXECUTE ON FUNCTION skipq.finish_dropping(bigint[], bigint[]) TO skipq_worker;

-- Idle threads wait in skipq.waiting for the enqueue to hand them a job
-- (060). Only through these functions: with table privileges a worker
-- role could LOCK the table, which every enqueue reads. Stats read it.
REVOKE ALL ON skipq.waiting FROM skipq_worker;
GRANT SELECT ON skipq.waiting TO skipq_worker, skipq_reader;
GRANT EXECUTE ON FUNCTION skipq.waiter_set(text, text, text, text[], bigint[], bigint),
                          skipq.waiter_unset(text, boolean), skipq.waiter_gone(text)
    TO skipq_worker;
