// train.batch_size = auto (train/batch_size.hpp): the rule on set sizes around
// its thresholds, the caps of each device, and accumulation.
#include <doctest/doctest.h>

#include <initializer_list>

#include "train/batch_size.hpp"

using namespace mf::train;

TEST_CASE("auto batch size: the largest power of two leaving enough steps per epoch") {
  // 1,000 segments (the digits set): 31 steps an epoch at 32 would be
  // fewer than 32, so 16; 2,048 segments: 32 steps at 64.
  CHECK(auto_batch_size(1000, 1, false) == 16);
  CHECK(auto_batch_size(2047, 1, false) == 32);
  CHECK(auto_batch_size(2048, 1, false) == 64);
  for (std::int64_t n : {512, 1000, 5000, 8192, 100000}) {
    CAPTURE(n);
    const std::int64_t b = auto_batch_size(n, 1, false);
    CHECK((b & (b - 1)) == 0);  // a power of two
    if (b > kMinAutoBatch) CHECK(n / b >= kMinStepsPerEpoch);  // enough steps
    if (b < kMaxAutoBatchCpu) CHECK(n / (2 * b) < kMinStepsPerEpoch);  // and the largest such
  }
}

TEST_CASE("auto batch size: device caps and the floor") {
  CHECK(auto_batch_size(100, 1, true) == kMinAutoBatch);
  CHECK(auto_batch_size(10'000'000, 1, false) == kMaxAutoBatchCpu);
  CHECK(auto_batch_size(10'000'000, 1, true) == kMaxAutoBatchGpu);
  CHECK(auto_batch_size(40'000, 1, true) == 1024);  // 39 steps an epoch
}

TEST_CASE("auto batch size: gradient accumulation counts micro-batches per step") {
  // Four micro-batches per step need four times the data for the same batch.
  CHECK(auto_batch_size(4 * 2048, 4, false) == auto_batch_size(2048, 1, false));
  CHECK(auto_batch_size(2048, 4, false) == 16);
}

TEST_CASE("auto batch size: a set smaller than the floor still fills one step") {
  // 13 segments: a batch of 16 would be dropped whole (train.drop_last); 13 is
  // one step an epoch over every segment.
  CHECK(auto_batch_size(13, 1, false) == 13);
  CHECK(auto_batch_size(13, 2, false) == 6);  // two micro-batches of 6 make the one step
  CHECK(auto_batch_size(1, 4, true) == 1);
  CHECK(auto_batch_size(16, 1, false) == 16);
}
