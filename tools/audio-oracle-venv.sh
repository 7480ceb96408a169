#!/usr/bin/env bash
# Makes .venv-audio/ (at the repository root): a Python venv with librosa and
# soundfile pinned (tests/oracle/requirements-audio.txt), the independent
# oracle of the audio front-end's tests. tools/test.sh runs it; run it yourself
# before `ctest` in a build of your own. Idempotent: an up-to-date venv is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/oracle/requirements-audio.txt
venv=.venv-audio
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then exit 0; fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
cp "$req" "$venv/requirements.txt"
"$venv/bin/python" -c "import librosa, soundfile; print('melforge: audio oracle: librosa', librosa.__version__)"
