"""PyTorch oracle for conv2d (kernels/conv2d.hpp).

usage: conv2d.py CASES
CASES is a text file, one case a line: DIR N H W CIN COUT K STRIDE BIAS RELU
(BIAS, RELU 0 or 1; one torch start-up for all of them).

Reads DIR/{x,w,b,dy}.bin (float32 little-endian; x NHWC, w OHWI, b [Cout],
dy [N, OH, OW, Cout]) -- the values the kernel saw, already rounded to its
storage dtype -- and computes in float64 with torch:
    y = act(conv2d(x, w, b if BIAS else None, stride=STRIDE, padding=K//2))
with act = relu when RELU, and the gradients of sum(y * dy) by autograd.
Writes DIR/{y,dx,dw}.bin (and DIR/db.bin when BIAS) as float64 little-endian
in melforge's layouts (y, dx NHWC; dw OHWI).
"""
import sys

import numpy as np
import torch


def run_case(d, n, h, w, cin, cout, k, stride, bias, relu):
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1

    def load(name, shape):
        a = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
        return torch.from_numpy(a.reshape(shape))

    x = load("x", (n, h, w, cin)).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    wt = load("w", (cout, k, k, cin)).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    b = load("b", (cout,)).requires_grad_(True) if bias else None
    dy = load("dy", (n, oh, ow, cout)).permute(0, 3, 1, 2).contiguous()

    y = torch.nn.functional.conv2d(x, wt, b, stride=stride, padding=k // 2)
    if relu:
        y = torch.relu(y)
    assert tuple(y.shape) == (n, cout, oh, ow), (y.shape, (n, cout, oh, ow))
    y.backward(dy)

    def save(name, t):
        t.detach().contiguous().numpy().astype("<f8").tofile(f"{d}/{name}.bin")

    save("y", y.permute(0, 2, 3, 1))
    save("dx", x.grad.permute(0, 2, 3, 1))
    save("dw", wt.grad.permute(0, 2, 3, 1))
    if bias:
        save("db", b.grad)


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if parts:
                run_case(parts[0], *(int(a) for a in parts[1:10]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
