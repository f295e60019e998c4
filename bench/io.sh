#!/usr/bin/env bash
# I/O-bound handlers: the peers' realistic matrix (../shared/bench-peers/
# realistic, its README) with skipq's tuned setup for a queue that keeps no
# done jobs beside its default.
#
#   bench/io.sh [BUILD=build] [PEERS=../shared/bench-peers] [REPS=3]
#
# The harness runs skipq, Graphile Worker and pg-boss with handlers that
# nap H ms, at concurrency C, and reports how close each comes to C / H
# jobs/s. Its skipq rows are the shipped defaults and `batch = 32`. This
# script runs a copy of it with bench/io-realistic.patch applied, which
# - adds the system skipq-leave: the default INI plus `[kind test]
#   keep_done = off` (done jobs leave skipq.jobs in the transaction that
#   records them; their audit rows stay). Graphile Worker deletes a job
#   when it completes, so this is the like-for-like row beside its "fast"
#   setup;
# - enqueues in enqueue_many() calls of 10,000 jobs, the shipped
#   skipq.settings max_batch_jobs (the harness sends all N in one call);
# - counts a job as run exactly once when its one execution ended done on
#   the first attempt and skipq.jobs holds it as done or not at all (the
#   harness looks for the done row, which a job that left no longer has);
# - adds the system skipq-fast: skipq-leave with `batch = 1000`, so each of
#   the two shared sessions of 128 threads claims up to 1,000 jobs at once
#   while they run within 100 ms (fewer claims, each walking the ready
#   index's dead entries once; bench/README.md).
# SYSTEMS defaults to skipq-default skipq-leave skipq-fast graphile-default
# graphile-fast pgboss-tuned (skipq-tuned, batch 32, runs below the
# default at C = 128, and pg-boss's default does a few jobs per poll: name
# them in SYSTEMS to add them). The harness's other environment variables
# (HANDLERS, CONCS, IDEAL_SECONDS, OUT, PROFILE, LOCKDIAG, ...) pass
# through, and it prints its summary at the end. HANDLERS=5 takes about 25
# minutes on a 2-core machine with 3 reps, most of it Graphile Worker's
# default setup at C = 64 and 128.
set -euo pipefail
root=$(pwd)
build=$(cd "${1:-build}" && pwd)
peers=$(cd "${2:-../shared/bench-peers}" && pwd)
reps=${3:-3}
[[ -x $build/skipq && -f $build/plugins/testkit.so ]] || { echo "io.sh: build the project first ($build/skipq)" >&2; exit 2; }
[[ -f $root/bench/io-realistic.patch ]] || { echo "io.sh: run from the project's root" >&2; exit 2; }
[[ -x $peers/realistic/run.sh ]] || { echo "io.sh: no $peers/realistic/run.sh (the peers' harness)" >&2; exit 2; }
work=$(mktemp -d /tmp/skipq-io-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$peers/realistic" "$work/realistic"
patch -s -d "$work/realistic" -p1 <"$root/bench/io-realistic.patch" ||
    { echo "io.sh: bench/io-realistic.patch no longer applies to $peers/realistic" >&2; exit 1; }
SYSTEMS=${SYSTEMS:-"skipq-default skipq-leave skipq-fast graphile-default graphile-fast pgboss-tuned"} \
    "$work/realistic/run.sh" "$build" "$reps"
