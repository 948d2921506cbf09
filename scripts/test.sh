#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest: unit, pass,
# kernel-vs-reference, conformance (ONNX backend test data) and PyTorch end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
cd "${KILN_BUILD_DIR:-build}"
ctest --output-on-failure -j2 "$@"
