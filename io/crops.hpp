// Crops of whole utterances (ragged datasets, io/dataset.hpp): where each
// epoch's crop of an utterance starts, and which frames it holds.
//
// A crop of N frames starting at frame s of an utterance of L frames holds
// frames (s + k) mod L for k = 0..N-1: an utterance at least N long gives N
// consecutive frames (s <= L - N); a shorter one is repeated from its start
// (voxceleb_trainer's numpy.pad(..., 'wrap') of a short utterance).
//
// Training crops start at a position drawn from (seed, epoch, utterance) by
// a counter-based hash: uniform over the L - N + 1 whole crops, a new one
// every epoch, independent of the batch order, the thread count and the
// process, so a resumed run reads the same crops. Evaluation crops are centred.
#pragma once

#include <cstdint>

#include "engine/counter_rng.hpp"

namespace mf::io {

// The middle whole crop (0 for an utterance shorter than the crop).
inline std::int64_t center_crop_start(std::int64_t length, std::int64_t crop) {
  return length > crop ? (length - crop) / 2 : 0;
}

// Epoch `epoch`'s crop of utterance `utterance`: uniform over [0, length - crop]
// (0 for an utterance shorter than the crop).
inline std::int64_t random_crop_start(std::uint64_t seed, std::int64_t epoch, std::int64_t utterance,
                                      std::int64_t length, std::int64_t crop) {
  if (length <= crop) return 0;
  const std::uint64_t key = splitmix64_hash(splitmix64_hash(splitmix64_hash(seed ^ 0x63726f70ull /* "crop" */) +
                                                            std::uint64_t(epoch)) +
                                            std::uint64_t(utterance));
  // Multiply-shift of the hash's high 32 bits onto [0, positions): a bias
  // below positions / 2^32 (under 1e-3 for a crop start in an hour of 10 ms
  // frames); a modulo past 2^32 positions (years of audio).
  const auto positions = std::uint64_t(length - crop + 1);
  if (positions > (std::uint64_t(1) << 32)) return std::int64_t(key % positions);
  return std::int64_t(((key >> 32) * positions) >> 32);
}

// Crop k of K evenly spaced crops (evaluation, K >= 2): numpy.linspace(0,
// length - crop, K)[k] rounded down, voxceleb_trainer's rule (first and last
// whole crops included; 0 for every crop of an utterance shorter than one).
inline std::int64_t eval_crop_start(std::int64_t k, std::int64_t crops, std::int64_t length, std::int64_t crop) {
  if (length <= crop || crops < 2) return crops < 2 ? center_crop_start(length, crop) : 0;
  return k * (length - crop) / (crops - 1);
}

// The utterance frame that frame k of a crop starting at `start` holds.
inline std::int64_t crop_frame(std::int64_t start, std::int64_t k, std::int64_t length) {
  return (start + k) % length;
}

}  // namespace mf::io
