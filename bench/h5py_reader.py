"""The h5py baseline for `melforge-bench reader`: reads the same batches as the
melforge reader (segment indices from a raw int64 file, B per batch, sorted
within each batch), the way a PyTorch Dataset's __getitem__ reads a
file-structured dataset: one h5py read per segment. Prints one JSON line.
Usage: h5py_reader.py FILE INDICES.bin BATCH [SEGMENTS_NAME]
"""
import json
import sys
import time

import h5py
import numpy as np

path, idx_path, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = sys.argv[4] if len(sys.argv) > 4 else "segments"
idx = np.fromfile(idx_path, dtype=np.int64)
with h5py.File(path, "r") as f:
    d = f[name]
    lead = d.shape[:-2]
    out = np.empty((batch,) + d.shape[-2:], dtype=d.dtype)
    t0 = time.perf_counter()
    n = 0
    for b0 in range(0, len(idx) - batch + 1, batch):
        for r, s in enumerate(idx[b0:b0 + batch]):
            out[r] = d[np.unravel_index(int(s), lead)]
        n += batch
    dt = time.perf_counter() - t0
print(json.dumps({"segments": n, "seconds": dt, "segment_bytes": int(out[0].nbytes)}))
