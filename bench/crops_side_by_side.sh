#!/usr/bin/env bash
# Random crops of whole utterances vs fixed segments, melforge beside PyTorch
# (bench/results/crops-side-by-side-cpu-2026-11-28.md). For each seed:
#   a) ragged train.h5, a random 200-frame crop per utterance per epoch, test EER on 5 evenly spaced crops
#   b) the same trained models, test EER on each utterance whole (eval.crops = full)
#   c) fixed segments (data synth without --utterances, 2 x 200 frames per file), the same optimizer steps
# Same synthetic speakers seed, unseen test speakers, the same trial list.
#   bench/crops_side_by_side.sh [WORK] [SEEDS]      (WORK default /tmp/crops-sbs, SEEDS default "0 1 2")
# MELFORGE (default build-carry/tools/melforge), PYTHON (default .venv-torch/bin/python), EPOCHS (40), LR (3e-3)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/crops-sbs}
seeds=${2:-0 1 2}
mf=${MELFORGE:-build-carry/tools/melforge}
py=${PYTHON:-.venv-torch/bin/python}
epochs=${EPOCHS:-40}
lr=${LR:-3e-3}
export OMP_NUM_THREADS=2
mkdir -p "$work"
[ -f "$work/data-utt/test.h5" ] || "$mf" data synth --out "$work/data-utt" --speakers 40 --files-per-speaker 8 --mels 40 \
  --frames 100 --max-frames 800 --utterances --seed 1
[ -f "$work/data-fixed/test.h5" ] || "$mf" data synth --out "$work/data-fixed" --speakers 40 --files-per-speaker 8 --mels 40 \
  --frames 200 --long 1 --short 2 --seed 1
for d in utt fixed; do
  [ -f "$work/trials-$d.txt" ] || "$mf" data trials --data "$work/data-$d/test.h5" --out "$work/trials-$d.txt" --per-file 10 --seed 0
done
common=(--loss aam_softmax --device cpu --python "$py" --melforge "$mf" --arch cnn
        --layers-toml bench/results/crops-stack-small.toml --embedding 64 --batch-size 32 --lr "$lr" --threads 2)
for s in $seeds; do
  # a) and b) in one run: one training per side, its final model evaluated both ways (the first, 5 crops,
  # is the run's "test"; test_eer_by_eval holds both).
  "$py" bench/compare_torch.py "${common[@]}" --data "$work/data-utt" --trials "$work/trials-utt.txt" \
    --epochs "$epochs" --seed "$s" --crop-frames 200 --eval-crops 5,full --out "$work/out/ab-s$s" --work "$work/work-ab-s$s"
  "$py" bench/compare_torch.py "${common[@]}" --data "$work/data-fixed" --trials "$work/trials-fixed.txt" \
    --epochs $((epochs / 2)) --seed "$s" --out "$work/out/c-s$s" --work "$work/work-c-s$s"
done
