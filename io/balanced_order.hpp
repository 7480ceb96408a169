// Speaker-balanced batches (data.per_class = M): each batch holds M segments
// of each of K = B / M distinct classes, M consecutive rows per class, for the
// prototypical losses (kernels/angleproto.hpp: the first row of a class is its
// query, the others its prototype).
//
// Per epoch, from (seed, epoch) alone (portable, like io::epoch_order):
//  1. each class's segments are shuffled file by file and then interleaved
//     across its files (one segment of each file in turn), so the M segments
//     of a group come from different files wherever the class has M files;
//  2. consecutive runs of M become groups, at most `batches` per class (the
//     surplus of a large class waits for another epoch: each epoch draws anew);
//  3. the groups are laid out class by class in a shuffled class order and
//     group t goes to batch t mod `batches`: a class never has more groups
//     than there are batches, so no batch holds a class twice, and every batch
//     gets exactly K groups; the groups within a batch are then shuffled.
// `batches` (balanced_batches) is the same every epoch: the largest b with
// sum_c min(groups_c, b) >= b * K, groups_c = floor(segments_c / M).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mf::io {

// Batches per epoch for labels/files per segment, M per class, batch size B
// (a multiple of M holding at least 2 classes). 0 when the data cannot fill
// one batch (fewer than B/M classes with M segments).
std::int64_t balanced_batches(std::span<const std::int32_t> labels, int per_class, std::int64_t batch);

// The segment order of epoch `epoch`: balanced_batches(...) * B segment
// indices, batch k at [k*B, (k+1)*B). file_of[i] is segment i's file.
std::vector<std::int64_t> balanced_epoch_order(std::span<const std::int32_t> labels,
                                               std::span<const std::int64_t> file_of, int per_class,
                                               std::int64_t batch, std::uint64_t seed, std::int64_t epoch);

}  // namespace mf::io
