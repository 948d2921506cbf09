#!/usr/bin/env bash
# The main job: installs what is missing, builds Release, exports the full-size ControlTransformer
# (seed 000) if it is missing, and runs it through engine-run at the full cold-start shapes
# (6 timesteps, empty cache) and at the incremental shapes (1 timestep on a 1370-token cache),
# printing latency statistics against the 10 Hz budget (100 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
MODEL=models/out/control_transformer.onnx
if [ ! -f "$MODEL" ]; then
  echo "[demo] exporting the full-size ControlTransformer to $MODEL"
  /usr/bin/python3 models/export_models.py control_transformer --size full --out "$MODEL"
fi
REF=models/out/reference
for case in full incremental; do
  if [ ! -d "$REF/control_transformer_$case" ]; then
    /usr/bin/python3 models/export_models.py control_transformer --size full --out "$MODEL" \
      --reference-dir "$REF" --case "$case"
  fi
done
for case in full incremental; do
  dir="$REF/control_transformer_$case"
  args=()
  for f in "$dir"/inputs/*.npy; do n=$(basename "$f" .npy); args+=(--input "$n=$f"); done
  echo "[demo] engine-run, profile '$case'"
  ./build/engine-run "$MODEL" "${args[@]}" --output-dir "build/demo/$case" --iterations 20 --json "build/demo/$case.json"
  /usr/bin/python3 models/compare_outputs.py "$dir/expected" "build/demo/$case" --budget-json "build/demo/$case.json" --budget-ms 100
done
