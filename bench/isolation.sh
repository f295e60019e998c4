#!/usr/bin/env bash
# bench/isolation.sh -- what process isolation costs: skipq-bench's drain
# throughput and idle latency with `[queue] isolation = process` against
# thread mode. Single runs swing by +-20 % on a shared machine, so the two
# modes are run alternately, in ABBA order (thread, process; process,
# thread; ...) so neither always goes first, on one throwaway PostgreSQL
# shared by every run (same server, same hour, same load), and the medians
# are compared. See bench/README.md, "Process isolation".
#
#   bench/isolation.sh [--build DIR] [--rounds N] [skipq-bench flags...]
#
#   --build DIR   the build directory holding bench/skipq-bench (default: build)
#   --rounds N    runs of each mode (default 5)
#   other flags go to every skipq-bench run; the default is
#   --modes drain,latency --threads 2 --batch 1000 --repeat 3 (drain and latency are
#   what it reads; --db, --json and --isolation are its own).
#
# Prints one line per run and a summary: per mode the median drain jobs/s
# and latency p50 / p99 with every run's figure, then process mode's drain
# as a share of thread mode's and the difference of the latency medians,
# against the targets (drain >= 90 %, latency p50 within 0.1 ms). Exit
# status: 0, 1 when a run failed (a correctness check of skipq-bench
# included), 2 for a usage error. Run files stay in /tmp/skipq-isolation-PID
# after a failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build=$root/build
rounds=5
extra=()
while (($#)); do
    case $1 in
        --build) build=$(realpath -m -- "${2:?--build needs a directory}"); shift 2 ;;
        --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
        --db|--db=*|--json|--json=*|--isolation|--isolation=*)
            echo "isolation.sh: $1 is set by this script" >&2; exit 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) extra+=("$1"); shift ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]?$ ]] || { echo "isolation.sh: --rounds: \"$rounds\" is not a number from 1 to 99" >&2; exit 2; }
((${#extra[@]})) || extra=(--modes "drain,latency" --threads 2 --batch 1000 --repeat 3)
bench=$build/bench/skipq-bench
[[ -x $bench ]] || { echo "isolation.sh: no $bench: build the skipq_bench target first" >&2; exit 2; }

work=/tmp/skipq-isolation-$$
mkdir -p "$work"
chmod 0755 "$work" # the postgres user must reach $work/pg
ok=0
finish() {
    "$root/scripts/pg.sh" destroy "$work/pg" >/dev/null 2>&1 || true
    if ((ok)); then rm -rf "$work"; else echo "isolation.sh: run files kept in $work" >&2; fi
}
trap finish EXIT

# A free port of our own in 56000-56999, as skipq-bench picks one.
conninfo=""
for _ in 1 2 3 4 5 6 7 8; do
    if conninfo=$("$root/scripts/pg.sh" start "$work/pg" $((56000 + RANDOM % 1000)) 2>>"$work/pg.err"); then break; fi
    conninfo=""
done
[[ -n $conninfo ]] || { echo "isolation.sh: could not start a throwaway PostgreSQL ($work/pg.err)" >&2; exit 1; }

# value FILE SECTION KEY: a number from skipq-bench's JSON, where each
# section ("drain", "latency") is one line.
value() {
    grep "^  \"$2\": " "$1" | grep -o "\"$3\": [0-9.]*" | head -n 1 | cut -d' ' -f2
}

# median NUMBERS...: the middle one (the lower of the two middle ones for
# an even count, as skipq-bench's --repeat does).
median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

declare -A drain p50 p99
run() { # run MODE ROUND
    local json=$work/$1-$2.json
    if ! "$bench" --db "$conninfo" --isolation "$1" --json "$json" "${extra[@]}" >"$work/$1-$2.out" 2>&1; then
        echo "isolation.sh: $1 run $2 failed:" >&2
        tail -n 20 "$work/$1-$2.out" >&2
        exit 1
    fi
    drain[$1]+="$(value "$json" drain jobs_per_s) "
    p50[$1]+="$(value "$json" latency p50_ms) "
    p99[$1]+="$(value "$json" latency p99_ms) "
    printf 'isolation.sh: round %d %-7s drain %s jobs/s, latency p50 %s ms, p99 %s ms, load %s\n' "$2" "$1" \
        "$(value "$json" drain jobs_per_s)" "$(value "$json" latency p50_ms)" "$(value "$json" latency p99_ms)" \
        "$(value "$json" params loadavg_1m_end)"
}

echo "isolation.sh: $rounds rounds, ABBA order, skipq-bench ${extra[*]}, on $(nproc) CPU(s)"
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then run thread "$r"; run process "$r"; else run process "$r"; run thread "$r"; fi
done

echo
printf '%-8s  %-14s  %-16s  %s\n' mode "drain jobs/s" "latency p50/p99" "runs (drain; p50)"
declare -A med
for m in thread process; do
    # shellcheck disable=SC2086 # word splitting of the figure lists is meant
    {
        med[$m.drain]=$(median ${drain[$m]})
        med[$m.p50]=$(median ${p50[$m]})
        med[$m.p99]=$(median ${p99[$m]})
    }
    printf '%-8s  %-14s  %-16s  %s; %s\n' "$m" "${med[$m.drain]}" "${med[$m.p50]} / ${med[$m.p99]} ms" \
        "${drain[$m]% }" "${p50[$m]% }"
done
awk -v pd="${med[process.drain]}" -v td="${med[thread.drain]}" -v pl="${med[process.p50]}" \
    -v tl="${med[thread.p50]}" 'BEGIN {
    share = td > 0 ? pd / td : 0; diff = pl - tl
    printf "\nprocess mode drain: %.1f %% of thread mode (target >= 90 %%): %s\n", share * 100,
           (share >= 0.9 ? "met" : "MISSED")
    printf "process mode latency p50: %+.3f ms against thread mode (target within 0.1 ms): %s\n", diff,
           (diff <= 0.1 ? "met" : "MISSED")
}'
ok=1
