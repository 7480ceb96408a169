// Fixed-order reductions over a warp or a block: the CUDA kernels' one home
// for block reductions.
// Contract (every function here):
//   - deterministic: operands combine in one pairwise tree that depends only
//     on the tree width N (a template argument), never on scheduling; no
//     atomics. The same inputs give the same bits on every run and GPU.
//   - any element type with the combine functor's operator (float, double,
//     int, long long, ...); several values, of different types, can share one
//     tree (one barrier per level for all of them).
//   - every thread gets the result back.
//   - block: every thread of the block calls (the calls contain
//     __syncthreads). block_reduce_all / block_reduce: 1-D blocks, blockDim.x
//     >= N, N a power of two; threads t >= N contribute nothing but take part
//     in the barriers. block_argmax: blockDim.x == N. block_reduce_columns:
//     see there.
//   - shared memory: the caller's, N entries of T per value (sizeof(T) * N
//     bytes); it may be reused as soon as the call returns (it ends with a
//     barrier).
// The tree: sh[t] = op(sh[t], sh[t + s]) for s = N/2, ..., 1, then sh[0]
// (a caller that must match a CPU twin's order says so where it calls).
#pragma once

namespace mf::cuda {

// Combine functors.
struct Add {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
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

// One value of a block reduction: the calling thread's operand, replaced by
// the block's result, and its shared array of N entries.
template <class T>
struct Reduced {
  T& value;
  T* sh;
};
template <class T>
__device__ __forceinline__ Reduced<T> reduced(T& value, T* sh) {
  return {value, sh};
}

// Reduces every value of `values` over the block's first N threads with op,
// each in its own tree of the same shape, all in one pass (one barrier per
// level); every thread's values become the results.
//   cuda::block_reduce_all<256>(cuda::Add{}, cuda::reduced(sum, sh_sum), cuda::reduced(count, sh_count));
template <int N, class Op, class... T>
__device__ void block_reduce_all(Op op, Reduced<T>... values) {
  static_assert(N > 0 && (N & (N - 1)) == 0, "the tree width must be a power of two");
  const int t = int(threadIdx.x);
  if (t < N) ((values.sh[t] = values.value), ...);
  __syncthreads();
  for (int s = N / 2; s > 0; s >>= 1) {
    if (t < s) ((values.sh[t] = op(values.sh[t], values.sh[t + s])), ...);
    __syncthreads();
  }
  ((values.value = values.sh[0]), ...);
  __syncthreads();
}

// The reduction of one value: block_reduce_all with one entry; sh holds N Ts.
template <int N, class T, class Op>
__device__ T block_reduce(T v, T* sh, Op op) {
  block_reduce_all<N>(op, reduced(v, sh));
  return v;
}

// The same tree per column of a 2-D block: thread (x, y) holds the operand of
// row y (of Rows = blockDim.y, a power of two) in column x (< Cols =
// blockDim.x); every thread gets its column's result. sh is [Rows][Pitch]
// with Pitch >= Cols (Pitch = Cols + 1 staggers the columns over the banks);
// the call ends with a barrier, so sh may be reused at once.
template <int Rows, int Pitch, class T, class Op>
__device__ T block_reduce_columns(T v, T (*sh)[Pitch], Op op) {
  static_assert(Rows > 0 && (Rows & (Rows - 1)) == 0, "the tree height must be a power of two");
  const int x = int(threadIdx.x), y = int(threadIdx.y);
  sh[y][x] = v;
  __syncthreads();
  for (int s = Rows / 2; s > 0; s >>= 1) {
    if (y < s) sh[y][x] = op(sh[y][x], sh[y + s][x]);
    __syncthreads();
  }
  v = sh[0][x];
  __syncthreads();
  return v;
}

// The index of the first maximum over the block's (value, index) pairs, with
// the same tree as block_reduce (N threads); index order breaks ties, an
// index < 0 means "no candidate". Every thread gets the index (-1 when no
// thread had one). blockDim.x == N; shv and shi hold N entries each.
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
