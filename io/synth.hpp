// Synthetic leak-detection datasets (`melforge data synth`): log-mel
// spectrograms that look like pipe-monitoring recordings, in the file-structured
// layout [F, L, S, n_mels, frames], split by file into train/val/test.
//
// Every file has its own acoustic scene, drawn from a seeded generator:
// - background: noise with a sloped spectrum (random tilt and level), speckled
//   like a real power spectrogram (exponential per-bin fluctuations), slowly
//   drifting in level; plus 0-3 machinery tones (narrow lines with a harmonic,
//   amplitude-modulated) and occasional broadband transients (clicks, traffic).
// - class 0 "normal": the background alone.
// - leak classes 1..C-1: band-limited hiss added to the background: a Gaussian
//   band at a class-specific centre frequency and bandwidth (jittered per
//   file), steady or intermittent (on/off runs), at an SNR drawn per file from
//   [-3, +12] dB relative to the background in that band.
// Low-SNR leaks, intermittent leaks (some segments carry no hiss at all) and
// tones that fall inside leak bands keep it from being trivial; the class
// centres are distinct, so it is learnable.
// Values are 10*log10(power) / 10 (decibels / 10): roughly -3..+3.
// Resolution: the scene is defined on 64 mel bands. With --mels below 64 it is
// rendered at R = ceil(64 / mels) times the bands and each R adjacent bands are
// averaged in power, as a coarser filter bank over the same recording would:
// tones and leak bands keep their widths in Hz (a tone stays narrower than a
// leak band) and the speckle averages down. Before this, a 32-mel scene drew
// tones of the same width in bands as a 64-mel one, i.e. twice as wide in Hz,
// as wide as a low leak band, which made small demo datasets a harder task
// than the default one (a CNN reached ~0.76 segment accuracy at 32x32 where
// it now reaches ~0.84 with the same model and schedule). 64 mels and above
// are unchanged, byte for byte.
// Difficulty (defaults, 224 training files): a ridge classifier on the
// time-averaged spectrum reaches ~65% segment accuracy on val (chance 25%);
// with 8 files it memorizes files and stays near chance, so use many files.
// Deterministic: the same config and seed give the same bytes, whatever the
// thread count (each file has its own generator, seeded by seed and file id).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "io/h5_writer.hpp"

namespace mf::io {

struct SynthConfig {
  std::int64_t files = 320;  // total over the three splits
  int classes = 4;          // class 0 is "normal"
  std::int64_t mels = 64, frames = 64;
  std::int64_t long_segments = 2, short_segments = 4;  // L and S per file
  std::uint64_t seed = 1;
  DType dtype = DType::f16;
  WriteStorage storage = WriteStorage::contiguous;
  double val_fraction = 0.15, test_fraction = 0.15;
};

struct SynthSplit {
  std::string name, path;
  std::int64_t files = 0, segments = 0;
  std::vector<std::int64_t> files_per_class;
};

std::vector<std::string> synth_class_names(int classes);

// One file's L*S segments of n_mels*frames values into `out`.
void synth_file(const SynthConfig& cfg, int cls, std::uint64_t file_seed, float* out);

// Writes DIR/train.h5, DIR/val.h5, DIR/test.h5 (DIR is created).
std::vector<SynthSplit> write_synthetic(const std::string& dir, const SynthConfig& cfg);

}  // namespace mf::io
