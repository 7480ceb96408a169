PYTHONUNBUFFERED=1 tools/gpu-check.sh --carried .carry --out "$OUT" --work /tmp/w2 --budget 140 --steps compare --compare-args "--epochs 4 --variants compile" 2>&1 | tail -30
