#!/usr/bin/env bash
# The whole test suite from scratch: installs what is missing, configures fresh
# builds, builds and runs ctest. GPU suites (label `gpu`) run for real on a
# machine with a GPU and show as skipped elsewhere. docs/testing.md lists the
# stages and what each costs on 2 cores.
#   BUILD_DIR=build-test   where to build (removed first)
#   CUDAARCHS=90           CUDA architectures of the first build (default: the
#                          GPU present, else 80-real;90-real;120-real: the
#                          oldest supported, the one GPU sessions run, the newest)
#   BUILD_TYPE=Release
#   CUDA_EMU=auto          auto: where no GPU is usable, also build the CUDA
#                          paths against the CPU emulator of CUDA
#                          (MELFORGE_CUDA_EMU, tests/cudaemu) in $BUILD_DIR-emu
#                          and run the GPU suites there; on | off
#   SANITIZE=on            also build the CPU suites with clang-19,
#                          AddressSanitizer + UBSan in $BUILD_DIR-san (the
#                          CPU-only build, MELFORGE_CUDA=OFF) and run them
#                          there; any report fails; off
#   FUZZ_SECONDS=45        then run every fuzz target (fuzz/run.sh; the same
#                          $BUILD_DIR-san build) this long, one per core at a
#                          time; any crash, hang or sanitizer report fails; 0
#                          skips. Seven targets (dataset checkpoint safetensors
#                          run_config audio_decode audio_csv trials)
# Every compile goes through ccache (CMakeLists.txt), so builds the same files
# with the same flags (the library in the first and emulated builds) compile once.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
JOBS=$(nproc)

# Stage timings, printed at the end (and when a stage fails).
stage_names=() stage_seconds=()
stage_start=$SECONDS
stage_done() { stage_names+=("$1"); stage_seconds+=($((SECONDS - stage_start))); stage_start=$SECONDS; }
print_stage_times() {
  local i
  echo "tools/test.sh: stage times on $JOBS cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)):"
  for i in "${!stage_names[@]}"; do
    printf '  %-42s %5d s\n' "${stage_names[$i]}" "${stage_seconds[$i]}"
  done
  printf '  %-42s %5d s\n' "total" "$SECONDS"
}
trap print_stage_times EXIT

tools/deps.sh --test
tools/audio-oracle-venv.sh   # librosa: the audio front-end's oracle (tests/audio)
tools/onnx-venv.sh           # onnx + onnxruntime: the ONNX export's checks (tests/onnx)
# No function over 150 lines outside tests (docs/decisions.md, "Function length").
tools/check-function-length.sh
stage_done "dependencies, function length"

gpu_present=0
nvidia-smi -L > /dev/null 2>&1 && gpu_present=1
if [[ -z ${CUDAARCHS:-} ]] && ((!gpu_present)); then
  export CUDAARCHS="80-real;90-real;120-real"
fi

BUILD_DIR=${BUILD_DIR:-build-test}
BUILD_TYPE=${BUILD_TYPE:-Release}
rm -rf "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DMELFORGE_WERROR=ON
cmake --build "$BUILD_DIR" --parallel "$JOBS"
stage_done "suite: build (${CUDAARCHS:-local GPU})"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 1200 --parallel "$JOBS" "$@")
stage_done "suite: ctest"

CUDA_EMU=${CUDA_EMU:-auto}
if [[ $CUDA_EMU == auto ]]; then
  if ((gpu_present)); then CUDA_EMU=off; else CUDA_EMU=on; fi
fi
if [[ $CUDA_EMU == on ]]; then
  # Every kernel, the runtime calls, graph capture and the GPU trainer path,
  # run on the CPU emulator: the GPU suites (label gpu) plus the emulator's own.
  # The same build type as the first build: its library objects come from ccache.
  rm -rf "$BUILD_DIR-emu"
  cmake -S . -B "$BUILD_DIR-emu" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DMELFORGE_WERROR=ON -DMELFORGE_CUDA_EMU=ON
  cmake --build "$BUILD_DIR-emu" --parallel "$JOBS" --target melforge_gpu_tests
  stage_done "CUDA emulator: build"
  (cd "$BUILD_DIR-emu" && ctest --output-on-failure --timeout 1800 -L gpu --parallel "$JOBS")
  stage_done "CUDA emulator: ctest -L gpu"
fi

SANITIZE=${SANITIZE:-on}
FUZZ_SECONDS=${FUZZ_SECONDS:-45}
if [[ $SANITIZE == on ]] || ((FUZZ_SECONDS > 0)); then
  # One clang-19 build for both (docs/decisions.md, "CI time"): all host C++
  # with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's
  # coverage (MELFORGE_FUZZ), the CPU suites and the fuzz targets linked from
  # the same objects. It is the CPU-only build (MELFORGE_CUDA=OFF): no nvcc, no
  # CUDA library or header, so CI also proves that build (docs/testing.md).
  rm -rf "$BUILD_DIR-san"
  cmake -S . -B "$BUILD_DIR-san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
    -DCMAKE_CXX_COMPILER=clang++-19 -DMELFORGE_FUZZ=ON -DMELFORGE_BUILD_TESTS=ON -DMELFORGE_CUDA=OFF
  targets=(melforge)
  [[ $SANITIZE == on ]] && targets+=(melforge_cpu_tests)
  ((FUZZ_SECONDS > 0)) && targets+=(melforge_fuzzers)
  cmake --build "$BUILD_DIR-san" --parallel "$JOBS" --target "${targets[@]}"
  stage_done "sanitizers and fuzz targets (CPU-only): build"
fi
if [[ $SANITIZE == on ]]; then
  # Every CPU suite (ctest -LE gpu; the CPU-only build has no other; the GPU
  # suites ran above, on the GPU or the emulator) under the sanitizers. A
  # report aborts the test (-fno-sanitize-recover=all, halt_on_error), leaks
  # included; detect_stack_use_after_return=0 (GCC's default, not clang's):
  # its fake stacks cannot be mapped in the child processes that test_io
  # starts with little address space on purpose.
  (cd "$BUILD_DIR-san" &&
    ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 1800 -LE gpu --parallel "$JOBS")
  stage_done "sanitizers: ctest -LE gpu"
fi
if ((FUZZ_SECONDS > 0)); then
  # A short coverage-guided run of each reader's fuzz target (docs/fuzzing.md);
  # a finding's input is left in $BUILD_DIR-san/fuzz-artifacts/TARGET/.
  # A fixed seed: CI explores the same inputs on every run (a finding is then a
  # change in the code, not luck); campaigns (docs/fuzzing.md) use fresh seeds.
  FUZZ_SEED=${FUZZ_SEED:-1} BUILD="$BUILD_DIR-san" fuzz/run.sh --no-build --seconds "$FUZZ_SECONDS"
  stage_done "fuzzing: ${FUZZ_SECONDS} s a target, $(nproc) at a time"
fi
