#!/usr/bin/env bash
# Second, short call: the step and the PyTorch comparison with every conv on
# the resident variant, then initcheck on the suites that failed.
set -u
export MELFORGE_CONV_ALGO=resident
tools/gpu-check.sh --carried .carry --out "$OUT" --work /tmp/w --budget 120 --steps step,compare \
  --compare-args "--epochs 4 --variants eager,resident"
B=$PWD/.carry/build/tests
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib
unset MELFORGE_CONV_ALGO
ic() { local name=$1; shift; (cd /tmp/w && timeout 18 compute-sanitizer --tool initcheck --print-limit 10 "$@") > "$OUT/ic-$name.log" 2>&1; echo "initcheck $name rc $?"; }
ic conv "$B/test_conv_relu_pool_gpu" '--test-case=*without dx*'
ic stack "$B/test_cnn_stack_gpu"
ic margin "$B/test_margin_softmax_gpu"
(timeout 25 .carry/build/bench/melforge-bench --no-write logmel --device cuda --files 2048 --repeats 2) > "$OUT/logmel.log" 2>&1; echo "logmel rc $?"
