"""Oracle for melforge's training step of the configuration-described CNN stack
(issue #16): PyTorch's CnnStack (bench/cnn_stack_torch.py) in train() mode,
CrossEntropyLoss (+ BCEWithLogitsLoss with the leak head), clip_grad_norm_,
torch.optim.AdamW and melforge's LR schedule, from melforge's initial weights
and batches. The protocol is leakcnn_steps.py's, with the model described by
DIR/model.json, the decayed parameters listed in DIR/decay.txt and the batch
norm running statistics compared too. Exits 1 on a mismatch, 2 on a malformed
DIR.

usage: cnn_stack_steps.py DIR
  DIR/model.json    the description (see cnn_stack_torch.py); every dropout p
                    must be 0 (the oracle cannot replay melforge's masks).
  DIR/config.txt    key=value lines: batch, steps, lr, wd, beta1, beta2, eps,
                    smoothing, class_weights (comma list or empty), wclass,
                    wleak, max_norm (0: no clipping), schedule (constant|cosine|
                    linear), warmup, total, min_lr, tol, check (comma list of
                    1-based steps), dtype (f64, else f32), mels, frames, classes
                    (must match model.json).
  DIR/decay.txt     the parameter names AdamW decays with wd, one a line; every
                    other parameter has weight_decay 0.
  DIR/init/         manifest.txt ("name d0 d1 ..." lines) + name.bin (f32 LE,
                    torch layout): every parameter and every batch norm's
                    running_mean and running_var (no num_batches_tracked).
  DIR/batch{s}.bin  s = 0..steps-1, f32 LE: x [batch, mels, frames], the class
                    ids [batch] as floats, the leak targets [batch] (0/1; may
                    be absent without a leak head).
  DIR/after{s}/     for s in check: the same tensors as init/ after step s.
  DIR/forward/      optional: logits.bin and logits_eval.bin, f32 [batch,
                    classes (+1 with the leak head: the leak logit last)],
                    melforge's forward of batch0 with the init weights in train
                    mode (batch statistics) and in eval mode (the init running
                    statistics), before any step.
Every comparison is the per-tensor relative L2 error, which must be <= tol.
"""
import copy
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from cnn_stack_torch import CnnStack  # noqa: E402
from leakcnn_torch import lr_at  # noqa: E402

TRACKED = "num_batches_tracked"


def fail(msg, code=2):
    print(f"cnn_stack_steps: {msg}")
    sys.exit(code)


def read_arrays(d):
    out = {}
    for line in open(os.path.join(d, "manifest.txt")):
        parts = line.split()
        if not parts:
            continue
        shape = [int(x) for x in parts[1:]]
        a = np.fromfile(os.path.join(d, parts[0] + ".bin"), dtype="<f4")
        if a.size != int(np.prod(shape)):
            fail(f"{d}/{parts[0]}.bin holds {a.size} floats, the manifest says {shape}")
        out[parts[0]] = a.reshape(shape)
    return out


def rel_l2(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    e = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
    return e if np.isfinite(e) else float("inf")


def compared(model):
    """The tensors melforge and torch share: parameters and running statistics."""
    return {n: t for n, t in model.state_dict().items() if not n.endswith(TRACKED)}


def read_config(d):
    cfg = {}
    for line in open(os.path.join(d, "config.txt")):
        if line.strip():
            k, v = line.split("=", 1)
            cfg[k.strip()] = v.strip()
    return cfg


def build_model(d, cfg, dtype):
    desc = json.load(open(os.path.join(d, "model.json")))
    for key, dkey in (("mels", "in_mels"), ("frames", "in_frames"), ("classes", "classes")):
        if int(cfg[key]) != int(desc[dkey]):
            fail(f"config.txt {key}={cfg[key]} but model.json {dkey}={desc[dkey]}")
    if "heads" in cfg and (cfg["heads"] == "class+leak") != bool(desc.get("leak_head", False)):
        fail(f"config.txt heads={cfg['heads']} but model.json leak_head={desc.get('leak_head', False)}")
    for i, l in enumerate(desc["layers"]):
        if l.get("type") == "dropout" and float(l.get("p", 0)) != 0.0:
            fail(f"layers[{i}] is a dropout with p={l['p']}: oracle runs need p = 0")
    model = CnnStack(desc)
    init = read_arrays(os.path.join(d, "init"))
    want = compared(model)
    if set(init) != set(want):
        fail(f"tensor names differ: only in melforge {sorted(set(init) - set(want))}, "
             f"only in torch {sorted(set(want) - set(init))}", 1)
    for n, t in want.items():
        if tuple(init[n].shape) != tuple(t.shape):
            fail(f"{n}: melforge shape {list(init[n].shape)}, torch {list(t.shape)}", 1)
    res = model.load_state_dict({k: torch.from_numpy(v.astype(dtype)) for k, v in init.items()}, strict=False)
    bad = [k for k in res.missing_keys if not k.endswith(TRACKED)] + list(res.unexpected_keys)
    if bad:
        fail(f"load_state_dict: unexpected missing/extra keys {bad}", 1)
    return model, bool(desc.get("leak_head", False))


def read_batch(d, s, B, mels, frames, leak_head):
    raw = np.fromfile(os.path.join(d, f"batch{s}.bin"), dtype="<f4")
    n_x = B * mels * frames
    if raw.size not in ((n_x + 2 * B,) if leak_head else (n_x + B, n_x + 2 * B)):
        fail(f"batch{s}.bin holds {raw.size} floats, expected {n_x} + {B} + {B} (x, classes, leak)")
    x = torch.from_numpy(raw[:n_x].reshape(B, 1, mels, frames).copy()).to(torch.get_default_dtype())
    y = torch.from_numpy(raw[n_x:n_x + B].astype(np.int64))
    t = torch.from_numpy(raw[n_x + B:n_x + 2 * B].copy()).to(torch.get_default_dtype()) if leak_head else None
    return x, y, t


def check_forward(d, model, x, tol):
    """melforge's forward of batch0 (train and eval mode) against torch's, each
    on a fresh copy of the init model so the training run is unaffected."""
    fdir = os.path.join(d, "forward")
    if not os.path.isdir(fdir):
        print("forward: no DIR/forward, not checked")
        return True
    ok = True
    for fname, train in (("logits.bin", True), ("logits_eval.bin", False)):
        path = os.path.join(fdir, fname)
        if not os.path.exists(path):
            print(f"forward: {path} is missing MISMATCH")
            ok = False
            continue
        m = copy.deepcopy(model)
        m.train(train)
        with torch.no_grad():
            logits, leak = m(x)
        ref = logits if leak is None else torch.cat((logits, leak[:, None]), dim=1)
        ours = np.fromfile(path, dtype="<f4")
        if ours.size != ref.numel():
            print(f"forward: {fname} holds {ours.size} floats, expected {list(ref.shape)} MISMATCH")
            ok = False
            continue
        e = rel_l2(ours.reshape(ref.shape), ref.numpy())
        print(f"forward ({'train' if train else 'eval'} mode): rel L2 {e:.3e}{'' if e <= tol else ' MISMATCH'}")
        ok = ok and e <= tol
    return ok


def make_optimizer(d, model, cfg):
    names = [l.strip() for l in open(os.path.join(d, "decay.txt")) if l.strip()]
    params = dict(model.named_parameters())
    unknown = [n for n in names if n not in params]
    if unknown:
        fail(f"decay.txt names no parameter of the model: {unknown}")
    decay = set(names)
    return torch.optim.AdamW([{"params": [p for n, p in params.items() if n in decay], "weight_decay": float(cfg["wd"])},
                              {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0}],
                             lr=float(cfg["lr"]), betas=(float(cfg["beta1"]), float(cfg["beta2"])),
                             eps=float(cfg["eps"]))


def compare_after(d, s, model, tol):
    ours = read_arrays(os.path.join(d, f"after{s}"))
    num = den = 0.0
    worst = (0.0, "")
    for name, p in compared(model).items():
        b = p.detach().double().numpy()
        if name not in ours:
            print(f"after step {s}: {name} missing from melforge's tensors MISMATCH")
            return False
        a = ours[name].astype(np.float64)
        e = rel_l2(a, b)
        worst = max(worst, (e, name))
        if a.shape == b.shape:
            num += float(np.sum((a - b) ** 2))
            den += float(np.sum(b ** 2))
    total = (num / max(den, 1e-300)) ** 0.5
    print(f"after step {s}: rel L2 (all tensors) {total:.3e}, worst tensor {worst[1]} {worst[0]:.3e}"
          f"{'' if worst[0] <= tol else ' MISMATCH'}")
    return worst[0] <= tol


def main():
    if len(sys.argv) != 2:
        fail("usage: cnn_stack_steps.py DIR")
    d = sys.argv[1]
    cfg = read_config(d)
    f64 = cfg.get("dtype") == "f64"
    torch.set_default_dtype(torch.float64 if f64 else torch.float32)
    mels, frames, B, steps = int(cfg["mels"]), int(cfg["frames"]), int(cfg["batch"]), int(cfg["steps"])
    tol = float(cfg["tol"])
    check = [int(x) for x in cfg["check"].split(",") if x.strip()]
    model, leak_head = build_model(d, cfg, np.float64 if f64 else np.float32)
    ok = check_forward(d, model, read_batch(d, 0, B, mels, frames, leak_head)[0], tol)
    model.train()
    opt = make_optimizer(d, model, cfg)
    cw = torch.tensor([float(x) for x in cfg["class_weights"].split(",")]) if cfg.get("class_weights") else None
    ce = torch.nn.CrossEntropyLoss(weight=cw, label_smoothing=float(cfg["smoothing"]))
    bce = torch.nn.BCEWithLogitsLoss()
    wc, wl, max_norm = float(cfg["wclass"]), float(cfg["wleak"]), float(cfg["max_norm"])
    lr = float(cfg["lr"])
    for s in range(steps):
        x, y, t = read_batch(d, s, B, mels, frames, leak_head)
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
        if s + 1 in check and not compare_after(d, s + 1, model, tol):
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
