#!/usr/bin/env bash
# Installs the Debian packages kiln needs, skipping the ones already installed. Runs as root on a
# fresh Debian machine (uses sudo when not root).
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  libbenchmark-dev libgtest-dev libdnnl-dev
  ocl-icd-opencl-dev opencl-c-headers  # dnnl-config.cmake (Debian's libdnnl-dev) finds OpenCL
  python3 python3-numpy python3-torch python3-torchvision python3-onnx libonnx-testdata
  python3-dev python3-pybind11 pybind11-dev   # the Python package kiln (python/)
  # engine-perf: history in SQLite, JSON, its command line, file hashes; the dashboard's browser test
  libsqlite3-dev nlohmann-json3-dev libcli11-dev libssl-dev chromium
  # clang builds the fuzz targets (scripts/fuzz.sh) and the ASan+UBSan tree CI runs: libFuzzer and
  # the sanitizer runtimes, and LLVM's OpenMP runtime for its -fopenmp
  clang libclang-rt-14-dev libomp-dev
)
command -v npm >/dev/null || PACKAGES+=(nodejs npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "[deps] installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages, pinned by each folder's package-lock.json: uPlot (inlined into engine-perf's
# dashboard page at build time) and puppeteer-core (drives chromium in the dashboard's browser test).
cd "$(dirname "$0")/.."
for dir in profiles/dashboard tests/e2e/browser; do
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "[deps] npm ci in $dir"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
done
