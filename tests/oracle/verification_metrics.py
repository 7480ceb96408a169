"""Oracle for model/verification.cpp: the EER and minDCF from scikit-learn's ROC
curve, computed as speaker-verification code usually does with sklearn.

Usage: verification_metrics.py MANIFEST

Each line of MANIFEST is one case, its fields separated by tabs:
  SCORES  LABELS  OUT  P_TARGET...
SCORES: raw little-endian float64 scores; LABELS: raw little-endian int32, 1 for
a target trial, 0 for a non-target. OUT receives one line of text:
  eer_interp eer_vox min_dcf(P_TARGET)...
- eer_interp: brentq(lambda x: 1 - x - interp1d(fpr, tpr)(x), 0, 1), the
  crossing of the linearly interpolated ROC with the diagonal;
- eer_vox: voxceleb_trainer's tuneThresholdfromScore, max(fpr, fnr) at
  nanargmin(|fnr - fpr|) (no interpolation);
- min_dcf: min over the curve's points of (fnr*p + fpr*(1-p)) / min(p, 1-p)
  (C_miss = C_fa = 1; voxceleb_trainer's ComputeMinDcf on sklearn's curve).
The curve is roc_curve(labels, scores, pos_label=1, drop_intermediate=False):
one point per distinct score plus the point of threshold +inf.
Any failure exits non-zero.
"""
import sys

import numpy as np
from scipy.interpolate import interp1d
from scipy.optimize import brentq
from sklearn.metrics import roc_curve


def case(scores_path, labels_path, out_path, p_targets):
    scores = np.fromfile(scores_path, dtype="<f8")
    labels = np.fromfile(labels_path, dtype="<i4")
    assert scores.shape == labels.shape, (scores.shape, labels.shape)
    fpr, tpr, _ = roc_curve(labels, scores, pos_label=1, drop_intermediate=False)
    fnr = 1 - tpr
    eer_interp = brentq(lambda x: 1.0 - x - interp1d(fpr, tpr)(x), 0.0, 1.0, xtol=1e-15, rtol=1e-15)
    idx = np.nanargmin(np.absolute(fnr - fpr))
    eer_vox = max(fpr[idx], fnr[idx])
    dcfs = []
    for p in p_targets:
        c_det = fnr * p + fpr * (1 - p)
        dcfs.append(np.min(c_det) / min(p, 1 - p))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(" ".join(repr(float(v)) for v in [eer_interp, eer_vox, *dcfs]) + "\n")


def main(manifest):
    with open(manifest, encoding="utf-8") as f:
        jobs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for job in jobs:
        case(job[0], job[1], job[2], [float(p) for p in job[3:]])


if __name__ == "__main__":
    main(sys.argv[1])
