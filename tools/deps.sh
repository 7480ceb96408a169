#!/usr/bin/env bash
# Installs what melforge needs to build and test on Debian/Ubuntu (as root, or
# through sudo), skipping what is already there. The CUDA toolkit itself (nvcc,
# cuBLAS, cuDNN, NVTX3) is expected system-wide, as on the machines we target.
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config git
      libhdf5-dev zlib1g-dev libsndfile1-dev libsoxr-dev libfftw3-dev libfmt-dev doctest-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
      python3 python3-venv python3-numpy python3-h5py python3-torch   # python3-venv: lizard (tools/check-function-length.sh)
      clang-19 libclang-rt-19-dev libomp-19-dev)   # the fuzz targets (libFuzzer; docs/fuzzing.md)

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

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "melforge: nvcc is not on PATH; add /usr/local/cuda/bin to PATH" >&2
  else
    echo "melforge: the CUDA toolkit (nvcc) is required; install CUDA 12 or 13 system-wide" >&2
  fi
  exit 1
fi
