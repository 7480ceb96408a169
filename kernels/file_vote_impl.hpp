// The per-file body of file_vote, shared by the CPU twin (file_vote.cpp) and
// the CUDA kernel (file_vote.cu) so both run the same arithmetic in the same
// order. Included only by those two files.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/host_device.hpp"
#include "kernels/file_vote.hpp"

namespace mf::kernels::detail {

MF_HOST_DEVICE_INLINE float fv_exp(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}

MF_HOST_DEVICE_INLINE void file_vote_one(const float* class_in, const float* leak_in, float* file_probs,
                                         std::int32_t* file_class, float* file_leak_prob, std::int32_t* file_leak,
                                         const FileVoteArgs& d, std::int64_t f) {
  const int C = d.classes;
  const std::int64_t L = d.longs, S = d.shorts;
  float file_sum[kFileVoteMaxClasses];
  int votes[kFileVoteMaxClasses];
  float long_sum[kFileVoteMaxClasses];
  float p[kFileVoteMaxClasses];
  for (int c = 0; c < C; ++c) {
    file_sum[c] = 0.f;
    votes[c] = 0;
  }
  float leak_sum = 0.f;
  std::int64_t leak_votes = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    for (int c = 0; c < C; ++c) long_sum[c] = 0.f;
    float long_leak = 0.f;
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t row = (f * L + l) * S + s;
      const float* x = class_in + row * C;
      if (d.logits) {
        float mx = x[0];
        for (int c = 1; c < C; ++c) mx = x[c] > mx ? x[c] : mx;
        float z = 0.f;
        for (int c = 0; c < C; ++c) {
          p[c] = fv_exp(x[c] - mx);
          z += p[c];
        }
        for (int c = 0; c < C; ++c) long_sum[c] += p[c] / z;
        if (leak_in) long_leak += 1.f / (1.f + fv_exp(-leak_in[row]));
      } else {
        for (int c = 0; c < C; ++c) long_sum[c] += x[c];
        if (leak_in) long_leak += leak_in[row];
      }
    }
    int best = 0;
    float best_p = 0.f;
    for (int c = 0; c < C; ++c) {
      const float m = long_sum[c] / float(S);
      file_sum[c] += m;
      if (c == 0 || m > best_p) {
        best = c;
        best_p = m;
      }
    }
    ++votes[best];
    const float q = long_leak / float(S);
    leak_sum += q;
    if (q >= d.threshold) ++leak_votes;
  }
  int winner = 0;
  for (int c = 0; c < C; ++c) {
    const float m = file_sum[c] / float(L);
    file_probs[f * C + c] = m;
    if (c == 0) continue;
    const float mw = file_sum[winner] / float(L);
    if (votes[c] > votes[winner] || (votes[c] == votes[winner] && m > mw)) winner = c;
  }
  file_class[f] = winner;
  if (!leak_in) return;  // no leak head: the class vote alone
  const float leak_mean = leak_sum / float(L);
  file_leak_prob[f] = leak_mean;
  const std::int64_t twice = 2 * leak_votes;
  file_leak[f] = twice > L ? 1 : (twice < L ? 0 : (leak_mean >= d.threshold ? 1 : 0));
}

}  // namespace mf::kernels::detail
