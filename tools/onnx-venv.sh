#!/usr/bin/env bash
# Makes .venv-onnx/ (at the repository root): a Python venv with onnx and
# onnxruntime pinned (tests/oracle/requirements-onnx.txt), what the ONNX
# export's tests (tests/onnx/) and bench/onnx_throughput.py run the exported
# models with. tools/test.sh runs it; run it yourself before `ctest` in a
# build of your own. Idempotent: an up-to-date venv is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/oracle/requirements-onnx.txt
venv=.venv-onnx
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then exit 0; fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
cp "$req" "$venv/requirements.txt"
"$venv/bin/python" -c "import onnx, onnxruntime; print('melforge: ONNX checks: onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__)"
