"""PyTorch oracle for instance_norm (kernels/instance_norm.hpp).

usage: instance_norm.py CASES
CASES is a text file, one case a line: DIR B MELS FRAMES (one torch start-up
for all of them). Reads DIR/x.bin [B, MELS, FRAMES] (float32 little-endian,
the values the kernel saw, already rounded to its storage dtype); applies
torch.nn.InstanceNorm1d(MELS) (affine False, eps 1e-5, track_running_stats
False) in float64, in training mode and in eval mode (the same without
running statistics: the test checks they agree), and writes DIR/y.bin
(float64 [B, MELS, FRAMES]).
"""
import sys

import numpy as np
import torch


def run_case(d, b, mels, frames):
    x = torch.from_numpy(np.fromfile(f"{d}/x.bin", dtype="<f4").astype(np.float64).reshape(b, mels, frames))
    norm = torch.nn.InstanceNorm1d(mels).double()
    norm.train()
    y = norm(x)
    norm.eval()
    y_eval = norm(x)
    if not torch.equal(y, y_eval):
        raise SystemExit(f"{d}: InstanceNorm1d train and eval differ")
    y.numpy().astype("<f8").tofile(f"{d}/y.bin")


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            d, b, mels, frames = line.split()
            run_case(d, int(b), int(mels), int(frames))


if __name__ == "__main__":
    main()
