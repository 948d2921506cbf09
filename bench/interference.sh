#!/usr/bin/env bash
# The control loop under load: the full-size ControlTransformer's paced 10 Hz streaming loop, quiet,
# with a CPU hog pinned to one core and with a memory-bandwidth hog, in f32 and bf16, on kiln's
# pool (all cores) and with `threads: 1`. Runs alternate (every configuration once per round), so a
# change in the machine's load spreads over all of them; results are appended as JSON lines.
#
#   bench/interference.sh [STEPS] [ROUNDS] [OUT.jsonl] [HOGS]   (defaults 600, 1, build/interference.jsonl,
#                                                                "none cpu memory")
#
# Per precision, three ways to run: kiln's pool on all cores ("pool": regions on OpenMP's team while
# it is on time, else on kiln's workers), the same binary with KILN_THREAD_POOL=kiln (every region on
# kiln's workers, "kiln-workers"), and the engine built with `threads: 1` run on one thread ("threads1").
#
# Needs build/ (scripts/build.sh) and the full-size export (models/export_models.py, see
# models/README.md); builds the four engines once into build/engines/ (engine-build --no-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-600}
ROUNDS=${2:-1}
OUT=${3:-build/interference.jsonl}
HOGS=${4:-none cpu memory}
# KILN_BENCH_OPTS: options for every run, e.g. "--realtime" (SCHED_FIFO) or "--pin-threads 0,1".
OPTS=${KILN_BENCH_OPTS:-}
B=build
mkdir -p $B/engines
engine() {  # NAME PRECISION THREADS
  [ -f "$B/engines/$1.engine" ] && return 0
  $B/engine-build configs/incremental.yaml --no-bench --output "$B/engines/$1.engine" --set precision="$2" --set threads="$3" \
    --set tactics.timing_cache="../$B/engines/$1.timing_cache" >"$B/engines/$1.build.log" 2>&1
}
engine ct_f32 fp32 0
engine ct_bf16 bf16 0
engine ct_f32_t1 fp32 1
engine ct_bf16_t1 bf16 1
for r in $(seq "$ROUNDS"); do
  for hog in $HOGS; do
    for prec in f32 bf16; do
      $B/interference configs/incremental.yaml --engine "$B/engines/ct_$prec.engine" --steps "$STEPS" --hog "$hog" \
        --label "round$r $prec pool $OPTS" --json "$OUT" $OPTS
      KILN_THREAD_POOL=kiln $B/interference configs/incremental.yaml --engine "$B/engines/ct_$prec.engine" --steps "$STEPS" \
        --hog "$hog" --label "round$r $prec kiln-workers $OPTS" --json "$OUT" $OPTS
      $B/interference configs/incremental.yaml --engine "$B/engines/ct_${prec}_t1.engine" --steps "$STEPS" --hog "$hog" --threads 1 \
        --label "round$r $prec threads1 $OPTS" --json "$OUT" $OPTS
    done
  done
done
