"""Loads a model.safetensors written by `melforge export` into the PyTorch
reference module (bench/leakcnn_torch.py), runs it on an HDF5 dataset with
h5py, and compares its per-segment predictions with `melforge predict
--per-segment`'s CSV.

usage: leakcnn_predict.py MODEL.safetensors DATA.h5 MELFORGE_SEGMENTS.csv
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
from leakcnn_torch import LeakCNN  # noqa: E402


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
        sd[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dtypes[h["dtype"]]).reshape(h["shape"]).float()
    return sd, meta


sd, meta = load_safetensors(sys.argv[1])
args = json.loads(meta["model_args"])
model = LeakCNN(**args)
missing, unexpected = model.load_state_dict(sd, strict=True), None
model.eval()

with h5py.File(sys.argv[2], "r") as f:
    x = f["segments"][()].astype(np.float32)
mels, frames = x.shape[-2], x.shape[-1]
x = torch.from_numpy(x.reshape(-1, 1, mels, frames))
with torch.no_grad():
    logits, leak = model(x)
    probs = torch.softmax(logits.double(), dim=1).numpy()
    leak_p = torch.sigmoid(leak.double()).numpy() if leak is not None else None

rows = list(csv.DictReader(open(sys.argv[3])))
assert len(rows) == probs.shape[0], (len(rows), probs.shape)
C = probs.shape[1]
names = [k for k in rows[0].keys() if k.startswith("prob_")]
assert len(names) == C, names
ours = np.array([[float(r[k]) for k in names] for r in rows])
ours_pred = np.array([int(r["pred"]) for r in rows])
err = np.abs(ours - probs).max()
# A model without the leak head (model.heads = class) has no leak columns.
if ("leak_prob" in rows[0]) != (leak_p is not None):
    print(f"leakcnn_predict: leak_prob column {'present' if 'leak_prob' in rows[0] else 'absent'}, "
          f"torch model {'with' if leak_p is not None else 'without'} the leak head")
    sys.exit(1)
if leak_p is not None:
    ours_leak = np.array([float(r["leak_prob"]) for r in rows])
    err = max(err, np.abs(ours_leak - leak_p).max())
# Predictions must agree wherever the top two probabilities are not within the error.
top2 = np.sort(probs, axis=1)[:, -2:]
clear = (top2[:, 1] - top2[:, 0]) > 1e-4
agree = (ours_pred == probs.argmax(1))[clear].mean()
print(f"leakcnn_predict: {len(rows)} segments, max |melforge - torch| probability {err:.2e}, "
      f"predictions agree on {agree * 100:.1f}% of {clear.sum()} clear cases")
if err > 1e-4 or agree < 1.0:
    sys.exit(1)
