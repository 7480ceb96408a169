#!/usr/bin/env bash
# Prepares what a bare GPU machine (CUDA 13 toolkit, CMake, no Debian -dev
# packages) needs to run melforge's GPU checks from a build made here:
#   build-carry/   a Release build for the given architecture (default sm_90),
#                  kept between calls so rebuilds are incremental
#   .carry/build   only what the GPU machine runs: melforge, melforge-bench,
#                  the `gpu` test binaries (stripped) and ctest's files
#   .carry/lib     the non-system shared libraries they need (ldd), stripped;
#                  glibc and CUDA's own libraries excepted (the GPU machine
#                  has them). The binaries find it through their RPATH
#                  ($ORIGIN/../../lib), so no LD_LIBRARY_PATH is needed.
#   .carry/carry.tar.xz  build/ and lib/ above, packed (tools/gpu-check.sh
#                  unpacks them into .carry on the GPU machine)
#   .carry/root    this checkout's absolute path (ctest's files and the
#                  binaries name it; tools/gpu-check.sh maps it to the new one)
# Then, on the GPU machine, from the repo root:
#   tools/gpu-check.sh --carried .carry --out "$OUT"
# (.carry is ignored by git; name it in the device tool's `carry`.)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$PATH:/usr/local/cuda/bin"
ARCH=${1:-90}
BUILD=$ROOT/build-carry
tools/deps.sh
# DT_RPATH (not RUNPATH) so that the libraries' own dependencies are found in
# .carry/lib too; every carried binary sits two folders below .carry.
# shellcheck disable=SC2016
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DMELFORGE_ORACLE_PYTHON=/usr/bin/python3 '-DCMAKE_BUILD_RPATH=$ORIGIN/../../lib' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >/dev/null
cmake --build "$BUILD" --parallel "$(nproc)" --target melforge melforge-bench melforge_gpu_tests
# The gpu suites' binaries, each once: ctest names some binaries in several
# tests (other settings) and names a test's command only once it is built.
GPU_TESTS=$(cd "$BUILD" && ctest -N -V -L gpu | sed -n 's|^[0-9]*: Test command: [^ ]*/\([^/ ]*\).*|\1|p' |
            awk '!seen[$0]++')
[ -n "$GPU_TESTS" ] || { echo "carry-for-gpu: ctest lists no gpu tests" >&2; exit 1; }

rm -rf .carry
mkdir -p .carry/lib .carry/build/tools .carry/build/bench .carry/build/tests
cp "$BUILD/tools/melforge" .carry/build/tools/
cp "$BUILD/bench/melforge-bench" .carry/build/bench/
for t in $GPU_TESTS; do cp "$BUILD/tests/$t" .carry/build/tests/; done
# ctest's files, with the build folder renamed to where it is carried.
(cd "$BUILD" && find . -name CTestTestfile.cmake) | while read -r f; do
  mkdir -p ".carry/build/$(dirname "$f")"
  sed "s|$BUILD|$ROOT/.carry/build|g" "$BUILD/$f" > ".carry/build/$f"
done
BINS=$(find .carry/build -type f -perm -u+x)
# shellcheck disable=SC2086
strip --strip-unneeded $BINS
for bin in $BINS; do
  if ldd "$bin" | grep -q 'not found' && ! ldd "$bin" | grep 'not found' | grep -qE 'libcu|libnv'; then
    echo "carry-for-gpu: $bin has unresolved libraries:" >&2; ldd "$bin" | grep 'not found' >&2; exit 1
  fi
  ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libcufft*|libcurand*|libnccl*|libnvidia*|libnvrtc*|libnvJitLink*) ;;  # the GPU machine's own
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|ld-linux*) ;;  # glibc
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
chmod u+w .carry/lib/*
strip --strip-unneeded .carry/lib/*
git rev-parse --short=12 HEAD > .carry/commit
echo "$ROOT" > .carry/root
echo "unpacked: $(du -sh .carry | cut -f1)"
# What travels counts uncompressed: carry build/ and lib/ as one xz tarball
# (about a fifth of the size); tools/gpu-check.sh unpacks it into .carry.
tar -C .carry -cf - build lib | xz -T0 -6 > .carry/carry.tar.xz
rm -rf .carry/build .carry/lib
du -sh .carry
echo "with the tracked tree: $({ git ls-files -z; printf '.carry\0'; } | du -ch --files0-from=- | tail -1 | cut -f1)" \
  "(the device tool's limit: 64 MiB)"
