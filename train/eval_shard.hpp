// Evaluation split over the processes of a data-parallel job. Each process
// runs a contiguous run of the evaluation's batches: the very batches, of the
// same size and content, that one process runs, so every row's outputs have
// one process's bits. The rows are then gathered on every process, which
// computes the metrics (loss, votes, trials, EER) from all of them: exactly
// one process's metrics, on every process.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "dist/world.hpp"
#include "io/reader.hpp"
#include "model/train_step.hpp"

namespace mf::train {

struct EvalShard {
  std::int64_t first_batch = 0;             // this process's batches start here
  std::int64_t first_row = 0, end_row = 0;  // and hold these rows of the evaluation
};

// The shard of process `rank` of `world` when `rows` rows are evaluated in
// batches of `batch`: the ceil(rows / batch) batches split into `world`
// contiguous runs whose lengths differ by at most one (a run may be empty).
EvalShard eval_shard(std::int64_t rows, std::int64_t batch, int rank, int world);

// The shard of this process in a data-parallel job when `shard`, else all
// `rows` rows (eval_shard over dist::World).
EvalShard eval_shard_here(std::int64_t rows, std::int64_t batch, bool shard);

// Runs the model over the rows of `s` (the reader must not shuffle):
// keep(out, row, take) receives each batch's outputs for the `take` rows from
// `row` on, counted from s.first_row.
void run_eval_batches(model::TrainStep& ts, io::BatchReader& reader, const EvalShard& s, cudaStream_t stream,
                      const std::function<void(const model::EvalOutput& out, std::int64_t row, std::int64_t take)>&
                          keep);

// Every process's rows in row order, on every process: `mine` holds the
// outputs (width floats per row) of this process's shard of eval_shard(rows,
// batch, ...). With one process, `mine` itself.
std::vector<float> gather_eval_rows(const dist::World& world, const std::vector<float>& mine, std::int64_t rows,
                                    std::int64_t width, std::int64_t batch, std::string_view what);

}  // namespace mf::train
