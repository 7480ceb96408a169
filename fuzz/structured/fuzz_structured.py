#!/usr/bin/python3
# fuzz_structured.py: a structure-aware fuzzer of melforge's file inputs (docs/fuzzing.md,
# "Structure-aware fuzzing of the commands").
#
# Contract. The libFuzzer targets in fuzz/ flip bytes under one reader's entry point; this
# script makes *well-formed containers holding the wrong thing* (type and shape confusion:
# a scalar where an array belongs, an array of another rank or dtype, strings that are not
# UTF-8, integers at their limits, NaN/inf, empty and deleted objects, attributes moved to
# datasets, extents that disagree, wrong JSON/TOML inside checkpoints, safetensors headers
# that lie), plus ~10% byte damage of the HDF5 and safetensors files, and drives the real
# `melforge` commands on them (always `--device cpu`, outputs in a temporary folder). Each
# run is classified:
#   accepted  exit 0
#   crash     killed by a signal, or stderr has a sanitizer report, "terminate called", ...
#             outside melforge's own error line (which may report, by design, that the
#             HDF5 library crashed in the isolated child process that read the file)
#   hang      still running after --timeout seconds (30; process group killed)
#   clean     non-zero exit and the "melforge: error:" text names the mutated file (path or
#             basename; for a config: the file or the mutated key) AND an entry (the mutated
#             object/key, another object of that file, "line N" or FILE:LINE, "tensor '...'",
#             "header"; for byte damage a file-level diagnosis such as "HDF5"/"damaged"/
#             "truncated"/"CRC"; paths are blanked first, so a folder name never counts) AND
#             holds none of UNCLEAR_MARKERS (and stderr has no HDF5-DIAG dump)
#   unclear   any other non-zero exit
# Each run: its own process group, OMP_NUM_THREADS=1, an address-space limit
# (--mem-limit-mb, 4096: an absurd allocation fails instead of swapping the machine),
# MELFORGE_ISOLATE_TIMEOUT = timeout/3.
# Inputs, mutations and command choice are deterministic for a given --seed (a mutation is
# a JSON description that fully determines the file made from the fixture).
#
# Usage (Python 3 with h5py and numpy; tomllib or tomli):
#   fuzz/structured/fuzz_structured.py --melforge build/tools/melforge --work /tmp/fz \
#       --inputs 200 --seed 1 [--kinds dataset,checkpoint,safetensors,config,trials] \
#       [--jobs 1] [--save-findings DIR] [--mpirun /usr/bin/mpirun]
#     -> one line per unclear/crash/hang, a table per kind and command, WORK/results.jsonl
#        (one record per input), WORK/summary.json; exit 1 when any unclear/crash/hang.
#   fuzz/structured/fuzz_structured.py --melforge build/tools/melforge --work /tmp/fz \
#       --replay tests/fuzz_regressions/structured
#     -> runs every CASES/**/case.json (saved by --save-findings: the mutated file, a command
#        template with {placeholders} for the fixtures, the mutation, the outcome) and exits 1
#        unless each ends as a clean error (or accepted, where case.json says
#        "expect": "accepted").
# Fixtures (tiny, rebuilt deterministically in WORK/fixtures by melforge itself): a 3-class
# leak dataset and a 12-speaker dataset of 16x16 segments (data synth), a LeakCNN checkpoint
# and an AAM-softmax embedding checkpoint trained 2 steps on the CPU, their exports, a trial
# list and the leak run's config.toml. Each command with the unmutated fixture must be
# accepted (checked first), so a finding is the mutation's.

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

KINDS = ("dataset", "checkpoint", "safetensors", "config", "trials")
EXT = {"dataset": ".h5", "checkpoint": ".h5", "safetensors": ".safetensors", "config": ".toml",
       "trials": ".txt"}
CRASH_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "terminate called",
                 "Segmentation fault", "Aborted")
UNCLEAR_MARKERS = ("[json.exception", "std::", "bad_alloc", "basic_string", "out of host memory",
                   "vector::", "stoi", "what():", "H5E", "unknown error", "HDF5-DIAG")
INT_LIMITS = [0, -1, 1, 2**31 - 1, -2**31, 2**63 - 1, -2**63]
BAD_UTF8 = {  # bytes that are not UTF-8
    "ff-fe": b"\xff\xfe",
    "lone-continuation": b"\x80\xbfab",
    "overlong-slash": b"\xc0\xaf",
    "overlong-3byte": b"\xe0\x80\xaf",
    "surrogate": b"\xed\xa0\x80",
    "truncated-sequence": b"ab\xe2\x82",
    "latin1": b"caf\xe9",
    "above-10ffff": b"\xf4\x90\x80\x80",
}
FILE_LEVEL = ["HDF5", "damaged", "truncated", "CRC", "crc32", "checksum", "header", "signature",
              "superblock", "not a"]
DATASET_ENTRIES = ["/segments", "/labels", "/leak", "/files", "class_names", "sample_rate",
                   "hop_length", "n_mels", "db_per_unit"]
CKPT_ENTRIES = ["/arrays", "/ints", "/floats", "/strings", "melforge_checkpoint", "class_names",
                r"line \d+", "tensor '"]
ST_ENTRIES = ["header", "tensor '", "__metadata__", "data_offsets", "dtype", "shape", "data bytes"]

# A command template that starts with this runs as a job of 2 processes under
# the launcher given by --mpirun (commands_of leaves it out without one).
MPIRUN_2 = "{mpirun -np 2}"
MPIRUN = ""  # --mpirun

# The tiny model every train command uses (the fixture checkpoints' shape).
TINY = ["--set", "model.channels=[4]", "--set", "model.pools=[2]", "--set", "model.dense=8",
        "--set", "train.batch_size=8", "--set", "reader.threads=1"]
TRAIN_TAIL = ["--device", "cpu", "--progress", "off"]
SHORT_TRAIN = ["--out", "{out}/run", "--epochs", "1", "--limit-batches", "1"] + TRAIN_TAIL

# kind -> [(command name, argument template, fixture bases the mutation starts from, placement)]
# {input} is the mutated file; {out} a fresh folder; the rest are fixtures (Fixtures.paths).
COMMANDS = {
    "dataset": [
        ("inspect", ["data", "inspect", "{input}"], ["dataset", "speaker_data"], None),
        ("train-train", ["train", "--train", "{input}", "--val", "{val}"] + SHORT_TRAIN + TINY,
         ["train"], None),
        ("train-val", ["train", "--train", "{train}", "--val", "{input}"] + SHORT_TRAIN + TINY,
         ["val"], None),
        ("eval", ["eval", "--checkpoint", "{checkpoint}", "--data", "{input}", "--device", "cpu"],
         ["dataset"], None),
        ("predict", ["predict", "--checkpoint", "{checkpoint}", "--data", "{input}", "--out",
                     "{out}/p.csv", "--device", "cpu"], ["dataset"], None),
        ("embed", ["embed", "--checkpoint", "{speaker_checkpoint}", "--data", "{input}", "--out",
                   "{out}/e.h5", "--device", "cpu"], ["speaker_data"], None),
        ("verify", ["verify", "--checkpoint", "{speaker_checkpoint}", "--data", "{input}",
                    "--trials", "{trials}", "--device", "cpu"], ["speaker_data"], None),
    ],
    "checkpoint": [
        ("eval", ["eval", "--checkpoint", "{input}", "--data", "{dataset}", "--device", "cpu"],
         ["checkpoint"], None),
        ("predict", ["predict", "--checkpoint", "{input}", "--data", "{dataset}", "--out",
                     "{out}/p.csv", "--device", "cpu"], ["checkpoint"], None),
        ("export", ["export", "--checkpoint", "{input}", "--out", "{out}/m.safetensors"],
         ["checkpoint"], None),
        ("embed", ["embed", "--checkpoint", "{input}", "--data", "{speaker_data}", "--out",
                   "{out}/e.h5", "--device", "cpu"], ["speaker_checkpoint"], None),
        ("verify", ["verify", "--checkpoint", "{input}", "--data", "{speaker_data}", "--trials",
                    "{trials}", "--device", "cpu"], ["speaker_checkpoint"], None),
        ("train-init-from", ["train", "--train", "{train}", "--val", "{val}", "--init-from",
                             "{input}"] + SHORT_TRAIN + TINY, ["checkpoint"], None),
        # --resume PATH: the run's configuration comes from the checkpoint; the data and a
        # second epoch of one step are given again (so a step runs after the restore).
        ("train-resume", ["train", "--train", "{train}", "--val", "{val}", "--resume", "{input}",
                          "--out", "{out}/run", "--epochs", "2", "--limit-batches", "1"]
         + TRAIN_TAIL, ["checkpoint"], None),
        # --resume auto with the mutated file as the run's newest checkpoint: skipping it with a
        # warning and starting afresh is a correct answer (accepted).
        ("train-resume-auto", ["train", "--train", "{train}", "--val", "{val}", "--resume", "auto",
                               "--out", "{out}/run", "--epochs", "2", "--limit-batches", "1"]
         + TRAIN_TAIL + TINY, ["checkpoint"], "{out}/run/checkpoints/ckpt-0000000002.h5"),
    ],
    "safetensors": [
        ("train-init-from", ["train", "--train", "{train}", "--val", "{val}", "--init-from",
                             "{input}"] + SHORT_TRAIN + TINY, ["safetensors"], None),
        ("train-init-from-embedding",
         ["train", "--train", "{speaker_train}", "--val", "{speaker_data}", "--init-from", "{input}",
          "--set", "loss.type=aam_softmax", "--set", "model.embedding=8"] + SHORT_TRAIN + TINY,
         ["speaker_safetensors"], None),
    ],
    "config": [
        # --stop-after-steps bounds a run whose epochs/limit_batches were mutated upwards.
        ("train-config", ["train", "--config", "{input}", "--train", "{train}", "--val", "{val}",
                          "--out", "{out}/run", "--stop-after-steps", "3"] + TRAIN_TAIL,
         ["config"], None),
        # The same as a job of 2 processes (data parallelism: dist.* keys, the
        # batch split, the processes' agreement); only with --mpirun.
        ("train-config-2proc", [MPIRUN_2, "train", "--config", "{input}", "--train", "{train}", "--val", "{val}",
                                "--out", "{out}/run", "--stop-after-steps", "3"] + TRAIN_TAIL,
         ["config"], None),
    ],
    "trials": [
        ("verify", ["verify", "--checkpoint", "{speaker_checkpoint}", "--data", "{speaker_data}",
                    "--trials", "{input}", "--device", "cpu"], ["trials"], None),
    ],
}


# ----------------------------------------------------------------------------- helpers

def commands_of(kind):
    """The kind's commands this run can drive (the 2-process ones need --mpirun)."""
    return [c for c in COMMANDS[kind] if MPIRUN or not c[1] or c[1][0] != MPIRUN_2]


def B(x):
    """A description's byte string: plain text, or {"hex": ...} for bytes that are not UTF-8."""
    if isinstance(x, dict):
        return bytes.fromhex(x["hex"])
    return x.encode()


def D(b):
    """Bytes for a JSON description (the inverse of B)."""
    try:
        return b.decode()
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def F(x):
    """A float of a description ("nan", "inf", "-0.0" are strings in JSON)."""
    return float(x)


def rng_for(*parts):
    return random.Random(":".join(str(p) for p in parts))


def fill(template, paths):
    out = []
    for a in template:
        for k, v in paths.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def run_melforge(melforge, args, cwd, timeout, mem_mb):
    """Runs melforge in its own process group under an address-space limit; returns
    (rc, stderr text, timed_out, seconds)."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MELFORGE_ISOLATE_TIMEOUT": str(max(1, timeout // 3)),
                "LC_ALL": "C.UTF-8"})
    # mem_mb 0: no limit (AddressSanitizer reserves terabytes of address space).
    limit = 'ulimit -v %d 2>/dev/null; ' % (mem_mb * 1024) if mem_mb > 0 else ''
    prefix = [melforge]
    if args and args[0] == MPIRUN_2:
        # Open MPI on loopback, as root, more processes than cores; without
        # leak detection under AddressSanitizer (Open MPI's own leaks, from
        # components it unloads, cannot be named for a suppression).
        prefix = [MPIRUN, "-np", "2", "--oversubscribe", melforge]
        args = args[1:]
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_btl_tcp_if_include": "lo"})
        if "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] += ":detect_leaks=0"
    argv = ["/bin/sh", "-c", limit + 'exec "$@"', "sh"] + prefix + args
    t0 = time.monotonic()
    with tempfile.TemporaryFile(dir=cwd) as err:
        p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, env=env, start_new_session=True)
        timed_out = False
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            rc = p.wait()
        # a finished melforge may leave an isolated child behind only if it crashed; reap the group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        err.seek(0)
        data = err.read(8 << 20)
    return rc, data.decode("utf-8", "replace"), timed_out, time.monotonic() - t0


def error_text(stderr):
    """The "melforge: error: ..." line and any continuation lines after it, else None."""
    lines = stderr.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("melforge: error:"):
            return " | ".join(x for x in lines[i:] if x.strip())
    return None


def last_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    return lines[-1][:600] if lines else ""


def classify(rc, stderr, timed_out, names, entries, timeout, paths=()):
    """-> (outcome, reason, the stderr line shown). `paths` (the input, the fixtures, the
    work folders) are blanked before looking for an entry, so a folder or file named
    "labels-..." does not count as naming /labels."""
    if timed_out:
        return "hang", "no exit after %d s" % timeout, last_line(stderr)
    # Not in melforge's own error line: a damaged file that crashes the HDF5
    # library in melforge's isolated child process is reported there by design
    # ("... the HDF5 library crashed (Segmentation fault) on this file"). Under
    # the sanitizers that child also prints its report before it dies: when
    # melforge's error says its isolated call crashed or ended without an
    # answer, the report is the child's (engine/isolate.hpp), not a finding.
    lines = stderr.splitlines()
    rest = [l for l in lines if not l.startswith("melforge: error:")]
    err_line = next((l for l in reversed(lines) if l.startswith("melforge: error:")), "")
    if rc > 0 and ("the HDF5 library crashed" in err_line or
                   "the isolated call ended without an answer" in err_line):
        rest = []
    for m in CRASH_MARKERS:
        if any(m in l for l in rest):
            return "crash", "stderr has '%s'" % m, next((l for l in rest if m in l), "")[:600]
    if rc < 0:
        return "crash", "killed by signal %d" % -rc, last_line(stderr)
    if rc == 0:
        return "accepted", "", last_line(stderr)
    err = error_text(stderr)
    if err is None:
        return "unclear", "no 'melforge: error:' line", last_line(stderr)
    shown = err[:600]
    if "HDF5-DIAG" in stderr:
        return "unclear", "stderr has an HDF5-DIAG dump", shown
    for m in UNCLEAR_MARKERS:
        if m in err:
            return "unclear", "error has '%s'" % m, shown
    if not any(n and n in err for n in names):
        return "unclear", "error does not name the mutated file", shown
    bare = err
    for p in sorted((p for p in paths if p), key=len, reverse=True):
        bare = bare.replace(p, "<file>")
    if not any(re.search(e, bare) for e in entries):
        return "unclear", "error names no entry of the file", shown
    return "clean", "", shown


def pattern_of(line):
    """A finding's message with paths, quoted text and numbers masked (for deduplication)."""
    s = re.sub(r"\S*/\S+", "<path>", line)
    if "[json.exception" in s:  # one family, whatever the parser's position and expectation
        s = s[: s.index("[json.exception")] + "[json.exception...]"
    s = re.sub(r"\[[^\]]*,[^\]]*\]", "[..]", s)
    s = s.replace("'s ", "s ")
    s = re.sub(r"mut-[a-z]+-\d+\.\w+", "<input>", s)
    s = re.sub(r"'[^']*'", "'<q>'", s)
    s = re.sub(r'"[^"]*"', '"<q>"', s)
    s = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    return s[:300]


# ----------------------------------------------------------------------------- fixtures

class Fixtures:
    def __init__(self, melforge, root, timeout, mem_mb):
        self.m, self.root, self.timeout, self.mem_mb = melforge, root, timeout, mem_mb
        self.paths = {}

    def _run(self, *args):
        rc, err, to, _ = run_melforge(self.m, list(args), self.root, 300, self.mem_mb)
        if rc != 0 or to:
            sys.exit("fixture: melforge %s failed (%s):\n%s" % (" ".join(args), rc, err))

    def build(self):
        r = self.root
        if os.path.exists(r):
            shutil.rmtree(r)
        os.makedirs(r)
        j = lambda *p: os.path.join(r, *p)
        self._run("data", "synth", "--out", j("leak"), "--files", "24", "--classes", "3",
                  "--mels", "16", "--frames", "16", "--long", "1", "--short", "2", "--seed", "1")
        self._run("data", "synth", "--out", j("spk"), "--speakers", "12", "--files-per-speaker",
                  "3", "--mels", "16", "--frames", "16", "--long", "1", "--short", "2", "--seed", "1")
        base = ["--epochs", "1", "--limit-batches", "2"] + TRAIN_TAIL + TINY
        self._run("train", "--train", j("leak", "train.h5"), "--val", j("leak", "val.h5"),
                  "--out", j("leak-run"), *base)
        self._run("train", "--train", j("spk", "train.h5"), "--val", j("spk", "val.h5"),
                  "--out", j("spk-run"), "--set", "loss.type=aam_softmax", "--set",
                  "model.embedding=8", *base)
        shutil.copy(j("leak-run", "checkpoints", "best.h5"), j("checkpoint.h5"))
        shutil.copy(j("spk-run", "checkpoints", "best.h5"), j("speaker_checkpoint.h5"))
        self._run("export", "--checkpoint", j("checkpoint.h5"), "--out", j("model.safetensors"))
        self._run("export", "--checkpoint", j("speaker_checkpoint.h5"), "--out",
                  j("speaker_model.safetensors"))
        self._run("data", "trials", "--data", j("spk", "val.h5"), "--out", j("trials.txt"),
                  "--per-file", "2", "--seed", "0")
        shutil.copy(j("leak-run", "config.toml"), j("config.toml"))
        self.paths = {
            "dataset": j("leak", "test.h5"), "train": j("leak", "train.h5"),
            "val": j("leak", "val.h5"), "speaker_data": j("spk", "val.h5"),
            "speaker_train": j("spk", "train.h5"), "checkpoint": j("checkpoint.h5"),
            "speaker_checkpoint": j("speaker_checkpoint.h5"), "safetensors": j("model.safetensors"),
            "speaker_safetensors": j("speaker_model.safetensors"), "trials": j("trials.txt"),
            "config": j("config.toml"),
        }
        return self.paths


# ----------------------------------------------------------------------------- HDF5 helpers

def is_stringy(arr):
    a = np.asarray(arr)
    return a.dtype.kind in "OSU"


def to_bytes_list(arr):
    out = []
    for x in np.asarray(arr).ravel():
        out.append(x if isinstance(x, bytes) else str(x).encode())
    return out


def string_array(lst, storage="vlen-utf8", shape=None):
    """(data, dtype) for h5py: a list of bytes stored as vlen/fixed, UTF-8/ASCII strings."""
    n = max([len(x) for x in lst] + [1])
    if storage == "vlen-utf8":
        data, dt = np.array(lst, dtype=object), h5py.string_dtype("utf-8")
    elif storage == "vlen-ascii":
        data, dt = np.array(lst, dtype=object), h5py.string_dtype("ascii")
    elif storage == "fixed-utf8":  # h5py cannot convert to it: written by write_obj's low-level path
        data, dt = np.array(lst, dtype="S%d" % n), "fixed-utf8"
    else:  # fixed-ascii
        data, dt = np.array(lst, dtype="S%d" % n), None
    if shape is not None:
        data = data.reshape(shape)
    return data, dt


def write_obj(f, target, data, dtype=None):
    """Writes `data` as the root attribute '@name' or the dataset '/name' (replacing it)."""
    if isinstance(data, np.ndarray) and data.dtype == object and dtype is None:
        dtype = h5py.string_dtype("utf-8")
    if isinstance(dtype, str) and dtype == "fixed-utf8":  # fixed-length strings marked UTF-8
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(data.dtype.itemsize)
        tid.set_cset(h5py.h5t.CSET_UTF8)
        space = h5py.h5s.create_simple(data.shape) if data.shape else h5py.h5s.create(h5py.h5s.SCALAR)
        name = target[1:] if target.startswith("@") else target.lstrip("/")
        if target.startswith("@"):
            if name in f.attrs:
                del f.attrs[name]
            h5py.h5a.create(f.id, name.encode(), tid, space).write(data, mtype=tid)
        else:
            if target in f:
                del f[target]
            h5py.h5d.create(f.id, name.encode(), tid, space).write(h5py.h5s.ALL, h5py.h5s.ALL, data,
                                                                  mtype=tid)
        return
    if target.startswith("@"):
        name = target[1:]
        if name in f.attrs:
            del f.attrs[name]
        if dtype is None:
            f.attrs[name] = data
        else:
            f.attrs.create(name, data, dtype=dtype)
    else:
        if target in f:
            del f[target]
        f.create_dataset(target, data=data, dtype=dtype)


def read_obj(f, target):
    if target.startswith("@"):
        return np.asarray(f.attrs[target[1:]])
    v = f[target][()]
    return np.asarray(v)


def numeric(arr):
    a = np.asarray(arr)
    if is_stringy(a):
        return np.arange(a.size, dtype=np.int64).reshape(a.shape)
    if a.dtype.kind == "V":
        return np.zeros(a.shape, np.int64)
    return a


def convert(arr, to):
    """(data, dtype) of `arr` converted to the dtype named `to`."""
    a = np.asarray(arr)
    num = numeric(a)
    simple = {"f64": "<f8", "f32": "<f4", "f16": "<f2", ">f4": ">f4", "i8": "<i1", "i32": "<i4",
              ">i8": ">i8", "u8": "<u1", "u64": "<u8", "i64": "<i8"}
    if to in simple:
        with np.errstate(all="ignore"):
            return num.astype(simple[to]), None
    if to == "string":
        return string_array([str(x).encode() for x in num.ravel()], "vlen-utf8", num.shape)
    if to == "fixed-string":
        lst = to_bytes_list(a) if is_stringy(a) else [str(x).encode() for x in num.ravel()]
        return string_array(lst, "fixed-ascii", a.shape)
    if to == "bool":
        return (num != 0), None
    if to == "enum":
        v = np.clip(num.astype(np.int64), -128, 127).astype(np.int8)
        mapping = {"v%d" % x: int(x) for x in sorted(set(v.ravel().tolist()) | {0})}
        return v, h5py.enum_dtype(mapping, basetype=np.int8)
    if to == "compound":
        base = num.dtype if num.dtype.kind in "iuf" else np.dtype("<i8")
        rec = np.zeros(num.shape, dtype=[("v", base), ("w", "<f4")])
        rec["v"] = num
        return rec, None
    raise ValueError(to)


# ----------------------------------------------------------------------------- dataset kind

def h5_inventory(path):
    with h5py.File(path, "r") as f:
        ds = {n: (f[n].shape, f[n].dtype.kind) for n in f if isinstance(f[n], h5py.Dataset)}
        at = {n: (np.asarray(f.attrs[n]).shape, np.asarray(f.attrs[n]).dtype.kind) for n in f.attrs}
    return ds, at


DS_DTYPES = ["f64", "f32", "f16", ">f4", "i8", "i32", ">i8", "u64", "string", "bool", "enum",
             "compound"]
STORAGES = ["vlen-utf8", "vlen-ascii", "fixed-utf8", "fixed-ascii"]


def dataset_catalog(path):
    ds, at = h5_inventory(path)
    g = {}

    def add(group, **m):
        g.setdefault(group, []).append(m)

    for name in ["segments", "labels", "leak", "files"]:
        t = "/" + name
        if name not in ds:
            if name == "files":  # the leak data has none: add one that is not UTF-8
                for k in BAD_UTF8:
                    add("utf8", op="non-utf8", target=t, variant=k, storage="vlen-utf8")
            continue
        shape, kind = ds[name]
        add("scalar", op="scalar", target=t)
        add("rank", op="rank+1", target=t)
        if len(shape) > 1:
            add("rank", op="rank-1", target=t)
        else:
            add("rank", op="rank+1-front", target=t)
        if name == "segments":
            add("rank", op="flat", target=t)
        for to in DS_DTYPES:
            add("dtype", op="dtype", target=t, to=to)
        add("empty", op="empty", target=t)
        add("empty", op="null-space", target=t)
        add("delete", op="delete", target=t)
        add("move", op="to-attr", target=t)
        add("move", op="as-group", target=t)
        add("move", op="soft-link", target=t, to="/segments" if name != "segments" else "/labels")
        add("move", op="dangling-link", target=t)
        add("move", op="external-link", target=t)
        for d in (-1, 1):
            add("extent", op="extent", target=t, delta=d)
        if name in ("labels", "leak"):
            for v in INT_LIMITS + ([2, 255] if name == "leak" else [3, 2**64 - 1]):
                add("limits", op="int", target=t, value=v, at="first")
            for v in (-1, 2**31 - 1):
                add("limits", op="int", target=t, value=v, at="all")
        if name == "segments":
            for v in ("nan", "inf", "-inf"):
                add("nonfinite", op="nonfinite", target=t, value=v, at="one")
            add("nonfinite", op="nonfinite", target=t, value="nan", at="all")
            add("nonfinite", op="nonfinite", target=t, value="65504", at="all")
        if name == "files":
            for i, k in enumerate(BAD_UTF8):
                add("utf8", op="non-utf8", target=t, variant=k, storage=STORAGES[i % 4])
            add("duplicate", op="duplicate", target=t)
            add("duplicate", op="set-string", target=t, value="")
    for name, (shape, kind) in at.items():
        t = "@" + name
        stringy = kind in "OSU"
        if stringy:
            add("scalar", op="scalar", target=t)
            add("rank", op="rank+1", target=t)
        else:
            add("rank", op="rank+1", target=t)
            add("rank", op="rank+2", target=t)
        for to in ["f64", "i32", "u64", "string", "fixed-string", "bool", "enum", "compound"]:
            add("dtype", op="dtype", target=t, to=to)
        add("empty", op="empty", target=t)
        add("empty", op="null-space", target=t)
        add("delete", op="delete", target=t)
        add("move", op="to-dataset", target=t)
        add("move", op="on-segments", target=t)
        if stringy:
            for i, k in enumerate(BAD_UTF8):
                add("utf8", op="non-utf8", target=t, variant=k, storage=STORAGES[i % 4])
            add("duplicate", op="duplicate", target=t)
            add("duplicate", op="set-string", target=t, value="")
            for d in (-1, 1):
                add("extent", op="count", target=t, delta=d)
        else:
            for v in INT_LIMITS:
                add("limits", op="int", target=t, value=v)
            for v in ("nan", "inf", "-inf", "1e308", "-0.0"):
                add("nonfinite", op="float", target=t, value=v)
    return g


def apply_dataset(path, m):
    op, t = m["op"], m.get("target")
    if op == "bytes":
        return apply_bytes(path, m)
    with h5py.File(path, "r+") as f:
        present = (t[1:] in f.attrs) if t.startswith("@") else (t in f)
        a = read_obj(f, t) if present else None
        if op == "scalar":
            if is_stringy(a):
                data, dt = string_array(to_bytes_list(a)[:1] or [b"x"])
                write_obj(f, t, data.reshape(()), dt)
            else:
                write_obj(f, t, np.array(a.ravel()[0] if a.size else 0, dtype=a.dtype))
        elif op in ("rank+1", "rank+1-front", "rank+2", "rank-1", "flat"):
            if op == "rank+1":
                b = a[..., None] if a.ndim else a.reshape(1)
            elif op == "rank+1-front":
                b = a[None, ...]
            elif op == "rank+2":
                b = a.reshape((1, 1) + a.shape)
            elif op == "rank-1":
                b = a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])
            else:
                b = a.reshape((-1,) + a.shape[-2:])
            if is_stringy(b):
                data, dt = string_array(to_bytes_list(b), "vlen-utf8", b.shape)
                write_obj(f, t, data, dt)
            else:
                write_obj(f, t, b)
        elif op == "dtype":
            data, dt = convert(a, m["to"])
            write_obj(f, t, data, dt)
        elif op == "empty":
            if is_stringy(a):
                write_obj(f, t, np.array([], dtype=object), h5py.string_dtype("utf-8"))
            else:
                write_obj(f, t, np.zeros((0,) + a.shape[1:], dtype=a.dtype))
        elif op == "null-space":
            write_obj(f, t, h5py.Empty("<i8" if is_stringy(a) else a.dtype))
        elif op == "delete":
            if t.startswith("@"):
                del f.attrs[t[1:]]
            else:
                del f[t]
        elif op == "to-attr":
            del f[t]
            if is_stringy(a):
                data, dt = string_array(to_bytes_list(a), "vlen-utf8", a.shape)
                f.attrs.create(t[1:], data, dtype=dt)
            else:
                f.attrs[t[1:]] = a
        elif op == "to-dataset":
            del f.attrs[t[1:]]
            if is_stringy(a):
                data, dt = string_array(to_bytes_list(a), "vlen-utf8", a.shape)
                f.create_dataset(t[1:], data=data, dtype=dt)
            else:
                f.create_dataset(t[1:], data=a)
        elif op == "as-group":
            del f[t]
            f.create_group(t)
        elif op == "soft-link":
            del f[t]
            f[t] = h5py.SoftLink(m["to"])
        elif op == "dangling-link":
            del f[t]
            f[t] = h5py.SoftLink("/nowhere")
        elif op == "external-link":
            del f[t]
            f[t] = h5py.ExternalLink("missing-file.h5", t)
        elif op == "on-segments":
            if is_stringy(a):
                data, dt = string_array(to_bytes_list(a)[:-1] or [b"x"])
                f["segments"].attrs.create(t[1:], data, dtype=dt)
            else:
                f["segments"].attrs[t[1:]] = (a * 2 if a.size else a)
        elif op == "extent":
            b = a[:-1] if m["delta"] < 0 else np.concatenate([a, a[-1:]])
            if is_stringy(b):
                data, dt = string_array(to_bytes_list(b))
                write_obj(f, t, data, dt)
            else:
                write_obj(f, t, b)
        elif op == "count":
            lst = to_bytes_list(a)
            lst = lst[:-1] if m["delta"] < 0 else lst + [b"extra"]
            data, dt = string_array(lst)
            write_obj(f, t, data, dt)
        elif op == "int":
            v = int(m["value"])
            dt = np.uint64 if v >= 2**63 else np.int64
            if t.startswith("@"):
                write_obj(f, t, np.array(v, dtype=dt))
            else:
                b = a.astype(dt)
                if m.get("at") == "all":
                    b[...] = v
                else:
                    b.ravel()[0] = v
                write_obj(f, t, b)
        elif op == "float":
            write_obj(f, t, np.float64(F(m["value"])))
        elif op == "nonfinite":
            b = np.array(a)
            with np.errstate(all="ignore"):
                if m["at"] == "all":
                    b[...] = F(m["value"])
                else:
                    b.ravel()[b.size // 2 + 3] = F(m["value"])
            # keep the layout (contiguous, same dtype) the fixture had
            write_obj(f, t, b)
        elif op == "non-utf8":
            if a is None:  # no /files: one name per /labels entry
                a = np.array([("file%d" % i).encode() for i in range(f["labels"].shape[0])],
                             dtype=object)
            lst = to_bytes_list(a)
            lst[0] = BAD_UTF8[m["variant"]]
            data, dt = string_array(lst, m["storage"], a.shape)
            write_obj(f, t, data, dt)
        elif op == "duplicate":
            lst = to_bytes_list(a)
            lst[1] = lst[0]
            data, dt = string_array(lst, "vlen-utf8", a.shape)
            write_obj(f, t, data, dt)
        elif op == "set-string":
            lst = to_bytes_list(a)
            lst[0] = B(m["value"])
            data, dt = string_array(lst, "vlen-utf8", a.shape)
            write_obj(f, t, data, dt)
        else:
            raise ValueError(op)


def apply_bytes(path, m):
    data = bytearray(open(path, "rb").read())
    r = random.Random(m["seed"])
    for _ in range(m["runs"]):
        off = r.randrange(len(data))
        for i in range(off, min(len(data), off + m["len"])):
            data[i] = {"flip": data[i] ^ 0xFF, "zero": 0, "random": r.randrange(256)}[m["mode"]]
    open(path, "wb").write(bytes(data))


def bytes_mutation(r):
    return {"op": "bytes", "mode": r.choice(["flip", "zero", "random"]),
            "runs": r.choice([1, 1, 2, 4]), "len": r.choice([1, 2, 4, 16, 64]),
            "seed": r.randrange(2**31)}


# ----------------------------------------------------------------------------- config (TOML text)

def toml_keys(text):
    """[(section.key, python value)] of the fixture's config."""
    out = []
    for sec, tab in tomllib.loads(text.decode()).items():
        for k, v in tab.items():
            out.append(("%s.%s" % (sec, k), v))
    return out


def _find_key(lines, key):
    sec, k = key.split(".", 1)
    cur = None
    for i, l in enumerate(lines):
        s = l.strip()
        if s.startswith(b"["):
            cur = s.strip(b"[]").strip().decode("utf-8", "replace")
        elif cur == sec and re.match(rb"\s*" + re.escape(k.encode()) + rb"\s*=", l):
            return i
    raise KeyError(key)


def _find_section(lines, sec):
    for i, l in enumerate(lines):
        if l.strip() == b"[" + sec.encode() + b"]":
            return i
    raise KeyError(sec)


def apply_toml(text, m):
    """Applies a text-level TOML edit (config kind, and /strings/config of a checkpoint)."""
    op = m["op"]
    lines = text.split(b"\n")
    if op == "set":
        i = _find_key(lines, m["key"])
        lines[i] = m["key"].split(".", 1)[1].encode() + b" = " + B(m["literal"])
    elif op == "delete-key":
        del lines[_find_key(lines, m["key"])]
    elif op == "duplicate-key":
        i = _find_key(lines, m["key"])
        lines.insert(i + 1, lines[i] if "literal" not in m else
                     m["key"].split(".", 1)[1].encode() + b" = " + B(m["literal"]))
    elif op == "insert":  # a line at the top (section "") or after a section header
        i = _find_section(lines, m["section"]) + 1 if m.get("section") else 0
        lines.insert(i, B(m["text"]))
    elif op == "replace":
        return text.replace(B(m["old"]), B(m["new"]), 1)
    elif op == "long-key":
        lines.insert(0, b"a" * m["n"] + b" = 1")
    elif op == "deep-nesting":
        i = _find_key(lines, m["key"])
        lines[i] = m["key"].split(".", 1)[1].encode() + b" = " + b"[" * m["depth"] + b"]" * m["depth"]
    elif op == "newlines":
        return text.replace(b"\n", B(m["to"]))
    elif op == "whole":
        return B(m["text"]) if "text" in m else bytes(range(256)) * m.get("repeat", 1)
    elif op == "truncate":
        return text[: int(len(text) * m["fraction"])]
    else:
        raise ValueError(op)
    return b"\n".join(lines)


WRONG_TYPE = {
    int: ['"3"', "[1]", "{ a = 1 }", "true", "1.5"],
    float: ['"x"', "[0.5]", "true", "{ a = 1.0 }", "1"],
    str: ["1", "['a']", "{ a = 'b' }", "true", "''"],
    bool: ["1", "'true'", "[true]"],
    list: ["1", "'[4]'", "[[4]]", "[1.5]", "['a']", "[]", "{ a = 1 }", "[-1]", "[0]"],
}


def pytype(v):
    return bool if isinstance(v, bool) else type(v)


def config_catalog(text, for_checkpoint=False):
    keys = toml_keys(text)
    g = {}

    def add(group, **m):
        g.setdefault(group, []).append(m)

    for key, v in keys:
        t = pytype(v)
        for lit in WRONG_TYPE.get(t, []):
            add("wrong-type", op="set", key=key, literal=lit)
        if t is int:
            for lim in INT_LIMITS:
                add("int-limits", op="set", key=key, literal=str(lim))
            add("int-limits", op="set", key=key, literal="99999999999999999999")
        if t is float:
            for lit in ("nan", "inf", "-inf", "-0.0", "1e308", "-1.0", "5e-324"):
                add("float-values", op="set", key=key, literal=lit)
        if t is str:
            for k in BAD_UTF8:
                add("non-utf8", op="set", key=key, literal={"hex": (b"'" + BAD_UTF8[k] + b"'").hex()})
        if t is list and key != "model.layers":
            for lit in ("[2147483647]", "[-1]", "[0]", "[9223372036854775807]",
                        "[" + ", ".join(["4"] * 1000) + "]", "[4, 4, 4, 4, 4, 4, 4, 4]"):
                add("list-values", op="set", key=key, literal=lit)
        add("duplicate", op="duplicate-key", key=key)
        add("delete-key", op="delete-key", key=key)
    for lit in ("[1]", "['conv']", "[{ type = 'conv' }]", "[{ type = 'bogus' }]",
                "[{ type = 'dense', units = -1 }]", "{ a = 1 }"):
        add("layers", op="set", key="model.layers", literal=lit)
    add("layers", op="set", key="model.arch", literal="'cnn'")
    for n in ("7", "2", "1", "-1", "1000000"):
        add("classes", op="set", key="model.num_classes", literal=n)
    for key, lit in (("model.channels", "[5]"), ("model.dense", "9"), ("model.kernel", "5"),
                     ("model.pools", "[1]"), ("model.arch", "'resnet34se-light'"),
                     ("model.heads", "'class'"), ("model.embedding", "8"),
                     ("loss.type", "'aam_softmax'"), ("model.input_norm", "'instance'"),
                     ("train.precision", "'fp16'"), ("frontend.n_mels", "32"),
                     ("data.normal_class", "7"), ("data.per_class", "2")):
        add("classes", op="set", key=key, literal=lit)
    for sec, line in (("train", "lr = 0.1"), ("", "bogus = 1"), ("model", "channel = [4]"),
                      ("optim", "LR = 0.1"), ("", "[bogus]\nx = 1"), ("", "[model.extra]\nx = 1"),
                      ("data", "'train ' = 'x'"), ("", "model.channels = [8]")):
        add("unknown-key", op="insert", section=sec, text=line)
    add("non-utf8", op="insert", section="data", text={"hex": (b"# " + BAD_UTF8["ff-fe"]).hex()})
    add("non-utf8", op="insert", section="data", text={"hex": (BAD_UTF8["latin1"] + b" = 1").hex()})
    add("duplicate", op="insert", section="", text="[train]\nepochs = 2")
    add("duplicate", op="duplicate-key", key="train.epochs", literal="5")
    for old, new in (("[model]", "[model"), ("'segments'", "'segments"), ("epochs = 1", "epochs ="),
                     ("lr = 0.001", "lr = 1e"), ("channels = [ 4 ]", "channels = [ 4"),
                     ("kernel = 3", "kernel = 3 3"), ("[train]", "[[train]]"),
                     ("heads = 'class+leak'", "heads = \"class+leak")):
        add("invalid-toml", op="replace", old=old, new=new)
    add("invalid-toml", op="insert", section="model", text="this is not toml")
    add("invalid-toml", op="insert", section="model", text={"hex": b"x = \x00".hex()})
    add("invalid-toml", op="deep-nesting", key="model.channels", depth=100000)
    add("invalid-toml", op="deep-nesting", key="model.channels", depth=300)
    add("invalid-toml", op="newlines", to="\r")
    add("invalid-toml", op="long-key", n=100000)
    add("invalid-toml", op="whole", repeat=4)
    add("invalid-toml", op="whole", text="")
    add("invalid-toml", op="truncate", fraction=0.5)
    add("invalid-toml", op="whole", text="{ not = toml }")
    return g


# ----------------------------------------------------------------------------- checkpoint kind

def ckpt_inventory(path):
    inv = {}
    with h5py.File(path, "r") as f:
        for grp in ("arrays", "ints", "floats", "strings"):
            inv[grp] = sorted(f[grp]) if grp in f else []
        inv["config"] = f["strings/config"][()] if "strings/config" in f else b""
    return inv


def checkpoint_catalog(path):
    inv = ckpt_inventory(path)
    g = {}

    def add(group, **m):
        g.setdefault(group, []).append(m)

    for n in inv["ints"]:
        t = "/ints/" + n
        for v in INT_LIMITS + [7, 2]:
            add("ints", op="set-int", target=t, value=v)
        add("scalar-array", op="to-array", target=t)
        add("type-swap", op="as-float", target=t)
        add("type-swap", op="as-string", target=t)
        add("delete", op="delete", target=t)
    for n in inv["floats"]:
        t = "/floats/" + n
        for v in ("nan", "inf", "-inf", "-0.0", "1e308", "5e-324"):
            add("floats", op="set-float", target=t, value=v)
        add("scalar-array", op="to-array", target=t)
        add("type-swap", op="as-int", target=t)
        add("delete", op="delete", target=t)
    for n in inv["strings"]:
        t = "/strings/" + n
        add("scalar-array", op="to-array", target=t)
        add("type-swap", op="as-vlen", target=t)
        add("type-swap", op="as-int", target=t)
        add("delete", op="delete", target=t)
        if n not in ("config", "class_names", "params"):
            for val in ("", "fp64", "FP32", {"hex": BAD_UTF8["ff-fe"].hex()}):
                add("strings-other", op="set-string", target=t, value=val)
    for n in inv["arrays"]:
        t = "/arrays/" + n
        for sh in ("2d", "truncate", "extend", "scalar", "empty"):
            add("arrays", op="reshape", target=t, to=sh)
        for val in ("f16", "bf16", "i32", "u8", "f64", "x", "", {"hex": "fffe"}):
            add("arrays", op="dtype-attr", target=t, value=val)
        for to in ("f64", "i32", "u8", "string"):
            add("arrays", op="storage", target=t, to=to)
        for how in ("flip", "string", "negative", "missing"):
            add("arrays", op="crc", target=t, how=how)
        add("arrays", op="del-attr", target=t, attr="dtype")
        add("delete", op="delete", target=t)
    for grp in ("/arrays", "/ints", "/floats", "/strings"):
        add("delete", op="delete", target=grp)
    for v in (0, 2, -1, 2**63 - 1, "1", 1.5, [1, 1]):
        add("root", op="set-attr", target="@melforge_checkpoint", value=v)
    add("root", op="delete", target="@melforge_checkpoint")
    add("root", op="extra", target="/ints/bogus")
    add("root", op="extra", target="/arrays/bogus")
    # /strings/config: text edits of the TOML inside (the config kind's, grouped coarser)
    cg = config_catalog(inv["config"], for_checkpoint=True)
    for grp, items in cg.items():
        name = {"wrong-type": "config-type", "int-limits": "config-range",
                "float-values": "config-range", "list-values": "config-range",
                "classes": "config-classes", "layers": "config-classes"}.get(grp, "config-text")
        for e in items:
            add(name, op="config", target="/strings/config", edit=e)
    for val in ("not toml at all = = =", {"hex": BAD_UTF8["ff-fe"].hex()}, ""):
        add("config-text", op="set-string", target="/strings/config", value=val)
    for val in ("not json", '{"a":1}', "[1,2,3]", '["normal","leak_low"]',
                '["normal","leak_low","leak_mid","x"]', '["normal","normal","leak_mid"]', "[]", "",
                '["a","b",', "null", '[["normal"],"leak_low","leak_mid"]',
                '["\\udcff","leak_low","leak_mid"]',
                {"hex": (b'["' + BAD_UTF8["ff-fe"] + b'","leak_low","leak_mid"]').hex()},
                {"hex": (b'["' + BAD_UTF8["overlong-slash"] + b'","leak_low","leak_mid"]').hex()}):
        add("class_names", op="set-string", target="/strings/class_names", value=val)
    add("params", op="set-string", target="/strings/params", value="not json")
    add("params", op="set-string", target="/strings/params", value="[]")
    for how in ("drop-first", "shape", "offset-huge", "offset-negative", "numel", "rename",
                "overlap", "offset-string", "non-utf8-name"):
        add("params", op="params", target="/strings/params", how=how)
    return g


def put_fixed_string(grp_or_file, path, b):
    if path in grp_or_file:
        del grp_or_file[path]
    grp_or_file.create_dataset(path, data=np.array(b, dtype="S%d" % max(1, len(b))))


def apply_checkpoint(path, m):
    op, t = m["op"], m.get("target")
    if op == "bytes":
        return apply_bytes(path, m)
    with h5py.File(path, "r+") as f:
        if op == "set-int":
            v = int(m["value"])
            del f[t]
            f.create_dataset(t, data=np.array(v, dtype=np.int64))
        elif op == "set-float":
            del f[t]
            f.create_dataset(t, data=np.float64(F(m["value"])))
        elif op == "delete":
            if t.startswith("@"):
                del f.attrs[t[1:]]
            else:
                del f[t]
        elif op == "to-array":
            v = f[t][()]
            del f[t]
            f.create_dataset(t, data=np.array([v, v]))
        elif op == "as-float":
            v = f[t][()]
            del f[t]
            f.create_dataset(t, data=np.float64(v))
        elif op == "as-int":
            v = f[t][()]
            del f[t]
            try:
                iv = int(v) if np.isfinite(v) else 0
            except TypeError:
                iv = 1
            f.create_dataset(t, data=np.int64(iv))
        elif op == "as-string":
            v = f[t][()]
            put_fixed_string(f, t, str(v).encode())
        elif op == "as-vlen":
            v = f[t][()]
            del f[t]
            f.create_dataset(t, data=v.decode("utf-8", "replace"), dtype=h5py.string_dtype("utf-8"))
        elif op == "set-string":
            put_fixed_string(f, t, B(m["value"]))
        elif op == "config":
            put_fixed_string(f, t, apply_toml(f[t][()], m["edit"]))
        elif op == "params":
            apply_params(f, t, m["how"])
        elif op in ("reshape", "dtype-attr", "storage", "crc"):
            apply_array(f, t, m)
        elif op == "del-attr":
            del f[t].attrs[m["attr"]]
        elif op == "set-attr":
            v = m["value"]
            if isinstance(v, str):
                f.attrs.create(t[1:], np.bytes_(v.encode()))
            elif isinstance(v, list):
                f.attrs[t[1:]] = np.array(v, dtype=np.int32)
            elif isinstance(v, float):
                f.attrs[t[1:]] = np.float64(v)
            else:
                f.attrs[t[1:]] = np.int64(v)
        elif op == "extra":
            if t.startswith("/ints"):
                f.create_dataset(t, data=np.int64(1))
            else:
                ds = f.create_dataset(t, data=np.zeros(4, np.float32))
                ds.attrs["dtype"] = np.bytes_(b"f32")
                ds.attrs["crc32"] = np.uint32(zlib.crc32(np.zeros(4, np.float32).tobytes()))
        else:
            raise ValueError(op)


def apply_array(f, t, m):
    ds = f[t]
    a, attrs = ds[()], dict(ds.attrs)
    op = m["op"]
    crc_dtype = np.asarray(attrs.get("crc32", np.uint32(0))).dtype
    if op == "reshape":
        to = m["to"]
        if to == "2d":
            a = a.reshape(-1, 2) if a.size % 2 == 0 else a.reshape(1, -1)
        elif to == "truncate":
            a = a[: a.size // 2]
        elif to == "extend":
            a = np.concatenate([a, a[:1]])
        elif to == "scalar":
            a = a[0]
        elif to == "empty":
            a = a[:0]
    elif op == "dtype-attr":
        attrs["dtype"] = np.bytes_(B(m["value"]))
    elif op == "storage":
        to = m["to"]
        if to == "string":
            a = np.array([str(x).encode() for x in a.ravel()[:16]], dtype="S24")
        else:
            with np.errstate(all="ignore"):
                a = a.astype({"f64": "<f8", "i32": "<i4", "u8": "<u1"}[to])
    del f[t]
    ds = f.create_dataset(t, data=a)
    for k, v in attrs.items():
        if k != "crc32":
            ds.attrs[k] = v
    crc = zlib.crc32(np.ascontiguousarray(a).tobytes())
    if op == "crc":
        how = m["how"]
        if how == "flip":
            ds.attrs["crc32"] = np.array(attrs["crc32"] ^ 1, dtype=crc_dtype)
        elif how == "string":
            ds.attrs["crc32"] = np.bytes_(str(attrs["crc32"]).encode())
        elif how == "negative":
            ds.attrs["crc32"] = np.int64(-1)
        # missing: not written
    else:
        ds.attrs["crc32"] = np.array(crc, dtype=crc_dtype)


def apply_params(f, t, how):
    raw = f[t][()]
    p = json.loads(raw)
    if how == "drop-first":
        p = p[1:]
    elif how == "shape":
        p[0]["shape"] = [s + 1 for s in p[0]["shape"]]
    elif how == "offset-huge":
        p[-1]["offset"] = 10**12
    elif how == "offset-negative":
        p[0]["offset"] = -8
    elif how == "numel":
        p[0]["numel"] += 1
    elif how == "rename":
        p[0]["name"] = "bogus.weight"
    elif how == "overlap":
        p[1]["offset"] = p[0]["offset"]
    elif how == "offset-string":
        p[0]["offset"] = "0"
    text = json.dumps(p, separators=(",", ":")).encode()
    if how == "non-utf8-name":
        text = text.replace(p[0]["name"].encode(), BAD_UTF8["ff-fe"], 1)
    put_fixed_string(f, t, text)


# ----------------------------------------------------------------------------- safetensors kind

def st_read(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def st_catalog(path):
    hdr, body = st_read(path)
    names = [k for k in hdr if k != "__metadata__"]
    meta = hdr.get("__metadata__", {})
    g = {}

    def add(group, **m):
        g.setdefault(group, []).append(m)

    for n in names:
        e = hdr[n]
        b, en = e["data_offsets"]
        numel = int(np.prod(e["shape"])) if e["shape"] else 1
        for v in ("F64", "I32", "BF16", "f32", "", "BOOL", 5, None):
            add("dtype", op="field", tensor=n, field="dtype", value=v)
        for v in ([numel + 1], [], [0], [-1], [2**62, 4], "4", [1.5], [numel, 1]):
            add("shape", op="field", tensor=n, field="shape", value=v)
        for v in ([b, en + 4], [b, len(body) + 4], [en, b], [0, en - b], [-1, en], [b, 2**64 + 5],
                  ["0", "4"], [b]):
            add("offsets", op="field", tensor=n, field="data_offsets", value=v)
        for k in BAD_UTF8:
            add("names-utf8", op="rename", tensor=n, new={"hex": (n.encode() + BAD_UTF8[k]).hex()})
        add("entries", op="delete-tensor", tensor=n)
        add("entries", op="rename", tensor=n, new="bogus." + n)
        for v in (1, [], {}, "x"):
            add("entries", op="entry", tensor=n, value=v)
        for fld in ("dtype", "shape", "data_offsets"):
            add("entries", op="remove-field", tensor=n, field=fld)
    add("entries", op="extra-tensor", name="bogus.weight",
        value={"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})
    for v in (0, 1, 7, 2**32, 2**63, 2**64 - 1, "len-1", "len+1", "total+1"):
        add("header-len", op="header-len", value=v)
    for v in (1, [], {"format": 1}, {"format": None}, {"class_names": '["a"]'},
              {"model_args": "{bad"}, None, {"format": "pt", "x": {"a": 1}}):
        add("metadata", op="metadata", value=v)
    for k in meta:
        add("metadata", op="metadata-key", key=k, value=7)
        add("names-utf8", op="metadata-bytes", key=k, value={"hex": BAD_UTF8["surrogate"].hex()})
    for text in ("not json", "[]", "{", '{"a":1,"a":2}', "{}", "null"):
        add("header-text", op="header-text", value=text)
    add("header-text", op="header-append", value="garbage")
    add("header-text", op="header-append", value={"hex": "00000000"})
    add("header-text", op="header-prepend", value={"hex": "efbbbf"})
    for n in (4, len(body) // 2, len(body)):
        add("data", op="data-truncate", n=n)
    add("data", op="data-extend", n=13)
    return g


def apply_safetensors(path, m):
    op = m["op"]
    if op == "bytes":
        return apply_bytes(path, m)
    hdr, body = st_read(path)
    sub = {}  # placeholder -> raw bytes (names that are not UTF-8)
    prefix, suffix, hlen = b"", b"", None
    if op == "field":
        hdr[m["tensor"]][m["field"]] = m["value"]
    elif op == "entry":
        hdr[m["tensor"]] = m["value"]
    elif op == "remove-field":
        del hdr[m["tensor"]][m["field"]]
    elif op == "delete-tensor":
        del hdr[m["tensor"]]
    elif op == "rename":
        new = B(m["new"])
        ph = "@@PLACEHOLDER0@@"
        sub[ph] = new
        hdr = {(ph if k == m["tensor"] else k): v for k, v in hdr.items()}
    elif op == "extra-tensor":
        hdr[m["name"]] = m["value"]
    elif op == "metadata":
        if m["value"] is None:
            hdr.pop("__metadata__", None)
        else:
            hdr["__metadata__"] = m["value"]
    elif op == "metadata-key":
        hdr["__metadata__"][m["key"]] = m["value"]
    elif op == "metadata-bytes":
        ph = "@@PLACEHOLDER1@@"
        sub[ph] = B(m["value"])
        hdr["__metadata__"][m["key"]] = ph
    elif op == "header-len":
        hlen = m["value"]
    elif op == "header-append":
        suffix = B(m["value"])
    elif op == "header-prepend":
        prefix = B(m["value"])
    elif op == "data-truncate":
        body = body[: len(body) - m["n"]]
    elif op == "data-extend":
        body = body + b"\xab" * m["n"]
    text = json.dumps(hdr, separators=(",", ":")).encode()
    if op == "header-text":
        text = B(m["value"])
    for ph, raw in sub.items():
        text = text.replace(ph.encode(), raw)
    text = prefix + text + suffix
    text += b" " * (-len(text) % 8)
    n = len(text)
    if isinstance(hlen, str):
        n = {"len-1": n - 1, "len+1": n + 1, "total+1": n + len(body) + 1}[hlen]
    elif hlen is not None:
        n = hlen
    with open(path, "wb") as f:
        f.write(int(n % 2**64).to_bytes(8, "little") + text + body)


# ----------------------------------------------------------------------------- trials kind

def trials_catalog(path):
    lines = [l for l in open(path, "rb").read().split(b"\n") if l.strip()]
    n = len(lines)
    g = {}

    def add(group, **m):
        g.setdefault(group, []).append(m)

    for i, k in enumerate(BAD_UTF8):
        add("utf8", op="field", line=i % n, field=1 + i % 2, value={"hex": BAD_UTF8[k].hex()})
    add("utf8", op="field", line=0, field=0, value={"hex": BAD_UTF8["ff-fe"].hex()})
    for i, new in enumerate(("1 spk0008/rec00", "1", "spk0008/rec00 spk0008/rec01",
                             "1 spk0008/rec00 spk0008/rec01 extra", "  spk0008/rec00 spk0008/rec01")):
        add("fields", op="line", line=(3 * i + 1) % n, value=new)
    for i, lab in enumerate(("2", "-1", "x", "1.0", "01", "+1", "0x1", "10",
                             "99999999999999999999", "true")):
        add("labels", op="field", line=(2 * i) % n, field=0, value=lab)
    for i, name in enumerate(("nosuch/rec00", "spk0008/rec00/", "SPK0008/rec00", "spk0008",
                              "spk0008/rec00\x0b")):
        add("names", op="field", line=(5 * i + 2) % n, field=1 + i % 2, value=name)
    add("names", op="line", line=1, value="1 spk0008/rec00 spk0008/rec00")
    for i, idx in enumerate(("#6", "#-1", "#99999999999999999999", "#", "#abc", "#0", "#1.5",
                             "#5", "#2147483648", "#1e3")):
        add("index", op="field", line=(3 * i) % n, field=1 + i % 2, value=idx)
    add("huge", op="huge-field", line=0, field=1, n=1 << 20, char="a")
    add("huge", op="huge-field", line=2, field=0, n=1 << 20, char="1")
    add("huge", op="huge-line", n=4 << 20, char=" ")
    add("huge", op="repeat", times=20000)
    for what in ("empty", "blank", "targets", "nontargets", "nul", "cr", "bom", "binary",
                 "no-final-newline"):
        add("whole", op="whole", what=what)
    return g


def apply_trials(path, m):
    text = open(path, "rb").read()
    lines = [l for l in text.split(b"\n") if l.strip()]
    op = m["op"]
    if op == "field":
        f = lines[m["line"]].split(b" ")
        f[m["field"]] = B(m["value"])
        lines[m["line"]] = b" ".join(f)
    elif op == "line":
        lines[m["line"]] = B(m["value"])
    elif op == "huge-field":
        f = lines[m["line"]].split(b" ")
        f[m["field"]] = m["char"].encode() * m["n"]
        lines[m["line"]] = b" ".join(f)
    elif op == "huge-line":
        lines.insert(1, m["char"].encode() * m["n"])
    elif op == "repeat":
        lines = lines * (m["times"] // len(lines) + 1)
    elif op == "whole":
        w = m["what"]
        if w == "empty":
            lines = []
        elif w == "blank":
            lines = [b"", b"   ", b"\t"]
        elif w == "targets":
            lines = [l for l in lines if l.startswith(b"1")]
        elif w == "nontargets":
            lines = [l for l in lines if l.startswith(b"0")]
        elif w == "nul":
            lines[1] = lines[1].replace(b" ", b"\x00", 1)
        elif w == "cr":
            open(path, "wb").write(b"\r".join(lines) + b"\r")
            return
        elif w == "bom":
            lines[0] = b"\xef\xbb\xbf" + lines[0]
        elif w == "binary":
            open(path, "wb").write(bytes(range(256)) * 8)
            return
        elif w == "no-final-newline":
            open(path, "wb").write(b"\n".join(lines))
            return
    else:
        raise ValueError(op)
    open(path, "wb").write(b"\n".join(lines) + (b"\n" if lines else b""))


def apply_config(path, m):
    text = open(path, "rb").read()
    open(path, "wb").write(apply_toml(text, m))


APPLY = {"dataset": apply_dataset, "checkpoint": apply_checkpoint,
         "safetensors": apply_safetensors, "config": apply_config, "trials": apply_trials}


def catalog_for(kind, path):
    if kind == "dataset":
        return dataset_catalog(path)
    if kind == "checkpoint":
        return checkpoint_catalog(path)
    if kind == "safetensors":
        return st_catalog(path)
    if kind == "config":
        return config_catalog(open(path, "rb").read())
    return trials_catalog(path)


# ----------------------------------------------------------------------------- what a clean error names

def entry_patterns(kind, m, config_keys):
    """Regexes of which at least one must be in a clean error (besides the file's name)."""
    def lit(s):
        return re.escape(s)
    if m.get("op") == "bytes":
        base = {"dataset": DATASET_ENTRIES, "checkpoint": CKPT_ENTRIES,
                "safetensors": ST_ENTRIES}.get(kind, [])
        return [lit(x) if not x.startswith("line") else x for x in base] + \
            [lit(x) for x in FILE_LEVEL]
    if kind == "dataset":
        out = [lit(x) for x in DATASET_ENTRIES]
        t = m.get("target", "")
        out.append(r"\b%s\b" % lit(t.lstrip("@/")))
        return out
    if kind == "checkpoint":
        out = [lit(x) if not x.startswith("line") else x for x in CKPT_ENTRIES]
        t = m.get("target", "")
        if t.startswith("/"):  # "no integer 'classes'": the entry's name, quoted
            leaf = t.rsplit("/", 1)[1]
            out.append(lit("'%s'" % leaf))
            if "_" in leaf:  # "adamw_state has 57 bytes": a name no prose word is
                out.append(r"\b%s\b" % lit(leaf))
        if m.get("op") == "config":
            out += [lit(k) for k in config_keys]
            if "key" in m["edit"]:
                out.append(lit(m["edit"]["key"]))
        if m.get("op") in ("reshape", "dtype-attr", "storage", "crc", "del-attr"):
            out += ["crc32", "dtype"]
        return out
    if kind == "safetensors":
        out = [lit(x) for x in ST_ENTRIES]
        if "tensor" in m:
            out.append(lit(m["tensor"]))
        if m.get("op") == "data-truncate":
            out += [lit(x) for x in FILE_LEVEL]
        return out
    if kind == "config":
        out = [lit(k) for k in config_keys] + [r"line \d+"]
        if "key" in m:
            out.append(lit(m["key"]))
        if m.get("op") == "insert":  # an inserted (unknown, duplicate) key or table
            text = B(m["text"]).decode("utf-8", "replace")
            out += [r"\b%s\b" % lit(w) for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]+", text)
                    if w not in ("is", "not", "this")]
        if m.get("op") == "long-key":
            out.append("a" * 32)
        return out
    # trials
    out = [r"line \d+"]
    if m.get("op") == "whole":
        out += ["trial", "target"]
    return out


def file_names(kind, m, input_path, placed_path):
    names = [input_path, os.path.basename(input_path)]
    if placed_path:
        names += [placed_path, os.path.basename(placed_path)]
    if kind == "config" and "key" in m:
        names.append(m["key"])
    return names


# ----------------------------------------------------------------------------- planning and running

def plan_inputs(n, seed, kinds, fx_paths):
    """Deterministic (kind, j, command, base, mutation) list, kinds interleaved."""
    cats, decks = {}, {}
    plan = []
    counters = {}
    per_kind = {k: 0 for k in kinds}
    for i in range(n):
        kind = kinds[i % len(kinds)]
        j = per_kind[kind]
        per_kind[kind] += 1
        cmds = commands_of(kind)
        name, tmpl, bases, place = cmds[j % len(cmds)]
        base = bases[(j // len(cmds)) % len(bases)]
        r = rng_for(seed, kind, j)
        if kind in ("dataset", "checkpoint", "safetensors") and r.random() < 0.1:
            m = bytes_mutation(r)
        else:
            key = (kind, base)
            if key not in cats:
                cats[key] = catalog_for(kind, fx_paths[base])
                decks[key] = []
                counters[key] = 0
            deck, groups = decks[key], cats[key]
            c = counters[key]
            counters[key] += 1
            # rounds of one entry per group, groups in a shuffled order each round
            while len(deck) <= c:
                rnd = len(deck) // len(groups)
                order = sorted(groups)
                rng_for(seed, kind, base, "round", rnd).shuffle(order)
                for gname in order:
                    items = groups[gname]
                    perm = list(range(len(items)))
                    rng_for(seed, kind, base, gname).shuffle(perm)
                    deck.append(dict(items[perm[rnd % len(items)]], group=gname))
            m = deck[c]
        plan.append({"index": i, "kind": kind, "j": j, "command": name, "base": base,
                     "mutation": m})
    return plan


def short_name(p):
    m = p["mutation"]
    parts = [p["command"], m.get("op", "")]
    for k in ("target", "key", "tensor", "to", "value", "variant", "how", "what", "field"):
        if k in m and not isinstance(m[k], (dict, list)):
            parts.append(str(m[k]))
            break
    if "edit" in m:
        parts.append(m["edit"].get("op", "") + "-" + m["edit"].get("key", ""))
    s = "-".join(parts)
    s = re.sub(r"[^A-Za-z0-9_.+-]+", "_", s).strip("_")[:70]
    return "%s-%04d" % (s, p["j"])


class Runner:
    def __init__(self, args, fx_paths, config_keys):
        self.a, self.fx, self.config_keys = args, fx_paths, config_keys

    def run_case(self, kind, command_tmpl, mutation, input_src, case_dir, place, apply=True):
        """Copies input_src into case_dir (mutating it when `apply`), runs, classifies."""
        os.makedirs(case_dir, exist_ok=True)
        inp = os.path.join(case_dir, "in", os.path.basename(input_src) if not apply else
                           os.path.basename(case_dir) + EXT[kind])
        os.makedirs(os.path.dirname(inp), exist_ok=True)
        shutil.copy(input_src, inp)
        os.chmod(inp, 0o644)
        if apply:
            APPLY[kind](inp, mutation)
        out = os.path.join(case_dir, "out")
        os.makedirs(out, exist_ok=True)
        paths = dict(self.fx, input=inp, out=out)
        placed = None
        if place:
            placed = fill([place], paths)[0]
            os.makedirs(os.path.dirname(placed), exist_ok=True)
            shutil.copy(inp, placed)
        argv = fill(command_tmpl, paths)
        rc, err, to, secs = run_melforge(self.a.melforge, argv, out, self.a.timeout, self.a.mem_limit_mb)
        names = file_names(kind, mutation, inp, placed)
        entries = entry_patterns(kind, mutation, self.config_keys)
        if kind in ("config", "trials"):  # "FILE:LINE:" (compiler style) names a line
            entries.append(r"<file>:\d+")  # (the file's path is blanked, below)
        blank = [inp, placed, os.path.basename(inp), out, case_dir, self.a.work] + list(self.fx.values())
        outcome, reason, line = classify(rc, err, to, names, entries, self.a.timeout, blank)
        return {"outcome": outcome, "reason": reason, "exit": rc, "stderr": line,
                "seconds": round(secs, 3), "input_path": inp}

    def run_planned(self, p):
        kind = p["kind"]
        name, tmpl, bases, place = next(c for c in commands_of(kind) if c[0] == p["command"])
        case_dir = os.path.join(self.a.work, "runs", "mut-%s-%04d" % (kind, p["j"]))
        try:
            res = self.run_case(kind, tmpl, p["mutation"], self.fx[p["base"]], case_dir, place)
        except Exception as e:  # a mutation that does not apply to this base is the fuzzer's bug
            res = {"outcome": "skipped", "reason": "mutation failed: %r" % e, "exit": None,
                   "stderr": "", "seconds": 0, "input_path": None}
        rec = dict(p, **{k: v for k, v in res.items() if k != "input_path"})
        rec["argv"] = tmpl
        rec["place"] = place
        if res["outcome"] in ("unclear", "crash", "hang") and self.a.save_findings:
            self.save_finding(rec, res["input_path"])
        shutil.rmtree(case_dir, ignore_errors=True)
        return rec

    def save_finding(self, rec, input_path):
        d = os.path.join(self.a.save_findings, rec["kind"], short_name(rec))
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        fname = os.path.basename(input_path)
        shutil.copy(input_path, os.path.join(d, fname))
        case = {
            "kind": rec["kind"], "command": rec["argv"], "input": fname,
            "command_line": "melforge " + " ".join(rec["argv"]).replace("{input}", fname),
            "base": rec["base"], "mutation": rec["mutation"], "outcome": rec["outcome"],
            "reason": rec["reason"], "exit": rec["exit"], "stderr": rec["stderr"],
            "expect": "clean", "seed": self.a.seed, "index": rec["index"],
        }
        if rec.get("place"):
            case["place"] = rec["place"]
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(case, f, indent=1)
            f.write("\n")


def table(records, kinds):
    cols = ["accepted", "clean", "unclear", "crash", "hang"]
    rows = []
    for kind in kinds:
        for name, *_ in commands_of(kind):
            rs = [r for r in records if r["kind"] == kind and r["command"] == name]
            if rs:
                rows.append((kind, name, len(rs)) + tuple(sum(r["outcome"] == c for r in rs)
                                                          for c in cols))
        rs = [r for r in records if r["kind"] == kind]
        if rs:
            rows.append((kind, "(all)", len(rs)) + tuple(sum(r["outcome"] == c for r in rs)
                                                         for c in cols))
    rows.append(("all", "", len(records)) + tuple(sum(r["outcome"] == c for r in records)
                                                  for c in cols))
    head = ("kind", "command", "inputs", "accepted", "clean", "unclear", "crash", "hang")
    w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    fmt = lambda row: "  ".join(str(v).ljust(w[i]) if i < 2 else str(v).rjust(w[i])
                                for i, v in enumerate(row))
    lines = [fmt(head), fmt(["-" * x for x in w])] + [fmt(r) for r in rows]
    return "\n".join(lines), rows


def self_check(runner, kinds, work):
    """Every command on its unmutated fixture must be accepted."""
    bad = []
    for kind in kinds:
        for name, tmpl, bases, place in commands_of(kind):
            for base in bases:
                d = os.path.join(work, "selfcheck", "%s-%s-%s" % (kind, name, base))
                res = runner.run_case(kind, tmpl, {"op": "identity"}, runner.fx[base], d, place,
                                      apply=False)
                shutil.rmtree(d, ignore_errors=True)
                if res["outcome"] != "accepted":
                    bad.append("%s %s (%s): %s %s" % (kind, name, base, res["outcome"], res["stderr"]))
    return bad


def do_replay(args, runner):
    cases = []
    for root, _, files in os.walk(args.replay):
        if "case.json" in files:
            cases.append(root)
    cases.sort()
    fails = 0
    for n, cdir in enumerate(cases):
        case = json.load(open(os.path.join(cdir, "case.json")))
        expect = case.get("expect", "clean")
        wd = os.path.join(args.work, "replay", "case-%04d" % n)
        shutil.rmtree(wd, ignore_errors=True)
        res = runner.run_case(case["kind"], case["command"], case.get("mutation", {}),
                              os.path.join(cdir, case["input"]), wd, case.get("place"), apply=False)
        shutil.rmtree(wd, ignore_errors=True)
        ok = res["outcome"] == expect
        fails += not ok
        print("%s %s: %s%s %s" % ("ok  " if ok else "FAIL", os.path.relpath(cdir, args.replay),
                                  res["outcome"], (" (" + res["reason"] + ")") if res["reason"] else "",
                                  res["stderr"]))
    print("replayed %d case(s), %d failed" % (len(cases), fails))
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description="Structure-aware fuzzer of melforge's file inputs "
                                 "(see the comment at the top of this file and docs/fuzzing.md).")
    ap.add_argument("--melforge", required=True, help="the melforge binary")
    ap.add_argument("--mpirun", default="", help="an MPI launcher (Open MPI's mpirun): configurations also run as "
                    "jobs of 2 processes (a melforge built with MPI)")
    ap.add_argument("--work", required=True, help="work folder (fixtures, results.jsonl, summary.json)")
    ap.add_argument("--inputs", type=int, default=200, help="inputs, spread evenly over the kinds")
    ap.add_argument("--seed", type=int, default=1, help="the same seed makes the same inputs")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--timeout", type=int, default=30, help="seconds per run before it is a hang")
    ap.add_argument("--mem-limit-mb", type=int, default=4096, help="address-space limit per run (0: none, for sanitizer builds)")
    ap.add_argument("--save-findings", help="copy each unclear/crash/hang input and its case.json here")
    ap.add_argument("--replay", help="run every case.json under this folder; all must end clean")
    ap.add_argument("--no-self-check", action="store_true",
                    help="skip running every command on its unmutated fixture first")
    args = ap.parse_args()
    global MPIRUN
    MPIRUN = args.mpirun
    args.melforge = os.path.abspath(args.melforge)
    args.work = os.path.abspath(args.work)
    if args.save_findings:
        args.save_findings = os.path.abspath(args.save_findings)
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            sys.exit("unknown kind %r (kinds: %s)" % (k, ", ".join(KINDS)))
    os.makedirs(args.work, exist_ok=True)
    t0 = time.monotonic()
    fx = Fixtures(args.melforge, os.path.join(args.work, "fixtures"), args.timeout,
                  args.mem_limit_mb).build()
    config_keys = [k for k, _ in toml_keys(open(fx["config"], "rb").read())]
    runner = Runner(args, fx, config_keys)
    t_fx = time.monotonic() - t0
    if args.replay:
        return do_replay(args, runner)
    if not args.no_self_check:
        bad = self_check(runner, kinds, args.work)
        if bad:
            print("self-check: commands that fail on the unmutated fixtures:\n  " + "\n  ".join(bad))
            return 2
    plan = plan_inputs(args.inputs, args.seed, kinds, fx)
    t1 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        records = []
        for rec in ex.map(runner.run_planned, plan):
            records.append(rec)
            if rec["outcome"] in ("unclear", "crash", "hang", "skipped"):
                print("[%s] %s/%s %s: %s%s" % (rec["outcome"], rec["kind"], rec["command"],
                                               json.dumps(rec["mutation"])[:200], rec["stderr"][:300],
                                               (" (" + rec["reason"] + ")") if rec["reason"] else ""),
                      flush=True)
    t_runs = time.monotonic() - t1
    with open(os.path.join(args.work, "results.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps({k: r[k] for k in ("index", "kind", "command", "base", "mutation",
                                                   "outcome", "reason", "exit", "stderr",
                                                   "seconds")}) + "\n")
    text, rows = table(records, kinds)
    findings = {}
    for r in records:
        if r["outcome"] in ("unclear", "crash", "hang"):
            key = (r["outcome"], r["kind"], pattern_of(r["stderr"]))
            f = findings.setdefault(key, {"outcome": r["outcome"], "kind": r["kind"],
                                          "pattern": key[2], "count": 0, "commands": [],
                                          "example": {"command": r["command"], "mutation": r["mutation"],
                                                      "stderr": r["stderr"], "reason": r["reason"]}})
            f["count"] += 1
            if r["command"] not in f["commands"]:
                f["commands"].append(r["command"])
    run_secs = [r["seconds"] for r in records if r["outcome"] != "skipped"]
    summary = {
        "seed": args.seed, "inputs": args.inputs, "kinds": kinds, "jobs": args.jobs,
        "melforge": args.melforge,
        "table": [dict(zip(("kind", "command", "inputs", "accepted", "clean", "unclear", "crash",
                            "hang"), row)) for row in rows],
        "skipped": sum(r["outcome"] == "skipped" for r in records),
        "findings": sorted(findings.values(), key=lambda f: (f["outcome"], f["kind"], -f["count"])),
        "seconds": {"fixtures": round(t_fx, 2), "runs": round(t_runs, 2),
                    "mean_per_run": round(sum(run_secs) / max(1, len(run_secs)), 3),
                    "max_per_run": max(run_secs + [0])},
    }
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print()
    print(text)
    print()
    print("distinct findings (outcome, kind, message pattern):")
    for f in summary["findings"]:
        print("  [%s] %s x%d (%s): %s" % (f["outcome"], f["kind"], f["count"], ",".join(f["commands"]),
                                          f["pattern"]))
    print("fixtures %.1f s, %d runs in %.1f s (mean %.3f s per run, incl. making the input)" % (
        t_fx, len(records), t_runs, t_runs / max(1, len(records)) * max(1, args.jobs)))
    bad = any(r["outcome"] in ("unclear", "crash", "hang") for r in records)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
