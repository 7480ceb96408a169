#!/usr/bin/env python3
"""PyTorch side of `compare_torch.py --loss` (issue 20): trains an embedding
model with a metric loss and scores a held-out trial list, as `melforge train`
+ `melforge verify` do, so the two can be put side by side.

The model: bench/leakcnn_torch.py's LeakCNN (or bench/cnn_stack_torch.py's
CnnStack with --model-json) with --embedding E, --input-norm and the loss
module of bench/metric_losses_torch.py (am_softmax, aam_softmax, angleproto,
softmaxproto; names loss.weight / loss.w / loss.b as melforge's), no leak
head. Training: AdamW (decay on conv and linear weights, melforge's rule:
not on biases or the loss's parameters), melforge's warmup + cosine schedule
set every step, gradient clipping, the dataset resident in memory (f32).
Batches: without --per-class, melforge's seeded per-epoch permutation
(torch_train.epoch_order, batch k = sorted positions [kB, (k+1)B)); with
--per-class M, the rule of io/balanced_order.hpp (M segments of each of B/M
classes from different files where possible, M consecutive rows per class,
the same number of batches per epoch) with numpy's generator: the same
composition, not the same draws. Init: PyTorch's default (the same
distributions as melforge's, not the same draws).

Diagnostics (LeakCNN + angleproto): --init melforge gives melforge's initial
weights for --seed (torch_train.melforge_init) and --order melforge its own
balanced batches, draw for draw (melforge_balanced_epoch, a port of
io/balanced_order.cpp): both sides then start from the same point on the same
batches, and their per-step losses (train_loss_per_step in the JSON) agree to
~1e-3 for the first ~10 steps before fp32 rounding makes them drift apart.

Evaluation (docs/verification.md): the file embedding of each --test file
is the mean of its segments' embeddings (model.eval()), L2-normalised; each
trial of --trials (VoxCeleb format, names as the dataset's /files, or
#<index>) is scored by the cosine; the EER is model/verification's
(interpolated on the ROC of distinct scores, = sklearn's roc_curve + brentq),
computed here in numpy (eer() below), and minDCF at P_target 0.05 and 0.01
(C_miss = C_fa = 1, normalised; min_dcf() below), as `melforge verify`.

Whole utterances (ragged files, docs/dataset.md; bench/crop_rule.py):
--crop-frames N trains on one crop of N frames per utterance per epoch, at
melforge's io::random_crop_start(--seed, epoch, utterance, length, N) (frames
(start + k) mod length: a short utterance wraps), the batches melforge's
per-epoch permutation of the utterances (or --per-class's). A ragged --test
is evaluated with --eval-crops K (default 1: the centred crop) evenly spaced
crops of --eval-crop-frames (default --crop-frames) per utterance at
io::eval_crop_start, the file embedding the L2-normalised mean of the crops'
raw embeddings, or --eval-crops full: each utterance whole, at its own length
(a model ending in global or attentive pooling). Without these flags, fixed
segments as before. bench/check_crop_rule.py checks the port against melforge.

  torch_metric_train.py --train train.h5 --test test.h5 --trials trials.txt --loss aam_softmax
                        [--per-class 2] [--embedding 64] [--input-norm] [--channels 8,16,32 --dense 64]
                        [--epochs N --batch-size B --lr X --seed S --threads T] [--json OUT]
                        [--crop-frames 200 --eval-crops 5|full --eval-crop-frames 200]   (ragged files)
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cnn_stack_torch import CnnStack  # noqa: E402
from crop_rule import RaggedSplit, eval_crop_start  # noqa: E402
from leakcnn_torch import LeakCNN, lr_at  # noqa: E402
from metric_losses_torch import has_class_head  # noqa: E402
from splitmix import GOLDEN, MASK64 as M64, mix as _mix  # noqa: E402
from torch_train import H5Split, batch_rows, epoch_order, melforge_init, stack_decay_names  # noqa: E402

METRIC_LOSSES = ("am_softmax", "aam_softmax", "angleproto", "softmaxproto")


# ---- the verification metric (model/verification.cpp) ----

def roc_points(scores, labels):
    """(P_miss, P_fa) at each distinct score u (accept score >= u) plus the
    threshold +inf (docs/verification.md), in threshold order."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    if not np.all(np.isfinite(s)):
        raise ValueError("eer: non-finite score")
    tgt, non = np.sort(s[y == 1]), np.sort(s[y == 0])
    if len(tgt) == 0 or len(non) == 0:
        raise ValueError(f"eer: {len(tgt)} targets and {len(non)} non-targets")
    u = np.unique(s)
    p_miss = np.append(np.searchsorted(tgt, u, side="left") / len(tgt), 1.0)
    p_fa = np.append((len(non) - np.searchsorted(non, u, side="left")) / len(non), 0.0)
    return p_miss, p_fa


def eer(scores, labels):
    """Interpolated EER (docs/verification.md): the crossing of P_miss = P_fa
    on the straight lines between the ROC points of roc_points()."""
    p_miss, p_fa = roc_points(scores, labels)
    d = p_miss - p_fa
    k = int(np.argmax(d >= 0))
    t = d[k - 1] / (d[k - 1] - d[k])
    return float(p_miss[k - 1] + t * (p_miss[k] - p_miss[k - 1]))


def min_dcf(scores, labels, p_target):
    """Normalised minDCF (docs/verification.md, C_miss = C_fa = 1): the minimum
    over every ROC point of roc_points() (both ends: u_1 accepts everything), of P_miss * P_target +
    P_fa * (1 - P_target), over min(P_target, 1 - P_target)."""
    p_miss, p_fa = roc_points(scores, labels)
    return float(np.min(p_miss * p_target + p_fa * (1 - p_target)) / min(p_target, 1 - p_target))


def read_trials(path, names):
    index = {n: i for i, n in enumerate(names)}
    a, b, lab = [], [], []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            p = line.split()
            if not p:
                continue
            if len(p) != 3 or p[0] not in ("0", "1") or p[1] not in index or p[2] not in index:
                raise SystemExit(f"{path}:{ln}: expected '0|1 name name' with names of the data, found {line!r}")
            lab.append(int(p[0]))
            a.append(index[p[1]])
            b.append(index[p[2]])
    return np.array(a), np.array(b), np.array(lab)


def file_names(path, files):
    with h5py.File(path, "r") as f:
        if "files" in f:
            return [n.decode() if isinstance(n, bytes) else str(n) for n in f["files"][()]]
    return [f"#{i}" for i in range(files)]


# ---- speaker-balanced batches (io/balanced_order.hpp's rule) ----

def balanced_epoch(labels, file_of, m, batch, rng):
    """[batches, batch] rows: M consecutive rows of each of batch/M classes."""
    k = batch // m
    groups = {}
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        by_file = [rng.permutation(rows[file_of[rows] == fi]) for fi in rng.permutation(np.unique(file_of[rows]))]
        inter = [r[i] for i in range(max(len(r) for r in by_file)) for r in by_file if i < len(r)]
        groups[c] = [inter[i:i + m] for i in range(0, len(inter) - m + 1, m)]
    counts = np.array([len(g) for g in groups.values()])
    nb = 0
    while sum(np.minimum(counts, nb + 1)) >= (nb + 1) * k:
        nb += 1
    if nb == 0:
        raise SystemExit(f"--per-class {m}: the data cannot fill one batch of {batch}")
    out = [[] for _ in range(nb)]
    t = 0
    for c in rng.permutation(list(groups)):
        for g in groups[c][:nb]:
            out[t % nb].append(g)
            t += 1
    return np.array([np.concatenate([b[i] for i in rng.permutation(len(b))][:k]) for b in out])


# ---- melforge's own balanced order (io/balanced_order.cpp), draw for draw ----



class _Draw:
    """io/balanced_order.cpp's Draw: splitmix64 seeded by (seed, epoch, purpose, item)."""

    def __init__(self, seed, epoch, purpose, item):
        self.state = _mix(seed ^ _mix((epoch * GOLDEN + purpose) & M64) ^ _mix((item + 0x62616C616E636564) & M64))

    def below(self, bound):
        threshold = ((1 << 64) - bound) % bound
        while True:
            r = _mix(self.state)  # splitmix64_next: state += gamma, finalize(state)
            self.state = (self.state + GOLDEN) & M64
            if r >= threshold:
                return r % bound

    def shuffle(self, v):
        for i in range(len(v), 1, -1):
            j = self.below(i)
            v[i - 1], v[j] = v[j], v[i - 1]


def melforge_balanced_epoch(labels, file_of, m, batch, seed, epoch):
    """[batches, batch] rows exactly as io::balanced_epoch_order (the same draws,
    so PyTorch sees melforge's batches; a diagnostic of --order melforge)."""
    k = batch // m
    classes = sorted(set(int(c) for c in labels))
    groups_n = [int(np.sum(labels == c)) // m for c in classes]
    nb = 0
    while sum(min(g, nb + 1) for g in groups_n) >= (nb + 1) * k:
        nb += 1
    per = []
    for c in classes:
        d = _Draw(seed, epoch, 1, c & 0xFFFFFFFF)
        segs = np.flatnonzero(labels == c).tolist()
        files = {}
        for s_ in segs:
            files.setdefault(int(file_of[s_]), []).append(s_)
        lists = []
        for f_ in sorted(files):
            v = files[f_]
            d.shuffle(v)
            lists.append(v)
        d.shuffle(lists)
        out = [l_[r] for r in range(max(len(l_) for l_ in lists)) for l_ in lists if r < len(l_)]
        g = min(len(out) // m, nb)
        if g > 0:
            per.append(out[:g * m])
    _Draw(seed, epoch, 2, 0).shuffle(per)
    batches = [[] for _ in range(nb)]
    t = 0
    for v in per:
        for g in range(len(v) // m):
            if len(batches[t % nb]) < batch:
                batches[t % nb] += v[g * m:(g + 1) * m]
            t += 1
    rows = []
    for kb, b in enumerate(batches):
        order = list(range(k))
        _Draw(seed, epoch, 3, kb).shuffle(order)
        rows.append(np.concatenate([b[gi * m:(gi + 1) * m] for gi in order]))
    return np.array(rows, dtype=np.int64)


# ---- training and evaluation ----

def build_model(args, train):
    if args.model_json:
        with open(args.model_json) as f:
            desc = json.load(f)
        desc = json.loads(desc["model_args"]) if isinstance(desc.get("model_args"), str) else desc
        desc = dict(desc, classes=train.classes, leak_head=False)
        model = CnnStack(desc, embedding=args.embedding, input_norm=args.input_norm, loss=args.loss,
                         margin=args.margin, scale=args.scale)
    else:
        model = LeakCNN(train.mels, train.frames, [int(c) for c in args.channels.split(",")],
                        [int(p) for p in args.pools.split(",")], args.kernel, args.dense, 0.0, train.classes,
                        leak_head=False, embedding=args.embedding, input_norm=args.input_norm, loss=args.loss,
                        margin=args.margin, scale=args.scale)
    return model


def loss_of(model, h, y, args):
    if args.loss in ("angleproto", "softmaxproto"):
        loss = model.loss(h, args.per_class)
        if has_class_head(args.loss):
            loss = loss + F.cross_entropy(model.class_head(h), y)
        return loss
    return model.loss(h, y)


def is_ragged(path):
    with h5py.File(path, "r") as f:
        return "lengths" in f and f["segments"].ndim == 2


@torch.no_grad()
def ragged_file_embeddings(model, test, crops, crop, batch=256):
    """[F, E] raw embeddings averaged per utterance: crops evenly spaced
    crops (eval_crop_start) of `crop` frames, or crops == 0: each utterance
    whole (one forward each, at its own length)."""
    if crops == 0:
        return np.stack([model.embed(torch.from_numpy(np.ascontiguousarray(test.utterance(u).T))[None, None])[0]
                         .double().numpy() for u in range(test.n)])
    rows = np.repeat(np.arange(test.n), crops)
    starts = [eval_crop_start(k, crops, int(test.lengths[u]), crop) for u in range(test.n) for k in range(crops)]
    x = torch.from_numpy(test.crops(rows, starts, crop)).unsqueeze(1)
    emb = torch.cat([model.embed(x[i:i + batch]) for i in range(0, len(x), batch)]).double().numpy()
    return emb.reshape(test.n, crops, -1).mean(axis=1)


@torch.no_grad()
def evaluate(model, test, trials, batch=256, crops=1, crop=0):
    model.eval()
    if isinstance(test, RaggedSplit):
        files = ragged_file_embeddings(model, test, crops, crop, batch)
    else:
        x = torch.from_numpy(test.read_all().astype(np.float32)).unsqueeze(1)
        emb = torch.cat([model.embed(x[i:i + batch]) for i in range(0, len(x), batch)]).double().numpy()
        files = emb.reshape(test.files, test.per_file, -1).mean(axis=1)
    model.train()
    norm = np.linalg.norm(files, axis=1, keepdims=True)
    files = (files / np.where(norm == 0, 1, norm)).astype(np.float32).astype(np.float64)
    names = file_names(test.path, test.files)
    a, b, lab = read_trials(trials, names)
    scores = np.einsum("ij,ij->i", files[a], files[b]).astype(np.float32)
    return {"eer": eer(scores, lab), "min_dcf_0.05": min_dcf(scores, lab, 0.05),
            "min_dcf_0.01": min_dcf(scores, lab, 0.01), "trials": int(len(lab)), "targets": int(lab.sum()), "files": test.files,
            "embedding_dim": int(files.shape[1])}


def train_run(args):
    torch.manual_seed(args.seed)
    ragged = bool(args.crop_frames)
    if ragged:
        train = RaggedSplit(args.train)
        train.frames = args.crop_frames
    else:
        train = H5Split(args.train)
    test_ragged = is_ragged(args.test)
    modes = (args.eval_crops or "1").split(",")  # the first is the run's "test"; every one goes to "tests"
    eval_modes = [0 if m == "full" else int(m) for m in modes]
    eval_crops = eval_modes[0]
    eval_crop = args.eval_crop_frames or args.crop_frames
    if test_ragged and any(eval_modes) and not eval_crop:
        raise ValueError(f"{args.test} holds whole utterances: --eval-crop-frames (or --crop-frames) or "
                         "--eval-crops full")
    test = RaggedSplit(args.test, classes=1) if test_ragged else H5Split(args.test, classes=1)
    model = build_model(args, train)
    if args.init == "melforge":
        if args.model_json or args.loss != "angleproto":
            raise ValueError("--init melforge: LeakCNN with --loss angleproto only (its ParamBuffer order)")
        melforge_init(model, args.seed)
    decay_names = stack_decay_names(model) - {n for n, _ in model.named_parameters() if n.startswith("loss.")}
    params = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for n, p in params if n in decay_names], "weight_decay": args.weight_decay},
                             {"params": [p for n, p in params if n not in decay_names], "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    # Fixed segments: read once. Whole utterances: each epoch's crops (below).
    x_all = None if ragged else torch.from_numpy(train.read_all().astype(np.float32)).unsqueeze(1)
    y_all = torch.from_numpy(train.labels)
    B, m = args.batch_size, args.per_class
    if m:
        file_of = np.repeat(np.arange(train.files), train.per_file)
        rng = np.random.default_rng(args.seed)
        epochs = [melforge_balanced_epoch(train.labels, file_of, m, B, args.seed, e) if args.order == "melforge"
                  else balanced_epoch(train.labels, file_of, m, B, rng) for e in range(args.epochs)]
    else:
        steps = train.n // B
        epochs = [np.stack([batch_rows(o, k, B) for k in range(steps)])
                  for o in (epoch_order(train.n, args.seed, e) for e in range(args.epochs))]
    steps_per_epoch = len(epochs[0])
    total = steps_per_epoch * args.epochs
    warm = min(args.timing_warmup, max(0, total - 1))
    it, losses, step_losses, t_steady = 0, [], [], None
    t0 = time.perf_counter()
    for e, batches in enumerate(epochs):
        loss_sum = 0.0
        if ragged:  # melforge's crops of epoch e (io::random_crop_start(seed, e, utterance, ...))
            x_all = torch.from_numpy(train.epoch_crops(args.seed, e, args.crop_frames)).unsqueeze(1)
        for rows in batches:
            if it == warm:
                t_steady = time.perf_counter()
            rows = torch.from_numpy(np.asarray(rows))
            lr = lr_at(it, args.lr, "cosine", args.warmup_steps, total, 0.0)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = loss_of(model, model.embed(x_all.index_select(0, rows)), y_all.index_select(0, rows), args)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            opt.step()
            loss_sum += float(loss)
            step_losses.append(float(loss))
            it += 1
        losses.append(loss_sum / steps_per_epoch)
        if args.verbose:
            print(f"[torch {args.loss}] epoch {e + 1}/{args.epochs}: loss {losses[-1]:.4f}", flush=True)
    t_end = time.perf_counter()
    t_eval = time.perf_counter()
    tests = {}
    if test_ragged:
        for mode, crops in zip(modes, eval_modes):
            tests[mode] = evaluate(model, test, args.trials, crops=crops, crop=eval_crop)
            tests[mode].update(eval_crops=mode, eval_crop_frames=eval_crop if crops else None)
        ver = tests[modes[0]]
    else:  # fixed segments: the mean of each file's segments (--eval-crops does not apply)
        ver = tests["segments"] = evaluate(model, test, args.trials)
    return {"status": "ok", "loss": args.loss, "per_class": m, "steps": total, "steps_per_epoch": steps_per_epoch,
            "timing_warmup_steps": warm, "train_s": t_end - t0,
            "steady_samples_per_s": (total - warm) * B / (t_end - t_steady) if t_end > t_steady else None,
            "train_loss_per_epoch": losses, "train_loss_per_step": step_losses,
            "loss_params": {n: p.detach().flatten().tolist() for n, p in model.loss.named_parameters()
                            if p.numel() <= 4} if getattr(model, "loss", None) is not None else {},
            "test": ver, "tests": tests, "eval_s": time.perf_counter() - t_eval, "crop_frames": args.crop_frames or None,
            "parameters": sum(p.numel() for p in model.parameters())}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True, help="held-out speakers' dataset (the trials' files)")
    p.add_argument("--trials", required=True)
    p.add_argument("--loss", required=True, choices=METRIC_LOSSES)
    p.add_argument("--per-class", type=int, default=0, help="segments per class per batch (the prototypical losses)")
    p.add_argument("--embedding", type=int, default=0)
    p.add_argument("--input-norm", action="store_true")
    p.add_argument("--margin", type=float, default=0.2)
    p.add_argument("--scale", type=float, default=30.0)
    p.add_argument("--channels", default="32,64,128")
    p.add_argument("--pools", default="2,2,2")
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--dense", type=int, default=256)
    p.add_argument("--model-json", help="a CNN stack's description instead of LeakCNN")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--timing-warmup", type=int, default=10, help="steps left out of steady samples/s")
    p.add_argument("--init", default="torch", choices=["torch", "melforge"],
                   help="torch: PyTorch's default init; melforge: melforge's draws for --seed (diagnostic; LeakCNN "
                        "+ angleproto)")
    p.add_argument("--order", default="numpy", choices=["numpy", "melforge"],
                   help="--per-class batches: numpy's draws of the same rule, or melforge's own draws (diagnostic)")
    p.add_argument("--crop-frames", type=int, default=0,
                   help="ragged --train: one crop of N frames per utterance per epoch at melforge's "
                        "random_crop_start(--seed, epoch, utterance, ...)")
    p.add_argument("--eval-crops", help="ragged --test: K evenly spaced crops per utterance (default 1, the centred "
                                        "crop) or full (each utterance whole); a comma list (5,full) evaluates "
                                        "each, the first being the run's test")
    p.add_argument("--eval-crop-frames", type=int, default=0, help="frames of each evaluation crop (default --crop-frames)")
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.eval_crops is not None and not all(m == "full" or (m.isdigit() and int(m) >= 1)
                                            for m in a.eval_crops.split(",")):
        p.error("--eval-crops takes a positive integer or full (or a comma list of them: the first is the run's test)")
    if a.crop_frames < 0 or a.eval_crop_frames < 0:
        p.error("--crop-frames and --eval-crop-frames must be positive")
    if a.crop_frames and a.init == "melforge":
        p.error("--init melforge goes with fixed segments (LeakCNN)")
    if a.loss in ("angleproto", "softmaxproto") and a.per_class < 2:
        p.error(f"--loss {a.loss} needs --per-class M >= 2")
    if a.per_class and a.batch_size % a.per_class:
        p.error("--batch-size must be a multiple of --per-class")
    return a


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = {"tool": "pytorch", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
           "python": platform.python_version(), "config": vars(args)}
    try:
        out["run"] = train_run(args)
    except Exception as e:  # reported in the JSON, non-zero exit
        out["run"] = {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
    r = out["run"]
    if r["status"] == "ok":
        print(f"[torch {args.loss}] {r['steady_samples_per_s']:.0f} samples/s steady, test EER {r['test']['eer']:.4f} "
              f"on {r['test']['trials']} trials", flush=True)
    else:
        print(f"[torch {args.loss}] failed: {r['reason']}", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if r["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
