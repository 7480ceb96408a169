"""librosa oracle for the mel filter bank and the logmel op (audio/logmel.hpp).

usage: librosa_logmel.py CASES
CASES is a text file, one case a line (one librosa start-up for all of them):

  fb  DIR SR N_FFT N_MELS FMIN FMAX
      writes DIR/weights.bin: librosa.filters.mel(sr=SR, n_fft=N_FFT,
      n_mels=N_MELS, fmin=FMIN, fmax=FMAX, htk=False, norm='slaney'),
      float32 [N_MELS, N_FFT/2 + 1].

  mel DIR SR N_FFT HOP N_MELS FMIN FMAX FRAMES L S
      reads DIR/signals.bin (float32, the files one after another) and
      DIR/lengths.bin (int64, each file's length in samples); for each file y
      computes, on the WHOLE file,
        S = librosa.feature.melspectrogram(y=y, sr=SR, n_fft=N_FFT,
              hop_length=HOP, n_mels=N_MELS, fmin=FMIN, fmax=FMAX, center=True,
              pad_mode='constant', power=2.0, htk=False, norm='slaney')
        db = 10 * log10(maximum(S, 1e-10))
      and writes its frames [0, FRAMES*L*S) to DIR/ref.bin as float32
      [files, L*S, N_MELS, FRAMES] (segment s = frames [s*FRAMES, (s+1)*FRAMES)),
      and to DIR/peak.bin, float32 [files, FRAMES*L*S], each frame's strongest
      rfft bin power in dB, 10*log10(max(max_k |stft[k, t]|^2, 1e-30)), with
      the same stft settings: the level the test measures depths from.
      A file shorter than the op's window ((T-1)*HOP + N_FFT/2 samples, T the
      frame count) is first padded with zeros to that length: with
      pad_mode='constant' this changes none of the frames librosa gives for
      the file, and gives it the T frames the op computes (zeros past a
      file's end, audio/logmel.hpp).
      It also checks that the op's input, the first window samples only,
      gives librosa the same T frames as the whole file (exit 3 otherwise).

Prints, per mel case, the largest difference of that check in dB.
"""
import sys

import librosa
import numpy as np


def db(y, sr, n_fft, hop, n_mels, fmin, fmax):
    s = librosa.feature.melspectrogram(
        y=y, sr=sr, n_fft=n_fft, hop_length=hop, n_mels=n_mels, fmin=fmin, fmax=fmax,
        center=True, pad_mode="constant", power=2.0, htk=False, norm="slaney")
    return 10 * np.log10(np.maximum(s, 1e-10))


def filterbank_case(d, sr, n_fft, n_mels, fmin, fmax):
    w = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax,
                            htk=False, norm="slaney")
    assert w.dtype == np.float32 and w.shape == (n_mels, n_fft // 2 + 1)
    w.tofile(f"{d}/weights.bin")


def mel_case(d, sr, n_fft, hop, n_mels, fmin, fmax, frames, n_long, n_short):
    segments = n_long * n_short
    total = segments * frames
    window = (total - 1) * hop + n_fft // 2
    lengths = np.fromfile(f"{d}/lengths.bin", dtype="<i8")
    signals = np.fromfile(f"{d}/signals.bin", dtype="<f4")
    assert signals.size == lengths.sum(), "signals.bin and lengths.bin disagree"
    out = np.empty((lengths.size, segments, n_mels, frames), dtype=np.float32)
    peak = np.empty((lengths.size, total), dtype=np.float32)
    worst_window_diff = 0.0
    offset = 0
    for b, n in enumerate(lengths):
        y = signals[offset:offset + n]
        offset += n
        if n < window:
            y = np.pad(y, (0, window - n))
        full = db(y, sr, n_fft, hop, n_mels, fmin, fmax)
        assert full.shape[1] >= total, f"librosa gave {full.shape[1]} frames, expected >= {total}"
        full = full[:, :total]
        spec = librosa.stft(y, n_fft=n_fft, hop_length=hop, center=True, pad_mode="constant")[:, :total]
        power = np.abs(spec.astype(np.complex128)) ** 2
        peak[b] = 10 * np.log10(np.maximum(power.max(axis=0), 1e-30))
        head = db(np.ascontiguousarray(y[:window]), sr, n_fft, hop, n_mels, fmin, fmax)[:, :total]
        worst_window_diff = max(worst_window_diff, float(np.max(np.abs(head - full))))
        # [n_mels, total] -> [segments, n_mels, frames]
        out[b] = full.reshape(n_mels, segments, frames).transpose(1, 0, 2)
    out.tofile(f"{d}/ref.bin")
    peak.tofile(f"{d}/peak.bin")
    print(f"{d}: first-window-only vs whole file: max |diff| {worst_window_diff:.3g} dB")
    if worst_window_diff > 1e-4:
        sys.exit(3)


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            a = line.split()
            if not a:
                continue
            if a[0] == "fb":
                filterbank_case(a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]), float(a[6]))
            elif a[0] == "mel":
                mel_case(a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6]), float(a[7]),
                         int(a[8]), int(a[9]), int(a[10]))
            else:
                sys.exit(f"unknown case kind {a[0]!r}")


if __name__ == "__main__":
    main()
