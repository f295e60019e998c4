#!/usr/bin/env bash
# scripts/demo.sh -- skipq end to end on a fresh machine: install what is
# missing, build, start a throwaway PostgreSQL, migrate, enqueue demo jobs
# (no-ops, a transactional note, jobs that fail and retry, one that fails
# for good), run a host with the example plugins, and show progress until
# the queue has drained. The throwaway server is removed at the end
# (SKIPQ_DEMO_KEEP=1 keeps it and prints how to reach it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs_n=${SKIPQ_DEMO_JOBS:-2000}

"$root/scripts/deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc)" >/dev/null
skipq="$root/build/skipq"

pgdir=/tmp/skipq-demo-pg
host_pid=""
cleanup() {
    [ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null
    if [ "${SKIPQ_DEMO_KEEP:-0}" = 1 ]; then
        echo "demo: PostgreSQL kept running: psql \"$DATABASE_URL\"; stop it with scripts/pg.sh destroy $pgdir"
    else
        "$root/scripts/pg.sh" destroy "$pgdir" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
export DATABASE_URL=$("$root/scripts/pg.sh" start "$pgdir" "${SKIPQ_DEMO_PORT:-54329}")
echo "demo: throwaway PostgreSQL at $DATABASE_URL"

"$skipq" migrate
psql -qX "$DATABASE_URL" -c "CREATE TABLE IF NOT EXISTS public.skipq_notes (job_id bigint, execution_id bigint, note text)"

# Enqueue from SQL in one transaction: the jobs exist only if it commits.
psql -qX "$DATABASE_URL" -v n="$jobs_n" <<'SQL'
BEGIN;
SELECT count(skipq.enqueue('noop')) AS noop_jobs FROM generate_series(1, :n);
SELECT skipq.enqueue('note.write', jsonb_build_object('note', 'hello from job ' || g)) FROM generate_series(1, 20) g \g /dev/null
SELECT skipq.enqueue('test', '{"sleep_ms": 300}', priority => 10) FROM generate_series(1, 8) \g /dev/null
SELECT skipq.enqueue('test', '{"fail_times": 2}') FROM generate_series(1, 5) \g /dev/null
COMMIT;
SQL
# ...and from the command line.
"$skipq" enqueue test '{"permanent": "this job can never succeed"}' --max-attempts 3 >/dev/null
"$skipq" enqueue test '{"sleep_ms": 50}' --delay 2s >/dev/null
echo "demo: enqueued $((jobs_n + 35)) jobs"

conf=$(mktemp /tmp/skipq-demo-XXXXXX.ini)
cat >"$conf" <<INI
[host]
poll_interval = 100ms
lease = 10s
heartbeat = 2s
shutdown_grace = 5s

[plugin noop]
path = $root/build/plugins/noop.so

[plugin notes]
path = $root/build/plugins/txn_note.so

[plugin testkit]
path = $root/build/plugins/testkit.so

[queue default]
threads = 8

[kind test]
backoff_base = 200ms
backoff_cap = 2s
INI

"$skipq" run -c "$conf" 2> >(grep -v ' INFO ' >&2) &
host_pid=$!
start=$(date +%s.%N)
while :; do
    sleep 1
    "$skipq" stats
    left=$(psql -qXAt "$DATABASE_URL" -c "SELECT count(*) FROM skipq.jobs WHERE status IN ('pending','running')")
    [ "$left" = 0 ] && break
    kill -0 "$host_pid" 2>/dev/null || { echo "demo: the host exited unexpectedly" >&2; exit 1; }
done
end=$(date +%s.%N)
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=""
echo
echo "demo: drained in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
psql -qX "$DATABASE_URL" -c "SELECT status, count(*) FROM skipq.jobs GROUP BY 1 ORDER BY 1" \
    -c "SELECT count(*) AS notes_written FROM public.skipq_notes" \
    -c "SELECT id, kind, attempts, last_error FROM skipq.jobs WHERE status = 'dead'"
rm -f "$conf"
