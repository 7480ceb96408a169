#!/usr/bin/env bash
# melforge quickstart: installs what is missing, builds, generates the
# synthetic leak-detection dataset, trains LeakCNN on it and prints the final
# file-level metrics and where the report and the plots are.
#   On a GPU: LeakCNN-64 (64x64 log-mel segments, 4 classes), bf16.
#   Without one: a smaller demo on the CPU (32x32 segments, a narrower model)
#   that finishes in a few minutes on 2 cores.
# Environment: BUILD_DIR (build), DATA_DIR (data), RUN_DIR (runs/quickstart-{gpu,cpu}),
# EPOCHS (override the number of epochs).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
tools/deps.sh

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"
MF="$BUILD_DIR/tools/melforge"
"$MF" info

if "$MF" info | grep -q '^cuda:'; then
  MODE=gpu
  SYNTH=(--files 1500 --classes 4 --mels 64 --frames 64 --long 4 --short 8)
  TRAIN=(--device cuda --precision bf16 --epochs "${EPOCHS:-20}" --batch-size 512 --lr 2e-3
         --set optim.warmup_steps=100)
else
  MODE=cpu
  echo "quickstart: no GPU: training the smaller CPU demo configuration"
  SYNTH=(--files 3000 --classes 4 --mels 32 --frames 32 --long 2 --short 2)
  TRAIN=(--device cpu --epochs "${EPOCHS:-10}" --batch-size 32 --lr 2e-3 --set optim.warmup_steps=50
         --set model.channels=[16,32] --set model.pools=[2,2] --set model.dense=64)
fi
DATA="${DATA_DIR:-data}/synth-$MODE"
RUN="${RUN_DIR:-runs/quickstart-$MODE}"
if [ ! -f "$DATA/test.h5" ]; then
  "$MF" data synth --out "$DATA" "${SYNTH[@]}"
fi
rm -rf "$RUN"
"$MF" train --train "$DATA/train.h5" --val "$DATA/val.h5" --test "$DATA/test.h5" --out "$RUN" "${TRAIN[@]}"

echo
echo "quickstart: done. Next:"
echo "  $MF eval --checkpoint $RUN/checkpoints/best.h5 --data $DATA/test.h5"
echo "  $MF predict --checkpoint $RUN/checkpoints/best.h5 --data $DATA/test.h5 --out $RUN/test_predictions.csv"
echo "  $MF export --checkpoint $RUN/checkpoints/best.h5 --format safetensors --out $RUN/model.safetensors"
