#!/usr/bin/env bash
# Installs what melforge needs on Debian/Ubuntu (as root, or through sudo),
# skipping what is already there. The CUDA toolkit itself (nvcc, cuBLAS, cuFFT;
# cuDNN and NVTX3 for the benchmarks) is expected system-wide, as on the
# machines we target; without it melforge builds its CPU backend alone.
#   tools/deps.sh          what building and running melforge needs (the
#                          quickstart): compilers, CMake, Ninja, ccache, the libraries
#   tools/deps.sh --test   also what the test suite needs (tools/test.sh): the
#                          PyTorch oracle, clang-19 and libFuzzer
set -euo pipefail

build_pkgs=(cmake ninja-build g++ pkg-config git ccache
            libhdf5-dev zlib1g-dev libsndfile1-dev libsoxr-dev libfftw3-dev libfmt-dev
            libcli11-dev libtomlplusplus-dev nlohmann-json3-dev doctest-dev python3
            libopenmpi-dev openmpi-bin   # data-parallel training (dist/; MELFORGE_MPI)
            libonnx-dev libprotobuf-dev)  # ONNX export (onnx/): ONNX's C++ API and checker
test_pkgs=(python3-venv python3-numpy python3-h5py python3-torch   # python3-venv: lizard (tools/check-function-length.sh)
           clang-19 libclang-rt-19-dev libomp-19-dev)   # the fuzz targets (libFuzzer; docs/fuzzing.md)

pkgs=("${build_pkgs[@]}")
case ${1:-} in
  "") ;;
  --test) pkgs+=("${test_pkgs[@]}") ;;
  *) echo "tools/deps.sh: unknown argument '$1' (expected nothing, or --test for the test suite's needs)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "melforge: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The toolkit is optional for building (without it CMake builds the CPU backend
# alone, MELFORGE_CUDA); the test suite's CUDA builds need it.
if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "melforge: nvcc is not on PATH; add /usr/local/cuda/bin to PATH" >&2
    exit 1
  elif [ "${1:-}" = --test ]; then
    echo "melforge: the test suite needs the CUDA toolkit (nvcc); install CUDA 12 or 13 system-wide" >&2
    exit 1
  fi
  echo "melforge: no CUDA toolkit (nvcc): the build will have the CPU backend only; for the GPU, install" \
       "CUDA 12 or 13 system-wide" >&2
fi
