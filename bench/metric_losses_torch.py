"""The metric losses of speaker verification in PyTorch (issue #20), written from
voxceleb_trainer's loss/amsoftmax.py, aamsoftmax.py, angleproto.py and
softmaxproto.py, with melforge's parameter names (model/param_buffer.hpp):
the module sits at the model's attribute `loss`, so its state_dict names are
loss.weight (AM/AAM-softmax) and loss.w, loss.b (the prototypical losses).

Differences from voxceleb_trainer, all melforge's conventions:
  * loss.weight is [C, E] (nn.Linear's layout); voxceleb_trainer's is [E, C].
    The cosine is the same: normalize(x) @ normalize(W).T.
  * The prototypical batch is [N*M, E] with M consecutive rows per class
    (melforge's speaker-balanced batches); it is viewed as [N, M, E] here.
  * angleproto's w is clamped to >= 1e-6 in the logits (voxceleb_trainer
    computes torch.clamp(self.w, 1e-6) and discards the result).
  * softmaxproto's softmax part is the model's class head (class_head), not a
    separate fc inside the loss; the loss module holds angleproto's w and b.
Init: loss.weight as nn.Linear's weight (uniform +-1/sqrt(E); melforge's init
is overwritten by the oracle anyway), w = 10, b = -5 (voxceleb_trainer's).

The module's forward returns the loss (a scalar); the class logits for the
accuracy are not needed by the oracles.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LOSSES = ("softmax", "am_softmax", "aam_softmax", "angleproto", "softmaxproto")


class AMSoftmax(nn.Module):
    """Additive margin softmax: the target logit s * (cos - m), the others s * cos."""

    def __init__(self, dim, classes, margin=0.2, scale=30.0):
        super().__init__()
        self.m, self.s = float(margin), float(scale)
        self.weight = nn.Parameter(torch.empty(classes, dim))
        nn.init.uniform_(self.weight, -1.0 / math.sqrt(dim), 1.0 / math.sqrt(dim))

    def cosine(self, x):
        return F.linear(F.normalize(x, dim=1, eps=1e-12), F.normalize(self.weight, dim=1, eps=1e-12))

    def forward(self, x, label):
        cos = self.cosine(x)
        delt = torch.zeros_like(cos).scatter_(1, label.view(-1, 1), self.m)
        return F.cross_entropy(self.s * (cos - delt), label)


class AAMSoftmax(AMSoftmax):
    """Additive angular margin (ArcFace), voxceleb_trainer's aamsoftmax with
    easy_margin False: phi = cos(theta + m) where theta + m <= pi (cos > cos(pi - m)),
    else cos - sin(pi - m) * m; the target logit s * phi, the others s * cos."""

    def forward(self, x, label):
        cos = self.cosine(x)
        sine = torch.sqrt((1.0 - cos * cos).clamp(0, 1))
        phi = cos * math.cos(self.m) - sine * math.sin(self.m)
        th, mm = math.cos(math.pi - self.m), math.sin(math.pi - self.m) * self.m
        phi = torch.where((cos - th) > 0, phi, cos - mm)
        one_hot = torch.zeros_like(cos).scatter_(1, label.view(-1, 1), 1)
        return F.cross_entropy(self.s * (one_hot * phi + (1.0 - one_hot) * cos), label)


class AngleProto(nn.Module):
    """Angular prototypical loss: x [N*M, E], M consecutive rows per class; the
    query of class i is its first row, its prototype the mean of the other M-1;
    logits[i][j] = clamp(w, 1e-6) * cos(query_i, prototype_j) + b; cross-entropy
    with target i, mean over N."""

    def __init__(self, init_w=10.0, init_b=-5.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([float(init_w)]))
        self.b = nn.Parameter(torch.tensor([float(init_b)]))

    def forward(self, x, per_class):
        if per_class < 2 or x.shape[0] % per_class or x.shape[0] // per_class < 2:
            raise ValueError(f"angleproto: {x.shape[0]} rows do not hold >= 2 classes of {per_class} >= 2 rows")
        x = x.reshape(x.shape[0] // per_class, per_class, x.shape[1])
        anchor = torch.mean(x[:, 1:, :], 1)
        positive = x[:, 0, :]
        cos = F.cosine_similarity(positive.unsqueeze(-1), anchor.unsqueeze(-1).transpose(0, 2))
        logits = cos * torch.clamp(self.w, 1e-6) + self.b
        return F.cross_entropy(logits, torch.arange(x.shape[0]))


def make_loss(loss, dim, classes, margin=0.2, scale=30.0):
    """The `loss` module of a model (None for softmax)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if loss == "am_softmax":
        return AMSoftmax(dim, classes, margin, scale)
    if loss == "aam_softmax":
        return AAMSoftmax(dim, classes, margin, scale)
    if loss in ("angleproto", "softmaxproto"):
        return AngleProto()
    return None


def has_class_head(loss):
    return loss in ("softmax", "softmaxproto")

