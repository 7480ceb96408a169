#!/usr/bin/env bash
# Makes a Python venv at the repository root with exactly the pinned
# requirements of one test oracle, then runs a check in it; the home of
# tools/audio-oracle-venv.sh and tools/onnx-venv.sh. Idempotent: a venv built
# from the same requirements file is kept (a changed file rebuilds it).
#   tools/pinned-venv.sh VENV REQUIREMENTS CHECK_PYTHON_CODE
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1 req=$2 check=$3
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then exit 0; fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
cp "$req" "$venv/requirements.txt"
"$venv/bin/python" -c "$check"
