"""Independent NumPy check of `melforge embed` and `melforge verify` (docs/verification.md).

Usage: embeddings_check.py EMB.h5 DATA.h5 TRIALS.txt SCORES.csv VERIFY.json

From the embeddings file alone (EMB.h5 written by `melforge embed`, per file):
  - /embeddings is f32 [rows, dim], one row per file of DATA.h5, each of L2 norm 1 (within 1e-6);
    /files and /labels are DATA.h5's file names and file labels, in order;
  - every trial of TRIALS.txt is scored by the cosine (dot product of the
    normalised rows) of its two files, found by name in /files; SCORES.csv
    (`verify --out`) lists the same trials in the same order with the same
    scores (within 1e-6; the CSV has 7 significant digits);
  - the EER and minDCF (P_target 0.05, 0.01) recomputed here from those scores
    with the rule of docs/verification.md (one ROC point per distinct score,
    accept score >= threshold, linear interpolation between the bracketing
    points) equal VERIFY.json's within 1e-9, and the counts its counts.
The scores are recomputed as verify computes them on the CPU (--device cpu:
ops::trial_scores' CPU twin, float32 sums in its fixed order, replayed here in
NumPy float32), so the ROC here is built from the very same score values.
Exit status 0 when everything holds; otherwise the failures are printed and the status is 1.
"""

import json
import sys

import h5py
import numpy as np


def names_of(ds):
    return [n.decode() if isinstance(n, bytes) else str(n) for n in ds[...]]


def file_labels(data):
    labels = data["labels"][...]
    files = data["segments"].shape[0]
    # /labels is per file or per segment (then constant within a file).
    return labels if labels.size == files else labels.reshape(files, -1)[:, 0]


def roc(scores, labels):
    """(thresholds, P_miss, P_fa): one point per distinct score, then +inf."""
    s = np.asarray(scores, np.float64)
    y = np.asarray(labels)
    tgt, non = np.sort(s[y == 1]), np.sort(s[y == 0])
    u = np.unique(s)
    p_miss = np.searchsorted(tgt, u, side="left") / len(tgt)  # targets with score < u
    p_fa = (len(non) - np.searchsorted(non, u, side="left")) / len(non)  # non-targets with score >= u
    return np.append(u, np.inf), np.append(p_miss, 1.0), np.append(p_fa, 0.0)


def eer(u, p_miss, p_fa):
    d = p_miss - p_fa
    k = int(np.argmax(d >= 0))
    assert k > 0, "the first ROC point must have P_miss < P_fa"
    t = d[k - 1] / (d[k - 1] - d[k])
    return p_miss[k - 1] + t * (p_miss[k] - p_miss[k - 1]), (u[k] if t > 0.5 else u[k - 1])


def min_dcf(p_miss, p_fa, p):
    return float(np.min(p_miss * p + p_fa * (1 - p)) / min(p, 1 - p))


def cosine(a, b):
    """ops::trial_scores' CPU order (kernels/trial_scores.hpp) in float32:
    32 partial sums, partial j over k = j, j + 32, ... (each product rounded
    to float32, then added), then p[i] += p[i + s] for s = 16, 8, 4, 2, 1."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    p = np.zeros(32, np.float32)
    for k in range(0, len(a), 32):
        prod = a[k:k + 32] * b[k:k + 32]
        p[:len(prod)] = p[:len(prod)] + prod
    s = 16
    while s > 0:
        p[:s] = p[:s] + p[s:2 * s]
        s //= 2
    return float(p[0])


def main(emb_path, data_path, trials_path, scores_path, verify_path):
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    with h5py.File(emb_path, "r") as f, h5py.File(data_path, "r") as data:
        emb = f["embeddings"]
        check(emb.dtype == np.float32, f"/embeddings dtype {emb.dtype}, expected float32")
        e = emb[...]
        names = names_of(f["files"])
        check(names == names_of(data["files"]), "/files differ from the data's /files")
        check(np.array_equal(f["labels"][...], file_labels(data)), "/labels differ from the data's file labels")
        check(e.shape == (len(names), int(f.attrs["dim"])), f"/embeddings shape {e.shape}, /files {len(names)}")
    norms = np.linalg.norm(e.astype(np.float64), axis=1)
    worst = float(np.max(np.abs(norms - 1)))
    check(worst <= 1e-6, f"an embedding's L2 norm is off 1 by {worst:.3g}")
    index = {n: i for i, n in enumerate(names)}
    check(len(index) == len(names), "/files has duplicate names")

    trials = [line.split() for line in open(trials_path) if line.strip()]
    labels = np.array([int(t[0]) for t in trials])
    scores = np.array([cosine(e[index[t[1]]], e[index[t[2]]]) for t in trials], np.float64)

    rows = [line.rstrip("\n").split(",") for line in open(scores_path)]
    check(rows[0] == ["label", "file_a", "file_b", "score"], f"scores.csv header {rows[0]}")
    rows = rows[1:]
    check(len(rows) == len(trials), f"scores.csv has {len(rows)} trials, the list {len(trials)}")
    worst = 0.0
    for i, (r, t) in enumerate(zip(rows, trials)):
        check(r[:3] == t, f"scores.csv row {i + 1} is {r[:3]}, the trial list's {t}")
        worst = max(worst, abs(float(r[3]) - scores[i]))
    check(worst <= 1e-6, f"a score differs from the NumPy cosine by {worst:.3g}")

    v = json.load(open(verify_path))
    u, p_miss, p_fa = roc(scores, labels)
    e_np, thr = eer(u, p_miss, p_fa)
    check(abs(e_np - v["eer"]) <= 1e-9, f"EER {v['eer']!r}, NumPy {e_np!r}")
    check(abs(e_np - v["raw"]["eer"]) <= 1e-9, f"raw EER {v['raw']['eer']!r}, NumPy {e_np!r}")
    check(abs(thr - v["eer_threshold"]) <= 1e-9, f"EER threshold {v['eer_threshold']!r}, NumPy {thr!r}")
    for p in (0.05, 0.01):
        m = min_dcf(p_miss, p_fa, p)
        check(abs(m - v[f"min_dcf_{p}"]) <= 1e-9, f"minDCF({p}) {v[f'min_dcf_{p}']!r}, NumPy {m!r}")
    check(v["targets"] == int(labels.sum()) and v["nontargets"] == int(len(labels) - labels.sum()),
          f"counts {v['targets']}/{v['nontargets']}, the list {labels.sum()}/{len(labels) - labels.sum()}")
    check(v["trials"] == len(trials) and v["files"] == len(names), "verify's trials/files counts")

    print(f"embeddings_check: {len(names)} files x {e.shape[1]}, {len(trials)} trials, EER {e_np:.6f} "
          f"(verify {v['eer']:.6f}), max |norm - 1| {float(np.max(np.abs(norms - 1))):.2g}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
