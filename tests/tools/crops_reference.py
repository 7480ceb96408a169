"""NumPy's side of the whole-utterance evaluation test (test_speaker_cli):
crops cut independently of melforge, and the comparison of embeddings.

  crops_reference.py cut RAGGED.h5 K N OUTDIR
      OUTDIR/crops.h5: every utterance's K evenly spaced crops of N frames
      (numpy.linspace(0, length - N, K) rounded down; a shorter utterance
      wrapped with numpy.take(mode="wrap")), file-structured [F, 1, K, mels, N];
      OUTDIR/utt_<f>.h5: utterance f whole, flat [1, mels, length].
  crops_reference.py compare A.h5 B.h5 TOL
      exits 1 unless /embeddings of the two embed outputs agree within TOL.
"""
import os
import sys

import h5py
import numpy as np


def cut(path, K, N, out):
    with h5py.File(path, "r") as f:
        x = f["segments"][:].astype(np.float32)
        lengths = f["lengths"][:]
        labels = f["labels"][:]
        names = list(f.attrs["class_names"])
    off = np.concatenate([[0], np.cumsum(lengths)])
    crops, F = [], len(lengths)
    for u in range(F):
        utt = x[off[u]:off[u + 1]]
        L = len(utt)
        starts = np.linspace(0, max(L - N, 0), K).astype(np.int64) if K > 1 else [max(L - N, 0) // 2]
        crops.append([np.take(utt, np.arange(s, s + N), axis=0, mode="wrap").T for s in starts])
        with h5py.File(os.path.join(out, f"utt_{u}.h5"), "w") as g:
            g.create_dataset("segments", data=utt.T[None])
            g.create_dataset("labels", data=labels[u:u + 1])
            g.attrs["class_names"] = names
    with h5py.File(os.path.join(out, "crops.h5"), "w") as g:
        g.create_dataset("segments", data=np.array(crops, np.float32).reshape(F, 1, K, x.shape[1], N))
        g.create_dataset("labels", data=labels)
        g.attrs["class_names"] = names


def compare(a, b, tol):
    with h5py.File(a, "r") as f, h5py.File(b, "r") as g:
        x, y = f["embeddings"][:], g["embeddings"][:]
    if x.shape != y.shape:
        sys.exit(f"shapes differ: {x.shape} vs {y.shape}")
    worst = float(np.abs(x - y).max())
    print(f"max |a - b| = {worst:.3g} over {x.shape}")
    sys.exit(0 if worst <= tol else 1)


if sys.argv[1] == "cut":
    cut(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
else:
    compare(sys.argv[2], sys.argv[3], float(sys.argv[4]))
