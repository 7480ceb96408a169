#!/usr/bin/env python3
"""melforge side by side with PyTorch on the same dataset and device, in one go.

Generates the dataset with `melforge data synth` (unless --data DIR is given),
runs `melforge train` and the PyTorch variants of bench/torch_train.py (eager,
torch.compile, dataset on the device; each in its own process) with the same
hyper-parameters, seed, data order and epochs, then prints one table and writes
the same as JSON (with device, date and git commit) under --out.

  compare_torch.py [--melforge build/tools/melforge] [--data DIR] [--out bench/results]
                   [--epochs 30] [--batch-size 8192] [--lr 1e-3] [--precision auto]
                   [--device auto] [--seed 0] [--variants eager,compile,resident]
  compare_torch.py --dry-run   # CI: tiny dataset, tiny model, 1 epoch, CPU

A CNN stack instead of LeakCNN (issue 16): --arch resnet34se-light (a preset),
or --arch cnn --layers-toml FILE (a TOML file whose [model] table holds the
[[model.layers]], passed to `melforge train --config`). melforge trains it
first; `melforge export` of its checkpoint gives the stack's description (the
safetensors `model_args`), from which torch_train.py builds
bench/cnn_stack_torch.py's CnnStack (--model-json FILE gives one directly,
e.g. with --no-melforge). Same data, batch order, batch size, epochs, AdamW
and schedule on both sides; PyTorch's default init (same distributions, not
the same draws). --threads sets torch's CPU threads (default for stacks: every core,
as melforge's CPU backend uses).

A metric loss (issue 20): --loss am_softmax|aam_softmax|angleproto|softmaxproto
(with --per-class M for the prototypical losses, --embedding E, --input-norm)
trains an embedding model on a set whose classes are speakers (`melforge data
synth --speakers`, default SYNTH_SPEAKERS; the leak synth's classes when the
binary lacks --speakers) on both sides: `melforge train` with loss.type etc.,
bench/torch_metric_train.py with the same trunk, loss, hyper-parameters,
batches and epochs; then one trial list of the unseen test speakers (`melforge
data trials --per-file 10 --seed 0`) scored by `melforge verify` (the final
checkpoint) and by PyTorch's file embeddings (mean of segment embeddings,
L2-normalised, cosine), the EER by the same rule (docs/verification.md).
Reported: each side's steady samples/s, test EER and minDCF (P_target 0.05
and 0.01). Whole utterances (ragged data, `data synth --utterances`):
--crop-frames N trains both sides on a new crop of N frames per utterance per
epoch (melforge: data.crop_frames; PyTorch: the same crops, io/crops.hpp's rule
ported in bench/crop_rule.py), --eval-crops K|full with --eval-crop-frames M
evaluates the test utterances the same way on both sides (melforge verify
--crops/--crop-frames). The dry mode checks torch_metric_train's numpy EER and minDCF
against melforge verify's on verify's own scores.csv. Threads: --threads sets
torch's; melforge's CPU backend follows OMP_NUM_THREADS (recorded in the JSON).

When the melforge binary has no `train` command, the melforge run is skipped
with a message and the PyTorch runs still happen. Exit status: 0 when every run
that could run succeeded (skipped/unavailable runs do not fail it), 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import glob
import shutil
import struct
import subprocess
import sys
import time

from host_cpu import cpu_model  # bench/host_cpu.py (the script's folder is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The GPU-sized synthetic set of docs/dataset.md (40,000 segments of 64x64, f16)
# and the tiny one of the dry mode (tiny model too: channels 8,16,32, dense 32).
SYNTH_FULL = "--files 2000 --long 5 --short 4"
SYNTH_DRY = "--files 24 --long 2 --short 2 --mels 16 --frames 16 --classes 3"
DRY_MODEL = {"channels": "8,16,32", "pools": "2,2,2", "dense": 32}


def leakcnn_model(args):
    """The LeakCNN both sides train: the dry mode's tiny one, else LeakCNN-64
    (channels 32,64,128, pools 2,2,2, dense 256) with --channels/--pools/--dense
    overriding (e.g. the quickstart's CPU demo: 16,32 / 2,2 / 64)."""
    if args.dry_run:
        return dict(DRY_MODEL)
    channels = args.channels or "32,64,128"
    pools = args.pools or ",".join(["2"] * len(channels.split(",")))
    return {"channels": channels, "pools": pools, "dense": args.dense or 256}


def melforge_model_args(model):
    return ["--set", f"model.channels=[{model['channels']}]", "--set", f"model.pools=[{model['pools']}]",
            "--set", f"model.dense={model['dense']}"]


def torch_model_args(model):
    return ["--channels", model["channels"], "--pools", model["pools"], "--dense", str(model["dense"])]
# Speaker sets of the metric-loss comparison (--loss): train, val and test
# speakers disjoint (test_speaker_cli's set; the dry one is smaller).
SYNTH_SPEAKERS = "--speakers 30 --files-per-speaker 6 --mels 32 --frames 32 --long 1 --short 4 --seed 1"
SYNTH_SPEAKERS_DRY = "--speakers 30 --files-per-speaker 4 --mels 16 --frames 16 --long 1 --short 2 --seed 1"
SYNTH_LEAK_TEST = "--files 120 --long 1 --short 4 --mels 32 --frames 32 --classes 6"
METRIC_LOSSES = ("am_softmax", "aam_softmax", "angleproto", "softmaxproto")


LAST_CPU_S = [None]  # user + system CPU seconds of sh()'s last child (and the children it waited for)


def sh(cmd, log=None, timeout=None, env=None):
    """Runs cmd (list); returns (rc, wall seconds, output). rc 124 on timeout.
    Its CPU seconds (user + system) go to LAST_CPU_S[0]."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           env=env)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\n[compare_torch] timed out after {timeout} s\n"
    except OSError as e:
        rc, out = 127, f"{cmd[0]}: {e}\n"
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU_S[0] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if log:
        with open(log, "w") as f:
            f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + out)
    return rc, wall, out


def find_melforge(given):
    if given:
        return given
    for c in ("build/tools/melforge", "build-gpu/tools/melforge"):
        p = os.path.join(ROOT, c)
        if os.access(p, os.X_OK):
            return p
    return shutil.which("melforge") or os.path.join(ROOT, "build/tools/melforge")


def has_command(melforge, words, expect):
    """True when `melforge WORDS --help` succeeds and mentions the option `expect`
    (an unknown subcommand may still print the top-level help)."""
    if not os.access(melforge, os.X_OK):
        return False
    rc, _, out = sh([melforge, *words, "--help"], timeout=60)
    return rc == 0 and expect in out


def git_info():
    def g(*a):
        try:
            return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": g("rev-parse", "HEAD") or None, "branch": g("rev-parse", "--abbrev-ref", "HEAD") or None,
            "dirty": bool(g("status", "--porcelain", "--untracked-files=no"))}


def gpu_name():
    rc, _, out = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=30)
    return out.strip().splitlines()[0] if rc == 0 and out.strip() else None


def torch_has_cuda(python):
    rc, _, out = sh([python, "-c", "import torch; print(int(torch.cuda.is_available()))"], timeout=120)
    return rc == 0 and out.strip().endswith("1")


# ---- melforge's report (fields looked up along several paths: the trainer's
# report.json is the source; metrics.jsonl fills what it lacks) ----

def _get(obj, path):
    for k in path:
        if isinstance(obj, dict) and k in obj:
            obj = obj[k]
        elif isinstance(obj, list) and isinstance(k, int) and -len(obj) <= k < len(obj):
            obj = obj[k]
        else:
            return None
    return obj


def _find_key(obj, key):
    """First value of `key` anywhere in obj (depth-first)."""
    if isinstance(obj, dict):
        if key in obj and not isinstance(obj[key], (dict, list)):
            return obj[key]
        for v in obj.values():
            r = _find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = _find_key(v, key)
            if r is not None:
                return r
    return None


def _first(report, paths, scale=1.0, anywhere=None):
    for p in paths:
        v = _get(report, p)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v * scale, "report.json:" + ".".join(str(x) for x in p)
    if anywhere:
        v = _find_key(report, anywhere)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v * scale, f"report.json:**.{anywhere}"
    return None, None


def read_melforge_run(run_dir, wall_s):
    report, lines = {}, []
    rp = os.path.join(run_dir, "report.json")
    if os.path.exists(rp):
        with open(rp) as f:
            report = json.load(f)
    mp = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(mp):
        with open(mp) as f:
            for line in f:
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass
    evals = [j for j in lines if j.get("type") == "eval"]
    last_eval = evals[-1] if evals else {}
    row, src = {"run": "melforge", "status": "ok", "process_wall_s": wall_s}, {}

    def put(name, value_source):
        row[name], src[name] = value_source

    put("time_to_first_step_s", _first(report, [("time_to_first_step_s",), ("timing", "time_to_first_step_s"),
                                                ("startup", "time_to_first_step_s")], anywhere="time_to_first_step_s"))
    put("steady_samples_per_s", _first(report, [("steady_samples_per_s",), ("throughput", "steady_samples_per_s"),
                                                ("throughput", "samples_per_s"), ("samples_per_s",)],
                                       anywhere="steady_samples_per_s"))
    if row["steady_samples_per_s"] is None:
        sps = [j["samples_per_s"] for j in lines if j.get("type") == "train" and "samples_per_s" in j]
        if len(sps) > 1:
            sps = sorted(sps[1:])  # the first interval holds the warm-up
            row["steady_samples_per_s"], src["steady_samples_per_s"] = sps[len(sps) // 2], "metrics.jsonl median"
    put("epoch_time_s", _first(report, [("epoch_time_s",), ("epochs", -1, "train_s"), ("epochs", -1, "epoch_time_s"),
                                        ("last_epoch", "train_s")], anywhere="epoch_time_s"))
    if row["epoch_time_s"] is None:
        put("epoch_time_s", _first(report, [("epochs", -1, "wall_ms"), ("phase_times", "wall_ms"),
                                            ("last_epoch", "wall_ms")], scale=1e-3))
    put("gpu_busy_share", _first(report, [("gpu_busy_share",), ("system", "gpu_busy_share")],
                                 anywhere="gpu_busy_share"))
    if row["gpu_busy_share"] is None:
        put("gpu_busy_share", _first(report, [("gpu_util_mean_pct",), ("system", "gpu_util_mean_pct"),
                                              ("system", "gpu_util_pct")], scale=0.01, anywhere="gpu_util_mean_pct"))
    put("data_wait_share", _first(report, [("data_wait_share",)], anywhere="data_wait_share"))
    put("peak_device_memory_bytes", _first(report, [("peak_device_memory_bytes",), ("system", "gpu_mem_peak_bytes"),
                                                    ("gpu_mem_peak_bytes",)], anywhere="peak_device_memory_bytes"))
    for name, leaf in (("val_accuracy", ("segment", "accuracy")), ("val_file_f1", ("file", "macro_f1"))):
        put(name, _first(report, [("val",) + leaf, ("final", "val") + leaf, ("final_eval",) + leaf,
                                  ("eval",) + leaf, ("best", "val") + leaf]))
        if row[name] is None:
            v = _get(last_eval, leaf) if _get(last_eval, leaf) is not None else _get(last_eval, ("val",) + leaf)
            if isinstance(v, (int, float)):
                row[name], src[name] = v, "metrics.jsonl last eval"
    if not report:
        row["note"] = f"no report.json in {run_dir}"
    row["sources"] = src
    row["missing"] = [k for k, v in src.items() if v is None and k in TABLE_KEYS]
    return row, report


def safetensors_metadata(path):
    """The __metadata__ of a .safetensors file (8-byte little-endian header
    length, then the JSON header)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def export_description(melforge, run_dir, work_dir, timeout):
    """The CNN stack description of melforge's run: `melforge export` of its
    newest checkpoint, metadata model_args, written to WORK/model.json.
    Returns (path, description) or (None, reason)."""
    ckpts = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "*.h5")) + glob.glob(os.path.join(run_dir, "*.h5")),
                   key=os.path.getmtime)
    if not ckpts:
        return None, f"no checkpoint in {run_dir}"
    st = os.path.join(work_dir, "melforge-export.safetensors")
    rc, _, out = sh([melforge, "export", "--checkpoint", ckpts[-1], "--out", st],
                    log=os.path.join(work_dir, "melforge-export.log"), timeout=timeout)
    if rc != 0:
        return None, f"melforge export failed (rc {rc}), see melforge-export.log"
    meta = safetensors_metadata(st)
    if meta.get("model") != "CnnStack":
        return None, f"{st}: metadata model is {meta.get('model')!r}, expected CnnStack"
    desc = json.loads(meta["model_args"])
    path = os.path.join(work_dir, "model.json")
    with open(path, "w") as f:
        json.dump(desc, f, indent=1)
    return path, desc


def torch_row(r):
    row = {"run": "pytorch " + r["variant"], "status": r["status"]}
    if r["status"] != "ok":
        row["reason"] = r.get("reason", "")
        return row
    row.update({k: r.get(k) for k in ("time_to_first_step_s", "compile_s", "load_s", "steady_samples_per_s",
                                      "steady_cpu_ms_per_step",
                                      "epoch_time_s", "gpu_busy_share", "gpu_busy_method", "data_wait_share",
                                      "peak_device_memory_bytes")})
    row["val_accuracy"] = r["val"]["segment"]["accuracy"]
    row["val_file_f1"] = r["val"]["file"]["macro_f1"]
    return row


COLUMNS = [("run", "run", "{}"), ("time_to_first_step_s", "first step s", "{:.2f}"), ("compile_s", "compile s", "{:.1f}"),
           ("steady_samples_per_s", "samples/s", "{:,.0f}"), ("epoch_time_s", "epoch s", "{:.2f}"),
           ("gpu_busy_share", "GPU busy", "{:.0%}"), ("val_accuracy", "val acc", "{:.4f}"),
           ("val_file_f1", "file F1", "{:.4f}"), ("peak_device_memory_bytes", "peak mem GiB", "{:.2f}")]


TABLE_KEYS = {k for k, _, _ in COLUMNS}


def fmt_cell(row, key, f):
    if row.get("status") != "ok" and key != "run":
        return "-" if key != "time_to_first_step_s" else f"({row['status']})"
    v = row.get(key)
    if v is None:
        return "n/a"
    if key == "peak_device_memory_bytes":
        v = v / 2 ** 30
    return f.format(v)


def print_table(rows):
    cells = [[h for _, h, _ in COLUMNS]] + [[fmt_cell(r, k, f) for k, _, f in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(x.ljust(widths[i]) if i == 0 else x.rjust(widths[i]) for i, x in enumerate(c)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    print("\n".join(lines))
    for r in rows:
        if r.get("status") != "ok":
            print(f"  {r['run']}: {r['status']}: {r.get('reason', '')}")
    methods = {r["run"]: r.get("gpu_busy_method") or (r.get("sources") or {}).get("gpu_busy_share")
               for r in rows if r.get("status") == "ok" and r.get("gpu_busy_share") is not None}
    for run, m in methods.items():
        print(f"  GPU busy, {run}: {m}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--melforge", help="the melforge binary (default: build/tools/melforge, then PATH)")
    p.add_argument("--data", help="a folder with train.h5 and val.h5 (default: generate into OUT/data)")
    p.add_argument("--synth", help=f"arguments of `melforge data synth` (default: {SYNTH_FULL!r})")
    p.add_argument("--out", help="where the comparison's JSON goes (default bench/results; runs/compare-dry with --dry-run)")
    p.add_argument("--work", help="dataset, run directories, logs (default OUT/compare-work with --out, "
                                  "else runs/compare)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8192)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="auto: bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", default="leakcnn",
                   help="leakcnn (default), cnn (with --layers-toml) or a preset stack (resnet34se-light)")
    p.add_argument("--layers-toml", help="--arch cnn: a TOML file with [model] arch = \"cnn\" and [[model.layers]]")
    p.add_argument("--model-json", help="a stack's description for PyTorch (default: from melforge's export)")
    p.add_argument("--channels", help="LeakCNN conv channels, e.g. 16,32 (default 32,64,128: LeakCNN-64)")
    p.add_argument("--pools", help="LeakCNN pools per conv layer (default 2 each)")
    p.add_argument("--dense", type=int, help="LeakCNN dense width (default 256)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: every core for a stack on the CPU, else torch's default)")
    p.add_argument("--variants", default="eager,compile,resident")
    p.add_argument("--workers", type=int, default=None, help="PyTorch DataLoader workers (default: torch_train's)")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch for the PyTorch runs")
    p.add_argument("--melforge-args", default="", help="extra arguments for `melforge train` (quoted)")
    p.add_argument("--torch-args", default="", help="extra arguments for torch_train.py (quoted)")
    p.add_argument("--no-melforge", action="store_true", help="PyTorch runs only")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    p.add_argument("--dry-run", action="store_true", help="CI: tiny dataset and model, 1 epoch, batch 8, CPU")
    p.add_argument("--loss", choices=METRIC_LOSSES,
                   help="train an embedding model with this metric loss on both sides; report samples/s and test EER")
    p.add_argument("--per-class", type=int, default=0, help="--loss: segments per speaker per batch (data.per_class)")
    p.add_argument("--embedding", type=int, default=0, help="--loss: embedding width (0: melforge's auto, 256 on LeakCNN)")
    p.add_argument("--input-norm", action="store_true", help="--loss: instance norm of each mel band at the input")
    p.add_argument("--trials", help="--loss: a trial list of test.h5 (default: melforge data trials --per-file 10)")
    p.add_argument("--crop-frames", type=int, default=0,
                   help="--loss, whole-utterance data: a new random crop of N frames per utterance per epoch "
                        "(melforge data.crop_frames; the same crops on PyTorch's side)")
    p.add_argument("--eval-crops", help="--loss, whole-utterance test data: K evenly spaced crops per utterance, or "
                                        "full (melforge verify --crops; default: the checkpoint's eval.crops, 1)")
    p.add_argument("--eval-crop-frames", type=int, default=0, help="frames per evaluation crop (default --crop-frames)")
    a = p.parse_args(argv)
    if a.loss is None and (a.crop_frames or a.eval_crops or a.eval_crop_frames):
        p.error("--crop-frames, --eval-crops and --eval-crop-frames go with --loss")
    if a.loss is None and (a.per_class or a.embedding or a.input_norm or a.trials):
        p.error("--per-class, --embedding, --input-norm and --trials go with --loss")
    if a.loss in ("angleproto", "softmaxproto") and a.per_class < 2:
        p.error(f"--loss {a.loss} needs --per-class M >= 2")
    if a.arch == "cnn" and not a.layers_toml:
        p.error("--arch cnn needs --layers-toml FILE")
    if a.layers_toml and a.arch != "cnn":
        p.error("--layers-toml needs --arch cnn")
    if a.loss and a.embedding == 0:
        a.embedding = 16 if a.dry_run else 256  # melforge's auto on LeakCNN; PyTorch gets it explicitly
    if a.dry_run:
        a.device, a.epochs, a.batch_size, a.precision = "cpu", 1, 8, "fp32"
        a.synth = a.synth or (SYNTH_SPEAKERS_DRY if a.loss else SYNTH_DRY)
        a.workers = 2 if a.workers is None else a.workers
    a.synth = a.synth or (SYNTH_SPEAKERS if a.loss else SYNTH_FULL)
    return a


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    # Dry runs (CI) keep out of bench/results/, which holds real measurements.
    out_dir = os.path.abspath(args.out or (os.path.join(ROOT, "runs", "compare-dry") if args.dry_run
                                           else os.path.join(HERE, "results")))
    # Bulky things (dataset, melforge's run directory, logs, per-run JSON) go to
    # the work folder, so that bench/results/ only gets the comparison's JSON.
    work_dir = os.path.abspath(args.work or (os.path.join(out_dir, "compare-work") if args.out
                                             else os.path.join(ROOT, "runs", "compare")))
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(work_dir, exist_ok=True)
    melforge = find_melforge(args.melforge)
    git = git_info()
    device = args.device
    gpu = gpu_name() if device != "cpu" else None
    torch_cuda = torch_has_cuda(args.python) if device != "cpu" else False
    if device == "auto":
        device = "cuda" if (gpu or torch_cuda) else "cpu"
        if device == "cpu" and not args.dry_run:
            print("compare_torch: no GPU here: running the dry mode instead (--device cpu for a full-size CPU run)",
                  flush=True)
            args = parse_args((argv if argv is not None else sys.argv[1:]) + ["--dry-run"])
    torch_skip = None
    if device == "cuda" and not torch_cuda:
        torch_skip = (f"{args.python} has no CUDA-enabled torch (pass --python with one): "
                      "PyTorch on the CPU beside melforge on the GPU would not be a comparison")
        print("compare_torch: " + torch_skip, flush=True)
    precision = args.precision if args.precision != "auto" else ("bf16" if device == "cuda" else "fp32")
    dev_name = (gpu if device == "cuda" else None) or ("CPU: " + cpu_model())
    print(f"compare_torch: {dev_name}, {precision}, batch {args.batch_size}, {args.epochs} epochs, "
          f"commit {(git['commit'] or '?')[:12]}{' (dirty)' if git['dirty'] else ''}", flush=True)

    if args.loss:
        return run_loss_comparison(args, melforge, out_dir, work_dir, device, precision, dev_name, git)

    # 1. The dataset.
    if args.data:
        data_dir, generator = os.path.abspath(args.data), "given"
    else:
        data_dir = os.path.join(work_dir, "data-dry" if args.dry_run else "data")
        stamp = os.path.join(data_dir, "synth.args")
        if os.path.exists(stamp) and open(stamp).read() == args.synth and \
                all(os.path.exists(os.path.join(data_dir, s)) for s in ("train.h5", "val.h5")):
            generator = f"reused ({args.synth})"
        elif has_command(melforge, ["data", "synth"], "--short"):
            rc, wall, out = sh([melforge, "data", "synth", "--out", data_dir, *shlex.split(args.synth)],
                               log=os.path.join(work_dir, "synth.log"), timeout=args.timeout)
            if rc != 0:
                print(out)
                raise SystemExit(f"compare_torch: `melforge data synth` failed (rc {rc}); see {work_dir}/synth.log")
            with open(stamp, "w") as f:
                f.write(args.synth)
            generator = f"melforge data synth {args.synth} ({wall:.1f} s)"
        elif args.dry_run:
            sys.path.insert(0, HERE)
            from torch_train import write_tiny_dataset
            os.makedirs(data_dir, exist_ok=True)
            write_tiny_dataset(data_dir)
            generator = "torch_train.write_tiny_dataset (h5py; this melforge has no `data synth`)"
        else:
            raise SystemExit(f"compare_torch: {melforge} has no `data synth` command; pass --data DIR "
                             "(a folder with train.h5 and val.h5)")
    train_h5, val_h5 = os.path.join(data_dir, "train.h5"), os.path.join(data_dir, "val.h5")
    for p in (train_h5, val_h5):
        if not os.path.exists(p):
            raise SystemExit(f"compare_torch: {p} is missing")
    print(f"dataset: {data_dir} ({generator})", flush=True)

    stack = args.arch != "leakcnn"
    if stack:
        model = {"arch": args.arch}
        if args.layers_toml:
            args.layers_toml = os.path.abspath(args.layers_toml)
            with open(args.layers_toml) as f:
                model.update(layers_toml=args.layers_toml, layers_toml_text=f.read())
        model_args = ["--set", f"model.arch={args.arch}"] + (["--config", args.layers_toml] if args.layers_toml else [])
    else:
        model = leakcnn_model(args)
        model_args = melforge_model_args(model)
    # Stacks: torch on every core by default, as melforge's CPU backend (Debian's
    # torch 1.13 defaults to 1 thread). LeakCNN keeps torch's default unless --threads.
    threads = args.threads if args.threads is not None else (os.cpu_count() if device == "cpu" and stack else None)
    model_json = os.path.abspath(args.model_json) if args.model_json else None
    rows, details, failed = [], {}, False

    # 2. melforge train.
    if args.no_melforge:
        rows.append({"run": "melforge", "status": "skipped", "reason": "--no-melforge"})
    elif not has_command(melforge, ["train"], "--batch-size"):
        msg = (f"{melforge} has no `train` command (the trainer has not landed in this build)"
               if os.access(melforge, os.X_OK) else f"no melforge binary at {melforge} (build it, or pass --melforge)")
        print(f"compare_torch: skipping the melforge run: {msg}", flush=True)
        rows.append({"run": "melforge", "status": "skipped", "reason": msg})
    else:
        run_dir = os.path.join(work_dir, "melforge-run")
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [melforge, "train", "--train", train_h5, "--val", val_h5, "--out", run_dir,
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--lr", repr(args.lr),
               "--precision", precision, "--device", device, "--seed", str(args.seed),
               "--set", f"optim.warmup_steps={args.warmup_steps}", "--set", "optim.schedule=cosine",
               *model_args, "--set", "train.drop_last=true", "--set", "log.progress=plain",
               *shlex.split(args.melforge_args)]
        print("running: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        rc, wall, out = sh(cmd, log=os.path.join(work_dir, "melforge-train.log"), timeout=args.timeout)
        if rc != 0:
            failed = True
            print(out[-3000:])
            rows.append({"run": "melforge", "status": "failed", "reason": f"rc {rc}, see melforge-train.log"})
        else:
            row, report = read_melforge_run(run_dir, wall)
            row["process_cpu_s"] = LAST_CPU_S[0]
            rows.append(row)
            details["melforge"] = {"command": cmd, "report": report}
            if stack and model_json is None:
                model_json, desc = export_description(melforge, run_dir, work_dir, args.timeout)
                if model_json is None:
                    failed = True
                    print(f"compare_torch: no stack description for PyTorch: {desc}", flush=True)
                else:
                    model["description"] = desc
            if row["missing"]:
                print(f"compare_torch: melforge's report lacks {', '.join(row['missing'])} "
                      "(shown as n/a)", flush=True)

    # 3. The PyTorch variants, one process each (one process for all in the dry
    # mode: a torch start-up per variant is most of CI's time there).
    details["pytorch"] = {}
    variants = [s.strip() for s in args.variants.split(",") if s.strip()]
    if stack and model_json is None and not torch_skip:
        torch_skip = "no stack description (melforge did not run or export failed; --model-json gives one)"
    for job in ([variants] if args.dry_run else [[v] for v in variants]):
        if torch_skip:
            rows += [{"run": "pytorch " + v, "status": "unavailable", "reason": torch_skip} for v in job]
            continue
        tag = "-".join(job)
        js = os.path.join(work_dir, f"torch-{tag}.json")
        if os.path.exists(js):
            os.remove(js)
        cmd = [args.python, os.path.join(HERE, "torch_train.py"), "--train", train_h5, "--val", val_h5,
               "--variant", ",".join(job), "--json", js, "--epochs", str(args.epochs),
               "--batch-size", str(args.batch_size), "--lr", repr(args.lr), "--precision", precision,
               "--device", device, "--seed", str(args.seed), "--warmup-steps", str(args.warmup_steps),
               "--schedule", "cosine", "--verbose"]
        cmd += ["--model-json", model_json] if stack else torch_model_args(model)
        if threads:
            cmd += ["--threads", str(threads)]
        if args.workers is not None:
            cmd += ["--workers", str(args.workers)]
        if args.dry_run:
            cmd += ["--dry-run"]
        cmd += shlex.split(args.torch_args)
        print("running: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        rc, wall, out = sh(cmd, log=os.path.join(work_dir, f"torch-{tag}.log"), timeout=args.timeout)
        runs = {}
        if os.path.exists(js):
            with open(js) as f:
                full = json.load(f)
            details["pytorch"][tag] = full
            runs = {r["variant"]: r for r in full.get("runs", [])}
        for v in job:
            r = runs.get(v)
            if r is None:
                failed = True
                print(out[-3000:])
                rows.append({"run": "pytorch " + v, "status": "failed", "reason": f"rc {rc}, see torch-{tag}.log"})
                continue
            if r["status"] == "failed":
                failed = True
            row = torch_row(r)
            row["process_wall_s"] = wall
            row["process_cpu_s"] = LAST_CPU_S[0] if len(job) == 1 else None  # one process per variant
            rows.append(row)

    # 4. The table, the ratios, the JSON.
    print()
    print_table(rows)
    ok = {r["run"]: r for r in rows if r.get("status") == "ok" and r.get("steady_samples_per_s")}
    speedups = {}
    mf = ok.get("melforge")
    torch_ok = {k: v for k, v in ok.items() if k.startswith("pytorch")}
    if mf and torch_ok:
        best = max(torch_ok.values(), key=lambda r: r["steady_samples_per_s"])
        speedups["vs_best_pytorch"] = mf["steady_samples_per_s"] / best["steady_samples_per_s"]
        speedups["best_pytorch"] = best["run"]
        if "pytorch eager" in torch_ok:
            speedups["vs_eager"] = mf["steady_samples_per_s"] / torch_ok["pytorch eager"]["steady_samples_per_s"]
        print(f"\nmelforge steady samples/s: {speedups['vs_best_pytorch']:.2f}x the best PyTorch variant "
              f"({best['run']})" + (f", {speedups['vs_eager']:.2f}x eager" if "vs_eager" in speedups else ""))
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "date": now.isoformat(timespec="seconds"),
        "device": device, "device_name": dev_name, "host_cpu": cpu_model(), "host": platform.node(),
        "git": git,
        "dry_run": args.dry_run,
        "work_dir": work_dir,
        "dataset": {"dir": data_dir, "generator": generator, "train": train_h5, "val": val_h5},
        "config": {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "precision": precision,
                   "seed": args.seed, "schedule": "cosine", "warmup_steps": args.warmup_steps,
                   "model": model, "variants": args.variants, "torch_threads": threads},
        "columns": {k: h for k, h, _ in COLUMNS},
        "rows": rows,
        "speedups": speedups,
        "details": details,
    }
    name = f"compare-{'dry-' if args.dry_run else ''}{now.strftime('%Y%m%d-%H%M%S')}.json"
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nwrote {path} (logs and per-run JSON in {work_dir})")
    return 1 if failed else 0


# ---- --loss: embedding models side by side (samples/s and test EER) ----

def speaker_dataset(args, melforge, work_dir):
    """(data_dir, generator) of the --loss comparison: --data, or a speaker
    synth (the leak synth's classes when `data synth` has no --speakers)."""
    if args.data:
        return os.path.abspath(args.data), "given"
    speakers = has_command(melforge, ["data", "synth"], "--speakers")
    synth = args.synth  # parse_args: SYNTH_SPEAKERS(_DRY) unless --synth
    if not speakers and "--speakers" in synth:
        synth = SYNTH_DRY if args.dry_run else SYNTH_LEAK_TEST
    data_dir = os.path.join(work_dir, "data-speakers-dry" if args.dry_run else "data-speakers")
    stamp = os.path.join(data_dir, "synth.args")
    if os.path.exists(stamp) and open(stamp).read() == synth and \
            all(os.path.exists(os.path.join(data_dir, s)) for s in ("train.h5", "val.h5", "test.h5")):
        return data_dir, f"reused ({synth})"
    rc, wall, out = sh([melforge, "data", "synth", "--out", data_dir, *shlex.split(synth)],
                       log=os.path.join(work_dir, "synth.log"), timeout=args.timeout)
    if rc != 0:
        print(out)
        raise SystemExit(f"compare_torch: `melforge data synth` failed (rc {rc}); see {work_dir}/synth.log")
    with open(stamp, "w") as f:
        f.write(synth)
    kind = "speakers" if "--speakers" in synth else "the leak synth's classes as speakers"
    return data_dir, f"melforge data synth {synth} ({kind}; {wall:.1f} s)"


def final_checkpoint(run_dir):
    """The newest epoch checkpoint of a run (not best.h5): the model after the
    last step, as PyTorch's side is evaluated."""
    ckpts = [c for c in glob.glob(os.path.join(run_dir, "checkpoints", "*.h5")) if os.path.basename(c) != "best.h5"]
    return max(ckpts, key=os.path.getmtime) if ckpts else None


def melforge_verify(melforge, ckpt, test_h5, trials, work_dir, timeout, extra=()):
    """`melforge verify` on the CPU: (its JSON, scores.csv path) or (None, reason)."""
    scores = os.path.join(work_dir, "melforge-scores.csv")
    cmd = [melforge, "verify", "--checkpoint", ckpt, "--data", test_h5, "--trials", trials, "--device", "cpu",
           "--out", scores, *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"melforge verify: {e}"
    with open(os.path.join(work_dir, "melforge-verify.log"), "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        return None, f"melforge verify failed (rc {p.returncode}), see melforge-verify.log"
    return json.loads(p.stdout[p.stdout.index("{"):]), scores


def check_eer_rule(scores_csv, want):
    """torch_metric_train's numpy EER on melforge verify's own scores: the two
    implementations of docs/verification.md's rule must agree."""
    sys.path.insert(0, HERE)
    from torch_metric_train import eer
    import csv
    with open(scores_csv) as f:
        rows = list(csv.DictReader(f))
    got = eer([float(r["score"]) for r in rows], [int(r["label"]) for r in rows])
    if isinstance(want, dict):  # verify's JSON: the EER and both minDCFs
        from torch_metric_train import min_dcf
        sc, lab = [float(r["score"]) for r in rows], [int(r["label"]) for r in rows]
        dcf_ok = all(abs(min_dcf(sc, lab, p) - want[f"min_dcf_{p}"]) <= 1e-6 for p in (0.05, 0.01))
        want = want["eer"]
    else:
        dcf_ok = True
    # Known answers (worked by hand from the rule): an exact crossing, an
    # interpolated one, ties across the classes (all equal: 0.5).
    known = [eer([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.5,
             abs(eer([0.3, 0.8, 0.9, 0.1, 0.5], [1, 1, 1, 0, 0]) - 1 / 3) < 1e-12,
             eer([0.2] * 4, [0, 1, 0, 1]) == 0.5]
    return got, abs(got - want) <= 1e-6 and all(known) and dcf_ok


def melforge_loss_run(args, melforge, d, trials, work_dir, device, precision, model, stack):
    """melforge train + verify; returns (row, details) and whether it failed."""
    if args.no_melforge:
        return {"run": "melforge", "status": "skipped", "reason": "--no-melforge"}, {}, False, None
    run_dir = os.path.join(work_dir, "melforge-run")
    shutil.rmtree(run_dir, ignore_errors=True)
    loss_args = ["--set", f"loss.type={args.loss}", "--set", f"model.embedding={args.embedding}",
                 "--set", "model.heads=class",
                 "--set", f"model.input_norm={'instance' if args.input_norm else 'none'}"]
    if args.per_class:
        loss_args += ["--set", f"data.per_class={args.per_class}"]
    if args.crop_frames:
        loss_args += ["--set", f"data.crop_frames={args.crop_frames}"]
    model_args = (["--set", f"model.arch={args.arch}"] + (["--config", args.layers_toml] if args.layers_toml else [])
                  if stack else melforge_model_args(model))
    cmd = [melforge, "train", "--train", os.path.join(d, "train.h5"), "--val", os.path.join(d, "val.h5"),
           "--out", run_dir, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--lr", repr(args.lr),
           "--precision", precision, "--device", device, "--seed", str(args.seed),
           "--set", f"optim.warmup_steps={args.warmup_steps}", "--set", "optim.schedule=cosine", *model_args,
           *loss_args, "--set", "train.drop_last=true", "--set", "log.progress=plain", *shlex.split(args.melforge_args)]
    print("running: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    rc, wall, out = sh(cmd, log=os.path.join(work_dir, "melforge-train.log"), timeout=args.timeout)
    if rc != 0:
        print(out[-3000:])
        return {"run": "melforge", "status": "failed", "reason": f"rc {rc}, see melforge-train.log"}, {}, True, None
    row, report = read_melforge_run(run_dir, wall)
    row = {k: row.get(k) for k in ("run", "status", "process_wall_s", "steady_samples_per_s", "epoch_time_s")}
    row["process_cpu_s"] = LAST_CPU_S[0]
    ckpt = final_checkpoint(run_dir)
    if ckpt is None:
        return dict(row, status="failed", reason=f"no checkpoint in {run_dir}"), {}, True, None
    ver, scores = melforge_verify(melforge, ckpt, os.path.join(d, "test.h5"), trials, work_dir, args.timeout,
                                  verify_crop_args(args))
    if ver is None:
        return dict(row, status="failed", reason=scores), {}, True, None
    row.update(test_eer=ver["eer"], test_min_dcf_005=ver.get("min_dcf_0.05"), test_min_dcf_001=ver.get("min_dcf_0.01"),
               test_trials=ver["trials"], checkpoint=ckpt)
    det = {"command": cmd, "report": report, "verify": ver}
    modes = args.eval_crops.split(",") if args.eval_crops else []
    if len(modes) > 1:  # the other evaluations of the same checkpoint
        by = {modes[0]: ver["eer"]}
        for mode in modes[1:]:
            w = os.path.join(work_dir, f"verify-{mode}")
            os.makedirs(w, exist_ok=True)
            v2, _ = melforge_verify(melforge, ckpt, os.path.join(d, "test.h5"), trials, w, args.timeout,
                                    verify_crop_args(args, mode))
            if v2 is None:
                return dict(row, status="failed", reason=f"verify --crops {mode}: {_}"), det, True, ckpt
            det[f"verify_{mode}"] = v2
            by[mode] = v2["eer"]
        row["test_eer_by_eval"] = by
    if args.dry_run:
        got, ok = check_eer_rule(scores, ver)
        det["eer_rule_check"] = {"numpy": got, "melforge": ver["eer"], "ok": ok}
        print(f"EER rule: numpy {got:.9f} vs melforge verify {ver['eer']:.9f} on verify's scores: "
              f"{'agree' if ok else 'DIFFER'}", flush=True)
        if not ok:
            return dict(row, status="failed", reason="numpy EER differs from melforge verify's"), det, True, ckpt
    return row, det, False, ckpt


def verify_crop_args(args, mode=None):
    """`melforge verify`'s evaluation of whole utterances, as --eval-crops/--eval-crop-frames say
    (mode: one of a comma list, default the first)."""
    mode = mode or (args.eval_crops.split(",")[0] if args.eval_crops else None)
    extra = ["--crops", mode] if mode else []
    frames = args.eval_crop_frames or args.crop_frames
    return extra + (["--crop-frames", str(frames)] if frames and mode != "full" else [])


def torch_crop_args(args):
    return ((["--crop-frames", str(args.crop_frames)] if args.crop_frames else []) +
            (["--eval-crops", args.eval_crops] if args.eval_crops else []) +
            (["--eval-crop-frames", str(args.eval_crop_frames)] if args.eval_crop_frames else []))


def torch_loss_run(args, d, trials, work_dir, device, model, model_json, threads):
    js = os.path.join(work_dir, "torch-metric.json")
    if os.path.exists(js):
        os.remove(js)
    cmd = [args.python, os.path.join(HERE, "torch_metric_train.py"), "--train", os.path.join(d, "train.h5"),
           "--test", os.path.join(d, "test.h5"), "--trials", trials, "--loss", args.loss,
           "--per-class", str(args.per_class), "--embedding", str(args.embedding), "--epochs", str(args.epochs),
           "--batch-size", str(args.batch_size), "--lr", repr(args.lr), "--warmup-steps", str(args.warmup_steps),
           "--seed", str(args.seed), "--json", js, "--verbose"]
    cmd += ["--input-norm"] if args.input_norm else []
    cmd += ["--model-json", model_json] if model_json else torch_model_args(model)
    cmd += ["--threads", str(threads)] if threads else []
    cmd += torch_crop_args(args)
    cmd += shlex.split(args.torch_args)
    if device != "cpu":
        return {"run": "pytorch", "status": "unavailable",
                "reason": "torch_metric_train.py runs on the CPU only (the GPU variant is to come)"}, {}, False
    print("running: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    rc, wall, out = sh(cmd, log=os.path.join(work_dir, "torch-metric.log"), timeout=args.timeout)
    if not os.path.exists(js):
        print(out[-3000:])
        return {"run": "pytorch", "status": "failed", "reason": f"rc {rc}, see torch-metric.log"}, {}, True
    with open(js) as f:
        full = json.load(f)
    r = full["run"]
    if r["status"] != "ok":
        return {"run": "pytorch", "status": "failed", "reason": r["reason"]}, full, True
    return {"run": "pytorch", "status": "ok", "process_wall_s": wall, "process_cpu_s": LAST_CPU_S[0],
            "steady_samples_per_s": r["steady_samples_per_s"], "test_eer": r["test"]["eer"],
            "test_min_dcf_005": r["test"].get("min_dcf_0.05"), "test_min_dcf_001": r["test"].get("min_dcf_0.01"),
            "test_trials": r["test"]["trials"], "torch_version": full["torch_version"],
            "test_eer_by_eval": {m: t["eer"] for m, t in r.get("tests", {}).items()} or None,
            "torch_threads": full["torch_threads"]}, full, False


def run_loss_comparison(args, melforge, out_dir, work_dir, device, precision, dev_name, git):
    data_dir, generator = speaker_dataset(args, melforge, work_dir)
    print(f"dataset: {data_dir} ({generator})", flush=True)
    trials = os.path.abspath(args.trials) if args.trials else os.path.join(work_dir, "trials.txt")
    if not args.trials:
        rc, _, out = sh([melforge, "data", "trials", "--data", os.path.join(data_dir, "test.h5"), "--out", trials,
                         "--per-file", "10", "--seed", "0"], log=os.path.join(work_dir, "trials.log"),
                        timeout=args.timeout)
        if rc != 0:
            print(out)
            raise SystemExit(f"compare_torch: `melforge data trials` failed (rc {rc}); pass --trials FILE")
    stack = args.arch != "leakcnn"
    model = ({"arch": args.arch} if stack else
             leakcnn_model(args))
    model = dict(model, loss=args.loss, per_class=args.per_class, embedding=args.embedding,
                 input_norm=args.input_norm, crop_frames=args.crop_frames or None, eval_crops=args.eval_crops,
                 eval_crop_frames=args.eval_crop_frames or None)
    threads = args.threads if args.threads is not None else (os.cpu_count() if device == "cpu" else None)
    mrow, mdet, mfail, ckpt = melforge_loss_run(args, melforge, data_dir, trials, work_dir, device, precision,
                                                model, stack)
    model_json = os.path.abspath(args.model_json) if args.model_json else None
    if stack and model_json is None and ckpt:
        model_json, desc = export_description(melforge, os.path.dirname(os.path.dirname(ckpt)), work_dir,
                                              args.timeout)
        model["description"] = desc
    if stack and model_json is None:
        trow, tdet, tfail = {"run": "pytorch", "status": "unavailable",
                             "reason": "no stack description (--model-json gives one)"}, {}, False
    else:
        trow, tdet, tfail = torch_loss_run(args, data_dir, trials, work_dir, device, model, model_json, threads)
    rows = [mrow, trow]
    print(f"\n{'run':<10} {'samples/s':>12} {'test EER':>10} {'minDCF.05':>10} {'trials':>8}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['run']:<10} ({r['status']}: {r.get('reason', '')})")
            continue
        dcf = r.get("test_min_dcf_005")
        print(f"{r['run']:<10} {r['steady_samples_per_s'] or float('nan'):>12,.0f} {r['test_eer']:>10.4f} "
              f"{dcf if dcf is not None else float('nan'):>10.4f} {r['test_trials']:>8}")
    ratio = None
    if all(r["status"] == "ok" and r.get("steady_samples_per_s") for r in rows):
        ratio = mrow["steady_samples_per_s"] / trow["steady_samples_per_s"]
        print(f"\nmelforge steady samples/s: {ratio:.2f}x PyTorch's")
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {"date": now.isoformat(timespec="seconds"), "device": device, "device_name": dev_name,
              "host_cpu": cpu_model(), "host": platform.node(), "git": git, "dry_run": args.dry_run,
              "work_dir": work_dir, "dataset": {"dir": data_dir, "generator": generator, "trials": trials},
              "config": {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "precision": precision,
                         "seed": args.seed, "schedule": "cosine", "warmup_steps": args.warmup_steps, "model": model,
                         "torch_threads": threads, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
              "rows": rows, "speedup_vs_pytorch": ratio, "details": {"melforge": mdet, "pytorch": tdet}}
    name = f"compare-{args.loss}-{'dry-' if args.dry_run else ''}{now.strftime('%Y%m%d-%H%M%S')}.json"
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nwrote {path} (logs in {work_dir})")
    return 1 if (mfail or tfail) else 0


if __name__ == "__main__":
    sys.exit(main())
