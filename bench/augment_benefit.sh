#!/usr/bin/env bash
# Does on-device augmentation ([augment], issue 15) help held-out files on the
# synthetic set? Trains the quickstart's CPU model on a small synthetic set
# where it overfits, with and without augmentation, over several training
# seeds, and prints a table (bench/results/augment-benefit-cpu.md).
#
# Data (made once under $WORK, by `melforge data synth`):
#   D  800 files, 4 classes, 32 mels x 32 frames, L=4 S=2, synth seed 11:
#      560 train / 120 val / 120 test files (the test set of every run).
#   X  2000 files, synth seed 12: its train.h5 (1400 files, other scenes from
#      the same generator, never trained on) is a second, larger held-out set,
#      scored with `melforge eval` on the best and the final weights.
#   noise.h5  the class-0 (normal) files of a 400-file 2-class synth set
#      (seed 99): background + machinery tones, no leak, same 32x32 shape
#      (the subset is written with h5py: $PYTHON, else .venv-bench-audio, else
#      python3; without h5py the noise condition is skipped).
# Runs: every condition x seed trains `--epochs $EPOCHS` single-threaded
# (OMP_NUM_THREADS=1: results do not depend on the thread count), $JOBS at a
# time; each run's best checkpoint is picked by val.file.macro_f1 (the default).
# Per run it records: test file macro-F1 (report.json, best weights), X file
# macro-F1 (best and final weights), best and final val file macro-F1, final
# val loss, train accuracy in the last epoch (on the augmented batches, from
# metrics.jsonl) and the final weights' accuracy on the clean training set.
# Output: $WORK/augment-benefit.json (every run) and a markdown table on stdout.
# Cost: 8 conditions x 4 seeds = 32 runs of about 50 CPU-seconds plus 3 evals
# each: about 20 min on 2 idle cores (it took 45 min at load 4-10).
# Environment: MF (melforge binary; default $BUILD_DIR/tools/melforge, BUILD_DIR
# default build), WORK (default runs/augment-benefit), SEEDS (default "0 1 2 3"),
# EPOCHS (15), JOBS (2), CONDITIONS (default: all eight below), RERUN (0: keep
# finished runs found in $WORK/runs; 1: train every run again).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MF=${MF:-${BUILD_DIR:-build}/tools/melforge}
[[ $MF = /* ]] || MF="$ROOT/$MF"
WORK=${WORK:-runs/augment-benefit}
SEEDS=${SEEDS:-"0 1 2 3"}
EPOCHS=${EPOCHS:-15}
JOBS=${JOBS:-2}
CONDITIONS=${CONDITIONS:-"none shift_gain masks_shift masks_shift_gain all_noise shift gain tmasks_shift_gain"}
RERUN=${RERUN:-0}
export OMP_NUM_THREADS=1

MODEL=(--device cpu --batch-size 32 --lr 2e-3 --set optim.warmup_steps=50 --set model.channels=[16,32]
       --set model.pools=[2,2] --set model.dense=64)
# synth data is dB/10; stated explicitly so that a build reading it from the
# data's attribute and one that does not give the same runs.
MASKS=(--set augment.time_masks=2 --set augment.time_mask_width=6 --set augment.freq_masks=2
       --set augment.freq_mask_width=4)
SHIFT=(--set augment.time_shift=6)
GAIN=(--set augment.gain_db=3)
NOISE=(--set augment.noise=noise.h5 "--set" "augment.noise_snr_db=[5,20]")
condition_args() {
  local a=(--set augment.db_per_unit=10)
  case $1 in
    none) a=() ;;
    shift) a+=("${SHIFT[@]}") ;;
    gain) a+=("${GAIN[@]}") ;;
    shift_gain) a+=("${SHIFT[@]}" "${GAIN[@]}") ;;
    tmasks_shift_gain) a+=(--set augment.time_masks=2 --set augment.time_mask_width=6 "${SHIFT[@]}" "${GAIN[@]}") ;;
    masks_shift) a+=("${MASKS[@]}" "${SHIFT[@]}") ;;
    masks_shift_gain) a+=("${MASKS[@]}" "${SHIFT[@]}" "${GAIN[@]}") ;;
    all_noise) a+=("${MASKS[@]}" "${SHIFT[@]}" "${GAIN[@]}" "${NOISE[@]}") ;;
    *) echo "augment_benefit: unknown condition '$1'" >&2; return 1 ;;
  esac
  [ ${#a[@]} -eq 0 ] || printf '%s\n' "${a[@]}"
}

# One run (called through xargs): train, then the three evaluations.
if [ "${1:-}" = __run ]; then
  cond=$2 seed=$3
  cd "$WORK"
  out=runs/$cond-s$seed
  # A finished run (its .wall is written last) is kept unless RERUN=1: the grid
  # can be extended with new conditions or seeds. Delete $WORK/runs after
  # changing a condition's arguments.
  if [ "$RERUN" != 1 ] && [ -f "$out.wall" ]; then exit 0; fi
  rm -rf "$out"
  mapfile -t extra < <(condition_args "$cond")
  t0=$(date +%s.%N)
  "$MF" train --train D/train.h5 --val D/val.h5 --test D/test.h5 --out "$out" --progress off --epochs "$EPOCHS" \
    --seed "$seed" "${MODEL[@]}" "${extra[@]}" > "$out.log" 2>&1
  t1=$(date +%s.%N)
  final=$(ls "$out"/checkpoints/ckpt-*.h5 | sort | tail -1)
  "$MF" eval --device cpu --checkpoint "$out/checkpoints/best.h5" --data X/train.h5 > "$out.x_best.json"
  "$MF" eval --device cpu --checkpoint "$final" --data X/train.h5 > "$out.x_final.json"
  "$MF" eval --device cpu --checkpoint "$final" --data D/train.h5 > "$out.train_final.json"
  echo "$t0 $t1" > "$out.wall"
  echo "augment_benefit: $cond seed $seed done ($(awk '{printf "%.0f", $2 - $1}' "$out.wall") s training)" >&2
  exit 0
fi

[ -x "$MF" ] || { echo "augment_benefit: no melforge binary at $MF (set MF or BUILD_DIR)" >&2; exit 1; }
mkdir -p "$WORK/runs"
export MF WORK EPOCHS RERUN
SYN=(--classes 4 --mels 32 --frames 32 --long 4 --short 2)
STAMP="v1 $("$MF" --version 2>/dev/null || true) ${SYN[*]}"
if [ "$(cat "$WORK/.data" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf "$WORK/D" "$WORK/X" "$WORK/N2" "$WORK/noise.h5"
  "$MF" data synth --out "$WORK/D" --files 800 "${SYN[@]}" --seed 11
  "$MF" data synth --out "$WORK/X" --files 2000 "${SYN[@]}" --seed 12
  "$MF" data synth --out "$WORK/N2" --files 400 --classes 2 --mels 32 --frames 32 --long 4 --short 2 --seed 99
  echo "$STAMP" > "$WORK/.data"
fi
if [ ! -f "$WORK/noise.h5" ]; then
  PY=""
  for p in ${PYTHON:-} "$ROOT/.venv-bench-audio/bin/python" python3; do
    if "$p" -c 'import h5py' 2>/dev/null; then PY=$p; break; fi
  done
  if [ -n "$PY" ]; then
    "$PY" - "$WORK/N2/train.h5" "$WORK/noise.h5" <<'EOF'
import sys, h5py, numpy as np
src, dst = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as s, h5py.File(dst + ".tmp", "w") as d:
    keep = np.nonzero(s["labels"][:] == 0)[0]  # normal files only: no leak hiss in the noise
    for k, v in s.attrs.items():
        d.attrs[k] = v
    for name in ("segments", "labels", "leak"):
        d.create_dataset(name, data=s[name][keep])
print(f"augment_benefit: noise.h5: {len(keep)} normal files of {src}")
EOF
    mv "$WORK/noise.h5.tmp" "$WORK/noise.h5"
  else
    echo "augment_benefit: no python with h5py: the all_noise condition is skipped" >&2
    CONDITIONS=${CONDITIONS//all_noise/}
  fi
fi

echo "augment_benefit: conditions [$CONDITIONS] x seeds [$SEEDS], $EPOCHS epochs, $JOBS jobs; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$(date +%s)
for c in $CONDITIONS; do for s in $SEEDS; do echo "$c $s"; done; done |
  xargs -P "$JOBS" -L 1 bash -c '"$0" __run "$1" "$2"' "$ROOT/bench/augment_benefit.sh"
echo "augment_benefit: grid took $(( $(date +%s) - start )) s wall; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$WORK" "$CONDITIONS" "$SEEDS" "$EPOCHS" <<'EOF'
import json, math, os, statistics as st, sys
work, conds, seeds, epochs = sys.argv[1], sys.argv[2].split(), [int(s) for s in sys.argv[3].split()], int(sys.argv[4])

def load(cond, seed):
    base = os.path.join(work, "runs", f"{cond}-s{seed}")
    rep = json.load(open(os.path.join(base, "report.json")))
    rows = [json.loads(l) for l in open(os.path.join(base, "metrics.jsonl"))]
    tr = [r for r in rows if r.get("type") == "train" and r["epoch"] == epochs]
    ev = [r for r in rows if r.get("type") == "eval" and r.get("split") == "val"]
    xb, xf, tf = (json.load(open(f"{base}.{k}.json")) for k in ("x_best", "x_final", "train_final"))
    t0, t1 = map(float, open(f"{base}.wall").read().split())
    return {
        "condition": cond, "seed": seed,
        "test_file_macro_f1": rep["test"]["file"]["macro_f1"],
        "test_file_accuracy": rep["test"]["file"]["accuracy"],
        "test_segment_accuracy": rep["test"]["segment"]["accuracy"],
        "test_false_alarms": rep["test"]["file"]["leak"]["false_alarm_rate"],
        "x_file_macro_f1_best": xb["file"]["macro_f1"],
        "x_file_macro_f1_final": xf["file"]["macro_f1"],
        "x_segment_accuracy_final": xf["segment"]["accuracy"],
        "val_file_macro_f1_best": rep["best_metric"]["value"],
        "best_step": rep["best_metric"]["step"],
        "val_file_macro_f1_final": ev[-1]["file"]["macro_f1"],
        "val_segment_accuracy_final": ev[-1]["segment"]["accuracy"],
        "val_loss_final": ev[-1]["loss"],
        "train_accuracy_last_epoch_augmented": st.mean(r["accuracy"] for r in tr),
        "train_segment_accuracy_final_clean": tf["segment"]["accuracy"],
        "train_wall_s": t1 - t0,
        "steady_samples_per_s": rep["steady_samples_per_s"],
    }

runs = [load(c, s) for c in conds for s in seeds]
by = {c: {r["seed"]: r for r in runs if r["condition"] == c} for c in conds}
cols = [("test_file_macro_f1", "test file F1 (120, best)"), ("x_file_macro_f1_best", "X file F1 (1400, best)"),
        ("x_file_macro_f1_final", "X file F1 (1400, final)"), ("val_file_macro_f1_best", "val file F1 best"),
        ("val_file_macro_f1_final", "val file F1 final"), ("val_loss_final", "val loss final"),
        ("train_accuracy_last_epoch_augmented", "train acc last epoch (aug.)"),
        ("train_segment_accuracy_final_clean", "train seg acc clean (final)"),
        ("val_segment_accuracy_final", "val seg acc final"), ("steady_samples_per_s", "samples/s")]

def ms(v):
    return f"{st.mean(v):.3f} ± {st.stdev(v):.3f}" if len(v) > 1 else f"{v[0]:.3f}"

print(f"Mean ± sample std over seeds {seeds} ({len(seeds)} runs a condition), {epochs} epochs.\n")
print("| condition | " + " | ".join(h for _, h in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for c in conds:
    print(f"| {c} | " + " | ".join(ms([by[c][s][k] for s in seeds]) if k != "steady_samples_per_s"
                                    else f"{st.mean(by[c][s][k] for s in seeds):.0f}" for k, _ in cols) + " |")

print("\nPaired by seed (same initialization and shuffling), augmented minus none:\n")
keys = ["test_file_macro_f1", "x_file_macro_f1_best", "x_file_macro_f1_final", "val_file_macro_f1_final"]
print("| condition | metric | mean diff | std of diffs | t (paired) | seeds better / worse |")
print("|---|---|---|---|---|---|")
summary = {}
for c in conds:
    if c == "none" or "none" not in by:
        continue
    for k in keys:
        d = [by[c][s][k] - by["none"][s][k] for s in seeds]
        sd = st.stdev(d) if len(d) > 1 else float("nan")
        t = st.mean(d) / (sd / math.sqrt(len(d))) if len(d) > 1 and sd > 0 else float("nan")
        better, worse = sum(x > 0 for x in d), sum(x < 0 for x in d)
        summary[f"{c}/{k}"] = {"diffs": d, "mean": st.mean(d), "std": sd, "t": t, "better": better, "worse": worse}
        print(f"| {c} | {k} | {st.mean(d):+.4f} | {sd:.4f} | {t:+.2f} | {better} / {worse} |")
print("\nPer run:\n")
print("| condition | seed | " + " | ".join(h for _, h in cols[:8]) + " | train s |")
print("|---" * 11 + "|")
for r in runs:
    print(f"| {r['condition']} | {r['seed']} | " + " | ".join(f"{r[k]:.3f}" for k, _ in cols[:8]) + f" | {r['train_wall_s']:.0f} |")
json.dump({"epochs": epochs, "seeds": seeds, "conditions": conds, "runs": runs, "paired_vs_none": summary},
          open(os.path.join(work, "augment-benefit.json"), "w"), indent=1)
EOF
