// GradientBuckets: the buckets cover the gradient exactly once, each starts
// when the last parameter overlapping it is final, in a fixed order, and
// finish() starts the rest.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "engine/error.hpp"
#include "model/gradient_buckets.hpp"

using mf::model::GradientBuckets;
using mf::model::ParamInfo;

namespace {

ParamInfo param(const char* name, std::int64_t offset, std::int64_t numel) {
  ParamInfo p;
  p.name = name;
  p.offset = offset;
  p.numel = numel;
  return p;
}

using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

}  // namespace

TEST_CASE("GradientBuckets: a bucket starts once every parameter in it is final") {
  // The layout's order (weights first, then biases), as ParamBuffer lays it
  // out, with 2 values of padding at the end; buckets of 4 values.
  const std::vector<ParamInfo> params = {param("blocks.0.conv.weight", 0, 6), param("blocks.1.conv.weight", 6, 3),
                                         param("fc.weight", 9, 2), param("blocks.0.conv.bias", 11, 1),
                                         param("blocks.1.conv.bias", 12, 1), param("fc.bias", 13, 1)};
  GradientBuckets b(params, 16, 4);
  REQUIRE(b.buckets().size() == 4);
  Ranges started;
  const auto start = [&](std::int64_t lo, std::int64_t hi) { started.emplace_back(lo, hi); };
  for (int step = 0; step < 2; ++step) {  // begin() makes the next step start the same way
    CAPTURE(step);
    started.clear();
    b.begin();
    b.ready("fc", start);  // [8, 12) still holds blocks.1's weight and blocks.0's bias
    CHECK(started.empty());
    b.ready("blocks.1", start);  // [8, 12) still holds blocks.0's bias; [12, 16) is complete
    CHECK(started == Ranges{{12, 16}});
    b.ready("blocks.0", start);  // the rest, in position order
    CHECK(started == Ranges{{12, 16}, {0, 4}, {4, 8}, {8, 12}});
    b.ready("blocks.0", start);  // told twice: nothing starts twice
    b.finish(start);
    CHECK(started.size() == 4);
  }
  // A prefix names whole parts of a name ("blocks" takes every block, not
  // "blocksx"); a full name names one parameter.
  started.clear();
  b.begin();
  b.ready("blocks", start);
  CHECK(started == Ranges{{0, 4}, {4, 8}});
  b.ready("fc.bias", start);
  CHECK(started == Ranges{{0, 4}, {4, 8}, {12, 16}});
  b.finish(start);
  CHECK(started == Ranges{{0, 4}, {4, 8}, {12, 16}, {8, 12}});
}

TEST_CASE("GradientBuckets: finish starts every bucket not started, padding-only ones too") {
  GradientBuckets b({param("w", 0, 3)}, 10, 4);  // [0, 4) holds w; [4, 8) and [8, 10) are padding
  Ranges started;
  const auto start = [&](std::int64_t lo, std::int64_t hi) { started.emplace_back(lo, hi); };
  b.ready("w", start);
  CHECK(started == Ranges{{0, 4}});
  b.finish(start);
  CHECK(started == Ranges{{0, 4}, {4, 8}, {8, 10}});
  CHECK_THROWS_AS(GradientBuckets({param("w", 8, 3)}, 10, 4), mf::Error);  // outside the gradient
  CHECK_THROWS_AS(GradientBuckets({param("w", 0, 3)}, 10, 0), mf::Error);
}
