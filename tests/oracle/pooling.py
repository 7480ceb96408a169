"""PyTorch oracle for the pooling ops (kernels/pooling.hpp).

usage: pooling.py CASES
CASES is a text file, one case a line (one torch start-up for all of them):
    DIR KIND N H W C POOL RESIDUAL RELU
KIND is maxpool, gap or gate; POOL is read by maxpool only, RESIDUAL and RELU
(0/1) by gate only.

Reads DIR/x.bin, DIR/dy.bin and for gate DIR/g.bin [N, C] and, with
RESIDUAL, DIR/res.bin (float32 little-endian, x and res NHWC [N, H, W, C], dy
the output's shape) -- the values the kernel saw, already rounded to its
storage dtype -- and computes in float64 with torch's autograd:
    maxpool: y = F.max_pool2d(x, POOL) (stride POOL, floor), with its indices
    gap:     y = x.mean((2, 3))
    gate:    y = x * sigmoid(g)[:, :, None, None] (+ res), then relu if RELU
and the gradients of sum(y * dy). Writes DIR/y.bin and DIR/dx.bin (float64,
NHWC), for maxpool DIR/code.bin (uint8: the winner's position dy*p + dx in
its window), for gate DIR/dg.bin [N, C] and, with RESIDUAL, DIR/dres.bin.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def load(d, name, shape):
    a = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
    return torch.from_numpy(a.reshape(shape))


def nchw(t):
    return t.permute(0, 3, 1, 2).contiguous()


def save(d, name, t):
    t = t.detach()
    if t.dim() == 4:
        t = t.permute(0, 2, 3, 1)
    t.contiguous().numpy().astype("<f8").tofile(f"{d}/{name}.bin")


def run_case(d, kind, n, h, w, c, p, residual, relu):
    x = nchw(load(d, "x", (n, h, w, c))).requires_grad_(True)
    if kind == "maxpool":
        y, idx = F.max_pool2d(x, p, stride=p, return_indices=True)
        dy = nchw(load(d, "dy", (n, h // p, w // p, c)))
        y.backward(dy)
        row, col = idx // w, idx % w
        pos = (row % p) * p + (col % p)
        pos.permute(0, 2, 3, 1).contiguous().numpy().astype(np.uint8).tofile(f"{d}/code.bin")
    elif kind == "gap":
        y = x.mean((2, 3))
        y.backward(load(d, "dy", (n, c)))
    elif kind == "gate":
        g = load(d, "g", (n, c)).requires_grad_(True)
        y = x * torch.sigmoid(g)[:, :, None, None]
        res = None
        if residual:
            res = nchw(load(d, "res", (n, h, w, c))).requires_grad_(True)
            y = y + res
        if relu:
            y = torch.relu(y)
        y.backward(nchw(load(d, "dy", (n, h, w, c))))
        save(d, "dg", g.grad)
        if residual:
            save(d, "dres", res.grad)
    else:
        raise SystemExit(f"unknown kind {kind}")
    save(d, "y", y)
    save(d, "dx", x.grad)


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if parts:
                run_case(parts[0], parts[1], *(int(a) for a in parts[2:9]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
