// The CUDA logmel op's sizing seam (audio/logmel.cu), for its tests:
// make_logmel_cuda(p, max_batch) is this with buffer_budget_bytes = 512 MiB.
// The op processes a batch's frames in pieces of at most
// buffer_budget_bytes / (n_fft * 4 + (n_fft/2 + 1) * 8) frames (its frame and
// spectrum buffers; at least one frame), so a small budget makes the tests
// walk the multi-piece path on small shapes.
#pragma once

#include <cstdint>
#include <memory>

#include "audio/logmel.hpp"

namespace mf::audio {

std::unique_ptr<LogmelOp> make_logmel_cuda_with_budget(const FrontendParams& p, std::int64_t max_batch,
                                                       std::int64_t buffer_budget_bytes);

}  // namespace mf::audio
