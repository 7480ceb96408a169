#!/usr/bin/env bash
# The whole test suite from scratch: installs what is missing, configures a
# fresh build, builds and runs ctest. GPU suites (label `gpu`) run for real on
# a machine with a GPU and show as skipped elsewhere.
#   BUILD_DIR=build-test   where to build (removed first)
#   CUDAARCHS=90           CUDA architectures (default: the GPU present, else
#                          the documented list in CMakeLists.txt)
#   BUILD_TYPE=Release
#   CUDA_EMU=auto          auto: where no GPU is usable, also build the CUDA
#                          paths against the CPU emulator of CUDA
#                          (MELFORGE_CUDA_EMU, tests/cudaemu) in $BUILD_DIR-emu
#                          and run the GPU suites there; on | off
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
tools/deps.sh

BUILD_DIR=${BUILD_DIR:-build-test}
BUILD_TYPE=${BUILD_TYPE:-Release}
rm -rf "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DMELFORGE_WERROR=ON
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 1200 "$@")

CUDA_EMU=${CUDA_EMU:-auto}
if [[ $CUDA_EMU == auto ]]; then
  if nvidia-smi -L > /dev/null 2>&1; then CUDA_EMU=off; else CUDA_EMU=on; fi
fi
if [[ $CUDA_EMU == on ]]; then
  # Every kernel, the runtime calls, graph capture and the GPU trainer path,
  # run on the CPU emulator: the GPU suites (label gpu) plus the emulator's own.
  rm -rf "$BUILD_DIR-emu"
  cmake -S . -B "$BUILD_DIR-emu" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMELFORGE_WERROR=ON -DMELFORGE_CUDA_EMU=ON
  cmake --build "$BUILD_DIR-emu" --parallel "$(nproc)" --target melforge_gpu_tests
  (cd "$BUILD_DIR-emu" && ctest --output-on-failure --timeout 1800 -L gpu --parallel "$(nproc)")
fi
