// The f32 scratch of an op's CUDA path (batch_norm, margin_softmax_loss,
// angleproto_loss take an optional Tensor* scratch, just before the stream): the caller's,
// checked, or one allocated for this call. A per-call allocation is refused
// while the stream is being captured into a CUDA graph: the graph would replay
// into memory freed after the capture, so a captured caller must allocate the
// scratch before the capture and pass it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/error.hpp"
#include "engine/tensor.hpp"

namespace mf::ops {

// The scratch's f32 pointer: *scratch when given (not null): f32, at least
// `need` elements, on like's device; else a fresh [need] f32 tensor on like's
// device held by `owned` (freed with it, on the stream). sizing() gives the
// size function and its arguments for the messages, e.g.
// "batch_norm_scratch_elems(M = 6, C = 3)"; it is called only on an error.
template <class Sizing>
float* scratch_or_per_call(Tensor* scratch, std::int64_t need, const Sizing& sizing, const Tensor& like,
                           Tensor& owned, cudaStream_t stream, const char* op) {
  if (scratch) {
    check_dtype(*scratch, DType::f32, op, "scratch");
    MF_CHECK(scratch->numel() >= need, "{}: scratch must hold at least {} = {} f32 values, found {}", op, sizing(),
             need, scratch->str());
    check_same_device({&like, scratch}, op);
    return static_cast<float*>(scratch->raw());
  }
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MF_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
  MF_CHECK(st == cudaStreamCaptureStatusNone,
           "{}: no scratch given while the stream is being captured into a CUDA graph; pass an f32 scratch of "
           "{} = {} elements allocated before the capture",
           op, sizing(), need);
  owned = Tensor::empty({need}, DType::f32, like.device(), Layout::plain, stream);
  return static_cast<float*>(owned.raw());
}

}  // namespace mf::ops
