#!/usr/bin/env python3
"""Checks torch_metric_train.py's whole-utterance evaluation (--eval-crops
K|full) against `melforge verify`: the same trained weights (melforge's
checkpoint, exported to safetensors and loaded into bench/cnn_stack_torch.py's
CnnStack) give the same EER and minDCF on a ragged test set.

  check_eval_port.py --melforge M --checkpoint CKPT --test test.h5 --trials T --crops 5|full [--crop-frames 200]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cnn_stack_torch import CnnStack  # noqa: E402
from crop_rule import RaggedSplit  # noqa: E402
from torch_metric_train import evaluate  # noqa: E402

DT = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64, "F64": np.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=DT[h["dtype"]]).reshape(h["shape"])
        tensors[name] = torch.from_numpy(a.copy())
    return meta, tensors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--melforge", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--trials", required=True)
    p.add_argument("--crops", required=True)
    p.add_argument("--crop-frames", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        st = os.path.join(tmp, "m.safetensors")
        subprocess.run([a.melforge, "export", "--checkpoint", a.checkpoint, "--out", st], check=True,
                       capture_output=True)
        meta, tensors = read_safetensors(st)
        vcmd = [a.melforge, "verify", "--checkpoint", a.checkpoint, "--data", a.test, "--trials", a.trials,
                "--device", "cpu", "--crops", a.crops] + (["--crop-frames", str(a.crop_frames)]
                                                          if a.crops != "full" else [])
        out = subprocess.run(vcmd, check=True, capture_output=True, text=True).stdout
    ver = json.loads(out[out.index("{"):])
    desc = json.loads(meta["model_args"])
    # The description holds the trunk; the embedding and the loss come from the run's config (as
    # compare_torch.py passes them): the embedding's width from the tensors, a margin loss (unused by embed).
    emb = int(tensors["embedding.weight"].shape[0]) if "embedding.weight" in tensors else 0
    model = CnnStack(dict(desc, leak_head=False), embedding=emb,
                     loss="aam_softmax" if "loss.weight" in tensors else None)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise SystemExit(f"the export does not fit the module: missing {missing}, unexpected {unexpected}")
    test = RaggedSplit(a.test, classes=1)
    crops = 0 if a.crops == "full" else int(a.crops)
    got = evaluate(model, test, a.trials, crops=crops, crop=a.crop_frames)
    ok = abs(got["eer"] - ver["eer"]) <= 1e-6 and abs(got["min_dcf_0.05"] - ver["min_dcf_0.05"]) <= 1e-6
    print(f"eval --crops {a.crops}{'' if crops == 0 else f' --crop-frames {a.crop_frames}'} on {a.test}: "
          f"PyTorch (melforge's weights) EER {got['eer']:.6f} minDCF.05 {got['min_dcf_0.05']:.6f}; "
          f"melforge verify EER {ver['eer']:.6f} minDCF.05 {ver['min_dcf_0.05']:.6f}: "
          f"{'agree' if ok else 'DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
