"""PyTorch oracle for margin_softmax_loss (kernels/margin_softmax.hpp).

usage: margin_softmax.py CASES
CASES is a text file, one case a line: DIR B C D TYPE S M GSCALE (TYPE am or
aam; GSCALE = loss_scale * grad_scale; one torch start-up for all of them).

Reads DIR/emb.bin [B, D] and DIR/w.bin [C, D] (float32 little-endian, the
values the kernel saw, already rounded to its storage dtype) and DIR/labels.bin
(int32 [B]); computes in float64 with torch autograd the losses of
voxceleb_trainer (loss/amsoftmax.py, loss/aamsoftmax.py with easy_margin
False), written here from their formulas:
    xn = F.normalize(emb), wn = F.normalize(w); cos = xn @ wn.T
    am:  logits = s * (cos - m * onehot(label))
    aam: sine = sqrt(clamp(1 - cos^2, 0, 1)); phi = cos cos(m) - sine sin(m)
         phi = where(cos - cos(pi - m) > 0, phi, cos - sin(pi - m) m)
         logits = s * (onehot * phi + (1 - onehot) * cos)
    loss = cross_entropy(logits, label, ignore_index) mean over the valid labels
A label outside [0, C) is ignored (melforge's rule, class_leak_loss's): mapped to
ignore_index -100. The margin constants are rounded to float32 as melforge's
contract says (in voxceleb they meet float32 tensors). Writes DIR/loss.bin
(float64 [2]: the loss, the number of valid samples whose plain-cosine argmax
equals the label), DIR/demb.bin [B, D] and DIR/dw.bin [C, D] (float64, the
gradients times GSCALE).
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def f32(v):
    return float(np.float32(v))


def run_case(d, b, c, dim, typ, s, m, gscale):
    emb = torch.from_numpy(np.fromfile(f"{d}/emb.bin", dtype="<f4").astype(np.float64).reshape(b, dim))
    w = torch.from_numpy(np.fromfile(f"{d}/w.bin", dtype="<f4").astype(np.float64).reshape(c, dim))
    labels = torch.from_numpy(np.fromfile(f"{d}/labels.bin", dtype="<i4").astype(np.int64))
    emb.requires_grad_(True)
    w.requires_grad_(True)
    valid = (labels >= 0) & (labels < c)
    target = torch.where(valid, labels, torch.full_like(labels, -100))
    cos = F.linear(F.normalize(emb, dim=1), F.normalize(w, dim=1))
    onehot = torch.zeros_like(cos)
    onehot[valid.nonzero().flatten(), labels[valid]] = 1.0
    if typ == "am":
        logits = s * (cos - f32(m) * onehot)
    else:
        cos_m, sin_m = f32(math.cos(m)), f32(math.sin(m))
        th, mm = f32(math.cos(math.pi - m)), f32(math.sin(math.pi - m) * m)
        sine = torch.sqrt((1.0 - cos * cos).clamp(0, 1))
        phi = cos * cos_m - sine * sin_m
        phi = torch.where((cos - th) > 0, phi, cos - mm)
        logits = s * (onehot * phi + (1.0 - onehot) * cos)
    if bool(valid.any()):
        loss = F.cross_entropy(logits, target, ignore_index=-100)
        (loss * gscale).backward()
        demb, dw, lv = emb.grad, w.grad, float(loss)
    else:
        demb, dw, lv = torch.zeros_like(emb), torch.zeros_like(w), 0.0
    pred = cos.detach().argmax(dim=1)
    correct = int(((pred == labels) & valid).sum())
    np.asarray([lv, correct], dtype="<f8").tofile(f"{d}/loss.bin")
    demb.detach().numpy().astype("<f8").tofile(f"{d}/demb.bin")
    dw.detach().numpy().astype("<f8").tofile(f"{d}/dw.bin")


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            d, b, c, dim, typ, s, m, gs = line.split()
            run_case(d, int(b), int(c), int(dim), typ, float(s), float(m), float(gs))


if __name__ == "__main__":
    main()
