#!/usr/bin/env python3
"""PyTorch reference runs of LeakCNN training, for the side-by-side comparison
with `melforge train` (bench/compare_torch.py runs both).

The same model (bench/leakcnn_torch.py), initial weights (melforge's seeded
generator, reproduced here), loss (CrossEntropyLoss + BCEWithLogitsLoss,
weighted sum), optimizer (AdamW, decay on weights only, fused on CUDA),
learning-rate schedule (melforge's warmup + cosine, set every step), gradient
clipping, batch composition and order (melforge's seeded per-epoch permutation,
batch k = sorted positions [kB, (k+1)B), last partial batch dropped), reading
the same HDF5 files, in the set-ups a PyTorch user would pick:

  eager     channels_last, AMP (bf16 on CUDA), fused AdamW, a tuned DataLoader
            over h5py (workers, pinned memory, persistent workers, prefetch)
  compile   the same, the model under torch.compile(mode="max-autotune");
            compile time is reported separately and left out of samples/s
  resident  the dataset preloaded on the device, batches gathered there

Reported per variant (JSON with --json, and a summary on stdout): time to first
step, compile and load times, steady samples/s (warm-up steps excluded), epoch
time, GPU busy share (NVML utilization when pynvml is importable, else CUDA
events: 1 - idle gaps between steps / wall time, an upper bound), data wait
share, final validation metrics at segment and file level (melforge's file
vote: mean of short-segment probabilities per long segment, majority vote
across long segments, ties broken by the mean probability), peak device memory.

  torch_train.py --train train.h5 --val val.h5 [--variant eager,compile,resident]
                 [--epochs N --batch-size B --lr X --precision auto|fp32|bf16|fp16
                  --device auto|cuda|cpu --seed S ...] [--json OUT.json]
  torch_train.py --dry-run     # CI: tiny h5py-written dataset, CPU, 1 epoch

With --model-json FILE (a CNN stack's description: the `model_args` metadata
`melforge export` writes, or model.json) the model is bench/cnn_stack_torch.py's
CnnStack instead of LeakCNN (issue 16): weight decay on conv and linear
weights and the attention vector (melforge's rule), PyTorch's default init
(the same distributions as melforge's, not the same draws), batch norm in
training mode during the steps and in evaluation mode for the metrics.
--threads N sets torch's intra-op threads (CPU).
"""
import time

_T_START = time.perf_counter()  # before any heavy import: "launch" for time to first step

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402


def _process_age_s():
    """Seconds since this process started (interpreter start-up included), from /proc."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


_LAUNCH_OFFSET = _process_age_s()  # interpreter start-up before _T_START

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from host_cpu import cpu_model  # noqa: E402  (bench/host_cpu.py)
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from leakcnn_torch import LeakCNN, lr_at, resolve_heads  # noqa: E402
from cnn_stack_torch import CnnStack  # noqa: E402
from splitmix import GOLDEN, MASK64, mix as _mix, mix_vec as _mix_vec  # noqa: E402,F401

_IMPORTS_DONE = time.perf_counter()
_FIRST_VARIANT = True  # time to first step counts from launch for the process's first variant


def since_launch():
    return _LAUNCH_OFFSET + (time.perf_counter() - _T_START)


# ---- melforge's generators (io/reader.cpp epoch_order, model/param_buffer.cpp init) ----

def epoch_order(n, seed, epoch, shuffle=True):
    """melforge's per-epoch permutation of [0, n): Fisher-Yates driven by splitmix64
    with unbiased bounded draws (rejection), seeded by (seed, epoch)."""
    v = list(range(n))
    if not shuffle or n < 2:
        return np.asarray(v, dtype=np.int64)
    state = ((seed * 0x2545F4914F6CDD1D) & MASK64) ^ ((epoch + 0x632BE59BD9B4E019) & MASK64)
    state = (state + GOLDEN) & MASK64  # the discarded first draw
    # Draw j uses mix(state + j*golden); vectorized, then checked for rejections
    # (probability ~bound/2^64 each: practically never, handled exactly anyway).
    bounds = np.arange(n, 1, -1, dtype=np.uint64)  # i + 1 for i = n-1 .. 1
    with np.errstate(over="ignore"):
        idx = np.uint64(state) + np.arange(len(bounds), dtype=np.uint64) * np.uint64(GOLDEN)
        r = _mix_vec(idx)
        thresholds = (np.uint64(0) - bounds) % bounds
    if np.all(r >= thresholds):
        js = (r % bounds).astype(np.int64).tolist()
        for k, i in enumerate(range(n - 1, 0, -1)):
            j = js[k]
            v[i], v[j] = v[j], v[i]
        return np.asarray(v, dtype=np.int64)
    for i in range(n - 1, 0, -1):  # exact path with rejections
        bound = i + 1
        thr = ((1 << 64) - bound) % bound
        while True:
            rr = _mix(state)
            state = (state + GOLDEN) & MASK64
            if rr >= thr:
                break
        j = rr % bound
        v[i], v[j] = v[j], v[i]
    return np.asarray(v, dtype=np.int64)


def batch_rows(order, k, batch):
    """Batch k: positions [kB, (k+1)B) of the epoch's order, sorted (melforge's reader)."""
    return np.sort(order[k * batch:(k + 1) * batch])


def melforge_param_order(model):
    """ParamBuffer's order: every weight (blocks, fc, class head, leak head), then
    every bias in the same order. Returns (name, fan_in) pairs."""
    params = dict(model.named_parameters())
    weights = [n for n in params if n.endswith("weight")]
    order = []
    for names in (weights, [w[:-len("weight")] + "bias" for w in weights]):
        for n in names:
            w = params[n[:-len("bias")] + "weight"] if n.endswith("bias") else params[n]
            order.append((n, int(np.prod(w.shape[1:]))))
    return order


@torch.no_grad()
def melforge_init(model, seed):
    """Reproduces melforge's ParamBuffer::init: U(-1/sqrt(fan_in), +1/sqrt(fan_in))
    from splitmix64 counters, in PyTorch's element order, so both start from the
    same weights for the same seed."""
    params = dict(model.named_parameters())
    for pi, (name, fan_in) in enumerate(melforge_param_order(model)):
        p = params[name]
        bound = 1.0 / math.sqrt(fan_in)
        base = _mix(seed ^ _mix(0x5EED0000 + pi))
        with np.errstate(over="ignore"):
            z = _mix_vec(np.uint64(base) + np.arange(p.numel(), dtype=np.uint64))
        u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        vals = (-bound + 2.0 * bound * u).astype(np.float32)
        p.copy_(torch.from_numpy(vals.reshape(tuple(p.shape))))


# ---- the dataset (docs/dataset.md) ----

def _attr_strings(v):
    return [s.decode() if isinstance(s, bytes) else str(s) for s in np.atleast_1d(v)]


class H5Split:
    """One split file: shape, per-segment labels and leak targets, file structure."""

    def __init__(self, path, segments="segments", labels="labels", leak="leak", normal_class=-1, classes=0):
        self.path, self.segments_name = path, segments
        with h5py.File(path, "r") as f:
            if segments not in f or labels not in f:
                raise SystemExit(f"{path}: expected datasets /{segments} and /{labels}")
            seg = f[segments]
            shape = seg.shape
            if len(shape) == 5:
                self.files, self.longs, self.shorts, self.mels, self.frames = (int(s) for s in shape)
            elif len(shape) == 3:
                self.files, self.mels, self.frames = (int(s) for s in shape)
                self.longs = self.shorts = 1
            else:
                raise SystemExit(f"{path}: /{segments} must be [N, mels, frames] or [F, L, S, mels, frames], found {shape}")
            self.file_dtype = seg.dtype
            self.per_file = self.longs * self.shorts
            self.n = self.files * self.per_file
            names = None
            for holder in (seg.attrs, f.attrs):
                if "class_names" in holder:
                    names = _attr_strings(holder["class_names"])
                    break
            lab = np.asarray(f[labels][()]).astype(np.int64).reshape(-1)
            self.classes = classes or (len(names) if names else int(lab.max()) + 1)
            self.class_names = names or [str(c) for c in range(self.classes)]
            if normal_class < 0:
                normal_class = self.class_names.index("normal") if "normal" in self.class_names else 0
            self.leak_in_file = bool(leak) and leak in f
            lk = np.asarray(f[leak][()]).astype(np.float32).reshape(-1) if self.leak_in_file else (lab != normal_class).astype(np.float32)
        self.file_labels = lab
        self.file_leak = lk.astype(np.int32)
        rep = self.per_file if len(shape) == 5 else 1
        self.labels = np.repeat(lab, rep)
        self.leak = np.repeat(lk, rep).astype(np.float32)
        self._h5 = None
        self._pid = None

    def _dataset(self):
        if self._h5 is None or self._pid != os.getpid():  # one handle per process (DataLoader workers)
            self._h5 = h5py.File(self.path, "r")
            self._pid = os.getpid()
        return self._h5[self.segments_name]

    def read_rows(self, rows):
        """Segments `rows` (sorted) as [len, mels, frames] in the file's dtype: one
        h5py read per run of consecutive segments within a long segment."""
        d = self._dataset()
        out = np.empty((len(rows), self.mels, self.frames), dtype=self.file_dtype)
        if len(rows) == 0:
            return out
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate(([0], breaks)).tolist()
        ends = np.concatenate((breaks, [len(rows)])).tolist()
        flat = self.longs == 1 and self.shorts == 1 and len(d.shape) == 3
        for a, b in zip(starts, ends):
            r, r1, pos = int(rows[a]), int(rows[b - 1]) + 1, a
            if flat:
                out[pos:pos + (r1 - r)] = d[r:r1]
                continue
            while r < r1:
                f_, rem = divmod(r, self.per_file)
                l_, s_ = divmod(rem, self.shorts)
                e = min(r1, r - s_ + self.shorts)
                out[pos:pos + (e - r)] = d[f_, l_, s_:s_ + (e - r)]
                pos += e - r
                r = e
        return out

    def read_all(self):
        with h5py.File(self.path, "r") as f:
            return np.asarray(f[self.segments_name][()]).reshape(self.n, self.mels, self.frames)

    def __getstate__(self):  # picklable for DataLoader workers (no open handle)
        s = dict(self.__dict__)
        s["_h5"] = None
        s["_pid"] = None
        return s


class BatchSampler(torch.utils.data.Sampler):
    """Yields melforge's batches (sorted row arrays), epoch after epoch."""

    def __init__(self, orders, batch, steps_per_epoch):
        self.orders, self.batch, self.steps = orders, batch, steps_per_epoch
        self.epoch = 0

    def set_epoch(self, epoch):  # called before each epoch's iter(loader)
        self.epoch = epoch

    def __iter__(self):
        order = self.orders[self.epoch]
        for k in range(self.steps):
            yield batch_rows(order, k, self.batch)

    def __len__(self):
        return self.steps


class BatchDataset(torch.utils.data.Dataset):
    def __init__(self, split):
        self.split = split

    def __getitem__(self, rows):
        x = self.split.read_rows(rows)
        return (torch.from_numpy(x), torch.from_numpy(self.split.labels[rows]),
                torch.from_numpy(self.split.leak[rows]))

    def __len__(self):
        return self.split.n


# ---- metrics (model/metrics.cpp, kernels/file_vote.hpp) ----

def class_metrics(labels, preds, classes, leak_labels=None, leak_scores=None, threshold=0.5):
    """model/metrics.cpp's metrics; without leak scores (heads=class) no "leak" entry."""
    conf = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(conf, (labels, preds), 1)
    n = len(labels)
    tp = np.diag(conf).astype(np.float64)
    actual, predicted = conf.sum(1), conf.sum(0)
    prec = np.where(predicted > 0, tp / np.maximum(predicted, 1), 0.0)
    rec = np.where(actual > 0, tp / np.maximum(actual, 1), 0.0)
    f1 = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-300), 0.0)
    seen = (actual > 0) | (predicted > 0)
    m = {
        "count": int(n),
        "accuracy": float(tp.sum() / n) if n else None,
        "balanced_accuracy": float(rec[actual > 0].mean()) if (actual > 0).any() else None,
        "macro_f1": float(f1[seen].mean()) if seen.any() else None,
        "confusion": conf.tolist(),
    }
    if leak_scores is None:
        return m
    dec = leak_scores >= threshold
    y = leak_labels != 0
    m["leak"] = {"threshold": threshold,
                 "accuracy": float((dec == y).mean()) if n else None,
                 "detection_rate": float(dec[y].mean()) if y.any() else None,
                 "false_alarm_rate": float(dec[~y].mean()) if (~y).any() else None}
    return m


def file_vote(probs, leak_p, files, longs, shorts, threshold):
    """kernels/file_vote.hpp's rule, vectorized: long-segment means, argmax votes
    (lowest class on a tie), most votes wins, ties by the larger file-mean
    probability then the lower class; leak by majority of long segments, an
    exact tie decided by the file-mean leak probability."""
    C = probs.shape[1]
    long_p = probs.reshape(files, longs, shorts, C).mean(axis=2, dtype=np.float32)
    file_p = long_p.mean(axis=1, dtype=np.float32)
    votes = np.zeros((files, C), dtype=np.int64)
    np.add.at(votes, (np.repeat(np.arange(files), longs), long_p.argmax(axis=2).reshape(-1)), 1)
    # most votes, then larger mean probability, then lower class (argmax takes the first)
    key = votes.astype(np.float64) * 4.0 + file_p.astype(np.float64)  # file_p <= 1 < 4: votes dominate
    klass = key.argmax(axis=1)
    if leak_p is None:  # heads=class: the class vote alone
        return klass, file_p, None, None
    long_leak = leak_p.reshape(files, longs, shorts).mean(axis=2, dtype=np.float32)
    leak_mean = long_leak.mean(axis=1, dtype=np.float32)
    leak_votes = (long_leak >= threshold).sum(axis=1)
    twice = 2 * leak_votes
    leak = np.where(twice > longs, 1, np.where(twice < longs, 0, (leak_mean >= threshold).astype(np.int64)))
    return klass, file_p, leak, leak_mean


# ---- one training run ----

def _process_cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def resolve_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: this torch ({torch.__version__}) sees no CUDA device")
    return torch.device(name)


def resolve_precision(name, device):
    if name == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return name


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class NvmlSampler:
    """Mean NVML GPU utilization over a window, sampled by a thread."""

    def __init__(self, index):
        import pynvml  # noqa: F401 (ImportError: caller falls back to events)
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.samples, self.stop_flag, self.thread = [], threading.Event(), None

    def start(self):
        def run():
            while not self.stop_flag.wait(0.1):
                self.samples.append(self.nv.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_flag.set()
        if self.thread:
            self.thread.join()
        return (sum(self.samples) / len(self.samples) / 100.0) if self.samples else None


def evaluate(model, xs, split, args, device, amp_ctx, resident, in_dtype):
    """Segment outputs in dataset order, then segment and file metrics."""
    model.eval()
    probs, leaks = [], []
    eb = args.eval_batch_size or args.batch_size
    with torch.no_grad():
        for a in range(0, split.n, eb):
            xb = xs[a:a + eb] if resident else torch.from_numpy(xs[a:a + eb]).to(device, non_blocking=True)
            xb = prep_input(xb.to(in_dtype), split)
            with amp_ctx():
                logits, leak = model(xb)
            probs.append(torch.softmax(logits.float(), dim=1))
            if leak is not None:
                leaks.append(torch.sigmoid(leak.float()))
    model.train()
    p = torch.cat(probs).cpu().numpy()
    lp = torch.cat(leaks).cpu().numpy() if leaks else None
    thr = args.threshold
    seg = class_metrics(split.labels, p.argmax(axis=1), split.classes, split.leak.astype(np.int32), lp, thr)
    klass, _, fleak, fleak_p = file_vote(p, lp, split.files, split.longs, split.shorts, thr)
    fil = class_metrics(split.file_labels, klass, split.classes, split.file_leak, fleak_p, thr)
    if lp is not None:
        fil["leak"]["accuracy"] = float((fleak == split.file_leak).mean())
    return {"segment": seg, "file": fil}


def prep_input(x, split):
    """[B, mels, frames] (any float dtype) -> [B, 1, mels, frames] channels_last, compute dtype."""
    return x.view(x.shape[0], 1, split.mels, split.frames).contiguous(memory_format=torch.channels_last)


def stack_decay_names(model):
    """melforge's weight-decay rule for a CNN stack (model/param_buffer.hpp):
    conv and linear weights (heads included) and the attention vector; not
    biases or batch norm."""
    names = set()
    for mn, m in model.named_modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            names.add(f"{mn}.weight" if mn else "weight")
    names |= {n for n, _ in model.named_parameters() if n.endswith(".attention")}
    return names


def load_stack_description(path, train, heads):
    """The CnnStack description of --model-json, checked against the data."""
    with open(path) as f:
        desc = json.load(f)
    if isinstance(desc.get("model_args"), str):  # a safetensors metadata dump
        desc = json.loads(desc["model_args"])
    if (int(desc["in_mels"]), int(desc["in_frames"])) != (train.mels, train.frames):
        raise SystemExit(f"{path}: the stack is for {desc['in_mels']}x{desc['in_frames']} inputs, "
                         f"the data's segments are {train.mels}x{train.frames}")
    if int(desc["classes"]) != train.classes:
        raise SystemExit(f"{path}: {desc['classes']} classes, the data has {train.classes}")
    if bool(desc.get("leak_head", False)) != (heads == "class+leak"):
        raise SystemExit(f"{path}: leak_head {desc.get('leak_head')} but the heads resolve to {heads}")
    return desc


def run_variant(variant, args, train, val, orders):
    global _FIRST_VARIANT
    t_variant = time.perf_counter()
    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    res = {"variant": variant, "status": "ok", "device": str(device), "precision": precision,
           "import_s": _LAUNCH_OFFSET + (_IMPORTS_DONE - _T_START)}
    if variant == "compile" and not hasattr(torch, "compile"):
        res.update(status="unavailable", reason=f"torch {torch.__version__} has no torch.compile")
        return res
    if variant == "compile" and device.type == "cpu" and not args.compile_on_cpu:
        res.update(status="skipped", reason="torch.compile is timed on CUDA only (--compile-on-cpu to try it here)")
        return res
    if precision in ("bf16", "fp16") and device.type == "cpu":
        res.update(status="unavailable", reason=f"AMP {precision} is not measured on the CPU; use --precision fp32")
        return res
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        # melforge never uses TF32; keep PyTorch's fp32 runs in true fp32 too.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.reset_peak_memory_stats(device)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    in_dtype = amp_dtype or torch.float32

    def amp_ctx():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    if args.model_desc is not None:
        model = CnnStack(args.model_desc)
        decay_names = stack_decay_names(model)
        res["init"] = "torch default (CnnStack)"
    else:
        model = LeakCNN(train.mels, train.frames, args.channels, args.pools, args.kernel, args.dense, args.dropout,
                        train.classes, leak_head=args.heads == "class+leak")
        decay_names = {n for n, _ in model.named_parameters() if not n.endswith("bias")}
        if args.init == "melforge":
            melforge_init(model, args.seed)
        res["init"] = args.init
    model = model.to(device, memory_format=torch.channels_last)
    decay = [p for n, p in model.named_parameters() if n in decay_names]
    nodecay = [p for n, p in model.named_parameters() if n not in decay_names]
    opt_kw = {"lr": args.lr, "betas": (args.beta1, args.beta2), "eps": args.eps}
    fused = device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    if fused:
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}], **opt_kw)
    res["optimizer"] = "AdamW fused" if fused else "AdamW (foreach/single-tensor)"
    ce = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    bce = nn.BCEWithLogitsLoss()
    scaler = torch.cuda.amp.GradScaler(init_scale=args.loss_scale, growth_interval=args.loss_scale_window) \
        if precision == "fp16" else None
    fwd = model
    if variant == "compile":
        fwd = torch.compile(model, mode="max-autotune")

    B = args.batch_size
    steps_per_epoch = train.n // B
    if args.limit_batches:
        steps_per_epoch = min(steps_per_epoch, args.limit_batches)
    if steps_per_epoch < 1:
        res.update(status="failed", reason=f"{train.n} training segments make no batch of {B}")
        return res
    total_steps = steps_per_epoch * args.epochs
    warm = min(args.timing_warmup, max(0, total_steps - 1))
    min_lr = args.lr * args.min_lr_ratio

    # Data.
    t_load = time.perf_counter()
    if variant == "resident":
        x_all = torch.from_numpy(train.read_all()).to(device).to(in_dtype)
        y_all = torch.from_numpy(train.labels).to(device)
        k_all = torch.from_numpy(train.leak).to(device)
        x_val = torch.from_numpy(val.read_all()).to(device).to(in_dtype)
        orders_dev = [torch.from_numpy(o).to(device) for o in orders]
        sync(device)
        loader = None
    else:
        x_val = val.read_all()
        sampler = BatchSampler(orders, B, steps_per_epoch)
        loader = torch.utils.data.DataLoader(
            BatchDataset(train), batch_size=None, sampler=sampler,
            num_workers=args.workers, pin_memory=device.type == "cuda",
            persistent_workers=args.workers > 0, prefetch_factor=args.prefetch if args.workers > 0 else 2)
    res["load_s"] = time.perf_counter() - t_load

    nvml = None
    if device.type == "cuda":
        try:
            nvml = NvmlSampler(device.index if device.index is not None else torch.cuda.current_device())
            res["gpu_busy_method"] = "nvml utilization (mean over the steady window)"
        except Exception:  # pynvml absent or no NVML
            nvml = None
            res["gpu_busy_method"] = "cuda events: 1 - idle gaps between steps / wall (upper bound)"
    else:
        res["gpu_busy_method"] = "n/a (cpu)"

    step_events = []  # (start, end) per steady step (events method)
    loss_sums = []
    it = 0
    data_wait = 0.0
    epoch_times = []
    first_step_s = None
    t_steady = None
    for epoch in range(args.epochs):
        t_epoch = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        if loader is not None:
            sampler.set_epoch(epoch)
            batches = iter(loader)
        for k in range(steps_per_epoch):
            if it == warm:
                sync(device)
                t_steady = time.perf_counter()
                cpu_steady = _process_cpu_s()
                data_wait_steady = data_wait
                if nvml:
                    nvml.start()
            tw = time.perf_counter()
            if loader is not None:
                xb, yb, tb = next(batches)
                data_wait += time.perf_counter() - tw
                xb = xb.to(device, non_blocking=True).to(in_dtype)
                yb = yb.to(device, non_blocking=True)
                tb = tb.to(device, non_blocking=True)
            else:
                rows = torch.sort(orders_dev[epoch][k * B:(k + 1) * B]).values
                xb, yb, tb = x_all.index_select(0, rows), y_all.index_select(0, rows), k_all.index_select(0, rows)
            t_compute = time.perf_counter()  # the step without its data wait (compile_s)
            if device.type == "cuda" and it >= warm and nvml is None:
                e0 = torch.cuda.Event(enable_timing=True)
                e0.record()
            xb = prep_input(xb, train)
            lr = lr_at(it, args.lr, args.schedule, args.warmup_steps, total_steps, min_lr)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            with amp_ctx():
                logits, leak = fwd(xb)
                loss = args.class_loss_weight * ce(logits.float(), yb)
                if leak is not None:
                    loss = loss + args.leak_loss_weight * bce(leak.float(), tb)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            if args.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            loss_sum += loss.detach()
            if device.type == "cuda" and it >= warm and nvml is None:
                e1 = torch.cuda.Event(enable_timing=True)
                e1.record()
                step_events.append((e0, e1))
            if it == 0:
                sync(device)
                # The process's first variant counts from launch (imports, dataset
                # opening, orders, workers, load, compile all included); a later
                # one in the same process from its own start plus the imports.
                first_step_s = since_launch() if _FIRST_VARIANT else \
                    res["import_s"] + (time.perf_counter() - t_variant)
                _FIRST_VARIANT = False
                res["first_step_only_s"] = time.perf_counter() - t_compute
            it += 1
        sync(device)
        epoch_times.append(time.perf_counter() - t_epoch)
        loss_sums.append(float(loss_sum) / steps_per_epoch)
        if args.verbose:
            print(f"[{variant}] epoch {epoch + 1}/{args.epochs}: loss {loss_sums[-1]:.4f}, "
                  f"{epoch_times[-1]:.2f} s", flush=True)
    sync(device)
    t_end = time.perf_counter()
    cpu_end = _process_cpu_s()
    busy = nvml.stop() if nvml else None
    steady_steps = total_steps - warm
    steady_wall = t_end - t_steady
    if device.type == "cuda" and nvml is None and step_events:
        idle = sum(step_events[i][0].elapsed_time(step_events[i + 1][0]) -
                   step_events[i][0].elapsed_time(step_events[i][1])
                   for i in range(len(step_events) - 1)) / 1000.0
        busy = max(0.0, 1.0 - idle / steady_wall)
    t_eval = time.perf_counter()
    val_metrics = evaluate(model, x_val, val, args, device, amp_ctx, variant == "resident", in_dtype)
    res.update({
        "time_to_first_step_s": first_step_s,
        "compile_s": res["first_step_only_s"] if variant == "compile" else None,
        "steps": total_steps, "steps_per_epoch": steps_per_epoch, "timing_warmup_steps": warm,
        "samples": total_steps * B,
        "steady_samples_per_s": steady_steps * B / steady_wall if steady_wall > 0 else None,
        # This process's CPU time (all its threads; not the DataLoader workers) per steady step.
        "steady_cpu_ms_per_step": 1e3 * (cpu_end - cpu_steady) / steady_steps if steady_steps else None,
        "epoch_time_s": epoch_times[-1],
        "epoch_times_s": epoch_times,
        "gpu_busy_share": busy,
        "data_wait_share": (data_wait - data_wait_steady) / steady_wall if loader is not None else 0.0,
        "train_loss_per_epoch": loss_sums,
        "eval_s": time.perf_counter() - t_eval,
        "val": val_metrics,
        "peak_device_memory_bytes": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
        "peak_device_memory_reserved_bytes": int(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else None,
        "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    })
    del loader
    return res


# ---- self-checks of the dry mode ----

def self_check(out, requested):
    """Values computed by melforge's C++ (io/reader.cpp epoch_order,
    model/param_buffer.cpp init) must come out of the Python twins bit for bit;
    eager and resident runs see the same batches in the same order from the same
    weights, so on the CPU they must reach the same losses and metrics."""
    errors = []
    for (n, seed, epoch), (h_ref, first, last) in {
            (10, 0, 0): (17811219924129247651, 7, 9),
            (1000, 7, 3): (17147602656582414104, 777, 518),
            (40000, 12345, 9): (18009060383009988182, 12484, 38026)}.items():
        v = epoch_order(n, seed, epoch).tolist()
        h = 0
        for x in v:
            h = (h * 1000003 + x) & MASK64
        if (h, v[0], v[-1]) != (h_ref, first, last):
            errors.append(f"epoch_order({n}, {seed}, {epoch}) differs from melforge's")
    for pi, i, ref in ((0, 0, -2.66844436e-05), (3, 1, 0.00518010929), (9, 1000, 0.00328313396)):
        bound = 1.0 / math.sqrt(8192.0)
        z = _mix_vec(np.uint64(_mix(42 ^ _mix(0x5EED0000 + pi))) + np.arange(i + 1, dtype=np.uint64))
        u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        got = float(np.float32(-bound + 2.0 * bound * u[i]))
        if got != float(np.float32(ref)):
            errors.append(f"init value (param {pi}, element {i}) {got!r} differs from melforge's {ref!r}")
    # file vote: a 1-1 tie between long segments goes to the larger mean
    # probability; a 1-1 leak tie is decided by the mean leak probability.
    k, fp, lk, lp = file_vote(np.array([[0.6, 0.4], [0.3, 0.7]], np.float32), np.array([0.6, 0.4], np.float32),
                              1, 2, 1, 0.5)
    if (int(k[0]), int(lk[0])) != (1, 1) or not np.allclose(fp, [[0.45, 0.55]]):
        errors.append(f"file vote tie rule: class {k}, leak {lk}, probabilities {fp}")
    k, _, lk, _ = file_vote(np.array([[0.2, 0.5, 0.3]] * 4 + [[0.1, 0.1, 0.8]] * 2, np.float32),
                            np.array([0.9, 0.8, 0.1, 0.2, 0.7, 0.6], np.float32), 1, 3, 2, 0.5)
    if (int(k[0]), int(lk[0])) != (1, 1):
        errors.append(f"file vote majority rule: class {k}, leak {lk}")
    ok = {r["variant"]: r for r in out["runs"] if r["status"] == "ok"}
    for v in ("eager", "resident"):
        if v in requested and v not in ok:
            errors.append(f"the {v} run did not complete")
    if len(ok) == 2 and "eager" in ok and "resident" in ok:
        a, b = ok["eager"], ok["resident"]
        if not np.allclose(a["train_loss_per_epoch"], b["train_loss_per_epoch"], rtol=1e-5, atol=1e-6):
            errors.append(f"eager and resident losses differ: {a['train_loss_per_epoch']} vs {b['train_loss_per_epoch']}")
        for r in (a, b):
            if not all(math.isfinite(x) for x in r["train_loss_per_epoch"]):
                errors.append(f"{r['variant']}: non-finite loss")
            for level in ("segment", "file"):
                acc = r["val"][level]["accuracy"]
                if acc is None or not 0.0 <= acc <= 1.0:
                    errors.append(f"{r['variant']}: bad {level} accuracy {acc}")
    for e in errors:
        print("self-check FAILED: " + e, file=sys.stderr)
    if not errors:
        print("self-check: order and init match melforge's; eager and resident agree")
    return not errors


# ---- the tiny dataset of the dry mode ----

def write_tiny_dataset(out_dir, files=(12, 6), longs=2, shorts=2, mels=16, frames=16, classes=3, seed=1):
    """train.h5 / val.h5 in the file-structured layout of docs/dataset.md: class c > 0
    adds a band around a class-specific mel bin to noise (learnable), gzip chunks."""
    rng = np.random.default_rng(seed)
    paths = []
    for name, nf in zip(("train", "val"), files):
        y = np.arange(nf) % classes
        x = rng.normal(0.0, 1.0, size=(nf, longs, shorts, mels, frames)).astype(np.float32)
        for f, c in enumerate(y):
            if c:
                centre = int((c * mels) // classes)
                x[f, :, :, max(0, centre - 1):centre + 2, :] += 3.0
        p = os.path.join(out_dir, f"{name}.h5")
        with h5py.File(p, "w") as h:
            h.create_dataset("segments", data=x.astype(np.float16), chunks=(1, 1, shorts, mels, frames),
                             compression="gzip", shuffle=True)
            h.create_dataset("labels", data=y.astype(np.int32))
            h.create_dataset("leak", data=(y != 0).astype(np.uint8))
            h.attrs["class_names"] = ["normal"] + [f"leak_{c}" for c in range(1, classes)]
        paths.append(p)
    return paths


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU: " + cpu_model()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", help="train.h5")
    p.add_argument("--val", help="val.h5")
    p.add_argument("--variant", default="eager,compile,resident",
                   help="comma list of eager, compile, resident (default: all)")
    p.add_argument("--epochs", type=int, default=None, help="default 10 (1 with --dry-run)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--eval-batch-size", type=int, default=0, help="0: --batch-size")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="auto: bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--device", default="auto", help="auto | cuda | cuda:N | cpu")
    p.add_argument("--seed", type=int, default=0, help="weights and data order (melforge's train.seed)")
    p.add_argument("--init", default="melforge", choices=["melforge", "torch"],
                   help="melforge: the same initial weights as melforge for --seed; torch: PyTorch's own RNG")
    # melforge's defaults (model/run_config.hpp)
    p.add_argument("--schedule", default="cosine", choices=["cosine", "linear", "constant"])
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--min-lr-ratio", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--class-loss-weight", type=float, default=1.0)
    p.add_argument("--leak-loss-weight", type=float, default=1.0)
    p.add_argument("--loss-scale", type=float, default=65536.0)
    p.add_argument("--loss-scale-window", type=int, default=2000)
    p.add_argument("--threshold", type=float, default=0.5, help="leak decision threshold")
    p.add_argument("--channels", default="32,64,128")
    p.add_argument("--pools", default="2,2,2")
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--dense", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--model-json", help="a CNN stack's description (melforge export's model_args): train "
                                        "cnn_stack_torch.CnnStack instead of LeakCNN")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--heads", default="auto", choices=("auto", "class", "class+leak"),
                   help="melforge's model.heads (auto: class+leak when the data has /leak or a class named normal)")
    p.add_argument("--limit-batches", type=int, default=0, help="steps per epoch at most (0: all)")
    p.add_argument("--segments", default="segments")
    p.add_argument("--labels", default="labels")
    p.add_argument("--leak", default="leak")
    p.add_argument("--normal-class", type=int, default=-1)
    # the loader and the timing
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="DataLoader workers")
    p.add_argument("--prefetch", type=int, default=4, help="DataLoader prefetch_factor (batches per worker)")
    p.add_argument("--timing-warmup", type=int, default=10, help="steps left out of steady samples/s")
    p.add_argument("--compile-on-cpu", action="store_true")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--dry-run", action="store_true",
                   help="CI mode: tiny h5py-written dataset (unless --train/--val), CPU, 1 epoch, batch 8, fp32")
    p.add_argument("--no-self-check", action="store_true", help="dry run: skip the checks against melforge's values")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    a.epochs = a.epochs or 10
    a.channels = [int(c) for c in a.channels.split(",")]
    a.pools = [int(c) for c in a.pools.split(",")]
    if a.dry_run:
        a.device, a.precision = "cpu", "fp32"
        a.epochs = a.epochs or 1
        a.batch_size = min(a.batch_size, 8)
        a.workers = min(a.workers, 2)
        a.timing_warmup = 1
        a.dense = min(a.dense, 32)
        a.channels = [min(c, 8 * 2 ** i) for i, c in enumerate(a.channels)]
    return a


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    tmp = None
    if args.dry_run and not (args.train and args.val):
        tmp = tempfile.TemporaryDirectory(prefix="melforge-torch-dry-")
        args.train, args.val = write_tiny_dataset(tmp.name)
    if not (args.train and args.val):
        raise SystemExit("torch_train: --train and --val are required (or --dry-run)")
    train = H5Split(args.train, args.segments, args.labels, args.leak, args.normal_class)
    val = H5Split(args.val, args.segments, args.labels, args.leak, args.normal_class, classes=train.classes)
    args.heads = resolve_heads(args.heads, train.leak_in_file, train.class_names, args.normal_class)
    args.model_desc = load_stack_description(args.model_json, train, args.heads) if args.model_json else None
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if (val.mels, val.frames) != (train.mels, train.frames):
        raise SystemExit(f"{args.val}: segments are {val.mels}x{val.frames}, train's are {train.mels}x{train.frames}")
    device = resolve_device(args.device)
    t_orders = time.perf_counter()
    orders = [epoch_order(train.n, args.seed, e) for e in range(args.epochs)]
    orders_s = time.perf_counter() - t_orders
    out = {
        "tool": "pytorch",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "model": "CnnStack" if args.model_desc is not None else "LeakCNN",
        "python": platform.python_version(),
        "device_name": device_name(device),
        "dataset": {"train": os.path.abspath(args.train), "val": os.path.abspath(args.val),
                    "train_segments": train.n, "val_segments": val.n, "val_files": val.files,
                    "mels": train.mels, "frames": train.frames, "classes": train.classes,
                    "file_structure": [train.longs, train.shorts], "file_dtype": str(train.file_dtype)},
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "model_desc")},
        "model_description": args.model_desc,
        "order_s": orders_s,
        "runs": [],
    }
    failed = False
    requested = [s.strip() for s in args.variant.split(",") if s.strip()]
    for v in requested:
        if v not in ("eager", "compile", "resident"):
            raise SystemExit(f"--variant {v}: expected eager, compile or resident")
        try:
            r = run_variant(v, args, train, val, orders)
        except Exception as e:  # report and go on with the other variants
            traceback.print_exc()
            r = {"variant": v, "status": "failed", "reason": f"{type(e).__name__}: {e}"}
        if r["status"] == "failed":
            failed = True
        out["runs"].append(r)
        if r["status"] == "ok":
            print(f"[{v}] first step at {r['time_to_first_step_s']:.2f} s, "
                  f"{r['steady_samples_per_s']:.0f} samples/s steady, epoch {r['epoch_time_s']:.2f} s, "
                  f"val acc {r['val']['segment']['accuracy']:.3f}, file F1 {r['val']['file']['macro_f1']:.3f}",
                  flush=True)
        else:
            print(f"[{v}] {r['status']}: {r.get('reason', '')}", flush=True)
    if args.dry_run and not args.no_self_check and not self_check(out, requested):
        failed = True
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if tmp:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
