"""Oracle for audio/decode.cpp: librosa.load and librosa.resample, as they run
with their defaults (soundfile reads float32, librosa.to_mono averages the
channels, soxr resamples with res_type 'soxr_hq', the length is fixed to
ceil(n * target / orig)).

Usage: librosa_load.py MANIFEST

Each line of MANIFEST is one job, its fields separated by tabs:
  load      AUDIO_PATH  SR  OUT      y = librosa.load(AUDIO_PATH, sr=SR, mono=True)
  resample  IN  FROM  TO  OUT        y = librosa.resample(x, orig_sr=FROM, target_sr=TO),
                                     x read from IN (raw little-endian float32)
OUT receives y as raw little-endian float32. Any failure exits non-zero.
"""
import sys

import librosa
import numpy as np


def rate(text):
    value = float(text)
    return int(value) if value.is_integer() else value


def write(path, y):
    assert y.dtype == np.float32 and y.ndim == 1, (y.dtype, y.shape)
    y.astype("<f4").tofile(path)


def main(manifest):
    with open(manifest, encoding="utf-8") as f:
        jobs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for job in jobs:
        if job[0] == "load" and len(job) == 4:
            y, _ = librosa.load(job[1], sr=rate(job[2]), mono=True)
            write(job[3], y)
        elif job[0] == "resample" and len(job) == 5:
            x = np.fromfile(job[1], dtype="<f4").astype(np.float32)
            write(job[4], librosa.resample(x, orig_sr=rate(job[2]), target_sr=rate(job[3])))
        else:
            raise SystemExit(f"librosa_load.py: bad manifest line {job!r}")
    print(f"librosa_load.py: {len(jobs)} jobs done (librosa {librosa.__version__})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
