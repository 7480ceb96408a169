"""Oracle for melforge's training step with speaker verification's additions
(issue #20): the metric losses (AM-softmax, AAM-softmax, angular prototypical,
softmax + angular prototypical), the embedding layer, the input instance norm
and gradient accumulation, on LeakCNN (bench/leakcnn_torch.py) or a CNN stack
(bench/cnn_stack_torch.py), the losses from bench/metric_losses_torch.py
(written from voxceleb_trainer's formulas), clip_grad_norm_, torch.optim.AdamW
and melforge's LR schedule, from melforge's initial weights and batches.

The protocol is cnn_stack_steps.py's (DIR/init, DIR/batch{s}.bin,
DIR/after{s}, DIR/decay.txt, per-tensor relative L2 <= tol over every
parameter, loss.* included, and batch norm's running statistics), with these
config.txt keys added:
  arch        leakcnn (then channels, pools, kernel, dense, heads as
              leakcnn_steps.py reads them) or cnn (then DIR/model.json).
  loss        softmax | am_softmax | aam_softmax | angleproto | softmaxproto
  margin, scale   AM/AAM-softmax's m and s.
  per_class   M: each micro-batch holds M consecutive rows of each class (the
              prototypical losses; 0 otherwise).
  embedding   E (0: none); input_norm 0|1; accum k (default 1).
A step is k micro-batches of `batch` rows (batch{s}.bin holds k*batch rows);
each micro-batch runs its own forward (batch norm statistics, and for the
prototypical losses its own episode), and its loss, divided by k, is
backpropagated; then one clipped AdamW step. Optional DIR/losses.txt: melforge's
loss of each step (the mean over its micro-batches) and, optionally, its
global gradient norm before clipping, one step a line, compared with torch's
(clip_grad_norm_'s total norm) within loss_tol (relative; default 1e-4): the
norm catches a gradient scale common to every parameter, which clipped AdamW
would not show in the weights. Optional DIR/forward/emb_eval.bin:
melforge's embeddings (eval mode, f32) of batch0's first micro-batch with the
init weights, compared within tol. Exits 1 on a mismatch, 2 on a malformed DIR.

loss.b (the prototypical losses) is compared with an absolute tolerance: the
bias is added to every logit of a row, so it cancels in the softmax and its
gradient is exactly 0 (torch's, in float64, is checked to be < 1e-9). In fp32
melforge's db is the rounding residue of sum_ij (p_ij - [i == j]), ~1e-8, the
size of AdamW's eps, so AdamW turns it into steps of up to ~lr (torch fp32 does
the same with its own residue). loss.b must stay within the sum of the
learning rates so far (+ tol * |b|) of torch's; it does not change the loss or
any other gradient, so every other tensor keeps the tight tol.

usage: metric_loss_steps.py DIR
"""
import copy
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
sys.path.insert(0, os.path.dirname(__file__))
from cnn_stack_steps import compared, read_arrays, read_config, rel_l2  # noqa: E402
from cnn_stack_torch import CnnStack  # noqa: E402
from leakcnn_torch import LeakCNN, lr_at  # noqa: E402
from metric_losses_torch import LOSSES, has_class_head  # noqa: E402

TRACKED = "num_batches_tracked"


def fail(msg, code=2):
    print(f"metric_loss_steps: {msg}")
    sys.exit(code)


def build_model(d, cfg):
    loss = cfg.get("loss", "softmax")
    if loss not in LOSSES:
        fail(f"config.txt loss={loss!r}: expected one of {LOSSES}")
    kw = dict(embedding=int(cfg.get("embedding", 0)), input_norm=cfg.get("input_norm", "0") == "1", loss=loss,
              margin=float(cfg.get("margin", 0.2)), scale=float(cfg.get("scale", 30.0)))
    leak_head = cfg.get("heads", "class") == "class+leak"
    arch = cfg.get("arch")
    if arch == "leakcnn":
        ints = lambda k: [int(x) for x in cfg[k].split(",")]  # noqa: E731
        model = LeakCNN(int(cfg["mels"]), int(cfg["frames"]), ints("channels"), ints("pools"), int(cfg["kernel"]),
                        int(cfg["dense"]), 0.0, int(cfg["classes"]), leak_head=leak_head, **kw)
    elif arch == "cnn":
        desc = json.load(open(os.path.join(d, "model.json")))
        for key, dkey in (("mels", "in_mels"), ("frames", "in_frames"), ("classes", "classes")):
            if int(cfg[key]) != int(desc[dkey]):
                fail(f"config.txt {key}={cfg[key]} but model.json {dkey}={desc[dkey]}")
        if leak_head != bool(desc.get("leak_head", False)):
            fail(f"config.txt heads={cfg.get('heads')} but model.json leak_head={desc.get('leak_head', False)}")
        for i, l in enumerate(desc["layers"]):
            if l.get("type") == "dropout" and float(l.get("p", 0)) != 0.0:
                fail(f"layers[{i}] is a dropout with p={l['p']}: oracle runs need p = 0")
        model = CnnStack(desc, **kw)
    else:
        fail(f"config.txt arch={arch!r}: expected leakcnn or cnn")
    init = read_arrays(os.path.join(d, "init"))
    want = compared(model)
    if set(init) != set(want):
        fail(f"tensor names differ: only in melforge {sorted(set(init) - set(want))}, "
             f"only in torch {sorted(set(want) - set(init))}", 1)
    for n, t in want.items():
        if tuple(init[n].shape) != tuple(t.shape):
            fail(f"{n}: melforge shape {list(init[n].shape)}, torch {list(t.shape)}", 1)
    dt = np.float64 if torch.get_default_dtype() == torch.float64 else np.float32
    res = model.load_state_dict({k: torch.from_numpy(v.astype(dt)) for k, v in init.items()}, strict=False)
    bad = [k for k in res.missing_keys if not k.endswith(TRACKED)] + list(res.unexpected_keys)
    if bad:
        fail(f"load_state_dict: unexpected missing/extra keys {bad}", 1)
    return model, leak_head


def read_batch(d, s, rows, mels, frames):
    raw = np.fromfile(os.path.join(d, f"batch{s}.bin"), dtype="<f4")
    n_x = rows * mels * frames
    if raw.size not in (n_x + rows, n_x + 2 * rows):
        fail(f"batch{s}.bin holds {raw.size} floats, expected {n_x} + {rows} (+ {rows}) (x, classes, leak)")
    x = torch.from_numpy(raw[:n_x].reshape(rows, 1, mels, frames).copy()).to(torch.get_default_dtype())
    y = torch.from_numpy(raw[n_x:n_x + rows].astype(np.int64))
    t = torch.from_numpy(raw[n_x + rows:].copy()).to(torch.get_default_dtype()) if raw.size > n_x + rows else None
    return x, y, t


def check_layout(y, per_class, loss, s):
    """The prototypical losses' episodes: per_class consecutive rows of one class, classes distinct."""
    if loss not in ("angleproto", "softmaxproto"):
        return
    if per_class < 2 or y.numel() % per_class:
        fail(f"loss {loss} needs per_class >= 2 dividing the micro-batch, got per_class={per_class}")
    g = y.view(-1, per_class)
    if not bool((g == g[:, :1]).all()) or len(set(g[:, 0].tolist())) != g.shape[0]:
        fail(f"batch{s}: labels {y.tolist()} are not {per_class} consecutive rows of distinct classes")


def micro_loss(model, x, y, t, cfg, ce, bce):
    """The loss of one micro-batch (train mode)."""
    loss_type = cfg.get("loss", "softmax")
    emb = model.embed(x)
    loss = emb.new_zeros(())
    if has_class_head(loss_type):
        loss = loss + float(cfg["wclass"]) * ce(model.class_head(emb), y)
        if model.leak_head is not None:
            loss = loss + float(cfg["wleak"]) * bce(model.leak_head(emb).squeeze(1), t)
    if loss_type in ("am_softmax", "aam_softmax"):
        loss = loss + model.loss(emb, y)
    if loss_type in ("angleproto", "softmaxproto"):
        loss = loss + model.loss(emb, int(cfg["per_class"]))
    return loss


def check_forward(d, model, x, tol):
    path = os.path.join(d, "forward", "emb_eval.bin")
    if not os.path.exists(path):
        print("forward: no DIR/forward/emb_eval.bin, not checked")
        return True
    m = copy.deepcopy(model).eval()
    with torch.no_grad():
        ref = m.embed(x)
    ours = np.fromfile(path, dtype="<f4")
    if ours.size != ref.numel():
        print(f"forward: emb_eval.bin holds {ours.size} floats, expected {list(ref.shape)} MISMATCH")
        return False
    e = rel_l2(ours.reshape(ref.shape), ref.numpy())
    print(f"forward (eval mode embeddings): rel L2 {e:.3e}{'' if e <= tol else ' MISMATCH'}")
    return e <= tol


def compare_after(d, s, model, tol, abs_tol):
    """Every tensor within tol (relative L2), those in abs_tol within their
    absolute tolerance (max |difference|) instead."""
    ours = read_arrays(os.path.join(d, f"after{s}"))
    worst, ok = (0.0, ""), True
    for name, p in compared(model).items():
        b = p.detach().double().numpy()
        if name not in ours:
            print(f"after step {s}: {name} missing from melforge's tensors MISMATCH")
            return False
        a = ours[name].astype(np.float64)
        if name in abs_tol:
            e = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
            good = e <= abs_tol[name]
            print(f"after step {s}: {name} max |diff| {e:.3e} (allowed {abs_tol[name]:.3e}, the summed lr)"
                  f"{'' if good else ' MISMATCH'}")
            ok = ok and good
            continue
        worst = max(worst, (rel_l2(a, b), name))
    print(f"after step {s}: worst tensor {worst[1]} rel L2 {worst[0]:.3e}{'' if worst[0] <= tol else ' MISMATCH'}")
    return ok and worst[0] <= tol


def main():
    if len(sys.argv) != 2:
        fail("usage: metric_loss_steps.py DIR")
    d = sys.argv[1]
    cfg = read_config(d)
    torch.set_default_dtype(torch.float64 if cfg.get("dtype") == "f64" else torch.float32)
    mels, frames, B, steps = int(cfg["mels"]), int(cfg["frames"]), int(cfg["batch"]), int(cfg["steps"])
    k = int(cfg.get("accum", 1))
    tol, loss_tol = float(cfg["tol"]), float(cfg.get("loss_tol", 1e-4))
    check = [int(x) for x in cfg["check"].split(",") if x.strip()]
    model, leak_head = build_model(d, cfg)
    ok = check_forward(d, model, read_batch(d, 0, k * B, mels, frames)[0][:B], tol)
    model.train()
    names = [l.strip() for l in open(os.path.join(d, "decay.txt")) if l.strip()]
    params = dict(model.named_parameters())
    if [n for n in names if n not in params]:
        fail(f"decay.txt names no parameter of the model: {[n for n in names if n not in params]}")
    opt = torch.optim.AdamW([{"params": [p for n, p in params.items() if n in names], "weight_decay": float(cfg["wd"])},
                             {"params": [p for n, p in params.items() if n not in names], "weight_decay": 0.0}],
                            lr=float(cfg["lr"]), betas=(float(cfg["beta1"]), float(cfg["beta2"])),
                            eps=float(cfg["eps"]))
    cw = torch.tensor([float(x) for x in cfg["class_weights"].split(",")]) if cfg.get("class_weights") else None
    ce = torch.nn.CrossEntropyLoss(weight=cw, label_smoothing=float(cfg.get("smoothing", 0)))
    bce = torch.nn.BCEWithLogitsLoss()
    max_norm, lr = float(cfg["max_norm"]), float(cfg["lr"])
    lpath = os.path.join(d, "losses.txt")
    ours_loss = [[float(v) for v in l.split()] for l in open(lpath) if l.strip()] if os.path.exists(lpath) else None
    proto = cfg.get("loss", "softmax") in ("angleproto", "softmaxproto")
    lr_sum = 0.0
    for s in range(steps):
        x, y, t = read_batch(d, s, k * B, mels, frames)
        if leak_head and t is None:
            fail(f"batch{s}.bin has no leak targets, but the model has the leak head")
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, cfg["schedule"], int(cfg["warmup"]), int(cfg["total"]), float(cfg["min_lr"]))
        lr_sum += opt.param_groups[0]["lr"]
        opt.zero_grad()
        total = 0.0
        for j in range(k):
            sl = slice(j * B, (j + 1) * B)
            check_layout(y[sl], int(cfg.get("per_class", 0)), cfg.get("loss", "softmax"), s)
            loss = micro_loss(model, x[sl], y[sl], t[sl] if t is not None else None, cfg, ce, bce)
            (loss / k).backward()
            total += loss.item() / k
        if proto and torch.get_default_dtype() == torch.float64 and abs(model.loss.b.grad.item()) > 1e-9:
            print(f"step {s + 1}: torch's gradient of loss.b is {model.loss.b.grad.item():.3e}, not 0 MISMATCH")
            ok = False
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm if max_norm > 0 else float("inf")))
        opt.step()
        line = f"step {s + 1}: torch loss {total:.7f}, grad norm {norm:.6g}"
        if ours_loss is not None and s < len(ours_loss):
            for what, ref, mine in zip(("loss", "grad norm"), (total, norm), ours_loss[s]):
                e = abs(mine - ref) / max(abs(ref), 1e-30)
                line += f"; melforge {what} {mine:.7g} (rel {e:.2e}{'' if e <= loss_tol else ' MISMATCH'})"
                ok = ok and e <= loss_tol
        print(line)
        abs_tol = {"loss.b": lr_sum + tol * abs(model.loss.b.item())} if proto else {}
        if s + 1 in check and not compare_after(d, s + 1, model, tol, abs_tol):
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
