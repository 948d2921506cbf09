#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest: unit, pass,
# kernel-vs-reference, conformance (ONNX backend test data), malformed-input corpus, fuzz
# regressions and PyTorch end-to-end tests. Extra arguments go to ctest.
#
#   KILN_SANITIZE=address,undefined ./scripts/test.sh   the whole suite under ASan + UBSan
#                                                       (no recovery, leak checks on)
#   KILN_SANITIZE=thread ./scripts/test.sh              the concurrency tests under TSan
#   KILN_SUITE=core ./scripts/test.sh                   only the tests labelled "core" (unit,
#                                                       conformance, malformed inputs, fuzz
#                                                       regressions), building only what they run;
#                                                       CI runs these under ASan + UBSan
#
# Sanitized builds go to build-<sanitizers>/ (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/install_deps.sh
SANITIZE=${KILN_SANITIZE:-}
SUITE=${KILN_SUITE:-all}
case "$SUITE" in all|core) ;; *) echo "KILN_SUITE must be 'all' or 'core', not '$SUITE'" >&2; exit 2;; esac
core_targets=(kiln_tests onnx_conformance engine-build engine-run kiln_example_plugin
              fuzz-replay-npy fuzz-replay-tensor_pb fuzz-replay-build_config fuzz-replay-onnx_import fuzz-replay-engine_load)
case "$SANITIZE" in
  *thread*) ./scripts/build.sh --target kiln_tests kiln_concurrency_tests ;;  # TSan runs the concurrency tests only
  *) if [ "$SUITE" = core ]; then ./scripts/build.sh --target "${core_targets[@]}"; else ./scripts/build.sh; fi ;;
esac
default_dir=build
[ -n "$SANITIZE" ] && default_dir="build-${SANITIZE//,/-}"
cd "${KILN_BUILD_DIR:-$default_dir}"
args=()
case "$SANITIZE" in
  "") ;;
  *thread*)
    # libgomp is not built with TSan, so OpenMP's own barriers would be reported: kiln's kernels
    # run on kiln's own workers (KILN_THREAD_POOL=kiln, seen by TSan), OpenMP (oneDNN) on the
    # calling thread alone.
    # oneDNN is not built with TSan either: tests/sanitizers/tsan.supp says what is suppressed and why.
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/tests/sanitizers/tsan.supp ${TSAN_OPTIONS:-}"
    export OMP_NUM_THREADS=1 KILN_NUM_THREADS=2 KILN_THREAD_POOL=kiln
    # The tests that run contexts on several threads (gtest suites named here).
    args=(-R '^(EngineConcurrency|Streaming|ThreadPool|ParallelFor|InferQueue)') ;;
  *)
    # detect_leaks is on by default; abort (not exit) so ctest reports the failing test.
    export ASAN_OPTIONS="abort_on_error=1 detect_leaks=1 strict_string_checks=1 ${ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
    # oneDNN's JIT and libgomp allocate once per process and keep it: not leaks of kiln's.
    export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp ${LSAN_OPTIONS:-}"
    ;;
esac
[ "$SUITE" = core ] && args+=(-L '^core$')
ctest --output-on-failure -j2 "${args[@]}" "$@"
