// train::eval_shard: the evaluation's batches split over the processes of a
// job. Every row in exactly one shard, in order; shards start on a batch;
// their batch counts differ by at most one; one process takes everything.
#include <doctest/doctest.h>

#include "dist/world.hpp"
#include "train/eval_shard.hpp"

using mf::train::eval_shard;
using mf::train::EvalShard;

TEST_CASE("eval_shard: contiguous shards of whole batches cover every row once") {
  for (std::int64_t rows : {0, 1, 7, 16, 17, 100}) {
    for (std::int64_t batch : {1, 4, 8}) {
      for (int world : {1, 2, 3, 5, 8}) {
        CAPTURE(rows);
        CAPTURE(batch);
        CAPTURE(world);
        std::int64_t next = 0, fewest = rows, most = 0;
        for (int r = 0; r < world; ++r) {
          const EvalShard s = eval_shard(rows, batch, r, world);
          CHECK(s.first_row == next);
          CHECK(s.end_row >= s.first_row);
          CHECK(s.first_row == std::min(rows, s.first_batch * batch));
          const std::int64_t batches = (s.end_row - s.first_row + batch - 1) / batch;
          fewest = std::min(fewest, batches);
          most = std::max(most, batches);
          next = s.end_row;
        }
        CHECK(next == rows);
        CHECK(most - fewest <= 1);
      }
    }
  }
  const EvalShard one = eval_shard(17, 4, 0, 1);
  CHECK(one.first_batch == 0);
  CHECK(one.end_row == 17);
}

TEST_CASE("gather_eval_rows: one process gets its own rows back") {
  const std::vector<float> mine{1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  CHECK(mf::train::gather_eval_rows(mf::dist::World::get(), mine, 3, 2, 2, "test") == mine);
}

TEST_CASE("eval_shard: impossible requests are errors") {
  CHECK_THROWS(eval_shard(10, 0, 0, 1));
  CHECK_THROWS(eval_shard(10, 4, 2, 2));
  CHECK_THROWS(eval_shard(-1, 4, 0, 1));
}
