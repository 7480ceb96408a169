"""PyTorch oracle for conv_relu_pool (kernels/conv_relu_pool.hpp).

usage: conv_relu_pool.py CASES
CASES is a text file, one case a line: DIR N H W CIN COUT K POOL (one torch
start-up for all of them).

Reads DIR/{x,w,b,dy}.bin (float32 little-endian; x NHWC, w OHWI, b [Cout],
dy [N, H/p, W/p, Cout]) -- the values the kernel saw, already rounded to its
storage dtype -- and computes in float64 with torch:
    y = max_pool2d(relu(conv2d(x, w, b, padding=k//2)), p)
and the gradients of sum(y * dy). Writes DIR/{y,dx,dw,db}.bin as float64
little-endian in melforge's layouts (y, dx NHWC; dw OHWI), and DIR/code.bin
(uint8: winning position in the window, 255 where the gradient is blocked).
"""
import sys

import numpy as np
import torch


def run_case(d, n, h, w, cin, cout, k, p):
    ph, pw = h // p, w // p

    def load(name, shape):
        a = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
        return torch.from_numpy(a.reshape(shape))

    x = load("x", (n, h, w, cin)).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    wt = load("w", (cout, k, k, cin)).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    b = load("b", (cout,)).requires_grad_(True)
    dy = load("dy", (n, ph, pw, cout)).permute(0, 3, 1, 2).contiguous()

    pre = torch.nn.functional.conv2d(x, wt, b, stride=1, padding=k // 2)
    act = torch.relu(pre)
    y, idx = torch.nn.functional.max_pool2d(act, p, stride=p, return_indices=True)
    y.backward(dy)

    # idx is the flat index into the H x W plane; turn it into the window position,
    # and mark blocked gradients (the winner's pre-activation <= 0) like the kernel.
    row, col = idx // w, idx % w
    pos = (row % p) * p + (col % p)
    winner_pre = pre.detach().flatten(2).gather(2, idx.flatten(2)).view_as(idx)
    code = torch.where(winner_pre > 0, pos, torch.full_like(pos, 255))

    def save(name, t):
        t.detach().numpy().astype("<f8").tofile(f"{d}/{name}.bin")

    save("y", y.permute(0, 2, 3, 1))
    save("dx", x.grad.permute(0, 2, 3, 1))
    save("dw", wt.grad.permute(0, 2, 3, 1))
    save("db", b.grad)
    code.permute(0, 2, 3, 1).numpy().astype(np.uint8).tofile(f"{d}/code.bin")


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if parts:
                run_case(parts[0], *(int(a) for a in parts[1:8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
