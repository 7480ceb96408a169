#!/usr/bin/env bash
# Seed corpora for the fuzz targets, made from valid files melforge itself
# writes (plus one h5py-written dataset, the other writer users have):
#   OUT/dataset/      data synth train/val files (f16 contiguous, f32 chunked,
#                     gzip) and a flat h5py file with a /leak dataset
#   OUT/checkpoint/   ckpt-*.h5 and best.h5 of a short CPU training run (fp32
#                     and bf16)
#   OUT/safetensors/  that run exported as F32, BF16 and F16
#   OUT/run_config/   the run's resolved config.toml and hand-written configs
#                     with --set lines (the input format of fuzz_run_config)
# The model is small (16 x 16 mels, channels [4,4,4], dense 8, 4 classes) so
# files are a few tens of KB and each execution is fast; fuzz_safetensors
# builds the same model.
#
# Usage: fuzz/make_seeds.sh [--melforge BUILD/tools/melforge] [--out fuzz/seeds]
# Takes about 30 s on 2 cores (any build of melforge: release, sanitized, fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
M=build/tools/melforge
OUT=fuzz/seeds
while (($#)); do
  case $1 in
    --melforge) M=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "make_seeds.sh: unknown argument $1 (expected --melforge BIN or --out DIR)" >&2; exit 2 ;;
  esac
done
[ -x "$M" ] || { echo "make_seeds.sh: no melforge binary at $M (build one, or pass --melforge)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# quiet MELFORGE ARGS...: runs melforge, shows its output only when it fails.
quiet() {
  "$M" "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; echo "make_seeds.sh: melforge $* failed" >&2; exit 1; }
}
mkdir -p "$OUT"/{dataset,checkpoint,safetensors,run_config}

# Datasets: small, three storage layouts and both float widths.
small=(--files 8 --classes 4 --mels 16 --frames 16 --long 2 --short 2)
quiet data synth --out "$work/d16" "${small[@]}" --seed 1
quiet data synth --out "$work/d32" "${small[@]}" --seed 2 --dtype f32 --storage chunked
quiet data synth --out "$work/dgz" "${small[@]}" --seed 3 --storage gzip
cp "$work/d16/val.h5" "$OUT/dataset/synth-f16-contiguous.h5"
cp "$work/d32/val.h5" "$OUT/dataset/synth-f32-chunked.h5"
cp "$work/dgz/val.h5" "$OUT/dataset/synth-f16-gzip.h5"
"$PY" - "$OUT/dataset/h5py-flat-leak.h5" <<'PYEOF'
import sys
import h5py
import numpy as np
rng = np.random.default_rng(7)
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("segments", data=rng.normal(size=(6, 16, 16)).astype(np.float16))
    f.create_dataset("labels", data=np.array([0, 1, 2, 0, 1, 2], dtype=np.int64))
    f.create_dataset("leak", data=np.array([0, 1, 1, 0, 1, 1], dtype=np.uint8))
    f["segments"].attrs["class_names"] = ["normal", "leak_a", "leak_b"]
    f["segments"].attrs["sample_rate"] = 16000
    f["segments"].attrs["hop_length"] = 256
    f["segments"].attrs["n_mels"] = 16
PYEOF

# Checkpoints and safetensors: a few CPU steps of the small model.
model=(--set model.channels=[4,4,4] --set model.dense=8)
for p in fp32 bf16; do
  quiet train --train "$work/d16/train.h5" --val "$work/d16/val.h5" --out "$work/run-$p" --device cpu \
    --precision $p --epochs 2 --batch-size 8 --limit-batches 2 "${model[@]}" --set checkpoint.keep_last=1 \
    --progress off
  cp "$work/run-$p/checkpoints/best.h5" "$OUT/checkpoint/best-$p.h5"
  cp "$(ls "$work/run-$p"/checkpoints/ckpt-*.h5 | head -1)" "$OUT/checkpoint/ckpt-$p.h5"
done
for d in f32 bf16 f16; do
  quiet export --checkpoint "$work/run-fp32/checkpoints/best.h5" --format safetensors --dtype $d \
    --out "$OUT/safetensors/model-$d.safetensors"
done

# Run configurations: the resolved config.toml and hand-written ones.
cp "$work/run-fp32/config.toml" "$OUT/run_config/resolved.toml"
cat > "$OUT/run_config/minimal.toml" <<'TOMLEOF'
[data]
train = "data/synth/train.h5"
val = "data/synth/val.h5"
[train]
epochs = 20
batch_size = 512
TOMLEOF
cat > "$OUT/run_config/sets.toml" <<'TOMLEOF'
[model]
channels = [16, 32, 64]
pools = [2, 2, 1]
dense = 128
dropout = 0.25
[optim]
lr = 2e-3
schedule = "linear"
warmup_steps = 100
[eval]
metric = "val.file.balanced_accuracy"
patience = 3
--set
optim.weight_decay=0.05
train.precision=bf16
reader.threads=4
run.profile_steps=10:20
data.normal_class=0
TOMLEOF
printf -- '--set\ntrain.epochs=3\nmodel.channels=[8, 8]\nmodel.pools=[2, 2]\neval.threshold=0.25\nrun.out=runs/x y\n' \
  > "$OUT/run_config/only-sets.toml"

for t in dataset checkpoint safetensors run_config; do
  echo "$OUT/$t: $(ls "$OUT/$t" | wc -l) seeds, $(du -sk "$OUT/$t" | cut -f1) KiB"
done
