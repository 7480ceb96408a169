"""PyTorch oracle for fold_batch_norm (kernels/fold_batch_norm.hpp).

usage: fold_batch_norm.py CASES
CASES is a text file, one case a line: DIR COUT K CIN BIAS EPS (one torch
start-up for all of them). Reads DIR/{w,gamma,beta,rm,rv}.bin and, with BIAS,
DIR/b.bin (float32 little-endian, the values the kernel saw, already rounded
to its storage dtype; w OHWI [COUT, K, K, CIN], the others [COUT]); builds a
torch.nn.Conv2d (OIHW weight) and a torch.nn.BatchNorm2d in eval mode in
float64 and fuses them with torch.nn.utils.fusion.fuse_conv_bn_eval; writes
DIR/w_out.bin (OHWI) and DIR/b_out.bin as float64 little-endian. It also
checks that the fused conv equals conv -> batch norm on a random input
(float64, relative 1e-12), so the oracle tests itself.
"""
import sys

import numpy as np
import torch
from torch.nn.utils.fusion import fuse_conv_bn_eval


def run_case(d, cout, k, cin, bias, eps):
    def load(name, shape):
        a = np.fromfile(f"{d}/{name}.bin", dtype="<f4").astype(np.float64)
        return torch.from_numpy(a.reshape(shape))

    conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2, bias=bias).double()
    bn = torch.nn.BatchNorm2d(cout, eps=eps).double()
    with torch.no_grad():
        conv.weight.copy_(load("w", (cout, k, k, cin)).permute(0, 3, 1, 2))  # OHWI -> OIHW
        if bias:
            conv.bias.copy_(load("b", (cout,)))
        bn.weight.copy_(load("gamma", (cout,)))
        bn.bias.copy_(load("beta", (cout,)))
        bn.running_mean.copy_(load("rm", (cout,)))
        bn.running_var.copy_(load("rv", (cout,)))
    conv.eval()
    bn.eval()
    fused = fuse_conv_bn_eval(conv, bn)
    with torch.no_grad():
        x = torch.randn(2, cin, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(cout * 31 + k))
        want, got = bn(conv(x)), fused(x)
        err = float((got - want).norm() / want.norm().clamp_min(1e-300))
        if err > 1e-12:
            raise SystemExit(f"{d}: fused conv differs from conv -> bn by {err}")
        fused.weight.permute(0, 2, 3, 1).contiguous().numpy().astype("<f8").tofile(f"{d}/w_out.bin")  # -> OHWI
        fused.bias.numpy().astype("<f8").tofile(f"{d}/b_out.bin")


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            d, cout, k, cin, bias, eps = line.split()
            run_case(d, int(cout), int(k), int(cin), bias == "1", float(eps))


if __name__ == "__main__":
    main()
