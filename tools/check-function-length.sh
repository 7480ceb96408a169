#!/usr/bin/env bash
# No function over 150 lines outside tests (docs/decisions.md, "Function
# length"). Measured with lizard (https://github.com/terryyin/lizard): its
# "length" counts every line of a function, signature to closing brace,
# comments and blank lines included. Runs from tools/test.sh (CI); lizard
# comes from PyPI into .venv-tools/ when it is not installed.
#   tools/check-function-length.sh [--limit N]    (default 150)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=150
if [[ ${1:-} == --limit ]]; then limit=$2; fi

lizard_bin=$(command -v lizard || true)
if [[ -z $lizard_bin ]]; then
  if [[ ! -x .venv-tools/bin/lizard ]]; then
    python3 -m venv .venv-tools
    .venv-tools/bin/pip install -q lizard==1.24.3
  fi
  lizard_bin=.venv-tools/bin/lizard
fi

mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' | grep -v '^tests/')
# -L: length limit; the complexity (-C) and argument (-a) limits are set out of
# reach so that only length is judged here.
if ! "$lizard_bin" --languages cpp --warnings_only -L "$limit" -C 100000 -a 1000 "${files[@]}"; then
  echo "check-function-length: the functions above are longer than $limit lines; split them" >&2
  exit 1
fi
echo "check-function-length: ${#files[@]} files, no function over $limit lines"
