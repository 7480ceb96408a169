#!/usr/bin/env bash
# Third, short call (after fixes to the three failing suites, auto -> resident,
# and the conv bench's cuDNN bias gradient): every GPU suite, the conv bench's
# resident/cin1 against cuDNN forward and backward, the step with auto and
# augmentation, memcheck of the CNN stack suite whose readback raced.
set -u
cp "$0" "$OUT/command.sh" 2>/dev/null
tools/gpu-check.sh --carried .carry --out "$OUT" --work /tmp/w --budget 80 --steps tests
B=$PWD/.carry/build
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib
(timeout 40 "$B/bench/melforge-bench" --no-write conv --batch 8192 --dtype bf16 --algo resident --algo cin1 --algo auto \
  --peak-gbps 4187 --peak-tflops 861) > "$OUT/conv.log" 2>&1; echo "conv rc $?"
(timeout 30 "$B/bench/melforge-bench" --no-write step --batch 8192 --precision bf16 --augment) > "$OUT/step-augment.log" 2>&1; echo "step rc $?"
(cd /tmp/w && timeout 20 compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 10 "$B/tests/test_cnn_stack_gpu") \
  > "$OUT/memcheck-stack.log" 2>&1; echo "memcheck stack rc $?"
