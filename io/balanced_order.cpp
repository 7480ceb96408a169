#include "io/balanced_order.hpp"

#include <algorithm>
#include <map>

#include "engine/counter_rng.hpp"
#include "engine/error.hpp"

namespace mf::io {

namespace {

// A seeded generator for one (seed, epoch, purpose, class) stream.
struct Draw {
  std::uint64_t state;
  Draw(std::uint64_t seed, std::int64_t epoch, std::uint64_t purpose, std::uint64_t item)
      : state(splitmix64_hash(seed ^ splitmix64_hash(std::uint64_t(epoch) * 0x9e3779b97f4a7c15ull + purpose) ^
                              splitmix64_hash(item + 0x62616c616e636564ull))) {}  // "balanced"
  // Uniform in [0, bound) without modulo bias.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const std::uint64_t r = splitmix64_next(state);
      if (r >= threshold) return r % bound;
    }
  }
  template <class T> void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
};

// Segments of each class, in index order (classes in label order).
std::map<std::int32_t, std::vector<std::int64_t>> by_class(std::span<const std::int32_t> labels) {
  std::map<std::int32_t, std::vector<std::int64_t>> c;
  for (std::size_t i = 0; i < labels.size(); ++i) c[labels[i]].push_back(std::int64_t(i));
  return c;
}

void check_args(int per_class, std::int64_t batch) {
  MF_CHECK(per_class >= 2, "data.per_class: expected >= 2 segments per class, found {}", per_class);
  MF_CHECK(batch % per_class == 0 && batch / per_class >= 2,
           "data.per_class = {}: the batch ({}) must be a multiple of it holding at least 2 classes", per_class, batch);
}

// Class c's segments for this epoch: shuffled within each file, files
// shuffled, then interleaved (one per file in turn).
std::vector<std::int64_t> interleaved(const std::vector<std::int64_t>& segs, std::span<const std::int64_t> file_of,
                                      Draw& d) {
  std::map<std::int64_t, std::vector<std::int64_t>> files;
  for (std::int64_t s : segs) files[file_of[std::size_t(s)]].push_back(s);
  std::vector<std::vector<std::int64_t>> lists;
  for (auto& [f, v] : files) {
    d.shuffle(v);
    lists.push_back(std::move(v));
  }
  d.shuffle(lists);
  std::vector<std::int64_t> out;
  for (std::size_t round = 0; out.size() < segs.size(); ++round)
    for (const auto& l : lists)
      if (round < l.size()) out.push_back(l[round]);
  return out;
}

}  // namespace

std::int64_t balanced_batches(std::span<const std::int32_t> labels, int per_class, std::int64_t batch) {
  check_args(per_class, batch);
  const std::int64_t K = batch / per_class;
  std::vector<std::int64_t> groups;
  for (const auto& [c, v] : by_class(labels)) groups.push_back(std::int64_t(v.size()) / per_class);
  // sum_c min(g_c, b) - b*K is concave in b: find the largest feasible b.
  std::int64_t total = 0;
  for (std::int64_t g : groups) total += g;
  std::int64_t best = 0;
  for (std::int64_t b = 1; b <= total / K; ++b) {
    std::int64_t have = 0;
    for (std::int64_t g : groups) have += std::min(g, b);
    if (have >= b * K) best = b;
    else break;
  }
  return best;
}

std::vector<std::int64_t> balanced_epoch_order(std::span<const std::int32_t> labels,
                                               std::span<const std::int64_t> file_of, int per_class,
                                               std::int64_t batch, std::uint64_t seed, std::int64_t epoch) {
  MF_CHECK(labels.size() == file_of.size(), "balanced_epoch_order: {} labels for {} file ids", labels.size(),
           file_of.size());
  const std::int64_t nb = balanced_batches(labels, per_class, batch);
  MF_CHECK(nb > 0, "data.per_class = {}: the data cannot fill one batch of {} (needs {} classes with {} segments "
           "each)", per_class, batch, batch / per_class, per_class);
  const std::int64_t K = batch / per_class;
  // Groups of M per class, at most nb per class, laid out class by class.
  std::vector<std::vector<std::int64_t>> per;  // per class: its groups' segments, flattened
  for (const auto& [c, segs] : by_class(labels)) {
    Draw d(seed, epoch, 1, std::uint64_t(std::uint32_t(c)));
    std::vector<std::int64_t> v = interleaved(segs, file_of, d);
    const std::int64_t g = std::min<std::int64_t>(std::int64_t(v.size()) / per_class, nb);
    v.resize(std::size_t(g * per_class));
    if (g > 0) per.push_back(std::move(v));
  }
  Draw order(seed, epoch, 2, 0);
  order.shuffle(per);
  std::vector<std::vector<std::int64_t>> batches(static_cast<std::size_t>(nb));  // group starts per batch
  std::int64_t t = 0;
  for (const auto& v : per)
    for (std::size_t g = 0; g * std::size_t(per_class) < v.size(); ++g, ++t) {
      auto& b = batches[std::size_t(t % nb)];
      if (std::int64_t(b.size()) < batch) b.insert(b.end(), v.begin() + std::ptrdiff_t(g * per_class),
                                               v.begin() + std::ptrdiff_t((g + 1) * per_class));
    }
  std::vector<std::int64_t> out;
  out.reserve(std::size_t(nb * batch));
  for (std::size_t k = 0; k < batches.size(); ++k) {
    auto& b = batches[k];
    MF_CHECK(std::int64_t(b.size()) == batch, "balanced_epoch_order: batch {} got {} rows, expected {}", k, b.size(),
             batch);
    // Shuffle the groups (not the rows) within the batch.
    std::vector<std::int64_t> groups(static_cast<std::size_t>(K));
    for (std::int64_t i = 0; i < K; ++i) groups[std::size_t(i)] = i;
    Draw d(seed, epoch, 3, k);
    d.shuffle(groups);
    for (std::int64_t gi : groups)
      out.insert(out.end(), b.begin() + std::ptrdiff_t(gi * per_class), b.begin() + std::ptrdiff_t((gi + 1) * per_class));
  }
  return out;
}

}  // namespace mf::io
