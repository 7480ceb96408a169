"""melforge's crops of whole utterances (io/crops.hpp) in Python, for the
PyTorch side of the ragged-data comparison (bench/torch_metric_train.py
--crop-frames / --eval-crops) and its check (bench/check_crop_rule.py).

A crop of N frames starting at frame s of an utterance of L frames holds
frames (s + k) mod L, k = 0..N-1 (an utterance shorter than N wraps).
Training: random_crop_start(seed, epoch, utterance, L, N), the counter-based
hash of io/crops.hpp (splitmix64_hash of engine/counter_rng.hpp, uint64
wraparound, then a multiply-shift of the hash's high 32 bits onto the L - N + 1
whole crops). Evaluation: K evenly spaced crops, eval_crop_start (floor of
k (L - N) / (K - 1); K = 1: the centred crop), or the whole utterance.

Ragged file layout (docs/dataset.md): /segments [T, n_mels] frame-major,
/lengths [F], /labels [F], /files [F].
"""
import h5py
import numpy as np

from splitmix import MASK64 as M64, mix as splitmix64_hash, mix_vec as _hash_vec

CROP_SALT = 0x63726F70  # "crop"


def random_crop_start(seed, epoch, utterance, length, crop):
    """io::random_crop_start for one utterance (Python ints, exact)."""
    if length <= crop:
        return 0
    key = splitmix64_hash((splitmix64_hash(splitmix64_hash((seed & M64) ^ CROP_SALT) + (epoch & M64)) +
                           (utterance & M64)) & M64)
    positions = length - crop + 1
    if positions > (1 << 32):
        return key % positions
    return ((key >> 32) * positions) >> 32


def random_crop_starts(seed, epoch, lengths, crop):
    """random_crop_start(seed, epoch, u, lengths[u], crop) for every utterance u,
    vectorised with uint64 wraparound (the same values as the scalar version)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    with np.errstate(over="ignore"):
        base = np.array([splitmix64_hash((seed & M64) ^ CROP_SALT)], dtype=np.uint64)
        base = _hash_vec(base + np.uint64(epoch & M64))
        key = _hash_vec(base + np.arange(len(lengths), dtype=np.uint64))
        positions = np.maximum(lengths - crop + 1, 1).astype(np.uint64)
        # (key >> 32) * positions fits in 64 bits while positions <= 2^32.
        start = ((key >> np.uint64(32)) * positions) >> np.uint64(32)
    big = positions > np.uint64(1 << 32)
    if big.any():
        start[big] = key[big] % positions[big]
    return np.where(lengths <= crop, 0, start.astype(np.int64))


def center_crop_start(length, crop):
    return (length - crop) // 2 if length > crop else 0


def eval_crop_start(k, crops, length, crop):
    """io::eval_crop_start: crop k of K evenly spaced crops (K = 1: centred)."""
    if length <= crop or crops < 2:
        return center_crop_start(length, crop) if crops < 2 else 0
    return k * (length - crop) // (crops - 1)


def crop_frames(frames, start, crop):
    """The crop of `crop` frames at `start` of one utterance's frames [L, mels]:
    frames (start + k) mod L. Returns [mels, crop] (melforge's segment layout)."""
    idx = (start + np.arange(crop)) % len(frames)
    return frames[idx].T


class RaggedSplit:
    """A whole-utterance file held in memory (f32): frames [T, mels], per
    utterance offsets, lengths, labels and names."""

    def __init__(self, path, classes=0):
        self.path = path
        with h5py.File(path, "r") as f:
            seg = f["segments"]
            if seg.ndim != 2 or "lengths" not in f:
                raise SystemExit(f"{path}: not a whole-utterance file (/segments [T, mels] with /lengths)")
            self.frames_all = np.asarray(seg[()], dtype=np.float32)
            self.lengths = np.asarray(f["lengths"][()]).astype(np.int64).reshape(-1)
            self.file_labels = np.asarray(f["labels"][()]).astype(np.int64).reshape(-1)
            names = f.attrs.get("class_names")
            self.class_count = len(names) if names is not None else 0
            self.names = ([n.decode() if isinstance(n, bytes) else str(n) for n in f["files"][()]]
                          if "files" in f else [f"#{i}" for i in range(len(self.lengths))])
        if int(self.lengths.sum()) != len(self.frames_all) or (self.lengths < 1).any():
            raise SystemExit(f"{path}: /lengths do not cover /segments")
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.mels = self.frames_all.shape[1]
        self.files = self.n = len(self.lengths)
        self.per_file = 1
        self.labels = self.file_labels
        self.classes = classes or self.class_count or int(self.labels.max()) + 1

    def utterance(self, u):
        return self.frames_all[self.offsets[u]:self.offsets[u + 1]]

    def crops(self, rows, starts, crop):
        """[len(rows), mels, crop] f32: the crop of each row's utterance at its start."""
        out = np.empty((len(rows), self.mels, crop), dtype=np.float32)
        for i, (u, s) in enumerate(zip(rows, starts)):
            idx = self.offsets[u] + (int(s) + np.arange(crop)) % self.lengths[u]
            out[i] = self.frames_all[idx].T
        return out

    def epoch_crops(self, seed, epoch, crop):
        """Every utterance's training crop of `epoch`: [F, mels, crop]."""
        return self.crops(np.arange(self.n), random_crop_starts(seed, epoch, self.lengths, crop), crop)
