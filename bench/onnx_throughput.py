#!/usr/bin/env python3
"""ONNX Runtime's CPU throughput on melforge's exported speaker models, beside
melforge's own extraction (`melforge-bench verify`) of the same model, shapes,
batch and threads, on the same machine, one after the other (issue 34).

The model: `--arch` (leakcnn or resnet34se-light) with instance norm at the
input, an embedding layer of 256 and the aam_softmax loss, which is what
`melforge-bench verify` builds. melforge trains it for one step on synthetic
data (the weights do not change the time), exports it with
`melforge export --format onnx`, and ONNX Runtime (CPU provider, all graph
optimisations, intra_op_num_threads = --threads) runs FILES x SEGMENTS
random log-mel segments in batches of --batch, then each file's embedding as
melforge computes it (the L2-normalised mean of its segments' embeddings).
Median of --repeats timed passes after one warm-up, as melforge-bench.

  .venv-onnx/bin/python bench/onnx_throughput.py --arch resnet34se-light --mels 40 --frames 200 \
      --threads 2 --json bench/results/onnx-throughput-cpu-DATE-resnet.json
Run nothing else meanwhile: both sides use --threads cores.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_cpu import cpu_model  # noqa: E402


def run(*cmd: str) -> str:
    p = subprocess.run(list(cmd), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def export_model(a: argparse.Namespace, work: Path) -> Path:
    """One training step of the benchmarked model, exported to ONNX."""
    data = work / "data"
    run(a.melforge, "data", "synth", "--out", str(data), "--files", "20", "--mels", str(a.mels), "--frames",
        str(a.frames), "--long", "1", "--short", "2", "--seed", "1")
    sets = ["loss.type=aam_softmax", "model.embedding=256", "model.input_norm=instance", "train.limit_batches=1"]
    if a.arch != "leakcnn":
        sets.append(f"model.arch={a.arch}")
    args = [a.melforge, "train", "--train", str(data / "train.h5"), "--out", str(work / "run"), "--epochs", "1",
            "--batch-size", "8", "--device", "cpu", "--progress", "plain"]
    for s in sets:
        args += ["--set", s]
    run(*args)
    ckpt = sorted((work / "run" / "checkpoints").glob("ckpt-*.h5"))[-1]
    out = work / f"{a.arch}.onnx"
    print(run(a.melforge, "export", "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(out)).strip())
    return out


def time_onnxruntime(a: argparse.Namespace, path: Path) -> dict:
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    n = a.files * a.segments
    x = (np.random.default_rng(1).standard_normal((n, a.mels, a.frames)) * 10 - 40).astype(np.float32)

    def one_pass() -> np.ndarray:
        rows = [sess.run(["embedding"], {"logmel": x[i:i + a.batch]})[0] for i in range(0, n, a.batch)]
        f = np.concatenate(rows).reshape(a.files, a.segments, -1).mean(axis=1)
        return f / np.linalg.norm(f, axis=1, keepdims=True)

    one_pass()  # warm-up: ONNX Runtime's first run allocates and picks kernels
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        files = one_pass()
        times.append(time.perf_counter() - t0)
    assert np.all(np.isfinite(files))
    t = statistics.median(times)
    return {"segments_per_s": n / t, "files_per_s": a.files / t, "median_s": t, "times_s": times,
            "embedding_dim": int(files.shape[1])}


def time_melforge(a: argparse.Namespace, work: Path) -> dict:
    out = work / "melforge-bench"
    log = run(a.melforge_bench, "--out-dir", str(out), "verify", "--device", "cpu", "--arch", a.arch, "--mels",
              str(a.mels), "--frames", str(a.frames), "--embedding", "256", "--files", str(a.files),
              "--segments-per-file", str(a.segments), "--batch", str(a.batch), "--repeats", str(a.repeats),
              "--threads", str(a.threads), "--trials", "1000", "--score-files", "100")
    print(log.strip())
    res = json.load(open(sorted(out.glob("verify-*.json"))[-1]))
    kernels = [line for line in run(a.melforge, "info").splitlines() if line.startswith("cpu kernels:")]
    return res["results"]["extraction"] | {"cpu_kernels": kernels[0].split(":", 1)[1].split("(")[0].strip()
                                           if kernels else "unknown"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="leakcnn", choices=["leakcnn", "resnet34se-light"])
    ap.add_argument("--mels", type=int, default=64)
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--segments", type=int, default=4, help="segments per file")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--melforge", default="build/tools/melforge")
    ap.add_argument("--melforge-bench", default="build/bench/melforge-bench")
    ap.add_argument("--work", default="/tmp/onnx-throughput")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    work = Path(a.work) / f"{a.arch}-{a.mels}x{a.frames}-b{a.batch}-t{a.threads}"
    run("rm", "-rf", str(work))
    work.mkdir(parents=True)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    path = export_model(a, work)
    ox = time_onnxruntime(a, path)
    mf = time_melforge(a, work)
    if ox["embedding_dim"] != mf.get("embedding_dim"):
        sys.exit(f"the exported model's embedding has {ox['embedding_dim']} values, melforge-bench's "
                 f"{mf.get('embedding_dim')}: not the same model")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "commit": commit, "cpu": cpu_model(),
              "cores": os.cpu_count(), "threads": a.threads, "onnxruntime": ort.__version__,
              "model": {"arch": a.arch, "mels": a.mels, "frames": a.frames, "embedding": 256,
                        "input_norm": "instance", "loss": "aam_softmax"},
              "batch": a.batch, "files": a.files, "segments_per_file": a.segments, "repeats": a.repeats,
              "onnxruntime_cpu": ox, "melforge_cpu": mf,
              "melforge_over_onnxruntime": mf["segments_per_s"] / ox["segments_per_s"]}
    print(f"\nembedding extraction, {a.arch} {a.mels}x{a.frames}, batch {a.batch}, {a.files} files x {a.segments} "
          f"segments, {a.threads} thread(s), {result['cpu']}")
    print(f"{'':34s} {'segments/s':>11s} {'files/s':>9s} {'median s':>9s}")
    for name, r in [(f"ONNX Runtime {ort.__version__} (CPU)", ox), ("melforge-bench verify (CPU)", mf)]:
        print(f"{name:34s} {r['segments_per_s']:11.1f} {r['files_per_s']:9.1f} {r['median_s']:9.3f}")
    print(f"{'melforge / ONNX Runtime':34s} {result['melforge_over_onnxruntime']:10.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
