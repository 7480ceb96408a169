#!/usr/bin/env bash
# Makes a Python venv with the newest PyTorch a user would install today (CPU
# wheels), plus numpy and h5py: the PyTorch side of bench/compare_torch.py
# (issue 17's side by side on the CPU). Idempotent: a venv whose torch imports
# is kept. Prints the interpreter to pass as --python.
#
#   bench/torch-venv.sh [DIR]          # default .venv-torch (at the repository root)
#   TORCH_SPEC='torch==2.9.1' bench/torch-venv.sh   # a pinned version instead of the newest
#
# Then, for example (LeakCNN-64, fp32, 2 threads, batch 128, 3 epochs; melforge built):
#   python3 bench/compare_torch.py --device cpu --python .venv-torch/bin/python \
#     --melforge build/tools/melforge --batch-size 128 --epochs 3 --threads 2
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-torch}
spec=${TORCH_SPEC:-torch}
py="$venv/bin/python"
if [ -x "$py" ] && "$py" -c "import torch, numpy, h5py" 2>/dev/null; then
  echo "$py"
  exit 0
fi
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -m pip install -q --disable-pip-version-check numpy h5py >&2
# The CPU-only wheels (~200 MB); where that index cannot be reached, the
# default index's wheels (with CUDA libraries, a few GB, the same CPU code).
if ! "$py" -m pip install -q --disable-pip-version-check "$spec" --index-url https://download.pytorch.org/whl/cpu >&2; then
  echo "torch-venv: the CPU-only index failed; installing $spec from the default index" >&2
  "$py" -m pip install -q --disable-pip-version-check "$spec" >&2
fi
"$py" -c "import torch; print('torch-venv: torch', torch.__version__, file=__import__('sys').stderr)"
echo "$py"
