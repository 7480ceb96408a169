// Fixed-order reductions over a warp or a block, shared by the CUDA kernels.
// Each combines its operands in one pairwise tree that depends only on the
// thread count, never on scheduling, so every run gives the same bits (no
// atomics). Callers that must match a CPU twin's order say so where they call.
#pragma once

namespace mf::cuda {

// Combine functors for block_reduce.
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
// The maximum, NaN when either operand is NaN (so a NaN logit makes the loss NaN).
struct MaxNan {
  __device__ float operator()(float a, float b) const { return isnan(a) || a >= b ? a : b; }
};
// fmaxf: a NaN operand is dropped (the other is kept). A caller using it must
// let NaN through another way (e.g. the exponentials summed after the max).
struct FMax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The sum of v over the warp's 32 lanes by an xor butterfly; every lane gets
// the same bits (each stage adds the same two operands in every lane). Lane
// 0's result is also what the shfl_down tree (v += shfl_down(v, 16, 8, ..., 1))
// leaves in lane 0: the same operands in the same order.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Tree reduction over a block of N threads (N a power of two, blockDim.x ==
// N, every thread calls it): sh[t] = op(sh[t], sh[t + s]) for s = N/2, ...,
// 1; every thread gets the result. sh holds N floats; it may be reused as
// soon as the call returns (it ends with a barrier).
template <int N, class Op>
__device__ float block_reduce(float v, float* sh, Op op) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = N / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// The index of the first maximum over the block's (value, index) pairs, with
// the same tree as block_reduce (N threads); index order breaks ties, an
// index < 0 means "no candidate". Every thread gets the index (-1 when no
// thread had one). shv and shi hold N entries each.
template <int N>
__device__ int block_argmax(float v, int i, float* shv, int* shi) {
  shv[threadIdx.x] = v;
  shi[threadIdx.x] = i;
  __syncthreads();
  for (int s = N / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) {
      const float ov = shv[threadIdx.x + s], cv = shv[threadIdx.x];
      const int oi = shi[threadIdx.x + s], ci = shi[threadIdx.x];
      if (oi >= 0 && (ci < 0 || ov > cv || (ov == cv && oi < ci))) {
        shv[threadIdx.x] = ov;
        shi[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int r = shi[0];
  __syncthreads();
  return r;
}

}  // namespace mf::cuda
