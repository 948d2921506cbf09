#!/usr/bin/env bash
# Runs one libFuzzer target for a while: builds the fuzz targets with clang, ASan and UBSan into
# build-fuzz/ (once; incremental after), seeds a working corpus from the project's test data, and
# fuzzes with the protobuf dictionary where the input is a protobuf.
#
#   scripts/fuzz.sh TARGET [SECONDS]     TARGET: npy tensor_pb build_config onnx_import engine_load
#
# SECONDS defaults to 60. The corpus grows in build-fuzz/corpus/TARGET (kept between runs); a crash
# is written to build-fuzz/crashes/TARGET/ and the script exits non-zero: fix it, then copy the
# input into tests/fuzz/regressions/TARGET/ so ctest replays it from then on. The last lines of
# libFuzzer's output (executions, coverage, corpus size) are appended to build-fuzz/fuzz-log.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:?usage: scripts/fuzz.sh TARGET [SECONDS]}
SECONDS_TO_RUN=${2:-60}
case "$TARGET" in npy|tensor_pb|build_config|onnx_import|engine_load) ;; *) echo "unknown target '$TARGET'" >&2; exit 2;; esac
./scripts/install_deps.sh >/dev/null
BUILD=build-fuzz
if [ ! -f "$BUILD/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_FUZZ=ON "${launcher[@]}"
fi
cmake --build "$BUILD" -j2 --target "fuzz-$TARGET"

corpus="$BUILD/corpus/$TARGET"
crashes="$BUILD/crashes/$TARGET"
mkdir -p "$corpus" "$crashes"
if [ -z "$(ls -A "$corpus")" ]; then
  # Seeds: the regressions and hostile inputs, plus valid files from the test data. `head` closes
  # find's pipe early, which pipefail would turn into a failed run.
  set +o pipefail
  cp tests/fuzz/regressions/"$TARGET"/* "$corpus"/ 2>/dev/null || true
  case "$TARGET" in
    npy) find /usr/share/libonnx-testdata -name '*.npy' | head -200 | xargs -r cp -t "$corpus" 2>/dev/null || true
         /usr/bin/python3 tests/fuzz/make_seeds.py npy "$corpus" ;;
    tensor_pb) find /usr/share/libonnx-testdata/data/node -name 'input_*.pb' | head -300 | while read -r f; do cp "$f" "$corpus/$(echo "$f" | md5sum | cut -c1-12).pb"; done ;;
    onnx_import) find /usr/share/libonnx-testdata/data/node -name model.onnx | head -400 | while read -r f; do cp "$f" "$corpus/$(echo "$f" | md5sum | cut -c1-12).onnx"; done ;;
    build_config) cp configs/*.yaml tests/e2e/configs/*.yaml "$corpus"/ 2>/dev/null || true ;;
    engine_load) /usr/bin/python3 tests/fuzz/make_seeds.py engine_load "$corpus" --engine-build build/engine-build ;;
  esac
  set -o pipefail
fi
dict=()
case "$TARGET" in tensor_pb|onnx_import|engine_load) dict=(-dict=tests/fuzz/protobuf.dict) ;; build_config) dict=(-dict=tests/fuzz/yaml.dict) ;; esac
export ASAN_OPTIONS="abort_on_error=1 detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
log="$BUILD/fuzz-$TARGET-$(date +%Y%m%d-%H%M%S).log"
status=0
"$BUILD/fuzz-$TARGET" "$corpus" "${dict[@]}" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
  -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || status=$?
{ echo "== $(date -u +%FT%TZ) $TARGET ${SECONDS_TO_RUN}s exit $status"; grep -E '^#[0-9]+.*(DONE|pulse|REDUCE|NEW)' "$log" | tail -1; grep -E '^stat::' "$log"; } | tee -a "$BUILD/fuzz-log.txt"
if [ "$status" -ne 0 ]; then
  echo "fuzz-$TARGET found a problem (log: $log, input in $crashes/)" >&2
  tail -40 "$log" >&2
fi
exit "$status"
