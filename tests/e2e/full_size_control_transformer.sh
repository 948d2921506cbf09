#!/usr/bin/env bash
# The full-size ControlTransformer of seed 000 (274 tokens per timestep, 8 layers, width 384,
# image 3x256x256) against PyTorch (atol 1e-4, rtol 1e-3):
#   1. engine-run on the ONNX model: 6 timesteps with an empty cache, and 1 timestep on a
#      1370-token cache;
#   2. one engine built by engine-build from configs/incremental.yaml with the full profile ranged
#      as timesteps {min: 1, opt: 6, max: 6}, run per profile at 5 and 6 timesteps (full) and at
#      274 and 1370 cached tokens (incremental: the range's min and opt = max).
# usage: full_size_control_transformer.sh ENGINE_RUN WORKDIR [ENGINE_BUILD]
set -euo pipefail
ENGINE_RUN=$1
mkdir -p "$2"
WORK=$(cd "$2" && pwd)  # absolute: --set model= resolves against the config folder
ENGINE_BUILD=${3:-$(dirname "$ENGINE_RUN")/engine-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$WORK/control_transformer.onnx
CASES=(full incremental full:T=5 incremental:T=1,cached=1)
mkdir -p "$WORK"
# Re-export only when the export scripts changed since the last export or a case is missing.
stale=0
[ -f "$MODEL" ] || stale=1
[ $stale = 1 ] || [ -z "$(find "$ROOT/models" -name '*.py' -newer "$MODEL")" ] || stale=1
for c in full incremental full_T_5 incremental_T_1_cached_1; do [ -d "$WORK/ref/$c/expected" ] || stale=1; done
if [ $stale = 1 ]; then
  rm -rf "$WORK/ref"
  /usr/bin/python3 "$ROOT/models/export_models.py" control_transformer --size full --out "$MODEL" \
    --reference-dir "$WORK/ref" --case "${CASES[@]}" --quiet
fi

status=0
run_case() {  # run_case LABEL CASE_DIR [engine-run args before --input ...]
  local label=$1 dir=$2
  shift 2
  local args=()
  for f in "$dir"/inputs/*.npy; do args+=(--input "$(basename "$f" .npy)=$f"); done
  echo "== $label"
  # --iterations 2: the outputs come from a steady-state run on the planned arena.
  if ! "$ENGINE_RUN" "$@" "${args[@]}" --output-dir "$WORK/out/$label" --iterations 2; then status=1; return; fi
  /usr/bin/python3 "$ROOT/scripts/compare_npy.py" "$dir/expected" "$WORK/out/$label" || status=1
}

run_case onnx_full "$WORK/ref/full" "$MODEL"
run_case onnx_incremental "$WORK/ref/incremental" "$MODEL"

ENGINE=$WORK/control_transformer.engine
"$ENGINE_BUILD" "$ROOT/configs/incremental.yaml" --no-bench --output "$ENGINE" --set "model=$MODEL" \
  --set 'profiles.full.dims={timesteps: {min: 1, opt: 6, max: 6}, cached_seq: 0, new_seq: {min: 274, opt: 1644, max: 1644}, total_seq: {min: 274, opt: 1644, max: 1644}}'
run_case engine_full_T6 "$WORK/ref/full" "$ENGINE" --profile full
run_case engine_full_T5 "$WORK/ref/full_T_5" "$ENGINE" --profile full
run_case engine_incremental_cached1370 "$WORK/ref/incremental" "$ENGINE" --profile incremental
run_case engine_incremental_cached274 "$WORK/ref/incremental_T_1_cached_1" "$ENGINE" --profile incremental
exit $status
