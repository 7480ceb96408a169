// Evaluation split over the processes of a data-parallel job. Each process
// runs a contiguous run of the evaluation's batches: the very batches, of the
// same size and content, that one process runs, so every row's outputs have
// one process's bits. The rows are then gathered on every process, which
// computes the metrics (loss, votes, trials, EER) from all of them: exactly
// one process's metrics, on every process.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dist/world.hpp"

namespace mf::train {

struct EvalShard {
  std::int64_t first_batch = 0;             // this process's batches start here
  std::int64_t first_row = 0, end_row = 0;  // and hold these rows of the evaluation
};

// The shard of process `rank` of `world` when `rows` rows are evaluated in
// batches of `batch`: the ceil(rows / batch) batches split into `world`
// contiguous runs whose lengths differ by at most one (a run may be empty).
EvalShard eval_shard(std::int64_t rows, std::int64_t batch, int rank, int world);

// Every process's rows in row order, on every process: `mine` holds the
// outputs (width floats per row) of this process's shard of eval_shard(rows,
// batch, ...). With one process, `mine` itself.
std::vector<float> gather_eval_rows(const dist::World& world, const std::vector<float>& mine, std::int64_t rows,
                                    std::int64_t width, std::int64_t batch, std::string_view what);

}  // namespace mf::train
