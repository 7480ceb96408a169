"""PyTorch oracle for attentive_pool (kernels/attentive_pool.hpp).

usage: attentive_pool.py CASES
CASES is a text file, one case a line: DIR N H W C A STATS (one torch start-up
for all of them).

Reads DIR/{x,w,b,v,dy}.bin (float32 little-endian; x NHWC [N, H, W, C], w
[A, C], b [A], v [A], dy [N, C] or [N, 2C]) -- the values the kernel saw,
already rounded to its storage dtype -- and computes in float64 with torch
autograd the pooling of voxceleb_trainer's ResNetSE34L/V2 (SAP, and ASP with
STATS = 1), on NCHW as there:
    x = x.mean(dim=2)                       # over the mel bands -> [N, C, W]
    x = x.permute(0, 2, 1)                  # [N, W, C]
    h = torch.tanh(F.linear(x, w, b))       # the attention layer
    e = torch.matmul(h, v)                  # v as the Parameter [A, 1]
    alpha = F.softmax(e, dim=1)             # over time
    mu = torch.sum(x * alpha, dim=1)
    sg = torch.sqrt((torch.sum(x**2 * alpha, dim=1) - mu**2).clamp(min=1e-5))
    y = torch.cat((mu, sg), 1)              # ASP; SAP: y = mu
and the gradients of sum(y * dy). Writes DIR/{y,dx,dw,db,dv}.bin as float64
little-endian in melforge's layouts (dx NHWC).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def run_case(d, n, h, w, c, a, stats):
    oc = 2 * c if stats else c

    def load(name, shape):
        arr = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
        return torch.from_numpy(arr.reshape(shape))

    x = load("x", (n, h, w, c)).permute(0, 3, 1, 2).contiguous().requires_grad_(True)  # NCHW
    wt = load("w", (a, c)).requires_grad_(True)
    b = load("b", (a,)).requires_grad_(True)
    v = load("v", (a, 1)).requires_grad_(True)
    dy = load("dy", (n, oc))

    xm = x.mean(dim=2).permute(0, 2, 1)
    hh = torch.tanh(F.linear(xm, wt, b))
    alpha = F.softmax(torch.matmul(hh, v), dim=1)
    mu = torch.sum(xm * alpha, dim=1)
    if stats:
        sg = torch.sqrt((torch.sum(xm ** 2 * alpha, dim=1) - mu ** 2).clamp(min=1e-5))
        y = torch.cat((mu, sg), 1)
    else:
        y = mu
    y.backward(dy)

    def save(name, t):
        t.detach().contiguous().numpy().astype("<f8").tofile(f"{d}/{name}.bin")

    save("y", y)
    save("dx", x.grad.permute(0, 2, 3, 1))
    save("dw", wt.grad)
    save("db", b.grad)
    save("dv", v.grad.reshape(a))


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if parts:
                run_case(parts[0], *(int(p) for p in parts[1:7]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
