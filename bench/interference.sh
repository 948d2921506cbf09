#!/usr/bin/env bash
# The control loop under load: the full-size ControlTransformer's paced 10 Hz streaming loop, quiet,
# with a CPU hog pinned to one core and with a memory-bandwidth hog, in f32 and bf16, on kiln's
# pool (all cores) and with `threads: 1`. Runs alternate (every configuration once per round), so a
# change in the machine's load spreads over all of them; results are appended as JSON lines.
#
#   bench/interference.sh [STEPS] [ROUNDS] [OUT.jsonl]      (defaults 600, 1, build/interference.jsonl)
#
# Needs build/ (scripts/build.sh) and the full-size export (models/export_models.py, see
# models/README.md); builds the four engines once into build/engines/ (engine-build --no-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-600}
ROUNDS=${2:-1}
OUT=${3:-build/interference.jsonl}
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
  for hog in none cpu memory; do
    for prec in f32 bf16; do
      $B/interference configs/incremental.yaml --engine "$B/engines/ct_$prec.engine" --steps "$STEPS" --hog "$hog" \
        --label "round$r $prec pool" --json "$OUT"
      $B/interference configs/incremental.yaml --engine "$B/engines/ct_${prec}_t1.engine" --steps "$STEPS" --hog "$hog" --threads 1 \
        --label "round$r $prec threads1" --json "$OUT"
    done
  done
done
