#!/usr/bin/env bash
# scripts/test.sh -- the full test suite, as CI runs it: install what is
# missing, start a throwaway PostgreSQL of our own, then build and run every
# Criterion suite three times over, and fuzz:
#   1. the release build (what ships), the failover suite included (its
#      own pg_auto_failover clusters, scripts/ha.sh; about a minute);
#   2. AddressSanitizer + UndefinedBehaviorSanitizer (every suite but
#      failover and package, which run once, in the release build; package
#      builds the Debian package and checks it, tests/check_package.sh);
#   3. ThreadSanitizer (the threaded suites, ctest label tsan: hosts,
#      hammer, faults, chaos, metrics, systemd, reload, pooler, cron, limits);
#   4. fuzz: each libFuzzer target for SKIPQ_FUZZ_SECONDS (60) under
#      ASan+UBSan (scripts/fuzz.sh).
# Any sanitizer report in a test or in a host's log fails the run.
#
#   scripts/test.sh                  everything
#   SKIPQ_VARIANTS="release" scripts/test.sh     only some builds
#   SKIPQ_HAMMER_SCALE=10 scripts/test.sh        bigger hammer runs
#   SKIPQ_FUZZ_SECONDS=600 scripts/test.sh       longer fuzzing
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

"$root/scripts/deps.sh"

variants=${SKIPQ_VARIANTS:-"release asan tsan fuzz"}
pgdir=${SKIPQ_PGDIR:-/tmp/skipq-test-pg-$$}
trap '"$root/scripts/pg.sh" destroy "$pgdir" >/dev/null 2>&1 || true' EXIT

# A free port of our own; never someone else's server.
conninfo=""
for try in 1 2 3 4 5 6 7 8; do
    port=$((55000 + RANDOM % 4000))
    if conninfo=$("$root/scripts/pg.sh" start "$pgdir" "$port"); then break; fi
    conninfo=""
done
[ -n "$conninfo" ] || { echo "test.sh: could not start a throwaway PostgreSQL" >&2; exit 1; }
export SKIPQ_TEST_DB="$conninfo"
echo "test.sh: throwaway PostgreSQL at $SKIPQ_TEST_DB"

jobs=$(nproc)
failed=0
for v in $variants; do
    dir="$root/build-test-$v"
    case $v in
        release) san=""; select=() ;;
        asan) san="address"; select=(-LE 'failover|package') ;;
        tsan) san="thread"; select=(-L tsan) ;;
        fuzz)
            echo "test.sh: === fuzz ==="
            SKIPQ_FUZZ_DIR="$root/build-test-fuzz" "$root/scripts/fuzz.sh" "${SKIPQ_FUZZ_SECONDS:-60}" || failed=1
            continue ;;
        *) echo "test.sh: unknown variant $v" >&2; exit 2 ;;
    esac
    echo "test.sh: === $v build ==="
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSKIPQ_SANITIZE="$san" >/dev/null
    cmake --build "$dir" -j "$jobs" >/dev/null
    (
        cd "$dir"
        # Leak checks apply to skipq processes (the harness passes these
        # options on), not to the test runner's own bookkeeping.
        export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
        export SKIPQ_CHILD_ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
        export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
        # report_thread_leaks=0: when the shutdown grace runs out the host
        # exits with a handler still running, on purpose (see host.c), so
        # some threads are never joined. Races are still reported.
        export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:atexit_sleep_ms=0:report_thread_leaks=0"
        # Full hammer sizes in the release build; a third of them under the
        # sanitizers, which run 2-10x slower (SKIPQ_HAMMER_SCALE overrides).
        if [ "$v" != release ]; then export SKIPQ_HAMMER_SCALE=${SKIPQ_HAMMER_SCALE:-0.3}; fi
        ctest --output-on-failure "${select[@]}"
    ) || failed=1
done
[ "$failed" = 0 ] && echo "test.sh: all variants passed ($variants)" || echo "test.sh: FAILED" >&2
exit "$failed"
