#!/usr/bin/env bash
# Builds the fuzz targets (clang + libFuzzer, MELFORGE_FUZZ=ON), makes the seed
# corpora (fuzz/make_seeds.sh) and runs every target (or the ones named) for a
# fixed time. Exits 1 when any target found a crash, hang, sanitizer report,
# leak or failed invariant; the input is then in BUILD/fuzz-artifacts/TARGET/.
#
#   fuzz/run.sh                         60 s per target (what tools/test.sh runs)
#   fuzz/run.sh --seconds 3600 dataset  a long campaign of one target
#   fuzz/run.sh --no-build ...          use the build as it is (no cmake)
#   BUILD=build-fuzz CUDAARCHS=90       the build folder (kept between runs, so
#                                       the corpus grows) and CUDA architecture
#   FUZZ_JOBS=2                         targets run at once (default: nproc)
#   FUZZ_SEED=1                         libFuzzer's -seed (unset: a new one each
#                                       run); tools/test.sh fixes it so CI tries
#                                       the same inputs every time
# Each target's corpus is BUILD/fuzz-corpus/TARGET (new inputs are added
# there); the seeds are read from BUILD/fuzz-seeds/TARGET. docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
SECONDS_PER_TARGET=60
BUILD=${BUILD:-build-fuzz}
BUILD_IT=1
targets=()
while (($#)); do
  case $1 in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --no-build) BUILD_IT=0; shift ;;
    dataset|checkpoint|safetensors|run_config|audio_decode|audio_csv|trials) targets+=("$1"); shift ;;
    *) echo "fuzz/run.sh: unknown argument '$1' (expected --seconds N, --build DIR, --no-build or a target:" \
            "dataset checkpoint safetensors run_config audio_decode audio_csv trials)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(dataset checkpoint safetensors run_config audio_decode audio_csv trials)

# Debian 12's clang-19 (its default clang 14 cannot compile melforge's C++20).
CC_FUZZ=${CC_FUZZ:-clang-19} CXX_FUZZ=${CXX_FUZZ:-clang++-19}
if ! command -v "$CXX_FUZZ" > /dev/null; then
  echo "fuzz/run.sh: $CXX_FUZZ is required (libFuzzer); tools/deps.sh installs Debian's clang-19" >&2
  exit 1
fi
if ((BUILD_IT)); then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC_FUZZ" \
      -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DMELFORGE_FUZZ=ON -DMELFORGE_BUILD_TESTS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" > /dev/null
  fi
  cmake --build "$BUILD" --parallel "$(nproc)" --target melforge_fuzzers melforge
fi

# HDF5 inputs are written to a file per execution: a RAM folder.
if [ -z "${MELFORGE_FUZZ_TMP:-}" ]; then
  MELFORGE_FUZZ_TMP=$(mktemp -d /dev/shm/melforge-fuzz.XXXXXX 2>/dev/null || mktemp -d)
  trap 'rm -rf "$MELFORGE_FUZZ_TMP"' EXIT
fi
export MELFORGE_FUZZ_TMP
# allocator_may_return_null: an absurd request (HDF5 sizing a buffer from a
# damaged header) fails as plain malloc would, and HDF5 reports an error; one of
# melforge's own then throws std::bad_alloc, which the targets report.
# fuzz/lsan.supp: HDF5's own leaks on damaged files (not melforge's).
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp}
# Attribute reads that make HDF5 loop are stopped after this many seconds
# (engine/isolate.hpp), well inside -timeout below.
export MELFORGE_ISOLATE_TIMEOUT=${MELFORGE_ISOLATE_TIMEOUT:-5}
for s in llvm-symbolizer-19 llvm-symbolizer; do
  if command -v $s > /dev/null; then export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v $s)}; break; fi
done

# Made again when a target has no seeds yet (a build folder older than it).
seeds_done=1
[ -f "$BUILD/fuzz-seeds/.complete" ] || seeds_done=0
for t in "${targets[@]}"; do [ -d "$BUILD/fuzz-seeds/$t" ] || seeds_done=0; done
if ((!seeds_done)); then
  rm -rf "$BUILD/fuzz-seeds"
  fuzz/make_seeds.sh --melforge "$BUILD/tools/melforge" --out "$BUILD/fuzz-seeds"
  touch "$BUILD/fuzz-seeds/.complete"
fi

# fuzz_one TARGET: one target's run; its exit status is left in the log folder.
fuzz_one() {
  local t=$1 corpus="$BUILD/fuzz-corpus/$1" artifacts="$BUILD/fuzz-artifacts/$1" log="$BUILD/fuzz-logs/$1.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # -timeout: an input that runs longer is a hang; -rss_limit_mb/-malloc_limit_mb:
  # an allocation sized from what a file declares is an out-of-memory finding.
  local rc=0
  "$BUILD/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=2560 \
    -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
    "$corpus" "$BUILD/fuzz-seeds/$t" > "$log" 2>&1 || rc=$?
  echo "$rc" > "$BUILD/fuzz-logs/$t.rc"
}

# libFuzzer runs one thread: FUZZ_JOBS targets at once (default: one per core).
JOBS=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  echo "fuzz/run.sh: $t for ${SECONDS_PER_TARGET} s (log $BUILD/fuzz-logs/$t.log)"
  rm -f "$BUILD/fuzz-logs/$t.rc"
  fuzz_one "$t" &
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
  log="$BUILD/fuzz-logs/$t.log" artifacts="$BUILD/fuzz-artifacts/$t"
  rc=$(cat "$BUILD/fuzz-logs/$t.rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ $rc != 0 ]]; then
    failed+=("$t")
    summary+=("$t: FAILED after ${execs:-?} executions (exit $rc): $(ls "$artifacts" | tail -1)")
    grep -E "ERROR|SUMMARY|fuzz $t|deadly|timeout|out-of-memory" "$log" | head -8 >&2 || true
  else
    summary+=("$t: ${execs:-?} executions, $(ls "$BUILD/fuzz-corpus/$t" | wc -l) corpus inputs, no finding")
  fi
done
printf 'fuzz/run.sh: %s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz/run.sh: findings in: ${failed[*]} (inputs in $BUILD/fuzz-artifacts/; docs/fuzzing.md says what to do)" >&2
  exit 1
fi
