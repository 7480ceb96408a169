#!/usr/bin/env bash
# Prepares what a bare GPU machine (CUDA 13 toolkit, CMake, no Debian -dev
# packages) needs to run melforge's GPU checks from a build made here:
#   .carry/build   a Release build for the given architecture (default sm_90)
#   .carry/lib     the non-system shared libraries its binaries need (ldd),
#                  CUDA's own libraries excepted (the GPU machine has them)
# Then, on the GPU machine, from the repo root:
#   tools/gpu-check.sh --carried .carry --out "$OUT"
# (.carry is ignored by git; name it in the device tool's `carry`.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
ARCH=${1:-90}
tools/deps.sh
rm -rf .carry
mkdir -p .carry/lib
cmake -S . -B .carry/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DMELFORGE_ORACLE_PYTHON=/usr/bin/python3 >/dev/null
cmake --build .carry/build --parallel "$(nproc)"
# Object files are not needed to run; keep the carried folder small.
find .carry/build -name '*.o' -delete
for bin in $(find .carry/build -type f -perm -u+x \( -name 'test_*' -o -name 'melforge*' \)); do
  ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$lib" in
    */libcuda.so*|*/libcudart*|*/libcublas*|*/libcudnn*|*/libnvidia*|*/libnvrtc*) ;;  # the GPU machine's own
    /lib/x86_64-linux-gnu/libc.so*|/lib/x86_64-linux-gnu/libm.so*|/lib64/*|*/ld-linux*) ;;  # glibc
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
echo "$(git rev-parse --short=12 HEAD)" > .carry/commit
du -sh .carry
ls .carry/lib
