#!/usr/bin/env python3
"""Checks bench/crop_rule.py (the Python port of io/crops.hpp that
bench/torch_metric_train.py --crop-frames uses) against melforge itself.

Builds bench/crop_check/dump_crops.cpp against io/crops.hpp and the build's
io + engine libraries (g++, the link line of tests/test_io), then:

  1. grid: io::random_crop_start for seeds (0, 1, 2, 7, 42, 2^63, 2^64-1, ...),
     epochs, utterances, lengths (1 .. 9e12 frames: the multiply-shift branch
     and the modulo branch past 2^32 positions) and crops, and
     io::eval_crop_start for K = 1, 2, 5, 10: the Python values (scalar and
     vectorised) must be equal to the C++ ones, every one;
  2. reader: melforge's training reader (io::BatchReader, random_crops, the
     ragged FILE, --crop N, --seed S, a few epochs, in its shuffled batch
     order) dumps every crop it delivers; each must be equal, element for
     element, to the crop Python cuts with h5py at the port's start.

  check_crop_rule.py [--build build-carry] [--data train.h5] [--crop 200] [--seed 3] [--epochs 3]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from crop_rule import RaggedSplit, eval_crop_start, random_crop_start, random_crop_starts  # noqa: E402


def build(build_dir, exe):
    b = os.path.join(ROOT, build_dir)
    cmd = ["g++", "-O1", "-std=c++20", "-DFMT_SHARED", f"-I{ROOT}", "-isystem", "/usr/local/cuda/include",
           "-isystem", "/usr/include/hdf5/serial", os.path.join(HERE, "crop_check", "dump_crops.cpp"), "-o", exe,
           "-Wl,-rpath,/usr/local/cuda/lib:/usr/lib/x86_64-linux-gnu/hdf5/serial",
           f"{b}/io/libmelforge_io.a", f"{b}/engine/libmelforge_engine.a", "/usr/local/cuda/lib/libcudart.so",
           "/usr/lib/x86_64-linux-gnu/libfmt.so.9.1.0", "/usr/lib/gcc/x86_64-linux-gnu/12/libgomp.so", "-ldl",
           "/usr/lib/x86_64-linux-gnu/hdf5/serial/libhdf5.so", "-lsz", "-lz", "-lpthread", "-lm"]
    subprocess.run(cmd, check=True)


def check_grid(exe):
    out = subprocess.run([exe, "grid"], check=True, capture_output=True, text=True).stdout.split("\n")
    n_rand = n_eval = bad = 0
    for line in out:
        p = line.split()
        if not p:
            continue
        v = [int(x) for x in p[1:]]
        if p[0] == "rand":
            seed, epoch, utt, length, crop, want = v
            got = random_crop_start(seed, epoch, utt, length, crop)
            gotv = int(random_crop_starts(seed, epoch, np.array([0] * utt + [length]), crop)[utt]) if utt < 5000 \
                else got
            n_rand += 1
            if got != want or gotv != want:
                bad += 1
                if bad <= 5:
                    print(f"  DIFFER rand seed {seed} epoch {epoch} utt {utt} len {length} crop {crop}: "
                          f"C++ {want}, Python {got} / vectorised {gotv}")
        else:
            k, K, length, crop, want = v
            got = eval_crop_start(k, K, length, crop)
            n_eval += 1
            if got != want:
                bad += 1
                if bad <= 5:
                    print(f"  DIFFER eval k {k} K {K} len {length} crop {crop}: C++ {want}, Python {got}")
    print(f"grid: {n_rand} random_crop_start and {n_eval} eval_crop_start values, {bad} differ")
    return bad == 0


def check_reader(exe, data, crop, seed, epochs):
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "crops.bin")
        subprocess.run([exe, "reader", data, str(crop), str(seed), str(epochs), dump], check=True,
                       capture_output=True)
        raw = open(dump, "rb").read()
    ds = RaggedSplit(data)
    rec = 16 + 4 * ds.mels * crop
    rows = len(raw) // rec
    bad, seen = 0, set()
    per_epoch = {e: random_crop_starts(seed, e, ds.lengths, crop) for e in range(epochs)}
    for i in range(rows):
        epoch, utt = np.frombuffer(raw, dtype=np.int64, count=2, offset=i * rec)
        x = np.frombuffer(raw, dtype=np.float32, count=ds.mels * crop, offset=i * rec + 16).reshape(ds.mels, crop)
        s = int(per_epoch[int(epoch)][utt])
        seen.add((int(epoch), int(utt)))
        if not np.array_equal(x, ds.crops([int(utt)], [s], crop)[0]):
            bad += 1
            if bad <= 5:
                print(f"  DIFFER epoch {epoch} utterance {utt} (length {ds.lengths[utt]}, Python start {s})")
    short = int((ds.lengths < crop).sum())
    moved = sum(int((per_epoch[e] != per_epoch[0]).sum()) for e in range(1, epochs))
    print(f"reader: {rows} crops of {crop} frames over {epochs} epochs (seed {seed}) from {data}: "
          f"{len(seen)} distinct (epoch, utterance), {ds.n} utterances ({short} shorter than the crop, wrapped), "
          f"{moved} later-epoch starts differ from epoch 0's; {bad} crops differ from Python's")
    return bad == 0 and rows == epochs * ds.n and len(seen) == rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build-carry")
    p.add_argument("--data", help="a ragged train.h5 (default: the grid check only)")
    p.add_argument("--crop", type=int, default=200)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "dump_crops")
        build(a.build, exe)
        ok = check_grid(exe)
        if a.data:
            ok = check_reader(exe, a.data, a.crop, a.seed, a.epochs) and ok
    print("crop rule: " + ("Python port equals melforge" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
