#!/usr/bin/env bash
# Data-parallel scaling on this machine's CPUs: LeakCNN (64 x 64 log-mels,
# fp32, the default model) at one global batch, as 1 process x 1 thread,
# 1 process x N threads and N processes x 1 thread (mpirun, ordered gradients, then dist.reduce = fast
# with one bucket, the default 4 MiB buckets and 1 MiB buckets started during the backward),
# plus one process running the same step as N micro-batches (what the N
# processes are bit-identical to). Prints steady samples/s (2nd epoch on),
# the efficiency against N x the 1 x 1 figure, and the communication share.
#   bench/dist_scaling.sh [MELFORGE] [N] [BATCH]     (defaults: build/tools/melforge 2 64)
set -euo pipefail
M=${1:-build/tools/melforge} N=${2:-2} B=${3:-64}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$M" data synth --out "$W/d" --files 640 --classes 4 > /dev/null
common=(train --train "$W/d/train.h5" --epochs 3 --device cpu --progress off --seed 1 --set reader.threads=1)
run() {  # NAME THREADS PROCS EXTRA...
  local name=$1 t=$2 p=$3; shift 3
  if ((p > 1)); then
    OMP_NUM_THREADS=$t mpirun -np "$p" --oversubscribe --bind-to none -x OMP_NUM_THREADS "$M" "${common[@]}" \
      --out "$W/$name" "$@" > "$W/$name.log" 2>&1
  else
    OMP_NUM_THREADS=$t "$M" "${common[@]}" --out "$W/$name" "$@" > "$W/$name.log" 2>&1
  fi
  python3 - "$W/$name/report.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
share = r.get("communication_share")
print(f"{sys.argv[2]:<28} {r['steady_samples_per_s'] or r['train_samples_per_s']:10.0f} samples/s"
      + (f"  communication {100 * share:4.1f}% ({1e3 * r['communication_s_per_step']:.2f} ms/step)" if share else ""))
PY
}
echo "melforge data parallelism on $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; batch $B"
run "1 process x 1 thread" 1 1 --batch-size "$B"
run "1 process x $N threads" "$N" 1 --batch-size "$B"
run "1 process, $N micro-batches" 1 1 --batch-size $((B / N)) --grad-accum "$N"
run "$N processes x 1 thread" 1 "$N" --batch-size "$B"
run "$N processes x 1 thread, fast, 1 bucket" 1 "$N" --batch-size "$B" --set dist.reduce=fast --set dist.bucket_mb=1024
run "$N processes x 1 thread, fast, 4 MiB buckets" 1 "$N" --batch-size "$B" --set dist.reduce=fast
run "$N processes x 1 thread, fast, 1 MiB buckets" 1 "$N" --batch-size "$B" --set dist.reduce=fast --set dist.bucket_mb=1
