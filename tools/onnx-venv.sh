#!/usr/bin/env bash
# Makes .venv-onnx/ (at the repository root): a Python venv with onnx and
# onnxruntime pinned (tests/oracle/requirements-onnx.txt), what the ONNX
# export's tests (tests/onnx/) and bench/onnx_throughput.py run the exported
# models with. tools/test.sh runs it; run it yourself before `ctest` in a
# build of your own. Idempotent: an up-to-date venv is kept.
exec "$(dirname "$0")/pinned-venv.sh" .venv-onnx tests/oracle/requirements-onnx.txt \
  "import onnx, onnxruntime; print('melforge: ONNX checks: onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__)"
