// Synthetic speaker datasets (`melforge data synth --speakers N`): log-mel
// spectrograms of N synthetic "speakers", many recordings each, in the
// file-structured layout [F, L, S, n_mels, frames], split BY SPEAKER into
// train/val/test (speaker verification is judged on speakers never seen in
// training).
//
// Each speaker has a voice, drawn from a generator seeded by (seed, speaker):
// - a spectral envelope: 4 formant-like Gaussian bumps (in dB) at
//   speaker-specific mel positions, widths and gains, an overall level and a
//   spectral tilt, and a breathiness (an aspiration floor under the harmonics);
// - a pitch: a fundamental f0 (90-260 Hz, log-uniform) whose harmonics k*f0
//   are rendered as narrow lines on the mel axis (HTK mels over 0-8 kHz: the
//   low harmonics are resolved, the high ones merge into a continuum).
// Each recording (file) of a speaker has its own generator, seeded by (seed,
// speaker, recording), and draws:
// - the voice's pitch jittered (f0 x exp(N(0, 0.06))) and drifting within the
//   file (a slow random walk in log f0 plus a contour per syllable);
// - syllable-like energy modulation: syllables of 6-21 frames with a raised
//   sine envelope, each with its own "vowel" (formant positions shifted by up
//   to +-0.035 of the mel axis, gains by +-3 dB), separated by pauses of 2-13
//   frames in which only the background is left;
// - a channel: level (+-3 dB), tilt (+-3 dB across the axis) and two smooth
//   random equaliser bumps (+-2 dB), applied to voice and background alike;
// - additive background noise with its own sloped spectrum (8-24 dB down
//   across the axis) at an SNR drawn from [15, 25] dB (relative to the mean
//   power of the voiced frames); in the pauses it is all there is;
// - speckle as in the leak synth (gamma-distributed power, shape 2).
// Values are 10*log10(power) / 10 (decibels / 10, attribute db_per_unit 10).
// Resolution: as in io/synth.hpp, below 64 mels the scene is rendered at
// R = ceil(64 / mels) times the bands and averaged down in power, so harmonic
// lines keep their width in Hz.
// Difficulty (defaults: 64 x 64, L=2, S=4): cosine scoring of the
// time-averaged raw spectra (the mean over a file's frames of each band's
// value) of unseen speakers' files, all pairs, gives an EER of about 25%
// (24 speakers x 8 files, 18,336 trials; seeds 1-5: 25.6%, 25.6%, 26.1%,
// 27.1%, 23.0%; chance is 50%): the voices are separable, but channel, noise,
// pauses and vowel variation blur a raw average, and averaging over time
// smears the pitch; a model has more to learn from (the harmonic lines, the
// formants per syllable). tests/io/test_synth_speakers.cpp keeps it in
// [15%, 35%] (seeds 1-3). The SNR range was the strongest knob while tuning
// (wider ranges, which make the pauses' level vary more, put it above 30%).
// Deterministic: the same config and seed give the same bytes whatever the
// thread count; a speaker's voice depends only on (seed, speaker), so the
// same speaker id sounds the same in datasets of different sizes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "io/h5_writer.hpp"

namespace mf::io {

struct SpeakerSynthConfig {
  int speakers = 40;                    // over the three splits
  std::int64_t files_per_speaker = 8;   // recordings per speaker
  std::int64_t mels = 64, frames = 64;
  std::int64_t long_segments = 2, short_segments = 4;  // L and S per file
  std::uint64_t seed = 1;
  DType dtype = DType::f16;
  WriteStorage storage = WriteStorage::contiguous;
  double val_fraction = 0.15, test_fraction = 0.15;  // of the speakers (each split gets >= 2)
  // Whole utterances (`--utterances`): each recording one utterance of
  // frames..max_frames frames (uniform, drawn from (seed, speaker, recording)),
  // written in the ragged layout (storage as for segments; chunks of 256
  // frames); long_segments and short_segments unused.
  bool utterances = false;
  std::int64_t max_frames = 0;  // 0: 4 x frames
};

struct SpeakerSplit {
  std::string name, path;
  std::vector<int> speakers;  // global speaker ids; label k of this split is speakers[k]
  std::int64_t files = 0, segments = 0;
};

// "spk0012": zero-padded to 4 digits, or more when `speakers` needs them.
std::string speaker_name(int speaker, int speakers);
// "spk0012/rec03": the /files name of a recording (2 digits or more).
std::string speaker_file_name(int speaker, int speakers, std::int64_t rec, std::int64_t files_per_speaker);

// The global speaker ids of train, val and test: consecutive blocks
// (train first), disjoint, every split with at least 2 speakers.
std::array<std::vector<int>, 3> speaker_splits(const SpeakerSynthConfig& cfg);

// Recording `rec` of `speaker`: L*S segments of n_mels*frames values into `out`.
void synth_speaker_file(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec, float* out);

// Whole-utterance mode: the length of recording `rec` of `speaker`, and its
// frames (frame-major [length, mels], as the ragged layout stores them);
// deterministic in (seed, speaker, recording) as the fixed-segment files are.
std::int64_t synth_utterance_frames(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec);
void synth_speaker_utterance(const SpeakerSynthConfig& cfg, int speaker, std::int64_t rec, float* out);

// Writes DIR/train.h5, DIR/val.h5, DIR/test.h5 (DIR is created): labels are
// each split's speaker indices, class_names the global names of its speakers
// (so test.h5's class 0 is e.g. "spk0034"), /files "spkNNNN/recNN", files in
// speaker-major order. No /leak dataset (it is not a leak task). Whole
// utterances: /segments [T, mels] and /lengths, one utterance per recording.
std::vector<SpeakerSplit> write_synthetic_speakers(const std::string& dir, const SpeakerSynthConfig& cfg);

}  // namespace mf::io
