#!/usr/bin/env python3
"""`melforge export --format onnx`, checked by ONNX and ONNX Runtime (issue 34).

Every kind of model melforge trains is trained for a few steps on generated
WAV files (three classes of tones in noise, written as 16-bit PCM), exported
to ONNX, checked by onnx.checker (full_check) and run by ONNX Runtime's CPU
provider. Its outputs must equal melforge's own inference on the same inputs:

  log-mel models   class_probs / leak_prob against `melforge predict
                   --per-segment`, embeddings against `melforge embed
                   --per-segment` (L2-normalised there, so here too), each
                   within |onnx - melforge| <= 1e-5 |melforge| + 1e-6, for
                   the whole dataset as one batch and for batch 1; models
                   with a dynamic frames axis also on a second dataset of
                   another (odd) frame count.
  waveform models  (--with-frontend) against `melforge predict / embed
                   --audio --per-segment` on the WAV files, within 1e-4
                   absolute: ONNX's STFT and melforge's FFT differ in
                   rounding, and the log turns that into ~1e-5 dB.

Then the errors: options that do not go together, and a failed export leaves
an existing --out untouched. Exits non-zero on the first mismatch, naming it.

  test_onnx_export.py --melforge build/tools/melforge --work DIR
Run with the venv tools/onnx-venv.sh makes (.venv-onnx/bin/python).
"""
import argparse
import csv
import json
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import h5py
import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

SAMPLE_RATE = 16000
CLASSES = ["normal", "hiss", "hum"]
FILES_PER_CLASS = 8
SECONDS = 2.3  # > the 2.06 s that 4 segments of 32 frames (hop 256, n_fft 1024) need

# Stack layers as `--set model.layers=...` takes them (TOML inline tables).
STACK_POOLED = ('[{type="conv", k=5, stride=2, cout=8, batch_norm=true}, '
                '{type="conv", k=3, cout=8, batch_norm=true, pool=2}, '
                '{type="residual", cout=8, se=4}, {type="residual", cout=16, stride=2}, '
                '{type="global_avg_pool"}, {type="dense", units=16}, {type="dropout", p=0.2}]')
STACK_FLAT = ('[{type="conv", k=3, cout=4, bias=true, pool=2}, {type="conv", k=3, cout=6, activation="none"}, '
              '{type="dense", units=12}, {type="dropout", p=0.3}, {type="dense", units=8, activation="none"}]')
STACK_STATS = ('[{type="conv", k=3, cout=8, batch_norm=true}, {type="residual", cout=8, se=2}, '
               '{type="attentive_stats_pool", stats="mean+std", attention=8}, {type="dense", units=16, activation="none"}]')
STACK_ATTENTIVE_MEAN = ('[{type="conv", k=3, stride=2, cout=8, batch_norm=true}, '
                        '{type="residual", cout=12, stride=2, se=4}, '
                        '{type="attentive_stats_pool", stats="mean", attention=4}]')

# name: (training --set values, what melforge computes its outputs with, dynamic frames axis)
MODELS = {
    "leakcnn": (["model.channels=[8,16]", "model.pools=[2,2]", "model.dense=32"], "predict", False),
    "leakcnn_embedding": (["model.channels=[8,16]", "model.pools=[2,2]", "model.dense=32", "model.heads=class", "model.input_norm=instance",
                           "model.embedding=16", "model.dropout=0.3"], "predict+embed", False),
    "stack_pooled": (["model.arch=cnn", "model.layers=" + STACK_POOLED], "predict", True),
    "stack_flat": (["model.arch=cnn", "model.heads=class", "model.layers=" + STACK_FLAT], "predict", False),
    "stack_stats_aam": (["model.arch=cnn", "model.layers=" + STACK_STATS, "loss.type=aam_softmax",
                         "model.input_norm=instance"], "embed", True),
    "stack_attentive_am": (["model.arch=cnn", "model.layers=" + STACK_ATTENTIVE_MEAN, "loss.type=am_softmax"],
                           "embed", True),
    "stack_softmaxproto": (["model.arch=cnn", "model.layers=" + STACK_ATTENTIVE_MEAN, "loss.type=softmaxproto",
                            "data.per_class=4"], "embed", True),
    "leakcnn_metric": (["model.channels=[8,16]", "model.pools=[2,2]", "model.dense=32", "loss.type=aam_softmax", "model.embedding=16"],
                       "embed", False),
    "resnet34se_light": (["model.arch=resnet34se-light", "train.limit_batches=2", "loss.type=aam_softmax",
                          "model.embedding=32"], "embed", True),
}
WITH_FRONTEND = ["leakcnn", "stack_flat", "stack_stats_aam"]

REL_TOL, ABS_TOL = 1e-5, 1e-6
FRONTEND_ABS_TOL = 1e-4


class Failure(Exception):
    pass


class Melforge:
    def __init__(self, binary: str):
        self.binary = binary

    def run(self, *args: str, expect_ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([self.binary, *args], capture_output=True, text=True)
        if expect_ok and p.returncode != 0:
            raise Failure(f"melforge {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p


def write_wavs(root: Path) -> list[Path]:
    """Tones in noise, one sub-folder per class, and labels.csv (path,label,leak)."""
    rng = np.random.default_rng(34)
    t = np.arange(int(SECONDS * SAMPLE_RATE)) / SAMPLE_RATE
    rows, paths = [], []
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(FILES_PER_CLASS):
            f0 = [300.0, 1800.0, 120.0][c] * (1 + 0.05 * i)
            y = 0.3 * np.sin(2 * np.pi * f0 * t + rng.uniform(0, 6.28)) + 0.05 * rng.standard_normal(t.size)
            if c == 1:
                y += 0.2 * rng.standard_normal(t.size)
            pcm = np.clip(np.round(y * 32767), -32768, 32767).astype("<i2")
            path = root / name / f"{name}_{i}.wav"
            with wave.open(str(path), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(SAMPLE_RATE)
                w.writeframes(pcm.tobytes())
            rows.append(f"{name}/{path.name},{name},{0 if c == 0 else 1}")
            paths.append(path)
    (root / "labels.csv").write_text("path,label,leak\n" + "\n".join(rows) + "\n")
    return paths


def read_wav(path: Path) -> np.ndarray:
    """The samples as libsndfile gives them to melforge: int16 / 32768."""
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def close(name: str, got: np.ndarray, want: np.ndarray, rel: float, atol: float) -> None:
    if got.shape != want.shape:
        raise Failure(f"{name}: ONNX Runtime gives shape {got.shape}, melforge {want.shape}")
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bound = rel * np.abs(want) + atol
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    if not np.all(err <= bound):
        raise Failure(f"{name}: ONNX Runtime {got[worst]} vs melforge {want[worst]} at {worst} "
                      f"(|diff| {err[worst]:.3g} > {bound[worst]:.3g})")
    print(f"  {name}: {want.size} values, max |diff| {err.max():.2e}")


def l2_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def predicted(csv_path: Path, audio: bool) -> dict:
    """melforge predict --per-segment's CSV as arrays (row order), with the rows' keys."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    probs = [k for k in rows[0] if k.startswith("prob_")]
    out = {"class_probs": np.array([[float(r[k]) for k in probs] for r in rows], dtype=np.float64),
           "columns": probs}
    if "leak_prob" in rows[0]:
        out["leak_prob"] = np.array([float(r["leak_prob"]) for r in rows])
    if audio:
        out["keys"] = [(Path(r["path"]).name, int(r["long"]), int(r["short"])) for r in rows]
    return out


def embedded(h5_path: Path) -> np.ndarray:
    with h5py.File(h5_path, "r") as f:
        return np.asarray(f["embeddings"], dtype=np.float64)


def segments_of(h5_path: Path) -> np.ndarray:
    with h5py.File(h5_path, "r") as f:
        x = np.asarray(f["segments"], dtype=np.float32)
    return x.reshape(-1, x.shape[-2], x.shape[-1])  # [files, segments, mels, frames] -> rows


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def metadata(path: Path) -> dict:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def export(mf: Melforge, ckpt: Path, out: Path, *extra: str) -> None:
    p = mf.run("export", "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(out), *extra)
    print("  " + p.stdout.strip().replace("\n", "\n  "))
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    if model.opset_import[0].version != 17:
        raise Failure(f"{out}: opset {model.opset_import[0].version}, docs/onnx.md promises 17")


def check_metadata(path: Path, data_h5: Path, with_frontend: bool) -> None:
    meta = metadata(path)
    with h5py.File(data_h5, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs["class_names"]]
    for key in ["melforge.version", "melforge.checkpoint", "melforge.model_config", "input_shape", "frontend"]:
        if not meta.get(key):
            raise Failure(f"{path}: metadata has no {key}")
    if json.loads(meta["class_names"]) != names:
        raise Failure(f"{path}: class_names {meta['class_names']}, the data's {names}")
    fe = json.loads(meta["frontend"])
    if fe["sample_rate"] != SAMPLE_RATE or fe["n_mels"] != 32:
        raise Failure(f"{path}: frontend metadata {fe}")
    inputs = [i.name for i in onnx.load(str(path)).graph.input]
    if inputs != (["waveform"] if with_frontend else ["logmel"]):
        raise Failure(f"{path}: inputs {inputs}")


def train(mf: Melforge, name: str, sets: list[str], data: Path, work: Path) -> Path:
    run = work / "runs" / name
    args = ["train", "--train", str(data / "train.h5"), "--out", str(run), "--epochs", "2", "--batch-size", "8",
            "--device", "cpu", "--progress", "plain", "--set", "log.interval=4", "--set", "train.seed=5"]
    for s in sets:
        args += ["--set", s]
    mf.run(*args)
    ckpts = sorted((run / "checkpoints").glob("ckpt-*.h5"))
    if not ckpts:
        raise Failure(f"{name}: training wrote no checkpoint in {run}/checkpoints")
    return ckpts[-1]


def melforge_outputs(mf: Melforge, how: str, ckpt: Path, data_h5: Path, out: Path) -> dict:
    """`how`: predict (the heads' probabilities), embed (the embedding) or both (predict+embed)."""
    want = {}
    if "predict" in how:
        mf.run("predict", "--checkpoint", str(ckpt), "--data", str(data_h5), "--out", str(out.with_suffix(".csv")),
               "--per-segment", "--device", "cpu", "--batch-size", "7")
        want |= predicted(out.with_suffix(".csv"), audio=False)
    if "embed" in how:
        mf.run("embed", "--checkpoint", str(ckpt), "--data", str(data_h5), "--out", str(out.with_suffix(".h5")),
               "--per-segment", "--device", "cpu", "--batch-size", "7")
        want["embedding"] = embedded(out.with_suffix(".h5"))
    return want


def compare_logmel(name: str, sess: ort.InferenceSession, x: np.ndarray, want: dict) -> None:
    names = [o.name for o in sess.get_outputs()]
    full = dict(zip(names, sess.run(None, {"logmel": x})))
    single = {k: np.concatenate([v for v in [dict(zip(names, sess.run(None, {"logmel": x[i:i + 1]})))[k]
                                             for i in range(3)]]) for k in names}
    for key, ref in want.items():
        if key == "columns":
            continue
        got, got1 = full[key], single[key]
        if key == "embedding":
            got, got1 = l2_rows(got), l2_rows(got1)
        close(f"{name} {key} (batch {x.shape[0]}, {x.shape[2]} frames)", got, ref, REL_TOL, ABS_TOL)
        close(f"{name} {key} (batch 1)", got1, ref[:3], REL_TOL, ABS_TOL)


def check_logmel_model(mf: Melforge, work: Path, name: str, ckpt: Path, how: str, dynamic: bool) -> None:
    onnx_path = work / "onnx" / f"{name}.onnx"
    export(mf, ckpt, onnx_path)
    check_metadata(onnx_path, work / "data32" / "train.h5", with_frontend=False)
    sess = session(onnx_path)
    frames_dim = sess.get_inputs()[0].shape[2]
    if dynamic != isinstance(frames_dim, str):
        raise Failure(f"{name}: the frames axis is {frames_dim!r}; it should {'' if dynamic else 'not '}be dynamic")
    datasets = ["data32", "data37"] if dynamic else ["data32"]  # 37: odd sizes through every stride and pool
    for d in datasets:
        data_h5 = work / d / "train.h5"
        want = melforge_outputs(mf, how, ckpt, data_h5, work / "outputs" / f"{name}_{d}")
        if "predict" in how and want["columns"] != [f"prob_{c}" for c in json.loads(metadata(onnx_path)["class_names"])]:
            raise Failure(f"{name}: predict's columns {want['columns']} are not the metadata's class names")
        compare_logmel(name, sess, segments_of(data_h5), want)


def check_waveform_model(mf: Melforge, work: Path, name: str, ckpt: Path, how: str, wavs: list[Path]) -> None:
    onnx_path = work / "onnx" / f"{name}_waveform.onnx"
    export(mf, ckpt, onnx_path, "--with-frontend")
    check_metadata(onnx_path, work / "data32" / "train.h5", with_frontend=True)
    fe = json.loads(metadata(onnx_path)["frontend"])
    window = (fe["long_segments"] * fe["short_segments"] * fe["frames"] - 1) * fe["hop_length"] + fe["n_fft"] // 2
    picked = wavs[::4]
    audio_dir = work / "audio_subset"
    audio_dir.mkdir(exist_ok=True)
    for w in picked:
        shutil.copy(w, audio_dir / w.name)
    # melforge scores each file's first `window` samples; the graph does too,
    # whatever the length given (the longer input checks that).
    full = np.stack([read_wav(w)[:window] for w in picked])
    longer = np.stack([read_wav(w)[:window + 700] for w in picked])
    sess = session(onnx_path)
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, {"waveform": full})))
    got_longer = dict(zip(names, sess.run(None, {"waveform": longer})))
    S = fe["long_segments"] * fe["short_segments"]
    out = work / "outputs" / f"{name}_audio"
    if how == "predict":
        mf.run("predict", "--checkpoint", str(ckpt), "--audio", str(audio_dir), "--out", str(out) + ".csv",
               "--per-segment", "--device", "cpu")
        want = predicted(Path(str(out) + ".csv"), audio=True)
        order = {w.name: i for i, w in enumerate(picked)}
        rows = [order[k[0]] * S + k[1] * fe["short_segments"] + k[2] for k in want["keys"]]
        checks = {"class_probs": want["class_probs"]}
        if "leak_prob" in want:
            checks["leak_prob"] = want["leak_prob"]
    else:
        mf.run("embed", "--checkpoint", str(ckpt), "--audio", str(audio_dir), "--out", str(out) + ".h5",
               "--per-segment", "--device", "cpu")
        with h5py.File(str(out) + ".h5", "r") as f:  # per segment: /files holds "PATH#SEGMENT"
            keys = [(n.decode() if isinstance(n, bytes) else str(n)).rsplit("#", 1) for n in f["files"]]
        order = {w.name: i for i, w in enumerate(picked)}
        rows = [order[Path(path).name] * S + int(seg) for path, seg in keys]
        checks = {"embedding": embedded(Path(str(out) + ".h5"))}
    for key, ref in checks.items():
        for label, g in [("", got[key]), (", longer input", got_longer[key])]:
            flat = g.reshape(len(picked) * S, -1) if g.ndim == 3 else g.reshape(-1)
            if key == "embedding":
                flat = l2_rows(flat)
            close(f"{name} --with-frontend {key}{label}", flat[rows], ref, 0.0, FRONTEND_ABS_TOL)
    check_file_outputs(mf, ckpt, how, audio_dir, picked, got, work / "outputs" / f"{name}_audio_files", name)
    if "file_leak" in got:
        check_vote_rules(onnx_path, work, fe, name)


def check_file_outputs(mf: Melforge, ckpt: Path, how: str, audio_dir: Path, picked: list[Path], got: dict,
                       out: Path, name: str) -> None:
    """The graph's per-file outputs against the rows `predict --audio` / `embed --audio` write per file."""
    order = {w.name: i for i, w in enumerate(picked)}
    if how == "predict":
        mf.run("predict", "--checkpoint", str(ckpt), "--audio", str(audio_dir), "--out", str(out) + ".csv",
               "--device", "cpu")
        with open(str(out) + ".csv", newline="") as f:
            rows = list(csv.DictReader(f))
        idx = [order[Path(r["path"]).name] for r in rows]
        probs = np.array([[float(r[k]) for k in rows[0] if k.startswith("prob_")] for r in rows])
        close(f"{name} --with-frontend file_probs", got["file_probs"][idx], probs, 0.0, FRONTEND_ABS_TOL)
        exact = {"file_class": [int(r["pred"]) for r in rows]}
        if "leak_prob" in rows[0]:
            close(f"{name} --with-frontend file_leak_prob", got["file_leak_prob"][idx],
                  np.array([float(r["leak_prob"]) for r in rows]), 0.0, FRONTEND_ABS_TOL)
            exact["file_leak"] = [int(r["leak"]) for r in rows]
        for key, want in exact.items():
            if got[key][idx].tolist() != want:
                raise Failure(f"{name} --with-frontend {key}: ONNX Runtime {got[key][idx].tolist()}, melforge {want}")
            print(f"  {name} --with-frontend {key}: {len(want)} files, the same decisions")
    else:
        mf.run("embed", "--checkpoint", str(ckpt), "--audio", str(audio_dir), "--out", str(out) + ".h5",
               "--device", "cpu")
        with h5py.File(str(out) + ".h5", "r") as f:
            idx = [order[Path(n.decode() if isinstance(n, bytes) else str(n)).name] for n in f["files"]]
        close(f"{name} --with-frontend file_embedding", got["file_embedding"][idx], embedded(Path(str(out) + ".h5")),
              0.0, FRONTEND_ABS_TOL)


def vote_oracle(class_rows: np.ndarray, leak_rows: np.ndarray, L: int, S: int, thr: float) -> tuple:
    """kernels/file_vote.hpp's rules in NumPy (float32 means, s then l)."""
    C = class_rows.shape[1]
    longs = class_rows.reshape(-1, L, S, C).mean(axis=2, dtype=np.float32)
    file_probs = longs.mean(axis=1, dtype=np.float32)
    classes = []
    for f in range(longs.shape[0]):
        votes = np.bincount(longs[f].argmax(axis=1), minlength=C)
        tied = np.flatnonzero(votes == votes.max())
        classes.append(int(tied[np.argmax(file_probs[f][tied])]))  # first maximum: the lower class
    leak_longs = leak_rows.reshape(-1, L, S).mean(axis=2, dtype=np.float32)
    leak_prob = leak_longs.mean(axis=1, dtype=np.float32)
    n = (leak_longs >= thr).sum(axis=1)
    leak = [int(2 * k > L or (2 * k == L and p >= thr)) for k, p in zip(n, leak_prob)]
    return classes, leak


def check_vote_rules(onnx_path: Path, work: Path, fe: dict, name: str) -> None:
    """The graph's file vote on segment probabilities built to tie: votes tied between classes (broken by the
    file-mean probability, then the lower class), argmax ties inside a long segment, a leak vote split in half
    (decided by the mean), a long segment exactly at the threshold."""
    L, S = fe["long_segments"], fe["short_segments"]
    if (L, S) != (2, 2):
        raise Failure(f"{name}: the vote cases are written for 2 long x 2 short segments, the model has {L} x {S}")
    sub = work / "onnx" / f"{name}_vote.onnx"
    onnx.utils.extract_model(str(onnx_path), str(sub), ["class_probs.rows", "leak_prob.rows"],
                             ["file_class", "file_leak", "file_probs", "file_leak_prob"])
    longs = [  # per file: (long 0's class probabilities, long 1's), each long's two short segments alike
        ([0.125, 0.625, 0.25], [0.25, 0.125, 0.625]),  # votes 1 and 2: the larger mean, class 2
        ([0.5, 0.5, 0.0], [0.5, 0.5, 0.0]),            # argmax ties: class 0 twice
        ([0.0, 0.5, 0.5], [0.0, 0.25, 0.75]),          # 1 (the first maximum) and 2: the larger mean, 2
        ([0.25, 0.625, 0.125], [0.25, 0.125, 0.625]),  # 1 and 2 with equal means: the lower, 1
        ([0.0, 0.5, 0.25], [0.0, 0.25, 0.5 + 2**-23]),  # 1 and 2, means 2^-24 apart: 2 (below a float32 ulp of 1.2)
    ]
    leaks = [(0.75, 0.25), (0.5, 0.5), (0.25, 0.5), (0.25, 0.25), (0.5, 0.25)]  # tie -> mean 0.5 >= 0.5; ...
    class_rows = np.array([p for a, b in longs for p in (a, a, b, b)], dtype=np.float32)
    leak_rows = np.array([q for a, b in leaks for q in (a, a, b, b)], dtype=np.float32)
    thr = float(metadata(onnx_path)["file_leak_threshold"])
    got = dict(zip(["file_class", "file_leak", "file_probs", "file_leak_prob"],
                   session(sub).run(None, {"class_probs.rows": class_rows, "leak_prob.rows": leak_rows})))
    classes, leak = vote_oracle(class_rows, leak_rows, L, S, thr)
    if got["file_class"].tolist() != classes or got["file_leak"].tolist() != leak:
        raise Failure(f"{name}: the graph's vote gives classes {got['file_class'].tolist()}, leak "
                      f"{got['file_leak'].tolist()}; kernels/file_vote.hpp's rules {classes}, {leak}")
    if thr == 0.5 and (classes, leak) != ([2, 0, 2, 1, 2], [1, 1, 0, 0, 0]):
        raise Failure(f"{name}: the vote oracle gives {classes}, {leak} on the hand-made cases, not [2, 0, 2, 1, 2], "
                      f"[1, 1, 0, 0, 0]")
    print(f"  {name} --with-frontend vote rules on tied cases: classes {classes}, leak {leak}")


def check_errors(mf: Melforge, work: Path, ckpt: Path) -> None:
    out = work / "onnx" / "kept.onnx"
    out.write_text("an earlier export")
    cases = [
        (["--format", "safetensors", "--with-frontend"], "--with-frontend goes with --format onnx"),
        (["--format", "onnx", "--dtype", "bf16"], "float32"),
        (["--format", "onnx", "--set", "frontend.n_mels=32"], "give them with --with-frontend"),
        (["--format", "onnx", "--with-frontend", "--threshold", "1.5"], "expected a number in (0, 1)"),
    ]
    for extra, message in cases:
        p = mf.run("export", "--checkpoint", str(ckpt), "--out", str(out), *extra, expect_ok=False)
        if p.returncode == 0 or message not in p.stderr:
            raise Failure(f"export {' '.join(extra)}: expected a failure saying '{message}', got "
                          f"{p.returncode}:\n{p.stdout}{p.stderr}")
        if out.read_text() != "an earlier export":
            raise Failure(f"export {' '.join(extra)} failed but changed {out}")
    print("  option errors name the problem and leave --out untouched")
    by_name = work / "onnx" / "by_extension.onnx"  # no --format: .onnx means ONNX
    mf.run("export", "--checkpoint", str(ckpt), "--out", str(by_name))
    onnx.checker.check_model(onnx.load(str(by_name)), full_check=True)
    print("  --out NAME.onnx without --format writes ONNX")
    lowered = work / "onnx" / "threshold.onnx"
    mf.run("export", "--checkpoint", str(ckpt), "--out", str(lowered), "--with-frontend", "--threshold", "0.25")
    if metadata(lowered).get("file_leak_threshold") != "0.25":
        raise Failure(f"export --threshold 0.25: metadata says {metadata(lowered).get('file_leak_threshold')}")
    print("  --threshold sets the waveform model's file leak vote")
    # Data made without melforge data build records no front-end: the export
    # says so, and takes the parameters from --set.
    synth = work / "synth"
    mf.run("data", "synth", "--out", str(synth), "--files", "12", "--mels", "16", "--frames", "16", "--long", "1",
           "--short", "2", "--seed", "4")
    bare = train(mf, "synth_leakcnn", ["model.channels=[4,8]", "model.pools=[2,2]", "model.dense=8"], synth, work)
    p = mf.run("export", "--checkpoint", str(bare), "--format", "onnx", "--with-frontend", "--out", str(out),
               expect_ok=False)
    if p.returncode == 0 or "does not record how its training features were made" not in p.stderr or out.read_text() != "an earlier export":
        raise Failure(f"--with-frontend without a recorded front-end: {p.returncode}\n{p.stderr}")
    fe = ["sample_rate=16000", "n_fft=512", "hop_length=160", "n_mels=16", "frames=16", "long=1", "short=2"]
    export(mf, bare, work / "onnx" / "synth_waveform.onnx", "--with-frontend",
           *[x for kv in fe for x in ("--set", "frontend." + kv)])
    print("  a checkpoint without a front-end: a clear error, or the front-end from --set")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--melforge", required=True, help="the melforge binary")
    ap.add_argument("--work", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    a = ap.parse_args()
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    for d in ["wav", "onnx", "outputs", "runs"]:
        (work / d).mkdir(parents=True)
    mf = Melforge(a.melforge)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    wavs = write_wavs(work / "wav")
    common = ["data", "build", "--audio", str(work / "wav"), "--labels", str(work / "wav" / "labels.csv"),
              "--mels", "32", "--dtype", "f32", "--split", "0.5,0.25,0.25", "--progress", "plain"]
    mf.run(*common, "--out", str(work / "data32"), "--frames", "32", "--long", "2", "--short", "2")
    mf.run(*common, "--out", str(work / "data37"), "--frames", "37", "--long", "1", "--short", "2")
    ckpts = {}
    try:
        for name in a.models.split(","):
            sets, how, dynamic = MODELS[name]
            print(f"{name}:")
            ckpts[name] = train(mf, name, sets, work / "data32", work)
            check_logmel_model(mf, work, name, ckpts[name], how, dynamic)
            if name in WITH_FRONTEND:
                check_waveform_model(mf, work, name, ckpts[name], how, wavs)
        print("errors:")
        check_errors(mf, work, next(iter(ckpts.values())))
    except Failure as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print("all ONNX export checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
