#!/usr/bin/env bash
# scripts/fuzz.sh -- build the libFuzzer targets of tests/fuzz with clang and
# run each for SECONDS (default 60) under AddressSanitizer and
# UndefinedBehaviorSanitizer, from its seed corpus (tests/fuzz/corpus/NAME)
# and dictionary. Any crash, leak, undefined behaviour, broken property,
# timeout or memory blow-up fails the run; the input that caused it is kept
# in build-fuzz/fuzz/NAME/ and its command to reproduce is printed.
#
#   scripts/fuzz.sh                    every target, 60 s each (CI)
#   scripts/fuzz.sh 3600               an hour each
#   SKIPQ_FUZZ_TARGETS="ini cron" scripts/fuzz.sh 600
#
# New inputs libFuzzer finds go to build-fuzz/fuzz/NAME/corpus, which later
# runs start from; the seed corpus in the tree is only read (the suites hold
# its files to expectations: see docs/tests.md before adding one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 1 ]] || { echo "fuzz.sh: SECONDS must be a whole number >= 1" >&2; exit 2; }
targets=${SKIPQ_FUZZ_TARGETS:-"ini cron enqueue_file plugin_elf"}
cc=${SKIPQ_FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
[ -n "$cc" ] || { echo "fuzz.sh: clang not found (scripts/deps.sh installs clang-14)" >&2; exit 1; }
dir=${SKIPQ_FUZZ_DIR:-$root/build-fuzz}

echo "fuzz.sh: building the fuzz targets with $cc in $dir"
cmake -S "$root" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSKIPQ_FUZZ=ON \
    -DSKIPQ_SANITIZE= >/dev/null
cmake --build "$dir" -j "$(nproc)" --target fuzz_targets >/dev/null

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
summary=""
for t in $targets; do
    bin="$dir/tests/fuzz/fuzz_$t"
    seeds="$root/tests/fuzz/corpus/$t"
    [ -x "$bin" ] && [ -d "$seeds" ] || { echo "fuzz.sh: unknown target $t" >&2; exit 2; }
    work="$dir/fuzz/$t"
    mkdir -p "$work/corpus"
    dict=()
    [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
    echo "fuzz.sh: === $t, ${seconds}s ==="
    rc=0
    "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/" "${dict[@]}" "$work/corpus" "$seeds" >"$work/log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
    units=$(find "$work/corpus" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        result="ok"
    else
        result="FAILED (exit $rc)"
        failed=1
        grep -E 'ERROR|SUMMARY|fuzz: |runtime error|Test unit written' "$work/log" | head -n 20 >&2 || true
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -e "$a" ] && echo "fuzz.sh: reproduce with: $bin $a" >&2
        done
        echo "fuzz.sh: full log: $work/log" >&2
    fi
    summary+=$(printf '%-14s %12s executions  %6s corpus inputs  %s' "$t" "${runs:-?}" "$units" "$result")$'\n'
done
echo "fuzz.sh: summary (${seconds}s each)"
printf '%s' "$summary"
[ "$failed" = 0 ] && echo "fuzz.sh: no crash" || echo "fuzz.sh: FAILED" >&2
exit "$failed"
