#!/usr/bin/env python3
"""PyTorch side of `melforge-bench verify`'s embedding extraction (issue 20):
the same model at the same shapes, timed the same way, so that the two can be
compared side by side (bench/extract_side_by_side.sh runs both).

What is timed (bench/bench_verify.cpp, bench_extraction): a synthetic set of
--files x --segments-per-file segments held in memory (torch.randn, seeded;
melforge draws uniform dB-like values, which does not change the work), then
per repeat: the model's embedding (model.embed: the trunk and the embedding
layer; no class head, no loss) of every --batch segments under
torch.inference_mode() into one [N, E] f32 tensor, the mean of each file's
segments, L2 normalisation. One untimed warm-up pass, then the median of
--repeats. Reported: seconds, files/s, segments/s, the forward's share, the
FLOPs of one segment (torch.utils.flop_counter, beside melforge's count),
parameter counts, torch version, threads, CPU; --json PATH writes them.

The model, random init (the weights do not change the cost), model.eval():
  --arch leakcnn (default)   bench/leakcnn_torch.py's LeakCNN as melforge-bench
                             verify builds it: channels 32,64,128, pools
                             2,2,2, k 3, dense 256, no leak head, the loss's
                             module, --embedding 256, --input-norm 1.
  --arch resnet34se-light    melforge's preset (model/cnn_layers.cpp,
                             cnn_preset), bench/cnn_stack_torch.py's CnnStack:
                             stem conv 7x7/2 16 + BN, residual stages 3,4,6,3
                             at 16,32,64,128 (strides 1,2,2,1), SE 8,
                             attentive pooling (mean), dense 512 (no ReLU),
                             then the --embedding layer (512 -> 256 by default,
                             as melforge-bench verify adds it).
  --arch cnn --layers-toml F the [[model.layers]] of a TOML file (e.g.
                             bench/results/cnn-stack-small.toml).
Batch norm runs in eval mode with its running statistics, unfolded: melforge
folds each BN that follows a conv into the conv at inference, PyTorch eager
does not (--fold-bn folds them with torch.nn.utils.fusion.fuse_conv_bn_eval,
to see what folding is worth on PyTorch's side; off by default, as a plain
PyTorch user runs it).

Memory format: --channels-last (model and input in torch.channels_last, the
layout oneDNN prefers) or --no-channels-last (contiguous NCHW). The default
is channels-last, measured faster here: on the 2-core AMD EPYC dev box
(torch 2.15.0+cu132 on the CPU, 1 thread, short runs beside a build)
resnet34se-light at 40x200 (32 segments in one batch) took ~0.16 s vs ~0.23 s
(~1.4x) and LeakCNN at 64x64 (64 segments) ~0.13 s vs ~0.25 s (~1.9x).
Precision: fp32 only.

  .venv-torch/bin/python bench/torch_extract.py --arch resnet34se-light --mels 40 --frames 200 \\
      --batch 64 --threads 2 [--files 256] [--segments-per-file 4] [--repeats 3] [--json PATH]
  .venv-torch/bin/python bench/torch_extract.py --dry-run      # CI: tiny shapes, 1 repeat, seconds
"""
import argparse
import json
import os
import statistics
import sys
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_stack_torch import CnnStack, ResidualBlock, ConvLayer  # noqa: E402
from leakcnn_torch import LeakCNN  # noqa: E402
from host_cpu import cpu_model  # noqa: E402

# melforge-bench verify's defaults (bench/bench_verify.cpp, VerifyOptions; files 256 on the CPU),
# and the tiny ones of --dry-run. An option given on the command line wins over both.
DEFAULTS = dict(mels=64, frames=64, classes=1000, files=256, segments_per_file=4, batch=256, repeats=3)
DRY = dict(mels=16, frames=32, classes=10, files=8, segments_per_file=2, batch=8, repeats=1)


def resnet34se_light():
    """model/cnn_layers.cpp cnn_preset("resnet34se-light") as CnnStack's layer list."""
    layers = [{"type": "conv", "k": 7, "cout": 16, "stride": 2, "batch_norm": True, "bias": False}]
    for blocks, cout, stride in zip((3, 4, 6, 3), (16, 32, 64, 128), (1, 2, 2, 1)):
        layers += [{"type": "residual", "cout": cout, "stride": stride if b == 0 else 1, "se": 8}
                   for b in range(blocks)]
    return layers + [{"type": "attentive_stats_pool"}, {"type": "dense", "units": 512, "activation": "none"}]


def toml_layers(path):
    """[[model.layers]] of a melforge TOML file, in the description's form (stats "mean+std" -> true)."""
    with open(path, "rb") as f:
        layers = tomllib.load(f).get("model", {}).get("layers", [])
    if not layers:
        sys.exit(f"{path}: expected [[model.layers]] tables (docs/models.md), found none")
    out = []
    for spec in layers:
        spec = dict(spec)
        if spec.get("type") == "attentive_stats_pool" and "stats" in spec:
            spec["stats"] = spec["stats"] == "mean+std"
        out.append(spec)
    return out


def build_model(a):
    common = dict(embedding=a.embedding, input_norm=a.input_norm, loss=a.loss)
    if a.arch == "leakcnn":
        # As bench/torch_metric_train.py's build_model, with melforge's LeakCNN defaults (model/model_config.hpp).
        return LeakCNN(a.mels, a.frames, (32, 64, 128), (2, 2, 2), 3, 256, 0.0, a.classes, leak_head=False, **common)
    layers = resnet34se_light() if a.arch == "resnet34se-light" else toml_layers(a.layers_toml)
    desc = {"in_mels": a.mels, "in_frames": a.frames, "classes": a.classes, "leak_head": False, "layers": layers}
    return CnnStack(desc, **common)


def fold_batch_norm(model):
    """Folds every BN that follows a conv into that conv (eval mode), as melforge's forward_eval does."""
    fuse = torch.nn.utils.fusion.fuse_conv_bn_eval
    for m in model.modules():
        if isinstance(m, ConvLayer) and m.bn is not None:
            m.conv, m.bn = fuse(m.conv, m.bn), None
        elif isinstance(m, ResidualBlock):
            m.conv1, m.bn1 = fuse(m.conv1, m.bn1), nn.Identity()
            m.conv2, m.bn2 = fuse(m.conv2, m.bn2), nn.Identity()
            if m.downsample is not None:
                m.downsample = nn.Sequential(fuse(m.downsample[0], m.downsample[1]))


def flops_per_segment(model, x1):
    """Forward FLOPs of one segment (conv, linear, matmul: 2 per multiply-add) by torch's counter;
    0 on a torch without it (before 2.1, e.g. Debian's python3-torch that CI's dry run uses)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return 0
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        model.embed(x1)
    return fc.get_total_flops()


def extract(model, data, files, per_file, batch, out_dim):
    """One pass: embeddings of every batch into [N, E], mean per file, L2 norm.
    Returns (file embeddings, seconds total, seconds of the forward)."""
    n = data.shape[0]
    t0 = time.perf_counter()
    with torch.inference_mode():
        emb = torch.empty(n, out_dim, dtype=torch.float32)
        for done in range(0, n, batch):
            emb[done:done + batch] = model.embed(data[done:done + batch])
        t1 = time.perf_counter()
        f = F.normalize(emb.view(files, per_file, out_dim).mean(dim=1), dim=1)
    return f, time.perf_counter() - t0, t1 - t0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="leakcnn", choices=("leakcnn", "resnet34se-light", "cnn"))
    p.add_argument("--layers-toml", help="--arch cnn: a TOML file whose [model] table holds the layers")
    p.add_argument("--loss", default="aam_softmax", help="the loss's module (parameters only; unused by extraction)")
    p.add_argument("--embedding", type=int, default=256, help="embedding width (0: none)")
    p.add_argument("--input-norm", type=lambda s: s.lower() in ("1", "true", "on", "yes"), default=True,
                   help="instance norm of each mel band at the input: 1|0 (default 1)")
    for k in ("mels", "frames", "classes", "files", "segments-per-file", "batch", "repeats"):
        p.add_argument(f"--{k}", type=int, help=f"default {DEFAULTS[k.replace('-', '_')]} "
                       f"({DRY[k.replace('-', '_')]} with --dry-run)")
    p.add_argument("--precision", default="fp32", choices=("fp32",))
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default, OMP_NUM_THREADS)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True,
                   help="model and input in torch.channels_last (default: on, measured faster here)")
    p.add_argument("--fold-bn", action="store_true", help="fold conv+BN like melforge (default: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results to this JSON file")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, 1 repeat (CI)")
    a = p.parse_args(argv)
    for k, v in (DRY if a.dry_run else DEFAULTS).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if (a.arch == "cnn") != bool(a.layers_toml):
        p.error("--layers-toml goes with --arch cnn (and --arch cnn needs it)")
    if min(a.files, a.segments_per_file, a.batch, a.repeats) < 1:
        p.error("expected --files, --segments-per-file, --batch, --repeats >= 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build_model(a).eval()
    params_total = sum(t.numel() for t in model.parameters())
    params_loss = sum(t.numel() for n, t in model.named_parameters() if n.startswith(("loss.", "class_head.")))
    has_bn = any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    if a.fold_bn:
        fold_batch_norm(model)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    files, per_file, n = a.files, a.segments_per_file, a.files * a.segments_per_file
    g = torch.Generator().manual_seed(a.seed)
    data = torch.randn(n, 1, a.mels, a.frames, generator=g).contiguous(memory_format=fmt)
    with torch.inference_mode():
        out_dim = model.embed(data[:1]).shape[1]
    flops = flops_per_segment(model, data[:1])

    total, forward = [], []
    for r in range(a.repeats + 1):
        f, t, tf = extract(model, data, files, per_file, a.batch, out_dim)
        if r > 0:  # r == 0: warm-up
            total.append(t)
            forward.append(tf)
    norm_err = float((f.norm(dim=1) - 1).abs().max())
    if not norm_err < 1e-5:
        sys.exit(f"torch_extract: a file embedding has norm error {norm_err} (non-finite model output?)")
    t, tf = statistics.median(total), statistics.median(forward)
    threads = torch.get_num_threads()
    fmt_name = "channels_last" if a.channels_last else "NCHW"
    bn = ("folded" if a.fold_bn else "unfolded (eval mode)") if has_bn else "none in the model"
    print(f"torch_extract: PyTorch {torch.__version__} on {cpu_model()} ({threads} threads): {a.arch} with loss "
          f"{a.loss}, embedding {out_dim}, input_norm {int(a.input_norm)}, {fmt_name}, BN {bn}; "
          f"{params_total - params_loss} parameters on the "
          f"extraction path ({params_total} with the loss's)")
    print(f"extraction: {files} files x {per_file} segments of {a.mels}x{a.frames}, batch {a.batch}, fp32: {t:.3f} s "
          f"(median of {a.repeats}), {files / t:.1f} files/s, {n / t:.1f} segments/s; forward {100 * tf / t:.1f}%, "
          f"pooling {100 * (t - tf) / t:.1f}%; {flops / 1e9:.3f} GFLOP/segment, {flops * n / tf / 1e9:.2f} GFLOP/s")
    res = {"suite": "torch_extract",
           "torch": torch.__version__, "cpu": cpu_model(), "threads": threads,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "model": {"arch": a.arch, "loss": a.loss, "embedding": out_dim, "input_norm": a.input_norm,
                     "mels": a.mels, "frames": a.frames, "classes": a.classes,
                     "layers_toml": a.layers_toml, "params_extraction": params_total - params_loss,
                     "params_total": params_total},
           "memory_format": fmt_name, "fold_bn": a.fold_bn and has_bn, "batch_norm": has_bn, "dry_run": a.dry_run,
           "extraction": {"files": files, "segments_per_file": per_file, "batch": a.batch, "precision": "fp32",
                          "embedding_dim": out_dim, "runs_s": total, "forward_runs_s": forward, "median_s": t,
                          "files_per_s": files / t, "segments_per_s": n / t, "forward_share": tf / t,
                          "forward_flops_per_segment": flops, "forward_GFLOPs": flops * n / tf / 1e9,
                          "norm_error_max": norm_err}}
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=2)
            fh.write("\n")
        print(f"wrote {a.json}")
    return res


if __name__ == "__main__":
    main()
