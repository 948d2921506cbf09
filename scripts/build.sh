#!/usr/bin/env bash
# Configures (once) and builds kiln in Release into build/. Incremental: re-running only rebuilds
# what changed. KILN_SANITIZE=address,undefined (or thread) builds with those sanitizers into
# build-<sanitizers>/ (e.g. build-address-undefined/), so the Release tree stays as it is.
# Arguments go to `cmake --build` (e.g. --target kiln_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=${KILN_SANITIZE:-}
default_dir=build
[ -n "$SANITIZE" ] && default_dir="build-${SANITIZE//,/-}"
BUILD_DIR=${KILN_BUILD_DIR:-$default_dir}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# ASan+UBSan builds use clang (installed for the fuzzers): GCC took 403 s for the largest kernel
# file with these sanitizers, clang 92 s, and CI builds this tree from scratch.
compilers=()
case "$SANITIZE" in *address*|*undefined*) command -v clang++ >/dev/null && compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;; esac
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_SANITIZE="$SANITIZE" "${compilers[@]}" "${launcher[@]}" ${KILN_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j2 "$@"
