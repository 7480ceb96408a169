"""Loads a model.safetensors that `melforge export` wrote for a CNN stack
(metadata model = "CnnStack", model_args = the stack's description) into the
PyTorch module bench/cnn_stack_torch.py builds from that description, runs it
in evaluation mode (batch norm on the exported running statistics) on every
segment of an HDF5 set read with h5py, and compares the class probabilities
(softmax of the class logits) and the leak probability (sigmoid of the leak
logit) with `melforge predict --per-segment`'s CSV.

The safetensors file is parsed by hand from the format's definition (8-byte
little-endian header length, JSON header, raw data): Debian's python3 may lack
the safetensors package.

Tolerance: melforge computes in fp32 and prints 7 significant digits; torch
runs the same weights in float64, so the difference is melforge's fp32
rounding. For these small stacks (sums of at most a few hundred products per
output, logits of magnitude < 10) the logits are good to ~1e-5 absolute, and a
probability moves at most 1/4 (sigmoid) or 1/2 (softmax) of a logit's change:
2e-5 bounds the expected error with margin (measured: ~1e-7). A wrong layout,
a missing running statistic or a training-mode batch norm moves probabilities
by 1e-3 or more; the script checks the last of these explicitly, so that a
running statistic left at its initial value cannot pass.

usage: cnn_stack_export.py MODEL.safetensors DATA.h5 MELFORGE_SEGMENTS.csv
"""
import csv
import json
import os
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from cnn_stack_torch import CnnStack  # noqa: E402

TOL = 2e-5


def fail(msg):
    print(f"cnn_stack_export: FAIL: {msg}")
    sys.exit(1)


def load_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    sd = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        sd[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dtypes[h["dtype"]]).reshape(h["shape"]).double()
    return sd, meta


def probabilities(model, x):
    with torch.no_grad():
        logits, leak = model(x)
        probs = torch.softmax(logits, dim=1).numpy()
        leak_p = torch.sigmoid(leak).numpy() if leak is not None else None
    return probs, leak_p


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sd, meta = load_safetensors(sys.argv[1])
    if meta.get("model") != "CnnStack":
        fail(f"metadata model is {meta.get('model')!r}, expected 'CnnStack'")
    desc = json.loads(meta["model_args"])
    model = CnnStack(desc).double()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        fail(f"tensors the module does not have: {unexpected}")
    if any(not k.endswith("num_batches_tracked") for k in missing):
        fail(f"tensors missing from the file: {[k for k in missing if not k.endswith('num_batches_tracked')]}")
    if any(m.shape != model.state_dict()[k].shape for k, m in sd.items()):
        fail("a tensor's shape differs from the module's")
    bn_stats = [k for k in sd if k.endswith("running_mean") or k.endswith("running_var")]
    if not bn_stats:
        fail("no batch norm running statistics in the file (the test stack must have batch norm)")
    model.eval()

    with h5py.File(sys.argv[2], "r") as f:
        x = f["segments"][()].astype(np.float64)
    mels, frames = x.shape[-2], x.shape[-1]
    if (mels, frames) != (desc["in_mels"], desc["in_frames"]):
        fail(f"segments are {mels}x{frames}, the model takes {desc['in_mels']}x{desc['in_frames']}")
    x = torch.from_numpy(x.reshape(-1, 1, mels, frames))
    probs, leak_p = probabilities(model, x)

    rows = list(csv.DictReader(open(sys.argv[3])))
    if len(rows) != probs.shape[0]:
        fail(f"{len(rows)} CSV rows, {probs.shape[0]} segments")
    names = [k for k in rows[0].keys() if k.startswith("prob_")]
    if len(names) != probs.shape[1]:
        fail(f"CSV class columns {names}, the model has {probs.shape[1]} classes")
    ours = np.array([[float(r[k]) for k in names] for r in rows])
    if ("leak_prob" in rows[0]) != (leak_p is not None):
        fail("the CSV's leak_prob column and the module's leak head disagree")
    err_class = np.abs(ours - probs).max()
    err_leak = 0.0
    if leak_p is not None:
        err_leak = np.abs(np.array([float(r["leak_prob"]) for r in rows]) - leak_p).max()
    ours_pred = np.array([int(r["pred"]) for r in rows])
    top2 = np.sort(probs, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 10 * TOL
    agree = (ours_pred == probs.argmax(1))[clear].mean() if clear.any() else 1.0

    # Sensitivity: the same module in training mode (batch statistics instead
    # of the running ones) must give clearly different probabilities, or the
    # comparison above could not tell the running statistics apart.
    model.train()
    probs_train, _ = probabilities(model, x)
    gap = np.abs(probs_train - probs).max()

    print(f"cnn_stack_export: {len(desc['layers'])} layers, {len(sd)} tensors ({len(bn_stats)} running statistics), "
          f"{len(rows)} segments; max |melforge - torch| class probability {err_class:.2e}, leak probability "
          f"{err_leak:.2e} (tolerance {TOL:.0e}); predictions agree on {agree * 100:.1f}% of {int(clear.sum())} clear "
          f"cases; training-mode batch norm would differ by {gap:.2e}")
    if err_class > TOL or err_leak > TOL:
        fail("probabilities differ beyond the tolerance")
    if agree < 1.0:
        fail("predicted classes differ")
    if gap < 100 * TOL:
        fail("evaluation and training mode give the same probabilities: the test cannot see the running statistics")
    print("cnn_stack_export: OK")


if __name__ == "__main__":
    main()
