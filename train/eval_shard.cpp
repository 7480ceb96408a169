#include "train/eval_shard.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>
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

namespace {

// Row i of a batch's outputs.
model::EvalOutput output_row(const model::EvalOutput& out, std::int64_t i) {
  model::EvalOutput r;
  r.embedding = out.embedding.slice(i, i + 1);
  if (out.probs.defined()) r.probs = out.probs.slice(i, i + 1);
  if (out.leak_prob.defined()) r.leak_prob = out.leak_prob.slice(i, i + 1);
  return r;
}

// eval.crops = full: each utterance of the shard whole, utterances of one
// length (up to a batch) in one forward, shortest first; keep() gets each
// row alone (take 1), as its outputs are not in row order.
void run_whole_utterances(model::TrainStep& ts, io::BatchReader& reader, const EvalShard& s, cudaStream_t stream,
                          const std::function<void(const model::EvalOutput&, std::int64_t, std::int64_t)>& keep) {
  const io::Dataset& ds = reader.dataset();
  const io::DatasetInfo& info = ds.info();
  const io::ReaderConfig& rc = reader.config();
  const model::ModelConfig& mc = ts.config().model;
  std::vector<std::int64_t> order;
  for (std::int64_t r = s.first_row; r < s.end_row; ++r) order.push_back(r);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return info.utterance_frames(a) < info.utterance_frames(b);
  });
  const std::int64_t M = info.n_mels, esz = std::int64_t(dtype_size(rc.dtype));
  for (std::size_t i = 0; i < order.size();) {
    const std::int64_t T = info.utterance_frames(order[i]);
    std::size_t j = i + 1;
    while (j < order.size() && std::int64_t(j - i) < rc.batch_size && info.utterance_frames(order[j]) == T) ++j;
    MF_CHECK(mc.takes_frames(T), "{}: utterance {} has {} frames, which the model cannot take whole (eval.crops = "
             "full needs a stack ending in global or attentive pooling, and at least the frames its strides and "
             "pools need): use eval.crops = N", info.path, order[i], T);
    Tensor x = Tensor::empty({std::int64_t(j - i), M, T, 1}, rc.dtype, Device::cpu(), Layout::nhwc);
    for (std::size_t k = i; k < j; ++k)
      ds.read_utterance(order[k], rc.dtype, static_cast<std::byte*>(x.raw()) + std::int64_t(k - i) * M * T * esz,
                        rc.check_finite);
    const model::EvalOutput out = ts.forward_eval(rc.device.is_cuda() ? x.to(rc.device, stream) : x, stream);
    for (std::size_t k = i; k < j; ++k) keep(output_row(out, std::int64_t(k - i)), order[k] - s.first_row, 1);
    i = j;
  }
}

}  // namespace

void run_eval_batches(model::TrainStep& ts, io::BatchReader& reader, const EvalShard& s, cudaStream_t stream,
                      const std::function<void(const model::EvalOutput&, std::int64_t, std::int64_t)>& keep) {
  if (reader.info().ragged() && reader.info().names.whole_utterances)
    return run_whole_utterances(ts, reader, s, stream, keep);
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
