#include "train/eval_shard.hpp"

#include <algorithm>
#include <span>

#include "engine/error.hpp"

namespace mf::train {

EvalShard eval_shard(std::int64_t rows, std::int64_t batch, int rank, int world) {
  MF_CHECK(rows >= 0 && batch >= 1 && world >= 1 && rank >= 0 && rank < world,
           "eval_shard: {} rows in batches of {}, rank {} of {}", rows, batch, rank, world);
  const std::int64_t batches = (rows + batch - 1) / batch;
  const auto first = [&](std::int64_t r) { return batches * r / world; };
  EvalShard s;
  s.first_batch = first(rank);
  s.first_row = std::min(rows, s.first_batch * batch);
  s.end_row = std::min(rows, first(rank + 1) * batch);
  return s;
}

EvalShard eval_shard_here(std::int64_t rows, std::int64_t batch, bool shard) {
  const dist::World& world = dist::World::get();
  return shard ? eval_shard(rows, batch, world.rank(), world.size()) : EvalShard{0, 0, rows};
}

void run_eval_batches(model::TrainStep& ts, io::BatchReader& reader, const EvalShard& s, cudaStream_t stream,
                      const std::function<void(const model::EvalOutput&, std::int64_t, std::int64_t)>& keep) {
  reader.restore({0, s.first_batch});
  for (std::int64_t done = 0; done < s.end_row - s.first_row;) {
    io::Batch b = reader.next(stream);
    MF_CHECK(b.valid > 0, "evaluation: the reader returned an empty batch at segment {}", s.first_row + done);
    const model::EvalOutput out = ts.forward_eval(b.x, stream);
    const std::int64_t take = std::min(b.valid, s.end_row - s.first_row - done);
    keep(out, done, take);
    done += take;
  }
}

std::vector<float> gather_eval_rows(const dist::World& world, const std::vector<float>& mine, std::int64_t rows,
                                    std::int64_t width, std::int64_t batch, std::string_view what) {
  if (!world.distributed()) return mine;
  const int W = world.size();
  // Every process sends the longest shard's worth (the others padded), so one
  // all-gather of equal parts carries them all.
  std::int64_t longest = 0;
  for (int r = 0; r < W; ++r) {
    const EvalShard s = eval_shard(rows, batch, r, W);
    longest = std::max(longest, s.end_row - s.first_row);
  }
  const EvalShard me = eval_shard(rows, batch, world.rank(), W);
  MF_CHECK(std::int64_t(mine.size()) == (me.end_row - me.first_row) * width,
           "rank {}: {}: {} values for rows [{}, {}) of width {}", world.rank(), what, mine.size(), me.first_row,
           me.end_row, width);
  std::vector<float> padded(std::size_t(longest * width), 0.f);
  std::copy(mine.begin(), mine.end(), padded.begin());
  const std::vector<float> all = world.allgather(std::span<const float>(padded), what);
  std::vector<float> out(std::size_t(rows * width));
  for (int r = 0; r < W; ++r) {
    const EvalShard s = eval_shard(rows, batch, r, W);
    const auto from = all.begin() + std::ptrdiff_t(r) * std::ptrdiff_t(longest * width);
    std::copy(from, from + (s.end_row - s.first_row) * width, out.begin() + s.first_row * width);
  }
  return out;
}

}  // namespace mf::train
