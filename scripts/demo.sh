#!/usr/bin/env bash
# The main job: installs what is missing, builds Release, exports the full-size ControlTransformer
# of seed 000 if it is missing, and runs `engine-build configs/incremental.yaml`: both profiles
# (full cold start, incremental step) built into one engine, loaded back, validated and benchmarked
# against the 10 Hz budget. Extra arguments go to engine-build (e.g. --set benchmark.iterations=20).
# The benchmark run is recorded into the history build/perf.db (engine-perf), and the dashboard page
# over that history is written to build/kiln-perf.html (open it in a browser; no server needed).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
MODEL=models/out/control_transformer.onnx
if [ ! -f "$MODEL" ] || [ -n "$(find models -name '*.py' -newer "$MODEL")" ]; then
  echo "[demo] exporting the full-size ControlTransformer to $MODEL"
  /usr/bin/python3 models/export_models.py control_transformer --size full --out "$MODEL" --quiet
fi
record=(--record build/perf.db --label "demo")
for arg in "$@"; do
  [ "$arg" = "--no-bench" ] && record=()  # nothing measured, nothing to record
done
./build/engine-build configs/incremental.yaml "${record[@]}" "$@"
if [ ${#record[@]} -gt 0 ]; then
  ./build/engine-perf dashboard --db build/perf.db -o build/kiln-perf.html
fi
