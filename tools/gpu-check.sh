#!/usr/bin/env bash
# One command on a GPU machine: build (or use a build carried along), run the
# GPU test suites, compute-sanitizer memcheck / racecheck / synccheck over the
# GPU test binaries, every melforge-bench suite and the PyTorch comparison,
# within a time budget; a summary table is printed last.
#
#   tools/gpu-check.sh [--out DIR] [--carried DIR] [--work DIR] [--budget S]
#                      [--steps LIST] [--compare-args "..."]
#     --out DIR      what comes back, flat, 4 files (default gpu-check-out):
#                    summary.txt, gpu.txt, results.json (every JSON written,
#                    merged, keyed by path) and logs.tar.gz (logs and JSON)
#     --carried DIR  use DIR/build and DIR/lib made by tools/carry-for-gpu.sh
#                    instead of building here
#     --work DIR     logs, JSON, the comparison's dataset (default: a new
#                    folder under /tmp)
#     --budget S     seconds for everything (default 540: the device tool
#                    stops a command at 600); a step that would outrun it is
#                    cut short or reported as not run
#     --steps LIST   which steps, run in this order whatever the list's
#                    (default all): tests, memcheck (step and conv suites),
#                    conv (ceilings; conv bf16 b=8192), step (bf16 b=8192),
#                    compare (PyTorch), more (verify, logmel, augment,
#                    resnet34se-light, adamw, reader, allreduce), sanitizer (the rest:
#                    memcheck, racecheck, synccheck), bench (full sweeps)
#     --compare-args extra arguments for bench/compare_torch.py (default
#                    "--epochs 3")
# Exit status: 0 when no step failed, timed out or found errors (skipped ones
# and 'not run (time budget)' do not count), 1 otherwise.
# Needs: an NVIDIA GPU and driver, the CUDA toolkit (compute-sanitizer), and a
# python3 with torch, numpy and h5py for the comparison. Building here needs
# CMake and the -dev packages of tools/deps.sh (installed when apt-get works);
# a carried build needs none of them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=gpu-check-out
CARRIED=""
WORK=""
BUDGET=540
STEPS=tests,memcheck,conv,step,compare,more,sanitizer,bench
COMPARE_ARGS="--epochs 3"
while (($#)); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --carried) CARRIED=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --compare-args) COMPARE_ARGS=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -z "$WORK" ]; then WORK=$(mktemp -d "${TMPDIR:-/tmp}/melforge-gpu-check.XXXXXX"); fi
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
exec > >(tee "$WORK/console.log") 2>&1
export PATH="$PATH:/usr/local/cuda/bin"
START=$SECONDS
declare -a SUMMARY=()
record() { SUMMARY+=("$(printf '%-36s %s' "$1" "$2")"); echo "gpu-check: $1: $2"; }
step() { [[ ",$STEPS," == *",$1,"* ]]; }
# Seconds a step may take: its own cap, or what is left of the budget (less 20 s
# for the packing); 0 when nothing is left.
limit() {
  local left=$((BUDGET - (SECONDS - START) - 20))
  ((left < 0)) && left=0
  echo $((left < $1 ? left : $1))
}
ran_out() { [ "$(limit 1)" -eq 0 ]; }

# Packs WORK into OUT (flat, few files) and prints the summary.
finish() {
  local commit
  commit=$(cat "${CARRIED:-/nonexistent}/commit" 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo '?')
  {
    echo "gpu-check summary: $(head -1 "$WORK/gpu.txt" 2>/dev/null), commit $commit, $((SECONDS - START)) s"
    printf '%s\n' "${SUMMARY[@]}"
  } > "$WORK/summary.txt"
  cp "$WORK/summary.txt" "$WORK/gpu.txt" "$OUT/" 2>/dev/null
  # Every JSON written (benches, comparison), merged: {relative path: content}.
  python3 - "$WORK" "$OUT/results.json" <<'EOF' || echo "gpu-check: could not merge the JSON files" >&2
import json, os, sys
work, dst = sys.argv[1], sys.argv[2]
merged = {}
for d, _, files in os.walk(work):
    for f in sorted(files):
        if f.endswith(".json"):
            p = os.path.join(d, f)
            try:
                with open(p) as fh:
                    merged[os.path.relpath(p, work)] = json.load(fh)
            except (OSError, ValueError) as e:
                merged[os.path.relpath(p, work)] = {"unreadable": str(e)}
with open(dst, "w") as fh:
    json.dump(merged, fh, indent=1)
EOF
  # Logs and JSON (no datasets or checkpoints), each file at most 4 MiB.
  (cd "$WORK" && find . -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.txt' \
      -o -name '*.csv' -o -name '*.toml' -o -name '*.svg' \) -size -4M -print0 |
    tar czf "$OUT/logs.tar.gz" --null -T -) || echo "gpu-check: could not pack the logs" >&2
  echo
  cat "$WORK/summary.txt"
  echo "(logs and JSON: $WORK; packed into $OUT: $(cd "$OUT" && ls | tr '\n' ' '))"
}

if ! nvidia-smi -L >"$WORK/gpu.txt" 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi failed); nothing to check" >&2
  cp "$WORK/gpu.txt" "$OUT/" 2>/dev/null
  exit 1
fi
cat "$WORK/gpu.txt"

# Where the binaries are, and the ctest folder to run ctest in.
if [ -n "$CARRIED" ]; then
  CARRIED=$(cd "$CARRIED" && pwd)
  BUILD=$CARRIED/build
  if [ ! -d "$BUILD" ] && [ -f "$CARRIED/carry.tar.xz" ]; then
    tar -C "$CARRIED" -xJf "$CARRIED/carry.tar.xz" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$CARRIED/carry.tar.xz" "$CARRIED" ||
      { record "build" "FAILED: could not unpack $CARRIED/carry.tar.xz"; finish; exit 1; }
  fi
  OLD=$(cat "$CARRIED/root" 2>/dev/null || echo /nonexistent)
  # ctest's files name the machine that built them: copy them with its paths
  # mapped to these (the carried tree itself is left as it came).
  CTEST_DIR=$WORK/ctest
  (cd "$BUILD" && find . -name CTestTestfile.cmake) | while read -r f; do
    mkdir -p "$CTEST_DIR/$(dirname "$f")"
    sed -e "s|$OLD/.carry/build|@CARRY@|g" -e "s|$OLD|@ROOT@|g" \
        -e "s|@CARRY@|$BUILD|g" -e "s|@ROOT@|$ROOT|g" "$BUILD/$f" > "$CTEST_DIR/$f"
  done
  # The binaries name the source folder too (oracle scripts, bench/h5py_reader.py).
  if [ "$OLD" != "$ROOT" ] && [ ! -e "$OLD" ]; then
    mkdir -p "$(dirname "$OLD")" && ln -s "$ROOT" "$OLD" && echo "gpu-check: linked $OLD -> $ROOT"
  fi
  record "build" "carried ($(cat "$CARRIED/commit" 2>/dev/null || echo '?'), built in $OLD)"
else
  BUILD=$ROOT/build-gpu
  CTEST_DIR=$BUILD
  if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then tools/deps.sh >"$WORK/deps.log" 2>&1; fi
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$WORK/build.log" 2>&1 &&
     cmake --build "$BUILD" --parallel "$(nproc)" >>"$WORK/build.log" 2>&1; then
    record "build" "ok"
  else
    record "build" "FAILED (see build.log)"
    finish
# Exit status: 1 when any step failed, timed out or found errors.
! printf '%s\n' "${SUMMARY[@]}" | grep -qE 'FAILED|TIMED OUT|ERRORS|MISSING'
    exit 1
  fi
fi
MELFORGE=$BUILD/tools/melforge
BENCH=$BUILD/bench/melforge-bench
# ctest -N -V: "N: Test command: /path/test_x_gpu [args]". Each binary once:
# some run in several tests with other settings, and compute-sanitizer runs
# the binary as is.
GPU_TESTS=$(cd "$CTEST_DIR" && ctest -L gpu -N -V 2>/dev/null | sed -n 's/^[0-9]*: Test command: \([^ ]*\).*/\1/p' |
            awk '!seen[$0]++')

# CUDA's libraries (cudart, cuBLAS, cuDNN) where the loader does not find them
# itself: CUDA's lib folders, then the pip wheels (nvidia/*/lib: cuDNN may
# only be there), then anywhere. Only our binaries get this LD_LIBRARY_PATH.
MF_LD=${LD_LIBRARY_PATH:-}
lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
  python3 - <<'EOF' 2>/dev/null
import glob, os
try:
    import nvidia
    for p in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(p, "*", "lib")) + glob.glob(os.path.join(p, "*", "*", "lib"))):
            print(d)
except Exception:
    pass
EOF
}
MISSING=""
for lib in $(for b in "$MELFORGE" "$BENCH" $GPU_TESTS; do [ -x "$b" ] && ldd "$b"; done |
             awk '/not found/{print $1}' | sort -u); do
  dir=""
  for d in $(lib_dirs); do [ -e "$d/$lib" ] && { dir=$d; break; }; done
  [ -n "$dir" ] || dir=$(dirname "$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
                                     -name "$lib" -print -quit 2>/dev/null)" 2>/dev/null)
  if [ -n "$dir" ] && [ "$dir" != . ]; then
    [[ ":$MF_LD:" == *":$dir:"* ]] || MF_LD=$dir${MF_LD:+:$MF_LD}
  else
    MISSING="$MISSING $lib"
  fi
done
echo "gpu-check: LD_LIBRARY_PATH for melforge's binaries: ${MF_LD:-(none needed)}"
[ -z "$MISSING" ] || record "shared libraries" "MISSING:$MISSING"
# Our binaries run with MF_LD; python3 (PyTorch) keeps its own environment.
mfenv() { LD_LIBRARY_PATH=$MF_LD "$@"; }
# melforge behind a wrapper with that environment, for compare_torch.py.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$MF_LD" "$MELFORGE" > "$WORK/melforge"
chmod +x "$WORK/melforge"
# bench/h5py_reader.py (melforge-bench reader) wants a python3 with h5py.
MELFORGE_PYTHON=$(command -v python3 || echo /usr/bin/python3)
export MELFORGE_PYTHON

# One compute-sanitizer tool over the given test binaries (environment as
# under ctest), each capped at CAP seconds; LABEL names the summary line.
sanitize() {
  local tool=$1 cap=$2 label=$3; shift 3
  local clean=0 errs="" skipped=0 other="" notrun=0 t name lim rc res
  for t in "$@"; do
    name=$(basename "$t")
    lim=$(limit "$cap")
    if ((lim == 0)); then notrun=$((notrun + 1)); continue; fi
    (cd "$WORK" && MELFORGE_BIN=$MELFORGE MELFORGE_BENCH_BIN=$BENCH mfenv timeout "$lim" \
       compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 100 "$t") \
      >"$WORK/sanitizer-$tool-$name.log" 2>&1
    rc=$?
    case $rc in
      0) clean=$((clean + 1)) ;;
      77) skipped=$((skipped + 1)) ;;
      99) errs="$errs $name" ;;
      124) other="$other $name(timed out after ${lim}s)" ;;
      *) other="$other $name(rc $rc)" ;;
    esac
  done
  res="$clean clean"
  ((skipped)) && res="$res, $skipped skipped (no GPU)"
  [ -n "$errs" ] && res="ERRORS in$errs; $res"
  [ -n "$other" ] && res="$res; FAILED:$other"
  ((notrun)) && res="$res; $notrun not run (time budget)"
  record "$label" "$res"
}

# One melforge-bench run, capped at CAP seconds: bench_run NAME CAP ARGS...
# (JSON into WORK/bench, log into WORK/bench-NAME.log).
bench_run() {
  local name=$1 cap=$2 lim rc; shift 2
  lim=$(limit "$cap")
  if ((lim == 0)); then record "bench $name" "not run (time budget)"; return; fi
  mkdir -p "$WORK/bench"
  mfenv timeout "$lim" "$BENCH" --out-dir "$WORK/bench" "$@" >"$WORK/bench-$name.log" 2>&1
  rc=$?
  if ((rc == 124)); then record "bench $name" "TIMED OUT after $lim s"
  elif ((rc != 0)); then record "bench $name" "FAILED rc $rc (see bench-$name.log)"
  elif grep -q 'no GPU' "$WORK/bench-$name.log"; then record "bench $name" "no GPU (CPU figures only, if any)"
  else record "bench $name" "ok ($(grep -c . "$WORK/bench-$name.log") lines)"; fi
}

# The binaries of the GPU suites whose names match a pattern.
gpu_tests_matching() { printf '%s\n' $GPU_TESTS | grep -E "$1"; }

# The steps, most valuable first (a lent GPU's time is short): the suites,
# memcheck of the step and conv suites, the conv and step benchmarks at
# LeakCNN-64 bf16 b=8192, the PyTorch side by side, the other GPU benchmarks,
# then the rest of the sanitizers and the full benchmark sweeps.

# 1. GPU test suites.
if step tests; then
  t=$(limit 150)
  if ((t == 0)); then
    record "ctest -L gpu" "not run (time budget)"
  else
    (cd "$CTEST_DIR" && mfenv timeout "$t" ctest -L gpu --output-on-failure --timeout 60) >"$WORK/ctest-gpu.log" 2>&1
    rc=$?
    log=$WORK/ctest-gpu.log
    n=$(grep -cE 'Test +#[0-9]+: ' "$log")
    np=$(grep -E 'Test +#[0-9]+: ' "$log" | grep -c ' Passed ')
    ns=$(grep -E 'Test +#[0-9]+: ' "$log" | grep -c 'Skipped')
    res="$np passed, $ns skipped, $((n - np - ns)) failed of $n"
    if ((rc == 124)); then record "ctest -L gpu" "TIMED OUT after $t s ($res)"
    elif ((rc != 0 || n == 0)); then record "ctest -L gpu" "FAILED: $res (see ctest-gpu.log)"
    elif ((ns == n)); then record "ctest -L gpu" "all $n skipped (no usable GPU?)"
    else record "ctest -L gpu" "ok: $res"; fi
  fi
fi

HAVE_SANITIZER=1
command -v compute-sanitizer >/dev/null || { HAVE_SANITIZER=0; record "compute-sanitizer" "not found"; }
FIRST_SANITIZED=$(gpu_tests_matching 'test_(train_step|conv_relu_pool|conv2d)_gpu$')

# 2. memcheck on the training-step and conv suites.
if step memcheck && ((HAVE_SANITIZER)); then
  # shellcheck disable=SC2086
  sanitize memcheck 60 "compute-sanitizer memcheck (step, conv)" $FIRST_SANITIZED
fi

# 3-4. The roofline, the conv kernels against cuDNN and the graphed step at
# LeakCNN-64, bf16, batch 8192.
if step conv; then
  bench_run ceilings 30 ceilings
  bench_run conv-bf16-8192 100 conv --batch 8192 --dtype bf16
fi
if step step; then
  bench_run step-bf16-8192 60 step --batch 8192 --precision bf16
fi

# 5. Side by side with PyTorch (python3 here is the one with torch); each of its
# runs (melforge, then the PyTorch variants) may take half of its time:
# torch.compile's max-autotune compile alone outran 40 s on an H200.
if step compare; then
  lim=$(limit 240)
  if ((lim < 60)); then
    record "compare with PyTorch" "not run (time budget)"
  else
    # shellcheck disable=SC2086
    timeout "$lim" python3 bench/compare_torch.py --melforge "$WORK/melforge" --out "$WORK/compare" \
      --timeout "$((lim / 2 > 40 ? lim / 2 : 40))" $COMPARE_ARGS >"$WORK/compare.log" 2>&1
    rc=$?
    if ((rc == 124)); then record "compare with PyTorch" "TIMED OUT after $lim s (see compare.log)"
    elif ((rc != 0)); then record "compare with PyTorch" "FAILED rc $rc (see compare.log)"
    elif grep -q 'no GPU here' "$WORK/compare.log"; then record "compare with PyTorch" "no GPU: ran the CPU dry mode"
    else record "compare with PyTorch" "ok"; fi
  fi
fi

# 6. Trial scoring and extraction, log-mel, augmentation's cost, the speaker stack.
if step more; then
  bench_run verify-cuda 40 verify --device cuda
  bench_run logmel-cuda 30 logmel --device cuda
  bench_run step-augment 50 step --batch 8192 --precision bf16 --augment
  bench_run step-resnet34se-light 50 step --arch resnet34se-light --batch 256 --precision bf16
  bench_run adamw 30 adamw
  bench_run reader 40 reader
  bench_run crops-cuda 30 crops --device cuda --utterances 2048 --threads 2,8
  # The training step's collectives on the GPU (one process: NCCL's own path; several GPUs: run it under mpirun).
  bench_run allreduce-cuda 30 allreduce --device cuda --max-bytes 67108864
fi

# 7. What is left of the time: every sanitizer over every suite, the sweeps.
if step sanitizer && ((HAVE_SANITIZER)); then
  # shellcheck disable=SC2086
  sanitize memcheck 60 "compute-sanitizer memcheck (others)" $(printf '%s\n' $GPU_TESTS | grep -vxF "$FIRST_SANITIZED")
  for tool in racecheck synccheck; do
    # shellcheck disable=SC2086
    sanitize "$tool" 60 "compute-sanitizer $tool" $GPU_TESTS
  done
fi
if step bench; then
  bench_run conv-all 120 conv
  bench_run step-all 120 step
fi

finish
# Exit status: 1 when any step failed, timed out or found errors.
! printf '%s\n' "${SUMMARY[@]}" | grep -qE 'FAILED|TIMED OUT|ERRORS|MISSING'
