"""PyTorch oracle for batch_norm (kernels/batch_norm.hpp).

usage: batch_norm.py CASES
CASES is a text file, one case a line: DIR N H W C RES RELU EPS MOMENTUM (one
torch start-up for all of them).

Reads DIR/{x,gamma,beta,rm,rv,dy}.bin and, with RES, DIR/res.bin (float32
little-endian; x, res, dy NHWC [N, H, W, C]; the others [C]) -- the values the
kernel saw, already rounded to its storage dtype -- and computes in float64:
    y = act(batch_norm(x, rm, rv, gamma, beta, training=True, momentum, eps) + res)
(torch.nn.functional.batch_norm on the NCHW view, updating the running buffers
in place as BatchNorm2d does), the gradients of sum(y * dy) by autograd, the
batch's mean and 1/sqrt(biased var + eps), and the eval-mode output with the
updated running buffers. Writes DIR/{y,mean,invstd,rm_out,rv_out,dx,dgamma,
dbeta,y_eval}.bin and, with RES, DIR/dres.bin as float64 little-endian (NHWC).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def run_case(d, n, h, w, c, res, relu, eps, momentum):
    def load(name, shape):
        a = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
        return torch.from_numpy(a.reshape(shape))

    def nchw(t):
        return t.permute(0, 3, 1, 2).contiguous()

    x = nchw(load("x", (n, h, w, c))).requires_grad_(True)
    gamma = load("gamma", (c,)).requires_grad_(True)
    beta = load("beta", (c,)).requires_grad_(True)
    rm = load("rm", (c,))
    rv = load("rv", (c,))
    dy = nchw(load("dy", (n, h, w, c)))
    r = nchw(load("res", (n, h, w, c))).requires_grad_(True) if res else None

    def epilogue(t):
        if r is not None:
            t = t + r
        return torch.relu(t) if relu else t

    y = epilogue(F.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=momentum, eps=eps))
    y.backward(dy)
    with torch.no_grad():
        var, mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=False)
        y_eval = epilogue(F.batch_norm(x, rm, rv, gamma, beta, training=False, eps=eps))

    def save(name, t):
        t.detach().numpy().astype("<f8").tofile(f"{d}/{name}.bin")

    def nhwc(t):
        return t.permute(0, 2, 3, 1)

    save("y", nhwc(y))
    save("mean", mean)
    save("invstd", 1.0 / torch.sqrt(var + eps))
    save("rm_out", rm)
    save("rv_out", rv)
    save("dx", nhwc(x.grad))
    save("dgamma", gamma.grad)
    save("dbeta", beta.grad)
    save("y_eval", nhwc(y_eval))
    if r is not None:
        save("dres", nhwc(r.grad))


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            p = line.split()
            if p:
                run_case(p[0], *(int(a) for a in p[1:7]), float(p[7]), float(p[8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
