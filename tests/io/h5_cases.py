"""Writes the HDF5 test files for tests/io with h5py (an independent writer:
melforge's own writer is not involved). Usage: h5_cases.py OUTDIR

Good files (round trips): NAME.h5 plus NAME.ref.bin (every segment as float32,
row-major [N, n_mels, frames], exactly the stored values) and NAME.labels.bin
(int32 label per segment). Malformed files: bad_*.h5.
"""
import os
import shutil
import sys

import h5py
import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1234)
M, T = 8, 12


def values(shape, dtype):
    return rng.normal(0.0, 2.0, size=shape).astype(dtype)


def save_ref(name, seg, seg_labels):
    seg.astype(np.float32).reshape(-1).tofile(os.path.join(out, name + ".ref.bin"))
    np.asarray(seg_labels, dtype=np.int32).tofile(os.path.join(out, name + ".labels.bin"))


def good_flat(name, dtype, **kw):
    N = 37
    x = values((N, M, T), dtype)
    y = rng.integers(0, 3, size=N).astype(np.int32)
    with h5py.File(os.path.join(out, name + ".h5"), "w") as f:
        f.create_dataset("segments", data=x, **kw)
        f.create_dataset("labels", data=y)
        f.attrs["class_names"] = ["normal", "leak_a", "leak_b"]
    save_ref(name, x, y)


def good_fs(name, dtype, seg_name="segments", lab_name="labels", leak=True, fixed_names=False, **kw):
    F, L, S = 5, 3, 4
    x = values((F, L, S, M, T), dtype)
    y = np.array([0, 1, 2, 1, 0], dtype=np.int64)
    with h5py.File(os.path.join(out, name + ".h5"), "w") as f:
        f.create_dataset(seg_name, data=x, **kw)
        f.create_dataset(lab_name, data=y)
        if leak:
            f.create_dataset("leak", data=(y != 0))  # h5py bool: an enum over int8
        names = ["normal", "leak_a", "leak_b"]
        f.attrs["class_names"] = np.array([n.encode() for n in names], dtype="S8") if fixed_names else names
        f.attrs["sample_rate"] = 16000
        f.attrs["hop_length"] = 256
        f.attrs["n_mels"] = M
    save_ref(name, x, np.repeat(y, L * S))


good_flat("flat_f32_contiguous", np.float32)
good_flat("flat_f16_contiguous", np.float16)
good_flat("flat_f16_chunked", np.float16, chunks=(5, 3, 5))            # chunks split mels and frames, partial edges
good_flat("flat_f32_gzip_shuffle", np.float32, chunks=(4, M, T), compression="gzip", shuffle=True)
good_fs("fs_f16_gzip_shuffle", np.float16, chunks=(2, 2, 3, 4, 12), compression="gzip", compression_opts=6, shuffle=True)
good_fs("fs_f32_gzip", np.float32, chunks=(1, 1, 4, M, T), compression="gzip")
good_fs("fs_f32_chunked", np.float32, chunks=(1, 3, 4, M, T))
good_fs("fs_f16_contiguous_named", np.float16, seg_name="mel", lab_name="y", leak=False, fixed_names=True)
good_fs("fs_f32_fletcher32", np.float32, chunks=(1, 1, 4, M, T), fletcher32=True)   # H5Dread fallback path

# Whole utterances (the ragged layout): frames [T, M] one utterance after
# another, /lengths [F]. NAME.frames.bin: every frame as float32 [T, M];
# NAME.crops.bin: the crops of RAGGED_CROPS (utterance, start) of RAGGED_N
# frames as NumPy cuts them (frames start, start+1, ... wrapping to the
# utterance's first frame: numpy.take(mode="wrap")), each [M, RAGGED_N].
RAGGED_LENGTHS = [5, 17, 12, 3, 30, 9]
RAGGED_N = 10
RAGGED_CROPS = [(0, 0), (0, 4), (1, 3), (1, 7), (2, 2), (3, 0), (3, 2), (4, 20), (4, 0), (5, 0)]


def good_ragged(name, dtype, **kw):
    x = values((sum(RAGGED_LENGTHS), M), dtype)
    y = np.array([0, 1, 2, 1, 0, 2], dtype=np.int64)
    with h5py.File(os.path.join(out, name + ".h5"), "w") as f:
        f.create_dataset("segments", data=x, **kw)
        f.create_dataset("lengths", data=np.array(RAGGED_LENGTHS, np.int32))
        f.create_dataset("labels", data=y)
        f.attrs["class_names"] = ["normal", "leak_a", "leak_b"]
    x.astype(np.float32).reshape(-1).tofile(os.path.join(out, name + ".frames.bin"))
    offsets = np.concatenate([[0], np.cumsum(RAGGED_LENGTHS)])
    crops = []
    for u, start in RAGGED_CROPS:
        utt = x[offsets[u]:offsets[u + 1]].astype(np.float32)
        crops.append(np.take(utt, np.arange(start, start + RAGGED_N), axis=0, mode="wrap").T)
    np.stack(crops).reshape(-1).tofile(os.path.join(out, name + ".crops.bin"))


good_ragged("ragged_f16_contiguous", np.float16)
good_ragged("ragged_f32_gzip", np.float32, chunks=(7, 5), compression="gzip", shuffle=True)  # chunks split mels

# Compact layout (tiny data kept in the object header): the H5Dread fallback path.
x = values((3, M, T), np.float32)
y = np.array([0, 1, 1], dtype=np.int16)
with h5py.File(os.path.join(out, "flat_f32_compact.h5"), "w") as f:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(x.shape)
    d = h5py.h5d.create(f.id, b"segments", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
    d.write(h5py.h5s.ALL, h5py.h5s.ALL, x)
    f.create_dataset("labels", data=y)
    f.attrs["class_names"] = ["normal", "leak_a", "leak_b"]
save_ref("flat_f32_compact", x, y)


# ---- malformed files
def bad(name, build):
    with h5py.File(os.path.join(out, "bad_" + name + ".h5"), "w") as f:
        build(f)


good_x = values((6, M, T), np.float32)
good_y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int32)
bad("missing_segments", lambda f: f.create_dataset("labels", data=good_y))
bad("missing_labels", lambda f: f.create_dataset("segments", data=good_x))
bad("rank4", lambda f: (f.create_dataset("segments", data=values((2, 3, M, T), np.float32)),
                        f.create_dataset("labels", data=good_y)))
bad("int_segments", lambda f: (f.create_dataset("segments", data=np.ones((6, M, T), np.int16)),
                               f.create_dataset("labels", data=good_y)))
bad("f64_segments", lambda f: (f.create_dataset("segments", data=good_x.astype(np.float64)),
                               f.create_dataset("labels", data=good_y)))
bad("label_count", lambda f: (f.create_dataset("segments", data=good_x),
                              f.create_dataset("labels", data=good_y[:5])))
bad("negative_label", lambda f: (f.create_dataset("segments", data=good_x),
                                 f.create_dataset("labels", data=np.array([0, 1, -1, 0, 1, 2], np.int32))))


def ragged_case(name, lengths, frames=20):
    def build(f):
        f.create_dataset("segments", data=values((frames, M), np.float32))
        if lengths is not None:
            f.create_dataset("lengths", data=lengths)
        f.create_dataset("labels", data=np.zeros(len(lengths) if lengths is not None else 4, np.int32))
    bad(name, build)


ragged_case("ragged_no_lengths", None)
ragged_case("ragged_lengths_sum", np.array([5, 5, 9], np.int32))
ragged_case("ragged_lengths_zero", np.array([5, 0, 15], np.int64))
ragged_case("ragged_lengths_overrun", np.array([10, 15], np.int32))
ragged_case("ragged_lengths_too_many", np.ones(21, np.int8))
ragged_case("ragged_lengths_float", np.array([10.0, 10.0], np.float32))


def range_case(f):
    f.create_dataset("segments", data=good_x)
    f.create_dataset("labels", data=np.array([0, 1, 5, 0, 1, 2], np.int32))
    f.attrs["class_names"] = ["normal", "a", "b"]


bad("label_range", range_case)
bad("float_labels", lambda f: (f.create_dataset("segments", data=good_x),
                               f.create_dataset("labels", data=good_y.astype(np.float32))))
bad("empty", lambda f: (f.create_dataset("segments", shape=(0, M, T), dtype=np.float32),
                        f.create_dataset("labels", shape=(0,), dtype=np.int32)))
bad("leak_value", lambda f: (f.create_dataset("segments", data=good_x), f.create_dataset("labels", data=good_y),
                             f.create_dataset("leak", data=np.array([0, 1, 2, 0, 1, 1], np.uint8))))


def nmels_case(f):
    f.create_dataset("segments", data=good_x)
    f.create_dataset("labels", data=good_y)
    f.attrs["n_mels"] = 40


bad("n_mels_attr", nmels_case)
bad("unwritten_chunks", lambda f: (f.create_dataset("segments", shape=(6, M, T), dtype=np.float32, chunks=(2, M, T)),
                                   f.create_dataset("labels", data=good_y)))
nan_x = good_x.copy()
nan_x[3, 2, 5] = np.nan
bad("nan", lambda f: (f.create_dataset("segments", data=nan_x), f.create_dataset("labels", data=good_y)))
inf_x = good_x.astype(np.float16)
inf_x[4, 7, 11] = np.inf
bad("inf_gzip", lambda f: (f.create_dataset("segments", data=inf_x, chunks=(2, M, T), compression="gzip", shuffle=True),
                           f.create_dataset("labels", data=good_y)))
try:
    bad("lzf", lambda f: (f.create_dataset("segments", data=good_x, chunks=(2, M, T), compression="lzf"),
                          f.create_dataset("labels", data=good_y)))
except Exception as e:  # h5py built without lzf
    print("no lzf:", e)

# Truncated: a good contiguous file cut in the middle of its data.
src = os.path.join(out, "flat_f32_contiguous.h5")
dst = os.path.join(out, "bad_truncated.h5")
shutil.copyfile(src, dst)
with open(dst, "r+b") as f:
    f.truncate(os.path.getsize(src) // 2)
with open(os.path.join(out, "bad_not_hdf5.h5"), "w") as f:
    f.write("segments,labels\n1,2\n" * 50)


# ---- damaged declared sizes: a good file whose /segments dataspace
# (dims, then the equal max dims: two runs of little-endian uint64) is patched
# in place, a few dozen bytes changed, as a bit flip or a hand edit would.
def patched_dims(name, shape, new_shape, **kw):
    path = os.path.join(out, "bad_" + name + ".h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("segments", data=values(shape, np.float32), **kw)
        f.create_dataset("labels", data=np.zeros(shape[0], np.int32))
    old = np.array(list(shape) * 2, "<u8").tobytes()
    new = np.array(list(new_shape) * 2, "<u8").tobytes()
    with open(path, "rb") as f:
        data = f.read()
    assert data.count(old) == 1, (name, data.count(old))
    with open(path, "wb") as f:
        f.write(data.replace(old, new))


# [5, 2^40, 4, 8, 12]: 5 files (the 5 labels match) of 2^42 segments: the
# per-segment arrays would be 2^42 entries.
patched_dims("huge_contiguous", (5, 3, 4, M, T), (5, 2**40, 4, M, T))
# 2^39 chunks declared, 3 stored: the chunk index would be 2^39 entries.
patched_dims("huge_chunked", (6, M, T), (2**40, M, T), chunks=(2, M, T))
# 2^32 x 2^32 x 12 elements: the element count overflows 64 bits.
patched_dims("overflow_shape", (6, M, T), (2**32, 2**32, T))

# Labels declared but never written (HDF5 would read its fill value, zeros).
bad("unwritten_labels", lambda f: (f.create_dataset("segments", data=good_x),
                                   f.create_dataset("labels", shape=(6,), dtype=np.int32)))


def attr_case(name, attr, value):
    def build(f):
        f.create_dataset("segments", data=good_x)
        f.create_dataset("labels", data=good_y)
        f.attrs[attr] = value
    bad(name, build)


attr_case("class_names_2d", "class_names", np.array([[b"a", b"b"], [b"c", b"d"]], dtype="S1"))
attr_case("class_names_int", "class_names", np.array([1, 2, 3], np.int32))
attr_case("hop_length_huge", "hop_length", 1e300)
attr_case("sample_rate_array", "sample_rate", np.array([16000, 22050], np.int32))
# Names that are not UTF-8 (Latin-1 bytes, a lone 0xFF): refused where read.
attr_case("class_names_not_utf8", "class_names", np.array([b"normal", b"caf\xe9", b"\xff"], dtype="S6"))


def files_not_utf8(f):
    f.create_dataset("segments", data=values((3, 2, 2, M, T), np.float32))
    f.create_dataset("labels", data=np.array([0, 1, 2], np.int32))
    f.create_dataset("files", data=np.array([b"a.wav", b"b.wav", b"\xc3(.wav"], dtype=h5py.string_dtype("ascii")))


bad("files_not_utf8", files_not_utf8)
print("h5_cases: wrote", out)
