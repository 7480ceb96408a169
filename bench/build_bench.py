#!/usr/bin/env python3
"""`melforge data build` against the Python dataset builders users write, on the same audio.

Makes (or reuses) a folder of N one-second 16 kHz mono int16 WAVs in a few class
sub-folders (noise + tones, seeded), reads every file once so that all of it is
in the page cache, then times, R times each and interleaved:

  melforge    `melforge data build` (--threads P, --device cpu|cuda), wall clock
              around the whole command; its own `time` and `bottleneck` lines
              are kept too
  librosa     multiprocessing.Pool(P): per file soundfile.read (float32) ->
              librosa.feature.melspectrogram -> 10*log10(max(S, 1e-10)) -> the
              first `frames` frames as float16; the parent collects the rows and
              writes one HDF5 with h5py in melforge's layout
  torchaudio  the same with torchaudio.transforms.MelSpectrogram (slaney mel
              scale and norm) and torch.set_num_threads(1) in each worker

All three compute librosa.feature.melspectrogram(y, sr, n_fft, hop_length,
n_mels, fmin, fmax, center=True, pad_mode='constant', power=2.0, htk=False,
norm='slaney') in dB. The Python builders get their best set-up: one BLAS/OpenMP
thread per process (OMP_NUM_THREADS etc. = 1 unless set; P processes already
fill the cores, and more threads made librosa 5x slower here) and a wall time
that starts after the parent has imported its libraries and processed one file
(workers are forked and inherit that: librosa's first call loads numba code,
about 1.5-2 s, which each worker would otherwise pay). That start-up, measured
in a fresh interpreter, is reported apart and not charged. melforge is timed
as a whole command (process start, listing, all three splits, HDF5 writes).
Then it checks that the
outputs agree (melforge's HDF5 rows against the librosa builder's and against
librosa in float32), prints a table and writes everything to --out as JSON.

The Python side runs in .venv-bench-audio/ at the repository root, made on
first use (librosa 0.11.0, soundfile, h5py, torch/torchaudio 2.9.1 for the CPU),
unless --python names an interpreter that has them. `--builders melforge` needs
no venv (numpy and h5py are used when the running python has them: without
them the audio is written by a slower pure-Python generator and the check is
skipped).

  build_bench.py [--melforge build/tools/melforge] [--device cpu|cuda] [--files 4000]
                 [--threads P] [--repeats 3] [--work runs/build-bench] [--out FILE.json]
                 [--builders melforge,librosa,torchaudio] [--no-torchaudio] [--python PY]

Exit status 0 when every run succeeded and the check (when run) passed.
"""
import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import wave

from host_cpu import cpu_model  # bench/host_cpu.py (the script's folder is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(ROOT, ".venv-bench-audio")
REEXEC_ENV = "MELFORGE_BUILD_BENCH_REEXEC"
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# The generator's version: a folder made by another version (or other N,
# classes, seed) is made again, never silently reused.
GEN_VERSION = 1
SAMPLE_RATE = 16000
CLASSES = ("normal", "tone_low", "tone_mid", "tone_high")
# Tone frequency ranges (Hz) of the classes above; "normal" is noise alone.
TONE_HZ = {"tone_low": (200, 600), "tone_mid": (1000, 2500), "tone_high": (3000, 6500)}

# The front-end every builder computes (melforge's option names).
PARAMS = {"sample_rate": 16000, "n_fft": 1024, "hop": 256, "mels": 64, "frames": 62, "long": 1, "short": 1,
          "fmin": 0.0, "fmax": 8000.0}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--melforge", default=os.path.join(ROOT, "build", "tools", "melforge"))
    p.add_argument("--device", default="cpu", help="melforge's --device: cpu, cuda or cuda:N")
    p.add_argument("--files", type=int, default=4000, help="one-second WAV files (N)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="P: Python worker processes and melforge --threads (default: the cores)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each builder (R)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "build-bench"),
                   help="audio folder and outputs go here")
    p.add_argument("--out", default=None,
                   help="JSON file (default bench/results/audio-build-<device>-<date>.json)")
    p.add_argument("--builders", default="melforge,librosa,torchaudio")
    p.add_argument("--no-torchaudio", action="store_true", help="skip the torchaudio builder (and its install)")
    p.add_argument("--python", default=None, help="run the Python side with this interpreter instead of the venv")
    p.add_argument("--check-files", type=int, default=16, help="files whose features are compared")
    a = p.parse_args()
    a.builders = [b for b in a.builders.split(",") if b and not (a.no_torchaudio and b == "torchaudio")]
    unknown = set(a.builders) - {"melforge", "librosa", "torchaudio"}
    if unknown:
        p.error(f"--builders: unknown {sorted(unknown)}; expected melforge, librosa, torchaudio")
    if a.files < 1 or a.threads < 1 or a.repeats < 1:
        p.error("--files, --threads and --repeats must be >= 1")
    return a


# ---------------------------------------------------------------- environment

def ensure_python(args):
    """Re-runs this script under the interpreter that has the Python builders' packages:
    --python, or the venv (made and filled on first use). Returns when this one is it."""
    if os.environ.get(REEXEC_ENV) or not ({"librosa", "torchaudio"} & set(args.builders)):
        return
    if args.python:
        exe = args.python
    else:
        exe = os.path.join(VENV, "bin", "python")
        make_venv("torchaudio" in args.builders)
    env = dict(os.environ, **{REEXEC_ENV: "1"})
    for k in BLAS_THREAD_VARS:
        env.setdefault(k, "1")
    sys.stdout.flush()
    os.execve(exe, [exe, os.path.abspath(__file__)] + sys.argv[1:], env)


def make_venv(with_torch):
    exe = os.path.join(VENV, "bin", "python")
    mods = "librosa, soundfile, h5py, numpy" + (", torch, torchaudio" if with_torch else "")
    if os.path.exists(exe) and subprocess.run([exe, "-c", f"import {mods}"], capture_output=True).returncode == 0:
        return
    print(f"[build_bench] installing the Python builders' packages into {VENV} (once)", flush=True)
    if not os.path.exists(exe):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    pip = [exe, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["librosa==0.11.0", "soundfile", "h5py"], check=True)
    if with_torch:
        torch = ["torch==2.9.1", "torchaudio==2.9.1"]
        # The CPU-only wheels (about 200 MB); where that index cannot be reached,
        # the default index's wheels (with CUDA libraries, a few GB, same CPU code).
        if subprocess.run(pip + torch + ["--index-url", "https://download.pytorch.org/whl/cpu"]).returncode != 0:
            print("[build_bench] the CPU-only torch index failed; installing torch from the default index",
                  flush=True)
            subprocess.run(pip + torch, check=True)


def git(*cmd):
    try:
        return subprocess.run(["git", "-C", ROOT] + list(cmd), capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def load_now():
    try:
        up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        up = ""
    return {"loadavg_1_5_15": list(os.getloadavg()), "uptime": up}


def versions():
    v = {"python": platform.python_version()}
    for name in ("numpy", "librosa", "soundfile", "h5py", "torch", "torchaudio", "scipy"):
        try:
            mod = __import__(name)
            v[name] = getattr(mod, "__version__", "?")
        except Exception:  # noqa: BLE001 - absent or broken: recorded as absent
            pass
    try:
        import soundfile
        v["libsndfile"] = soundfile.__libsndfile_version__
    except Exception:  # noqa: BLE001
        pass
    return v


# ---------------------------------------------------------------- the audio

def wav_name(cls, i):
    return os.path.join(cls, f"{cls}_{i:06d}.wav")


def file_list(n):
    """Relative paths of the N files: file i is in class i % len(CLASSES)."""
    return [wav_name(CLASSES[i % len(CLASSES)], i) for i in range(n)]


def synth_numpy(i, seed):
    import numpy as np
    rng = np.random.default_rng([seed, i])
    cls = CLASSES[i % len(CLASSES)]
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    x = rng.normal(0.0, rng.uniform(0.02, 0.1), SAMPLE_RATE)
    if cls in TONE_HZ:
        for _ in range(int(rng.integers(1, 4))):
            f = rng.uniform(*TONE_HZ[cls])
            x += rng.uniform(0.05, 0.3) * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    return np.clip(np.round(x * 32767 * 0.7), -32768, 32767).astype("<i2").tobytes()


def synth_plain(i, seed):
    """The same kind of signal without numpy (another random stream: not the same samples)."""
    import array
    import random
    rng = random.Random(seed * 1_000_003 + i)
    cls = CLASSES[i % len(CLASSES)]
    sigma = rng.uniform(0.02, 0.1)
    tones = [(rng.uniform(*TONE_HZ[cls]), rng.uniform(0.05, 0.3), rng.uniform(0, 2 * math.pi))
             for _ in range(rng.randint(1, 3))] if cls in TONE_HZ else []
    w = [2 * math.pi * f / SAMPLE_RATE for f, _, _ in tones]
    out = array.array("h")
    for n in range(SAMPLE_RATE):
        v = rng.gauss(0.0, sigma) + sum(a * math.sin(wk * n + ph) for wk, (_, a, ph) in zip(w, tones))
        out.append(max(-32768, min(32767, round(v * 32767 * 0.7))))
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def make_audio(work, n, seed):
    """The audio folder for (n, seed), made unless a complete one with the same stamp is there."""
    try:
        import numpy  # noqa: F401
        synth, gen = synth_numpy, "numpy"
    except ImportError:
        synth, gen = synth_plain, "plain"
        print("[build_bench] no numpy: the audio is written by the pure-Python generator (about 20 ms a file)",
              flush=True)
    folder = os.path.join(work, f"audio-{n}-seed{seed}-{gen}")
    stamp = {"version": GEN_VERSION, "files": n, "seed": seed, "classes": list(CLASSES), "generator": gen}
    stamp_path = os.path.join(folder, ".stamp.json")
    try:
        with open(stamp_path) as f:
            if json.load(f) == stamp:
                return folder, False
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    for c in CLASSES:
        os.makedirs(os.path.join(folder, c))
    t0 = time.perf_counter()
    for i, rel in enumerate(file_list(n)):
        with wave.open(os.path.join(folder, rel), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(synth(i, seed))
    with open(stamp_path, "w") as f:  # last: a folder without it is incomplete
        json.dump(stamp, f)
    print(f"[build_bench] wrote {n} WAVs to {folder} in {time.perf_counter() - t0:.1f} s", flush=True)
    return folder, True


def warm_page_cache(folder, rels):
    t0, total = time.perf_counter(), 0
    for r in rels:
        with open(os.path.join(folder, r), "rb") as f:
            total += len(f.read())
    return {"bytes": total, "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- melforge

TIME_RE = re.compile(r"^time\s+([\d.]+) s wall for (\d+) files, ([\d.]+) h of audio: (\d+) files/s, "
                     r"([\d.]+) h of audio/s \((\d+) decode threads\)", re.M)
PARTS_RE = re.compile(r"read\+decode ([\d.]+) s, resample ([\d.]+) s, FFT\+mel ([\d.]+) s, write ([\d.]+) s")
BOTTLENECK_RE = re.compile(r"^bottleneck\s+(.*)$", re.M)


def melforge_cmd(args, folder, out):
    p = PARAMS
    return [args.melforge, "data", "build", "--audio", folder, "--out", out,
            "--sample-rate", str(p["sample_rate"]), "--n-fft", str(p["n_fft"]), "--hop", str(p["hop"]),
            "--mels", str(p["mels"]), "--frames", str(p["frames"]), "--long", str(p["long"]),
            "--short", str(p["short"]), "--threads", str(args.threads), "--progress", "off",
            "--device", args.device]


def cpu_seconds():
    """User + system CPU seconds of this process and its waited-for children so far."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def run_melforge(args, folder, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = melforge_cmd(args, folder, out)
    c0, t0 = cpu_seconds(), time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if p.returncode != 0:
        raise RuntimeError(f"melforge data build exited {p.returncode}:\n{p.stdout[-3000:]}")
    r = {"wall_s": wall, "cpu_s": cpu, "output": p.stdout}
    m = TIME_RE.search(p.stdout)
    if m:
        r["own"] = {"wall_s": float(m[1]), "files": int(m[2]), "audio_h": float(m[3]), "files_per_s": int(m[4]),
                    "audio_h_per_s": float(m[5]), "decode_threads": int(m[6])}
    m = PARTS_RE.search(p.stdout)
    if m:
        r["parts_s"] = dict(zip(("read+decode", "resample", "FFT+mel", "write"), map(float, m.groups())))
    m = BOTTLENECK_RE.search(p.stdout)
    if m:
        r["bottleneck"] = m[1].strip()
    return r


# ---------------------------------------------------------------- Python builders

_W = {}  # per worker process: the builder's kind and its transform


def _librosa_row(path):
    import numpy as np
    import librosa
    import soundfile
    p = PARAMS
    y, sr = soundfile.read(path, dtype="float32")
    S = librosa.feature.melspectrogram(y=y, sr=sr, n_fft=p["n_fft"], hop_length=p["hop"], n_mels=p["mels"],
                                       fmin=p["fmin"], fmax=p["fmax"], center=True, pad_mode="constant",
                                       power=2.0, htk=False, norm="slaney")
    return (10.0 * np.log10(np.maximum(S, 1e-10)))[:, :p["frames"]].astype(np.float16)


def _torch_init():
    import torch
    import torchaudio
    torch.set_num_threads(1)
    p = PARAMS
    _W["mel"] = torchaudio.transforms.MelSpectrogram(
        sample_rate=p["sample_rate"], n_fft=p["n_fft"], hop_length=p["hop"], n_mels=p["mels"], f_min=p["fmin"],
        f_max=p["fmax"], center=True, pad_mode="constant", power=2.0, norm="slaney", mel_scale="slaney")


def _torchaudio_row(path):
    import soundfile
    import torch
    y, _ = soundfile.read(path, dtype="float32")
    with torch.no_grad():
        S = _W["mel"](torch.from_numpy(y))
        db = 10.0 * torch.log10(torch.clamp(S, min=1e-10))
    return db[:, :PARAMS["frames"]].to(torch.float16).numpy()


def write_h5(out, rels, rows, labels):
    import h5py
    import numpy as np
    p = PARAMS
    with h5py.File(out, "w") as f:
        d = f.create_dataset("segments", data=rows.reshape(len(rels), p["long"], p["short"], p["mels"],
                                                           p["frames"]))
        d.attrs["n_mels"] = p["mels"]
        f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
        f.create_dataset("files", data=np.array(rels, dtype=h5py.string_dtype()))
        f.attrs["class_names"] = list(CLASSES)
        f.attrs["sample_rate"] = p["sample_rate"]
        f.attrs["hop_length"] = p["hop"]


def run_python_builder(kind, args, folder, rels, out):
    """What a user's builder does: a process pool over the files, rows back to the parent,
    one HDF5 written at the end. Returns the wall time of the whole."""
    import numpy as np
    row = _librosa_row if kind == "librosa" else _torchaudio_row
    init = _torch_init if kind == "torchaudio" else None
    paths = [os.path.join(folder, r) for r in rels]
    labels = [CLASSES.index(r.split(os.sep)[0]) for r in rels]
    if init:
        init()
    row(paths[0])  # imports and first-call set-up, inherited by the forked workers (not timed)
    c0, t0 = cpu_seconds(), time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.threads, initializer=init) as pool:
        out_rows = pool.map(row, paths, chunksize=max(1, min(64, len(paths) // (4 * args.threads))))
    rows = np.stack(out_rows)
    write_h5(out, rels, rows, labels)
    # The workers were reaped when the pool closed: their CPU time is in RUSAGE_CHILDREN.
    return {"wall_s": time.perf_counter() - t0, "cpu_s": cpu_seconds() - c0}


def startup_time(kind, first_file):
    """Seconds for a fresh interpreter to import the builder's libraries and process one
    file (not charged to the builder; the first run also fills numba's on-disk cache)."""
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import build_bench as b; "
            + ("b._torch_init(); b._torchaudio_row" if kind == "torchaudio" else "b._librosa_row")
            + f"({first_file!r})")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


# ---------------------------------------------------------------- the check

def read_melforge_rows(out_dir):
    """{relative path: (segment [mels, frames] f16, class name)} over melforge's three files."""
    import h5py
    rows = {}
    for split in ("train", "val", "test"):
        path = os.path.join(out_dir, f"{split}.h5")
        if not os.path.exists(path):
            continue
        with h5py.File(path, "r") as f:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["files"][:]]
            cls = f["segments"].attrs.get("class_names", f.attrs.get("class_names"))
            cls = [c.decode() if isinstance(c, bytes) else str(c) for c in cls]
            labels, seg = f["labels"][:], f["segments"]
            for i, n in enumerate(names):
                rows[n] = (seg[i, 0, 0], cls[int(labels[i])])
    return rows


def f16_half_ulp(x):
    import numpy as np
    a = np.abs(x.astype(np.float32))
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -14)))
    return 2.0 ** (e - 11)


def check_outputs(args, folder, rels, mf_out, lib_h5):
    """melforge's rows against the librosa builder's (both f16: max |diff| < 0.1 dB) and
    against librosa in float32 (within half an f16 ulp + 0.002 dB)."""
    import h5py
    import numpy as np
    mf = read_melforge_rows(mf_out)
    r = {"melforge_rows": len(mf), "files": len(rels)}
    missing = [x for x in rels if x not in mf]
    bad_label = [x for x in rels if x in mf and mf[x][1] != x.split(os.sep)[0]]
    k = min(args.check_files, len(rels))
    pick = [i for i in sorted({round(j * (len(rels) - 1) / max(1, k - 1)) for j in range(k)}) if rels[i] in mf]
    with h5py.File(lib_h5, "r") as f:
        lib = f["segments"][pick, 0, 0]
    diff_f16, excess_f32 = 0.0, -1.0
    for j, i in enumerate(pick):
        a = mf[rels[i]][0].astype(np.float32)
        diff_f16 = max(diff_f16, float(np.max(np.abs(a - lib[j].astype(np.float32)))))
        ref = _librosa_f32(os.path.join(folder, rels[i]))
        excess_f32 = max(excess_f32, float(np.max(np.abs(a - ref) - f16_half_ulp(ref))))
    r.update({"checked_files": [rels[i] for i in pick], "max_abs_diff_db_vs_librosa_builder_f16": diff_f16,
              "max_excess_over_half_f16_ulp_db_vs_librosa_f32": excess_f32,
              "missing_in_melforge": len(missing), "wrong_class": len(bad_label)})
    r["ok"] = bool(pick and not missing and not bad_label and diff_f16 < 0.1 and excess_f32 <= 0.002)
    return r


def _librosa_f32(path):
    import numpy as np
    import librosa
    import soundfile
    p = PARAMS
    y, sr = soundfile.read(path, dtype="float32")
    S = librosa.feature.melspectrogram(y=y, sr=sr, n_fft=p["n_fft"], hop_length=p["hop"], n_mels=p["mels"],
                                       fmin=p["fmin"], fmax=p["fmax"], center=True, pad_mode="constant",
                                       power=2.0, htk=False, norm="slaney")
    return (10.0 * np.log10(np.maximum(S.astype(np.float64), 1e-10)))[:, :p["frames"]].astype(np.float32)


def check_torchaudio(lib_h5, ta_h5):
    import h5py
    import numpy as np
    with h5py.File(lib_h5, "r") as a, h5py.File(ta_h5, "r") as b:
        d = np.abs(a["segments"][:].astype(np.float32) - b["segments"][:].astype(np.float32))
    return {"max_abs_diff_db_vs_librosa_builder_f16": float(d.max()),
            "share_of_values_differing": float(np.mean(d > 0))}


# ---------------------------------------------------------------- report

def summarize(walls, cpus, n):
    """Wall times (best and median) and CPU time: user + system seconds of every process
    of the builder, a measure of its work that the other load on the machine moves less."""
    lo, med = min(walls), statistics.median(walls)
    return {"walls_s": walls, "cpu_s": cpus, "cpu_ms_per_file_median": 1000 * statistics.median(cpus) / n,
            "min_s": lo, "median_s": med, "files_per_s_best": n / lo,
            "files_per_s_median": n / med, "audio_h_per_s_median": n / 3600 / med,
            "audio_h_per_s_best": n / 3600 / lo}


def print_table(summary, n):
    mf = summary.get("melforge")
    print("\n| builder | min s | median s | files/s (median) | audio-h/s (median) | CPU ms/file | "
          "melforge speed-up (median, min) |")
    print("|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        up = "" if not mf or name == "melforge" else \
            f"{s['median_s'] / mf['median_s']:.1f}x, {s['min_s'] / mf['min_s']:.1f}x"
        print(f"| {name} | {s['min_s']:.2f} | {s['median_s']:.2f} | {s['files_per_s_median']:,.0f} | "
              f"{s['audio_h_per_s_median']:.2f} | {s['cpu_ms_per_file_median']:.3f} | {up} |")
    print(f"({n} one-second files)")


def run_all(args, folder, rels, work, result):
    walls = {b: [] for b in args.builders}
    cpus = {b: [] for b in args.builders}
    mf_out = os.path.join(work, "out-melforge")
    py_out = {b: os.path.join(work, f"out-{b}.h5") for b in ("librosa", "torchaudio")}
    for rep in range(args.repeats):
        for b in args.builders:
            if b == "melforge":
                r = run_melforge(args, folder, mf_out)
                result["melforge_runs"].append({k: v for k, v in r.items() if k != "output"})
                result["melforge_last_output"] = r["output"]
            else:
                r = run_python_builder(b, args, folder, rels, py_out[b])
            walls[b].append(r["wall_s"])
            cpus[b].append(r["cpu_s"])
            why = f"  ({r['bottleneck']})" if "bottleneck" in r else ""
            print(f"[build_bench] repeat {rep + 1}/{args.repeats} {b:<10} {r['wall_s']:7.2f} s  "
                  f"{len(rels) / r['wall_s']:9,.0f} files/s  {r['cpu_s']:6.2f} CPU s{why}", flush=True)
    return walls, cpus, mf_out, py_out


def main():
    args = parse_args()
    ensure_python(args)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(HERE, "results", f"audio-build-{args.device.split(':')[0]}-{date}.json")
    if "melforge" in args.builders and not os.access(args.melforge, os.X_OK):
        sys.exit(f"build_bench: no melforge binary at {args.melforge} (build the melforge target; --melforge PATH)")

    folder, made = make_audio(work, args.files, args.seed)
    rels = file_list(args.files)
    result = {
        "bench": "audio-build", "date": date, "time": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "host": platform.node(),
                    "kernel": platform.release()},
        "melforge": {"commit": git("rev-parse", "HEAD"), "describe": git("describe", "--always", "--dirty"),
                     # the binary may be built from a tree with changes not in the commit
                     "worktree_changes": git("status", "--porcelain", "--untracked-files=all").splitlines(),
                     "binary": os.path.abspath(args.melforge), "device": args.device,
                     "command": " ".join(melforge_cmd(args, folder, "OUT"))},
        "versions": versions(), "files": args.files, "audio_seconds_per_file": 1.0, "processes_P": args.threads,
        "repeats_R": args.repeats, "params": PARAMS, "builders": args.builders, "audio_folder": folder,
        "audio_made_now": made, "load_before": load_now(), "melforge_runs": [],
    }
    result["page_cache_warm"] = warm_page_cache(folder, rels)
    result["python_env"] = {k: os.environ.get(k) for k in BLAS_THREAD_VARS}
    result["python_startup_s"] = {b: startup_time(b, os.path.join(folder, rels[0]))
                                  for b in args.builders if b != "melforge"}
    walls, cpus, mf_out, py_out = run_all(args, folder, rels, work, result)
    result["load_after"] = load_now()
    result["summary"] = {b: summarize(w, cpus[b], args.files) for b, w in walls.items()}
    if "melforge" in walls:
        for b, s in result["summary"].items():
            if b != "melforge":
                s["melforge_speedup_median"] = s["median_s"] / result["summary"]["melforge"]["median_s"]
                s["melforge_speedup_min"] = s["min_s"] / result["summary"]["melforge"]["min_s"]
    ok = True
    if "melforge" in walls and "librosa" in walls:
        result["check"] = check_outputs(args, folder, rels, mf_out, py_out["librosa"])
        ok = result["check"]["ok"]
    if "torchaudio" in walls and "librosa" in walls:
        result["check_torchaudio"] = check_torchaudio(py_out["librosa"], py_out["torchaudio"])

    print_table(result["summary"], args.files)
    if "melforge_last_output" in result:
        print("\nmelforge's last run:\n" + "\n".join("  " + l for l in result["melforge_last_output"].splitlines()))
    if "check" in result:
        c = result["check"]
        print(f"\ncheck ({'ok' if ok else 'FAILED'}): {c['melforge_rows']} melforge rows for {c['files']} files "
              f"({c['missing_in_melforge']} missing, {c['wrong_class']} in the wrong class); "
              f"{len(c['checked_files'])} files: max |melforge - librosa builder| = "
              f"{c['max_abs_diff_db_vs_librosa_builder_f16']:.4f} dB (both f16; allowed < 0.1), "
              f"|melforge - librosa f32| exceeds half an f16 ulp by at most "
              f"{c['max_excess_over_half_f16_ulp_db_vs_librosa_f32']:.4f} dB (allowed 0.002)")
    if "check_torchaudio" in result:
        print(f"torchaudio builder vs librosa builder: max |diff| = "
              f"{result['check_torchaudio']['max_abs_diff_db_vs_librosa_builder_f16']:.4f} dB (f16; information)")
    print(f"load average before {result['load_before']['loadavg_1_5_15']}, "
          f"after {result['load_after']['loadavg_1_5_15']}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
