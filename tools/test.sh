#!/usr/bin/env bash
# The whole test suite from scratch: installs what is missing, configures a
# fresh build, builds and runs ctest. GPU suites (label `gpu`) run for real on
# a machine with a GPU and show as skipped elsewhere.
#   BUILD_DIR=build-test   where to build (removed first)
#   CUDAARCHS=90           CUDA architectures (default: the GPU present, else
#                          the documented list in CMakeLists.txt)
#   BUILD_TYPE=Release
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
tools/deps.sh

BUILD_DIR=${BUILD_DIR:-build-test}
BUILD_TYPE=${BUILD_TYPE:-Release}
rm -rf "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DMELFORGE_WERROR=ON
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 1200 "$@"
