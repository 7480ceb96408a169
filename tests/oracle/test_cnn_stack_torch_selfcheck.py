"""Self-check of bench/cnn_stack_torch.py and tests/oracle/cnn_stack_steps.py,
run by hand (Debian's python3 with torch):

    /usr/bin/python3 tests/oracle/test_cnn_stack_torch_selfcheck.py

1. The module's math against naive loops written from the description:
   attentive pooling (with and without stats), squeeze-excitation, the
   residual shortcut, the NHWC flattening of dense and the heads; the
   state_dict names of the issue's example description.
2. The oracle's protocol: fake DIRs written from the torch model itself by an
   independent training loop here (init = its state_dict, after{s} = its
   tensors after step s, forward/ = its logits), for several random
   descriptions; the oracle must pass on each and fail (exit 1 or 2) when one
   tensor, one running statistic or one forward logit is perturbed, when
   decay.txt is wrong, when init/ lacks a running statistic, and when a
   dropout has p > 0.
Prints one line per case; exits 1 if any expectation fails.
"""
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
from cnn_stack_torch import CnnStack, describe_params  # noqa: E402

FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


# ---- 1. the module against naive loops -------------------------------------

def naive_attentive(x, W, b, att, stats):
    """x [N, C, H, W] float64 numpy; the pooling by explicit loops."""
    N, C, H, T = x.shape
    out = []
    for n in range(N):
        xm = np.array([[sum(x[n, c, h, t] for h in range(H)) / H for c in range(C)] for t in range(T)])
        e = np.array([sum(math.tanh(sum(W[a, c] * xm[t, c] for c in range(C)) + b[a]) * att[a, 0]
                          for a in range(W.shape[0])) for t in range(T)])
        alpha = np.exp(e - e.max())
        alpha /= alpha.sum()
        mu = np.array([sum(alpha[t] * xm[t, c] for t in range(T)) for c in range(C)])
        row = list(mu)
        if stats:
            m2 = np.array([sum(alpha[t] * xm[t, c] ** 2 for t in range(T)) for c in range(C)])
            row += list(np.sqrt(np.maximum(m2 - mu ** 2, 1e-5)))
        out.append(row)
    return np.array(out)


def check_module_math():
    torch.manual_seed(1)
    for stats in (False, True):
        desc = {"in_mels": 5, "in_frames": 7, "classes": 3, "leak_head": True, "layers": [
            {"type": "conv", "k": 3, "cout": 4, "bias": True, "activation": "none"},
            {"type": "attentive_stats_pool", "stats": stats, "attention": 6}]}
        m = CnnStack(desc).double().eval()
        x = torch.randn(2, 1, 5, 7, dtype=torch.float64)
        feat = m.layers[0](x)
        got = m.layers[1](feat).detach().numpy()
        p = m.layers[1]
        ref = naive_attentive(feat.detach().numpy(), p.linear.weight.detach().numpy(), p.linear.bias.detach().numpy(),
                              p.attention.detach().numpy(), stats)
        expect(np.abs(got - ref).max() < 1e-12, f"attentive pool (stats={stats}) equals the naive loop")
        logits, leak = m(x)
        expect(tuple(logits.shape) == (2, 3) and tuple(leak.shape) == (2,), "heads shapes with leak head")

    # Residual block with SE and identity shortcut, by hand from its parts.
    desc = {"in_mels": 6, "in_frames": 5, "classes": 2, "layers": [
        {"type": "conv", "k": 1, "cout": 4, "bias": True, "activation": "relu"},
        {"type": "residual", "cout": 4, "stride": 1, "se": 2}]}
    m = CnnStack(desc).double().eval()
    for bn in (m.layers[1].bn1, m.layers[1].bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    expect(m.layers[1].downsample is None, "residual with stride 1 and cin == cout has an identity shortcut")
    x = m.layers[0](torch.randn(3, 1, 6, 5, dtype=torch.float64)).detach()
    r = m.layers[1]

    def bn_eval(v, bn):
        s = (bn.weight / torch.sqrt(bn.running_var + 1e-5))[None, :, None, None]
        return (v - bn.running_mean[None, :, None, None]) * s + bn.bias[None, :, None, None]
    h = bn_eval(F.conv2d(torch.relu(bn_eval(F.conv2d(x, r.conv1.weight, padding=1), r.bn1)),
                         r.conv2.weight, padding=1), r.bn2)
    sq = h.detach().numpy().mean(axis=(2, 3))
    hid = np.maximum(sq @ r.se.fc1.weight.detach().numpy().T + r.se.fc1.bias.detach().numpy(), 0)
    g = 1 / (1 + np.exp(-(hid @ r.se.fc2.weight.detach().numpy().T + r.se.fc2.bias.detach().numpy())))
    ref = np.maximum(h.detach().numpy() * g[:, :, None, None] + x.numpy(), 0)
    expect(r.se.fc1.out_features == 2, "SE hidden width = cout // se")
    expect(np.abs(r(x).detach().numpy() - ref).max() < 1e-12, "residual block with SE equals the hand computation")

    # Dense and the heads flatten a spatial input in NHWC order (h, w, c).
    desc = {"in_mels": 3, "in_frames": 4, "classes": 2, "layers": [
        {"type": "conv", "k": 1, "cout": 2, "bias": False, "activation": "none"},
        {"type": "dense", "units": 5, "activation": "none"}]}
    m = CnnStack(desc).double()
    x = torch.randn(2, 1, 3, 4, dtype=torch.float64)
    a = m.layers[0](x).detach().numpy()  # [N, C, H, W]
    flat = np.array([[a[n, c, h, w] for h in range(3) for w in range(4) for c in range(2)] for n in range(2)])
    ref = flat @ m.layers[1].fc.weight.detach().numpy().T + m.layers[1].fc.bias.detach().numpy()
    expect(np.abs(m.layers[1](m.layers[0](x)).detach().numpy() - ref).max() < 1e-12, "dense flattens NHWC")
    desc["layers"] = desc["layers"][:1]
    m = CnnStack(desc).double()
    a = m.layers[0](x).detach().numpy()
    flat = np.array([[a[n, c, h, w] for h in range(3) for w in range(4) for c in range(2)] for n in range(2)])
    ref = flat @ m.class_head.weight.detach().numpy().T + m.class_head.bias.detach().numpy()
    logits, leak = m(x)
    expect(leak is None and np.abs(logits.detach().numpy() - ref).max() < 1e-12,
           "heads flatten a spatial input NHWC; no leak head -> None")

    # The example description: exact names and shapes.
    example = {"in_mels": 40, "in_frames": 64, "classes": 5, "leak_head": False, "layers": [
        {"type": "conv", "k": 3, "cout": 16, "stride": 1, "bias": False, "batch_norm": True, "activation": "relu",
         "pool": 1},
        {"type": "residual", "cout": 32, "stride": 2, "se": 8},
        {"type": "attentive_stats_pool", "stats": False, "attention": 128},
        {"type": "dense", "units": 64, "activation": "none"},
        {"type": "dropout", "p": 0.1}]}
    names = [n for n, _ in describe_params(example) if not n.endswith("num_batches_tracked")]
    bn = lambda p: [p + ".weight", p + ".bias", p + ".running_mean", p + ".running_var"]
    want = (["layers.0.conv.weight"] + bn("layers.0.bn") + ["layers.1.conv1.weight"] + bn("layers.1.bn1")
            + ["layers.1.conv2.weight"] + bn("layers.1.bn2")
            + ["layers.1.se.fc1.weight", "layers.1.se.fc1.bias", "layers.1.se.fc2.weight", "layers.1.se.fc2.bias",
               "layers.1.downsample.0.weight"] + bn("layers.1.downsample.1")
            + ["layers.2.attention", "layers.2.linear.weight", "layers.2.linear.bias", "layers.3.fc.weight",
               "layers.3.fc.bias", "class_head.weight", "class_head.bias"])
    expect(names == want, "state_dict names of the example description")
    shapes = dict(describe_params(example))
    expect(shapes["layers.1.downsample.0.weight"] == (32, 16, 1, 1) and shapes["layers.3.fc.weight"] == (64, 32)
           and shapes["layers.2.attention"] == (128, 1), "example shapes (projection, dense input, attention)")
    for bad, what in (({"type": "conv", "cout": 4, "kernel": 3}, "unknown key"), ({"type": "lstm"}, "unknown type"),
                      ({"type": "conv", "cout": 4, "activation": "gelu"}, "unknown activation")):
        try:
            CnnStack({"in_mels": 4, "in_frames": 4, "classes": 2, "layers": [bad]})
            expect(False, f"rejects {what}")
        except ValueError:
            expect(True, f"rejects {what}")


# ---- 2. the oracle protocol -------------------------------------------------

def write_arrays(d, tensors):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "manifest.txt"), "w") as f:
        for n, t in tensors.items():
            a = t.detach().cpu().double().numpy().astype("<f4")
            a.tofile(os.path.join(d, n + ".bin"))
            f.write(n + " " + " ".join(str(s) for s in a.shape) + "\n")


def shared(model):
    return {n: t for n, t in model.state_dict().items() if not n.endswith("num_batches_tracked")}


def lr_at(it, lr, warmup, total, min_lr):
    """Cosine with warmup, written here from kernels/adamw.hpp's contract."""
    if it < warmup:
        return lr * (it + 1) / warmup
    p = min(max((it - warmup) / max(1, total - warmup), 0.0), 1.0)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))


def make_dir(d, desc, dtype="f64", steps=4, B=6, seed=0):
    """Writes a complete DIR from the torch model (the role melforge plays)."""
    torch.manual_seed(seed)
    tdt = torch.float64 if dtype == "f64" else torch.float32
    model = CnnStack(desc).to(tdt)
    with torch.no_grad():  # init as f32 values (what the files hold) and non-trivial running statistics
        for n, t in shared(model).items():
            if n.endswith("running_mean"):
                t.uniform_(-0.3, 0.3)
            elif n.endswith("running_var"):
                t.uniform_(0.5, 2.0)
            t.copy_(t.float().to(tdt))
    os.makedirs(d)
    json.dump(desc, open(os.path.join(d, "model.json"), "w"))
    mels, frames, C = desc["in_mels"], desc["in_frames"], desc["classes"]
    cfg = dict(batch=B, steps=steps, lr=0.01, wd=0.1, beta1=0.9, beta2=0.99, eps=1e-8, smoothing=0.1,
               class_weights=",".join(str(0.5 + 0.25 * c) for c in range(C)), wclass=1.0, wleak=0.7, max_norm=0.5,
               schedule="cosine", warmup=2, total=steps, min_lr=0.001, tol=(1e-6 if dtype == "f64" else 1e-5),
               check=f"1,{steps}", dtype=dtype, mels=mels, frames=frames, classes=C)
    open(os.path.join(d, "config.txt"), "w").write("".join(f"{k}={v}\n" for k, v in cfg.items()))
    params = dict(model.named_parameters())
    decay = [n for n in params if n.endswith("weight") and ".bn" not in n and "downsample.1" not in n]
    open(os.path.join(d, "decay.txt"), "w").write("".join(n + "\n" for n in decay))
    write_arrays(os.path.join(d, "init"), shared(model))
    rng = np.random.default_rng(seed)
    batches = []
    for s in range(steps):
        x = rng.normal(size=(B, mels, frames)).astype("<f4")
        y = rng.integers(0, C, size=B).astype("<f4")
        t = (y != 0).astype("<f4")
        np.concatenate([x.ravel(), y, t]).tofile(os.path.join(d, f"batch{s}.bin"))
        batches.append((torch.from_numpy(x[:, None].copy()).to(tdt), torch.from_numpy(y.astype(np.int64)),
                        torch.from_numpy(t).to(tdt)))
    os.makedirs(os.path.join(d, "forward"))
    for fname, train in (("logits.bin", True), ("logits_eval.bin", False)):
        m = copy.deepcopy(model).train(train)
        with torch.no_grad():
            lg, lk = m(batches[0][0])
        out = lg if lk is None else torch.cat((lg, lk[:, None]), 1)
        out.double().numpy().astype("<f4").tofile(os.path.join(d, "forward", fname))
    opt = torch.optim.AdamW([{"params": [params[n] for n in decay], "weight_decay": cfg["wd"]},
                             {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    ce = torch.nn.CrossEntropyLoss(weight=torch.tensor([0.5 + 0.25 * c for c in range(C)], dtype=tdt),
                                   label_smoothing=cfg["smoothing"])
    model.train()
    init_vars = {n: t.clone() for n, t in shared(model).items() if n.endswith("running_var")}
    for s, (x, y, t) in enumerate(batches):
        for g in opt.param_groups:
            g["lr"] = lr_at(s, cfg["lr"], cfg["warmup"], cfg["total"], cfg["min_lr"])
        opt.zero_grad()
        lg, lk = model(x)
        loss = cfg["wclass"] * ce(lg, y)
        if lk is not None:
            loss = loss + cfg["wleak"] * F.binary_cross_entropy_with_logits(lk, t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["max_norm"])
        opt.step()
        if s + 1 in (1, steps):
            write_arrays(os.path.join(d, f"after{s + 1}"), shared(model))
    moved = all(not torch.equal(init_vars[n], t) for n, t in shared(model).items() if n in init_vars)
    return moved


def run_oracle(d):
    r = subprocess.run([sys.executable, os.path.join(HERE, "cnn_stack_steps.py"), d], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def perturb(path, rel=1e-3):
    a = np.fromfile(path, dtype="<f4")
    a[a.size // 2] += np.float32(rel * (np.linalg.norm(a) + 1))
    a.tofile(path)


DESCS = {
    "conv+bn, residual identity+SE, residual projection, stats pool, dense, leak": {
        "in_mels": 12, "in_frames": 10, "classes": 3, "leak_head": True, "layers": [
            {"type": "conv", "k": 3, "cout": 6, "stride": 1, "bias": False, "batch_norm": True,
             "activation": "relu", "pool": 2},
            {"type": "residual", "cout": 6, "stride": 1, "se": 2},
            {"type": "residual", "cout": 8, "stride": 2, "se": 0},
            {"type": "attentive_stats_pool", "stats": True, "attention": 5},
            {"type": "dense", "units": 7, "activation": "relu"},
            {"type": "dropout", "p": 0.0}]},
    "conv stride 2 with bias, residual projection (channels) + SE, mean pool, no leak": {
        "in_mels": 9, "in_frames": 11, "classes": 4, "leak_head": False, "layers": [
            {"type": "conv", "k": 5, "cout": 4, "stride": 2, "bias": True, "batch_norm": False,
             "activation": "none", "pool": 1},
            {"type": "residual", "cout": 6, "stride": 1, "se": 4},
            {"type": "attentive_stats_pool", "stats": False, "attention": 0}]},
    "conv+bn+bias, residual stride 2 + SE, global average pool, leak": {
        "in_mels": 8, "in_frames": 8, "classes": 2, "leak_head": True, "layers": [
            {"type": "conv", "k": 3, "cout": 4, "bias": True, "batch_norm": True},
            {"type": "residual", "cout": 4, "stride": 2, "se": 8},
            {"type": "global_avg_pool"}]},
    "conv, dense on a spatial input, heads on a spatial input": {
        "in_mels": 6, "in_frames": 5, "classes": 3, "leak_head": True, "layers": [
            {"type": "conv", "k": 3, "cout": 3, "batch_norm": True, "pool": 2},
            {"type": "dense", "units": 4, "activation": "none"},
            {"type": "dropout", "p": 0.0}]},
}


def check_oracle(root):
    first = None
    for i, (what, desc) in enumerate(DESCS.items()):
        for dtype in ("f64", "f32"):
            d = os.path.join(root, f"d{i}{dtype}")
            moved = make_dir(d, desc, dtype, seed=i)
            rc, out = run_oracle(d)
            expect(rc == 0, f"oracle passes on its own run ({dtype}): {what}")
            if rc != 0:
                print(out)
            if any(l["type"] in ("conv", "residual") and (l.get("batch_norm") or l["type"] == "residual")
                   for l in desc["layers"]):
                expect(moved, f"running variances move in train mode: {what} ({dtype})")
            first = first or d
    d = first

    def variant(name, change, want_rc=1, marker=None):
        """The oracle on a changed copy of the first DIR must exit want_rc,
        and (marker) flag exactly the comparison that starts with marker."""
        v = os.path.join(root, name)
        shutil.copytree(d, v)
        change(v)
        rc, out = run_oracle(v)
        flagged = [l for l in out.splitlines() if l.endswith("MISMATCH") or l.startswith("cnn_stack_steps:")]
        right = marker is None or (len(flagged) >= 1 and flagged[0].startswith(marker))
        expect(rc == want_rc and right, f"oracle exits {want_rc} when {name} (got {rc}; first flagged: "
               f"{flagged[0] if flagged else 'none'})")

    variant("a weight differs after the last step", lambda v: perturb(os.path.join(v, "after4", "layers.4.fc.weight.bin")),
            marker="after step 4")
    variant("a running_var differs after step 1",
            lambda v: perturb(os.path.join(v, "after1", "layers.1.bn2.running_var.bin")),
            marker="after step 1: rel L2 (all tensors) ")
    variant("a running_mean differs after the last step",
            lambda v: perturb(os.path.join(v, "after4", "layers.2.downsample.1.running_mean.bin")),
            marker="after step 4")
    variant("the attention vector differs", lambda v: perturb(os.path.join(v, "after4", "layers.3.attention.bin")),
            marker="after step 4")
    variant("a train-mode forward logit differs", lambda v: perturb(os.path.join(v, "forward", "logits.bin")),
            marker="forward (train mode)")
    variant("an eval-mode forward logit differs", lambda v: perturb(os.path.join(v, "forward", "logits_eval.bin")),
            marker="forward (eval mode)")
    variant("decay.txt is empty", lambda v: open(os.path.join(v, "decay.txt"), "w").close(),
            marker="after step 1")

    def drop_running_mean(v):
        mf = os.path.join(v, "init", "manifest.txt")
        lines = [l for l in open(mf) if not l.startswith("layers.0.bn.running_mean ")]
        open(mf, "w").write("".join(lines))
    variant("init lacks a running_mean", drop_running_mean)

    def dropout(v):
        p = os.path.join(v, "model.json")
        desc = json.load(open(p))
        desc["layers"][-1]["p"] = 0.1
        json.dump(desc, open(p, "w"))
    variant("a dropout has p > 0", dropout, want_rc=2)
    variant("decay.txt names an unknown parameter",
            lambda v: open(os.path.join(v, "decay.txt"), "a").write("layers.9.fc.weight\n"), want_rc=2)


def main():
    check_module_math()
    root = tempfile.mkdtemp(prefix="cnn_stack_selfcheck_")
    try:
        check_oracle(root)
    finally:
        shutil.rmtree(root)
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
