"""PyTorch oracle for angleproto_loss (kernels/angleproto.hpp).

usage: angleproto.py CASES
CASES is a text file, one case a line: DIR N M D W B GSCALE (GSCALE =
loss_scale * grad_scale; one torch start-up for all of them).

Reads DIR/emb.bin [N*M, D] (float32 little-endian, the values the kernel saw,
already rounded to its storage dtype); computes in float64 with torch autograd
voxceleb_trainer's angular prototypical loss (loss/angleproto.py), written here
from its formulas:
    x = emb.reshape(N, M, D)
    anchor = mean(x[:, 1:, :], 1); positive = x[:, 0, :]
    cos = F.cosine_similarity(positive.unsqueeze(-1), anchor.unsqueeze(-1).transpose(0, 2))
    logits = cos * clamp(w, 1e-6) + b
    loss = cross_entropy(logits, arange(N))
w and b are float64 leaves initialised from the float32 values W, B. Writes
DIR/loss.bin (float64 [4]: the loss, the number of rows whose argmax equals
their index, dw, db; the gradients times GSCALE) and DIR/demb.bin [N*M, D]
(float64, the gradient times GSCALE).
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def run_case(d, n, m, dim, w0, b0, gscale):
    emb = torch.from_numpy(np.fromfile(f"{d}/emb.bin", dtype="<f4").astype(np.float64).reshape(n * m, dim))
    emb.requires_grad_(True)
    w = torch.tensor(float(np.float32(w0)), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(float(np.float32(b0)), dtype=torch.float64, requires_grad=True)
    x = emb.reshape(n, m, dim)
    anchor = torch.mean(x[:, 1:, :], 1)
    positive = x[:, 0, :]
    cos = F.cosine_similarity(positive.unsqueeze(-1), anchor.unsqueeze(-1).transpose(0, 2))
    logits = cos * torch.clamp(w, 1e-6) + b
    label = torch.arange(n)
    loss = F.cross_entropy(logits, label)
    (loss * gscale).backward()
    correct = int((logits.detach().argmax(dim=1) == label).sum())
    np.asarray([float(loss), correct, float(w.grad), float(b.grad)], dtype="<f8").tofile(f"{d}/loss.bin")
    emb.grad.detach().numpy().astype("<f8").tofile(f"{d}/demb.bin")


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            d, n, m, dim, w, b, gs = line.split()
            run_case(d, int(n), int(m), int(dim), float(w), float(b), float(gs))


if __name__ == "__main__":
    main()
