#!/usr/bin/env bash
# melforge quickstart: installs what is missing, builds, and runs the main job.
# (Until the trainer lands, the main job is the engine smoke run: allocation,
# copies and a kernel on the GPU if present, else on the CPU, checked against
# the CPU twin.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
tools/deps.sh

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
"$BUILD_DIR/tools/melforge" info
"$BUILD_DIR/tools/melforge" smoke --device auto
