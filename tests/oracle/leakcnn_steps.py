"""Oracle for melforge's training step: PyTorch's LeakCNN (bench/leakcnn_torch.py),
CrossEntropyLoss + BCEWithLogitsLoss (CrossEntropyLoss alone for heads=class:
no leak head), clip_grad_norm_, torch.optim.AdamW and the same LR schedule,
from melforge's initial weights and batches. Compares the weights after each
checkpointed step with melforge's and exits 1 on mismatch.

usage: leakcnn_steps.py DIR   (DIR/config.txt, DIR/init/, DIR/batch{i}.bin,
                               DIR/after{s}/ written by tests/model/test_oracle.cpp)
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from leakcnn_torch import LeakCNN, lr_at  # noqa: E402


def read_arrays(d):
    out = {}
    for line in open(os.path.join(d, "manifest.txt")):
        parts = line.split()
        if not parts:
            continue
        shape = [int(x) for x in parts[1:]]
        out[parts[0]] = np.fromfile(os.path.join(d, parts[0] + ".bin"), dtype="<f4").reshape(shape)
    return out


def main():
    d = sys.argv[1]
    cfg = {}
    for line in open(os.path.join(d, "config.txt")):
        k, v = line.split("=", 1)
        cfg[k.strip()] = v.strip()
    ints = lambda k: [int(x) for x in cfg[k].split(",")]
    mels, frames = int(cfg["mels"]), int(cfg["frames"])
    C = int(cfg["classes"])
    B = int(cfg["batch"])
    steps = int(cfg["steps"])
    tol = float(cfg["tol"])
    check = [int(x) for x in cfg["check"].split(",")]
    torch.set_default_dtype(torch.float64 if cfg.get("dtype") == "f64" else torch.float32)
    leak_head = cfg.get("heads", "class+leak") == "class+leak"
    model = LeakCNN(mels, frames, ints("channels"), ints("pools"), int(cfg["kernel"]), int(cfg["dense"]), 0.0, C,
                    leak_head=leak_head)
    init = read_arrays(os.path.join(d, "init"))
    if set(init) != set(model.state_dict()):
        print(f"parameter names differ: melforge {sorted(init)}, torch {sorted(model.state_dict())}")
        sys.exit(1)
    sd = {k: torch.from_numpy(v.astype(np.float64 if cfg.get("dtype") == "f64" else np.float32)) for k, v in init.items()}
    model.load_state_dict(sd)
    lr = float(cfg["lr"])
    # melforge decays weights only: biases in a second group without decay.
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    nodecay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(cfg["wd"])},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(float(cfg["beta1"]), float(cfg["beta2"])), eps=float(cfg["eps"]))
    cw = None
    if cfg.get("class_weights"):
        cw = torch.tensor([float(x) for x in cfg["class_weights"].split(",")])
    ce = torch.nn.CrossEntropyLoss(weight=cw, label_smoothing=float(cfg["smoothing"]))
    bce = torch.nn.BCEWithLogitsLoss()
    wc, wl = float(cfg["wclass"]), float(cfg["wleak"])
    max_norm = float(cfg["max_norm"])
    ok = True
    for s in range(steps):
        raw = np.fromfile(os.path.join(d, f"batch{s}.bin"), dtype="<f4")
        n_x = B * mels * frames
        x = torch.from_numpy(raw[:n_x].reshape(B, 1, mels, frames).copy()).to(torch.get_default_dtype())
        y = torch.from_numpy(raw[n_x:n_x + B].astype(np.int64))
        t = torch.from_numpy(raw[n_x + B:n_x + 2 * B].copy()).to(torch.get_default_dtype())
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, cfg["schedule"], int(cfg["warmup"]), int(cfg["total"]), float(cfg["min_lr"]))
        opt.zero_grad()
        logits, leak = model(x)
        loss = wc * ce(logits, y)
        if leak is not None:
            loss = loss + wl * bce(leak, t)
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        print(f"step {s + 1}: torch loss {loss.item():.7f}")
        if s + 1 in check:
            ours = read_arrays(os.path.join(d, f"after{s + 1}"))
            num = den = 0.0
            worst = (0.0, "")
            for name, p in model.state_dict().items():
                a = ours[name].astype(np.float64)
                b = p.detach().double().numpy()
                e = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
                if not np.isfinite(e):
                    e = float("inf")
                worst = max(worst, (e, name))
                num += float(np.sum((a - b) ** 2))
                den += float(np.sum(b ** 2))
            total = (num / den) ** 0.5
            print(f"after step {s + 1}: rel L2 (all params) {total:.3e}, worst tensor {worst[1]} {worst[0]:.3e}")
            if not (worst[0] <= tol):
                ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
