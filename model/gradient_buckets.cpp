#include "model/gradient_buckets.hpp"

#include <algorithm>

#include "engine/error.hpp"

namespace mf::model {

GradientBuckets::GradientBuckets(const std::vector<ParamInfo>& params, std::int64_t size, std::int64_t bucket_elems) {
  MF_CHECK(bucket_elems > 0, "GradientBuckets: a bucket must hold at least one value, found {}", bucket_elems);
  MF_CHECK(size >= 0, "GradientBuckets: the gradient has {} values", size);
  for (std::int64_t b = 0; b < size; b += bucket_elems) buckets_.push_back({b, std::min(size, b + bucket_elems)});
  for (const ParamInfo& p : params) {
    MF_CHECK(p.offset >= 0 && p.numel >= 0 && p.offset + p.numel <= size,
             "GradientBuckets: parameter {} at [{}, {}) lies outside the gradient's {} values", p.name, p.offset,
             p.offset + p.numel, size);
    if (p.numel == 0) continue;
    Param q{p.name, p.offset, p.offset + p.numel};
    q.first_bucket = int(p.offset / bucket_elems);
    q.last_bucket = int((q.end - 1) / bucket_elems);
    for (int b = q.first_bucket; b <= q.last_bucket; ++b) ++buckets_[std::size_t(b)].params;
    params_.push_back(q);
  }
  begin();
}

void GradientBuckets::begin() {
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.waiting_for = b.params;
    b.started = false;
  }
}

void GradientBuckets::ready(std::string_view prefix, const Start& start) {
  std::vector<int> complete;
  for (Param& p : params_) {
    if (p.ready || !name_matches(p.name, prefix)) continue;
    p.ready = true;
    for (int b = p.first_bucket; b <= p.last_bucket; ++b)
      if (--buckets_[std::size_t(b)].waiting_for == 0) complete.push_back(b);
  }
  std::sort(complete.begin(), complete.end());
  for (const int b : complete) {
    Bucket& k = buckets_[std::size_t(b)];
    k.started = true;
    start(k.begin, k.end);
  }
}

void GradientBuckets::finish(const Start& start) {
  for (Bucket& b : buckets_) {
    if (b.started) continue;
    b.started = true;
    start(b.begin, b.end);
  }
}

}  // namespace mf::model
