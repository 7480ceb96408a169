// GradientBuckets: dist.reduce = fast's all-reduce of the gradient, cut into
// buckets so each can start while the backward is still computing the rest.
//
//   GradientBuckets b(pb.params(), pb.size(), bucket_elems);
//   b.begin();                          // a new step: no gradient final yet
//   ... a layer's backward done ...
//   b.ready("layers.3", start);         // its gradients are final: start every bucket that now is
//   b.finish(start);                    // the rest, then wait for all (the caller)
//
// A bucket is a contiguous range of the flat gradient buffer (ParamBuffer's
// layout), at most bucket_elems values; a parameter may straddle two. It is
// started once every parameter overlapping it is final, so a bucket holding
// the first layer's weights starts last. Buckets start in the order their
// last parameter becomes final, then by position: the same order on every
// rank, as the backward's order is (MPI and NCCL need every rank to start the
// same collectives in the same order).
//
// Being told too late costs only overlap; being told too early (a gradient
// still to be written) would sum a stale value, which is what the data-parallel
// suite's bucketed-versus-whole comparison catches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/param_buffer.hpp"

namespace mf::model {

class GradientBuckets {
 public:
  // Starts the sum of the gradient's elements [begin, end).
  using Start = std::function<void(std::int64_t begin, std::int64_t end)>;

  GradientBuckets(const std::vector<ParamInfo>& params, std::int64_t size, std::int64_t bucket_elems);

  void begin();
  // The parameters `prefix` names (name_matches: the name, or a prefix that
  // ends at a dot) are final; starts each bucket that becomes complete.
  void ready(std::string_view prefix, const Start& start);
  // Starts every bucket not started yet, in position order.
  void finish(const Start& start);

  struct Bucket {
    std::int64_t begin = 0, end = 0;
    int waiting_for = 0;  // parameters still to be final (this step)
    int params = 0;       // parameters overlapping it
    bool started = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  struct Param {
    std::string name;  // a copy: the caller's ParamInfo list may be a temporary
    std::int64_t begin = 0, end = 0;
    bool ready = false;
    int first_bucket = 0, last_bucket = 0;  // the buckets it overlaps
  };
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
};

}  // namespace mf::model
