#!/usr/bin/env bash
# melforge quickstart: installs what building melforge needs, builds the
# `melforge` program alone (no tests, no benchmarks) for one CUDA architecture,
# generates the synthetic leak-detection dataset, trains LeakCNN on it and
# prints the final file-level metrics and where the report and the plots are.
#   On a GPU: LeakCNN-64 (64x64 log-mel segments, 4 classes), bf16, with the
#   kernels compiled for that GPU's architecture (examples/leakcnn-64-gpu.toml).
#   Without one: the kernels are compiled for sm_90 only (say so, and how to
#   build for other GPUs), and a smaller demo trains on the CPU (32x32
#   segments, 6000 files of 8 segments, a narrower model, 8 epochs:
#   examples/leakcnn-cpu-demo.toml), reaching a file-level macro-F1 of about
#   0.91 (0.899-0.913 over 3 seeds) on the 900 held-out test files
#   (bench/results/cpu-demo-and-batch-rule.md).
# Clone to final metrics on a fresh 2-core machine without a GPU: docs/testing.md.
# Environment: BUILD_DIR (build), DATA_DIR (data), RUN_DIR (runs/quickstart-{gpu,cpu}),
# EPOCHS (override the number of epochs), CUDAARCHS (the CUDA architectures to
# build, e.g. "80;86;89;90;100;120"; default: the GPU present, else 90).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}   # clones elsewhere share ccache's hits
t_start=$SECONDS
tools/deps.sh

if ! command -v nvcc >/dev/null 2>&1; then
  ARCHS=90  # unused: CMake builds the CPU backend alone (MELFORGE_CUDA)
  echo "quickstart: no CUDA toolkit: building melforge without CUDA, the CPU backend only"
elif [ -n "${CUDAARCHS:-}" ]; then
  ARCHS=$CUDAARCHS
  echo "quickstart: building the CUDA kernels for CUDAARCHS=$ARCHS"
elif cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1) &&
     [[ $cc =~ ^([0-9]+)\.([0-9]+) ]]; then
  ARCHS="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
  echo "quickstart: building the CUDA kernels for this machine's GPU (sm_$ARCHS)"
else
  ARCHS=90
  echo "quickstart: no GPU found: building the CUDA kernels for sm_90 (H100) only; to run on other" \
       "GPUs build again with e.g. CUDAARCHS=\"80;86;89;90;100;120\" tools/quickstart.sh"
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMELFORGE_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target melforge
t_built=$SECONDS
MF="$BUILD_DIR/tools/melforge"
"$MF" info

if "$MF" info | grep -q '^cuda:'; then
  MODE=gpu
  SYNTH=(--files 1500 --classes 4 --mels 64 --frames 64 --long 4 --short 8)
  TRAIN=(--config examples/leakcnn-64-gpu.toml)
else
  MODE=cpu
  echo "quickstart: no GPU: training the smaller CPU demo configuration"
  # Many distinct files (scenes) so the small model learns leaks, not files;
  # 8 segments a file (4 long segments vote) for file-level decisions.
  SYNTH=(--files 6000 --classes 4 --mels 32 --frames 32 --long 4 --short 2)
  TRAIN=(--config examples/leakcnn-cpu-demo.toml)
fi
[ -z "${EPOCHS:-}" ] || TRAIN+=(--epochs "$EPOCHS")
DATA="${DATA_DIR:-data}/synth-$MODE"
RUN="${RUN_DIR:-runs/quickstart-$MODE}"
# The dataset is made again when the arguments or the generator changed (a
# data/synth-cpu from an older quickstart is not reused).
STAMP="synth-v2 ${SYNTH[*]}"
if [ ! -f "$DATA/test.h5" ] || [ "$(cat "$DATA/.quickstart" 2>/dev/null)" != "$STAMP" ]; then
  "$MF" data synth --out "$DATA" "${SYNTH[@]}"
  echo "$STAMP" > "$DATA/.quickstart"
fi
t_data=$SECONDS
rm -rf "$RUN"
"$MF" train --train "$DATA/train.h5" --val "$DATA/val.h5" --test "$DATA/test.h5" --out "$RUN" "${TRAIN[@]}"
t_trained=$SECONDS

echo
echo "quickstart: $((t_trained - t_start)) s in all: dependencies and build $((t_built - t_start)) s," \
     "dataset $((t_data - t_built)) s, training $((t_trained - t_data)) s"

echo "quickstart: done. Next:"
echo "  $MF eval --checkpoint $RUN/checkpoints/best.h5 --data $DATA/test.h5"
echo "  $MF predict --checkpoint $RUN/checkpoints/best.h5 --data $DATA/test.h5 --out $RUN/test_predictions.csv"
echo "  $MF export --checkpoint $RUN/checkpoints/best.h5 --format safetensors --out $RUN/model.safetensors"
echo "  tools/test.sh    # the whole test suite (builds every test, benchmark and the sanitizer builds: long)"
