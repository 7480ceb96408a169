#!/usr/bin/env bash
# Makes .venv-audio/ (at the repository root): a Python venv with librosa and
# soundfile pinned (tests/oracle/requirements-audio.txt), the independent
# oracle of the audio front-end's tests. tools/test.sh runs it; run it yourself
# before `ctest` in a build of your own. Idempotent: an up-to-date venv is kept.
exec "$(dirname "$0")/pinned-venv.sh" .venv-audio tests/oracle/requirements-audio.txt \
  "import librosa, soundfile; print('melforge: audio oracle: librosa', librosa.__version__)"
