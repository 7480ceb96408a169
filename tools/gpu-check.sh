#!/usr/bin/env bash
# One command on a GPU machine: build (or use a build carried along), run the
# GPU test suites, compute-sanitizer memcheck / racecheck / synccheck over the
# GPU test binaries, every melforge-bench suite and the PyTorch comparison;
# everything goes under an output folder, and a summary table is printed last.
#
#   tools/gpu-check.sh [--out DIR] [--carried DIR]
#     --out DIR      where logs and JSON go (default gpu-check-out)
#     --carried DIR  use DIR/build and DIR/lib made by tools/carry-for-gpu.sh
#                    instead of building here
# Needs: an NVIDIA GPU and driver, the CUDA toolkit (nvcc, compute-sanitizer).
# Building here needs CMake and the -dev packages of tools/deps.sh (installed
# when apt-get works); a carried build needs none of them.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=gpu-check-out
CARRIED=""
while (($#)); do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --carried) CARRIED=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PATH="$PATH:/usr/local/cuda/bin"
declare -a SUMMARY=()
record() { SUMMARY+=("$(printf '%-38s %s' "$1" "$2")"); }

if ! nvidia-smi -L >"$OUT/gpu.txt" 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi failed); nothing to check" >&2
  exit 1
fi
cat "$OUT/gpu.txt"

if [ -n "$CARRIED" ]; then
  BUILD=$(cd "$CARRIED/build" && pwd)
  # The carried build's ctest files hold the absolute source path of the
  # machine that built it; make that path point here.
  SRC=$(grep -m1 '^CMAKE_HOME_DIRECTORY' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  if [ -n "$SRC" ] && [ "$SRC" != "$ROOT" ] && [ ! -e "$SRC" ]; then
    mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC"
  fi
  BIN_OLD=$(grep -m1 '^melforge_BINARY_DIR' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  if [ -n "$BIN_OLD" ] && [ "$BIN_OLD" != "$BUILD" ] && [ ! -e "$BIN_OLD" ]; then
    mkdir -p "$(dirname "$BIN_OLD")" && ln -s "$BUILD" "$BIN_OLD"
  fi
  LIBS=$(cd "$CARRIED/lib" && pwd)
  CUDNN_DIR=$(dirname "$(find / -name 'libcudnn.so.9*' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
  export LD_LIBRARY_PATH="$LIBS:${CUDNN_DIR:-}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  record "build" "carried ($(cat "$CARRIED/commit" 2>/dev/null || echo '?'))"
else
  BUILD=$ROOT/build-gpu
  if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then tools/deps.sh >"$OUT/deps.log" 2>&1; fi
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
     cmake --build "$BUILD" --parallel "$(nproc)" >>"$OUT/build.log" 2>&1; then
    record "build" "ok"
  else
    record "build" "FAILED (see build.log)"
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
  fi
fi

# 1. GPU test suites.
if (cd "$BUILD" && ctest -L gpu --output-on-failure) >"$OUT/ctest-gpu.log" 2>&1; then
  record "ctest -L gpu" "passed ($(grep -Eo '[0-9]+ tests? failed out of [0-9]+' "$OUT/ctest-gpu.log"))"
else
  record "ctest -L gpu" "FAILED: $(grep -Eo '[0-9]+ tests? failed out of [0-9]+' "$OUT/ctest-gpu.log")"
fi

# 2. compute-sanitizer over each GPU test binary.
GPU_TESTS=$(cd "$BUILD" && ctest -L gpu -N -V 2>/dev/null | sed -n 's/^[0-9]*: Test command: \([^ ]*\).*/\1/p')
for tool in memcheck racecheck synccheck; do
  errs=0
  for t in $GPU_TESTS; do
    name=$(basename "$t")
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" >"$OUT/sanitizer-$tool-$name.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then errs=$((errs + 1)); fi
  done
  record "compute-sanitizer $tool" "$([ $errs -eq 0 ] && echo clean || echo "$errs binaries with errors")"
done

# 3. Benchmarks (each validates before timing; JSON into $OUT).
BENCH="$BUILD/bench/melforge-bench"
for suite in ceilings conv step adamw reader; do
  if ! "$BENCH" --help 2>/dev/null | grep -qE "^\s+$suite\b"; then
    record "bench $suite" "not built"
    continue
  fi
  if "$BENCH" --out-dir "$OUT" "$suite" >"$OUT/bench-$suite.log" 2>&1; then
    record "bench $suite" "ok"
  else
    record "bench $suite" "FAILED (see bench-$suite.log)"
  fi
done

# 4. Side by side with PyTorch (when the comparison exists).
if [ -f bench/compare_torch.py ]; then
  if python3 bench/compare_torch.py --melforge "$BUILD/tools/melforge" --out "$OUT" >"$OUT/compare.log" 2>&1; then
    record "compare with PyTorch" "ok"
  else
    record "compare with PyTorch" "FAILED (see compare.log)"
  fi
else
  record "compare with PyTorch" "not written yet"
fi

echo
echo "gpu-check summary ($(head -1 "$OUT/gpu.txt"), commit $(git rev-parse --short=12 HEAD 2>/dev/null || cat "${CARRIED:-.}/commit" 2>/dev/null))"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
