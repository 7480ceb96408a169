#!/usr/bin/env bash
# Embedding extraction, melforge beside PyTorch, on the CPU: the same model,
# shapes, batch and threads on both sides, one table.
#   melforge: `melforge-bench verify --device cpu` (bench/bench_verify.cpp; its trial
#             scoring part runs too, kept tiny here with --trials 1000 --score-files 100)
#   PyTorch:  bench/torch_extract.py (eager, torch.inference_mode(), channels_last,
#             BN unfolded; the same files x segments in memory, mean per file, L2 norm)
# Each writes its JSON under WORK; the table reads segments/s from both. They run one
# after the other: run nothing else meanwhile (on a 2-core box, 2 threads beside any
# other load give erratic times on both sides).
#
#   bench/extract_side_by_side.sh [ARCH] [MELS] [FRAMES] [BATCH] [THREADS]
#     ARCH     leakcnn (default) | resnet34se-light | cnn (with LAYERS_TOML=FILE)
#     MELS, FRAMES, BATCH   default 64, 64, 256 (melforge-bench verify's defaults)
#     THREADS  default 2; OMP_NUM_THREADS is set to it for both sides, and both get --threads
# The same can be given as environment variables (ARCH=... MELS=... ...); arguments win.
# Also: FILES (256), SEGMENTS (4, per file), REPEATS (3, median of), EMBEDDING (256),
# WORK (/tmp/extract-sbs), MELFORGE_BENCH (build-carry/bench/melforge-bench),
# PYTHON (.venv-torch/bin/python), MF_ARGS / TORCH_ARGS (extra options of one side,
# e.g. TORCH_ARGS="--no-channels-last" or "--fold-bn"), DRY=1 (tiny shapes, 1 repeat: a smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-${ARCH:-leakcnn}}
mels=${2:-${MELS:-64}}
frames=${3:-${FRAMES:-64}}
batch=${4:-${BATCH:-256}}
threads=${5:-${THREADS:-2}}
files=${FILES:-256} segs=${SEGMENTS:-4} repeats=${REPEATS:-3} emb=${EMBEDDING:-256}
if [ "${DRY:-0}" = 1 ]; then files=8 segs=2 repeats=1; fi
mfb=${MELFORGE_BENCH:-build-carry/bench/melforge-bench}
py=${PYTHON:-.venv-torch/bin/python}
tag="$arch-${mels}x$frames-b$batch-t$threads"
work=${WORK:-/tmp/extract-sbs}/$tag
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=$threads  # melforge's CPU backend and torch both size their pools from it

model=(--arch "$arch" --mels "$mels" --frames "$frames" --embedding "$emb")
[ -n "${LAYERS_TOML:-}" ] && model+=(--layers-toml "$LAYERS_TOML")
shape=(--files "$files" --segments-per-file "$segs" --batch "$batch" --repeats "$repeats" --threads "$threads")

# melforge-bench writes OUT_DIR/verify-cpu-DATE.json (one name per day), so each run gets its own WORK folder.
# shellcheck disable=SC2086  # MF_ARGS and TORCH_ARGS are split on purpose
"$mfb" --out-dir "$work/melforge" verify --device cpu "${model[@]}" "${shape[@]}" \
  --trials 1000 --score-files 100 ${MF_ARGS:-} | tee "$work/melforge.log"
# shellcheck disable=SC2086
"$py" bench/torch_extract.py "${model[@]}" "${shape[@]}" --json "$work/torch.json" ${TORCH_ARGS:-} \
  | tee "$work/torch.log"

"$py" - "$work"/melforge/verify-*.json "$work/torch.json" <<'EOF'
import json, sys
mf, pt = (json.load(open(p)) for p in sys.argv[1:3])
m, t = mf["results"]["extraction"], pt["extraction"]
d = pt["model"]
print(f"\nextraction, {d['arch']} {d['mels']}x{d['frames']}, embedding {d['embedding']}, batch {t['batch']}, "
      f"{t['files']} files x {t['segments_per_file']} segments, {pt['threads']} thread(s), {pt['cpu']}")
rows = [(f"melforge ({mf['results']['cpu_threads']} CPU threads)", m),
        (f"PyTorch {pt['torch']} ({pt['memory_format']}, BN "
         f"{'none' if not pt['batch_norm'] else 'folded' if pt['fold_bn'] else 'unfolded'})", t)]
w = max(len(n) for n, _ in rows)
print(f"{'':{w}s} {'segments/s':>11s} {'files/s':>9s} {'median s':>9s} {'GFLOP/seg':>10s}")
for name, r in rows:
    print(f"{name:{w}s} {r['segments_per_s']:11.1f} {r['files_per_s']:9.1f} {r['median_s']:9.3f} "
          f"{r['forward_flops_per_segment'] / 1e9:10.3f}")
print(f"{'melforge / PyTorch':{w}s} {m['segments_per_s'] / t['segments_per_s']:10.2f}x")
EOF
