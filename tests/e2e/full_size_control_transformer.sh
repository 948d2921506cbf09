#!/usr/bin/env bash
# The full-size ControlTransformer of seed 000 (274 tokens per timestep, 8 layers, width 384,
# image 3x256x256) through engine-run, compared with PyTorch (atol 1e-4, rtol 1e-3):
#   full:        6 timesteps, empty cache (cached_seq = 0)
#   incremental: 1 timestep on a 1370-token cache
# usage: full_size_control_transformer.sh ENGINE_RUN WORKDIR
set -euo pipefail
ENGINE_RUN=$1
WORK=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$WORK/control_transformer.onnx
mkdir -p "$WORK"
# Re-export only when the export scripts changed since the last export.
if [ ! -f "$MODEL" ] || [ ! -d "$WORK/ref/incremental/expected" ] || [ -n "$(find "$ROOT/models" -name "*.py" -newer "$MODEL")" ]; then
  rm -rf "$WORK/ref"
  /usr/bin/python3 "$ROOT/models/export_models.py" control_transformer --size full --out "$MODEL" \
    --reference-dir "$WORK/ref" --case full incremental --quiet
fi
status=0
for case in full incremental; do
  dir=$WORK/ref/$case
  args=()
  for f in "$dir"/inputs/*.npy; do args+=(--input "$(basename "$f" .npy)=$f"); done
  echo "== $case: $(/usr/bin/python3 -c "import numpy as np; print('cached_kv', list(np.load('$dir/inputs/cached_kv.npy').shape), 'mask', list(np.load('$dir/inputs/mask.npy').shape))")"
  "$ENGINE_RUN" "$MODEL" "${args[@]}" --output-dir "$WORK/out/$case"
  /usr/bin/python3 "$ROOT/scripts/compare_npy.py" "$dir/expected" "$WORK/out/$case" || status=1
done
exit $status
