// nn/attention_kernels.h — the attention kernels behind attention_forward/backward (internal
// to src/nn; the public API and its contract are in mxtrain/nn/ops.h).
//
// Both kernels run the same blocked algorithm (FlashAttention-2): per (batch, head), queries in
// blocks of kAttnBlock rows, keys in blocks of kAttnBlock, each score block computed
// transposed, S^T[key][query], so that the softmax statistics of a query are kept in one SIMD
// lane and every reduction over keys is a vertical add in key order. Nothing of size T x T is
// ever stored. The two kernels differ only in FP32 summation order inside the block products
// and in exp (std::exp in the reference, a polynomial in the AVX-512 kernel, exp_avx512
// below). docs/numerics.md, "Attention" states what that costs.
//
//   attention_*_ref      portable C++, both precisions (ops_attention.cc)
//   attention_*_avx512bf16  AttnPrecision::bf16 only, VDPBF16PS block products on packed BF16
//                        tiles; needs AVX512-F/BW/VL/DQ + AVX512-BF16 (attention_avx512.cc)
// Inference over a KV cache has its own pair (attention_cached_*, below).
// Callers (ops_attention.cc) check the arguments; the kernels do not.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dispatch.h"
#include "mxtrain/isa.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain::nn_detail {

constexpr int64_t kAttnBlock = 64;  // query and key block size (both paths)

// The BF16 value the bf16 products multiply: x rounded to nearest even, and ±0 for
// |x| < 2^-126 (VDPBF16PS reads BF16 subnormals as zero). NaN stays NaN.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    u |= 0x00400000u;
  } else if ((u & 0x7F800000u) == 0) {
    u &= 0x80000000u;
  } else {
    u += 0x7FFFu + ((u >> 16) & 1u);
  }
  u &= 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Shapes as in mxtrain/nn/ops.h: qkv [B*T, 3D], out [B*T, D], lse [B, H, T], dqkv [B*T, 3D].
// rope: nullptr, or the table q and k are rotated by as they are read (mxtrain/nn/ops.h).
using AttnForward = void (*)(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                             int64_t D, int64_t H, AttnPrecision p, const RopeTable* rope);
using AttnBackward = void (*)(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                              AttnPrecision p, const RopeTable* rope);

// The reference applies a rope by rope_forward on a copy of qkv (and rope_backward on dqkv):
// that sequence is the definition the fused kernel reproduces bit for bit.
void attention_forward_ref(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                           int64_t D, int64_t H, AttnPrecision p, const RopeTable* rope);
void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                            AttnPrecision p, const RopeTable* rope);

void attention_forward_avx512bf16(float* out, float* lse, const float* qkv, int64_t B,
                                  int64_t T, int64_t D, int64_t H, const RopeTable* rope);
void attention_backward_avx512bf16(float* dqkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse, int64_t B, int64_t T,
                                   int64_t D, int64_t H, const RopeTable* rope);

// y[i] = exp(x[i]) by the AVX-512 kernel's polynomial (for its accuracy test); n any.
void exp_avx512(float* y, const float* x, int64_t n);

// attention_cached's kernels (mxtrain/nn/ops.h; attention_cached.cc): the portable reference and
// the AVX-512 one (attention_cached_avx512.cc), bit for bit the same. The AVX-512 kernel puts
// sixteen keys side by side for the scores (kT's rows are contiguous in the key) and sixteen
// head dimensions side by side for the output, so every sum keeps the reference's order.
using AttnCached = void (*)(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                            int64_t H, const float* kT, const float* v, int64_t Tc,
                            float* probs);
void attention_cached_ref(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                          int64_t H, const float* kT, const float* v, int64_t Tc, float* probs);
void attention_cached_avx512(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                             int64_t H, const float* kT, const float* v, int64_t Tc,
                             float* probs);
// The softmax's scalar part, shared by both kernels: p[0..keys) = std::exp(p_s - max), the
// maximum and then the numerators in key order; returns fl(1 / their sum in key order).
inline float softmax_numerators(float* p, int64_t keys) {
  float mx = p[0];
  for (int64_t s = 1; s < keys; ++s) mx = std::max(mx, p[s]);
  float sum = 0.f;
  for (int64_t s = 0; s < keys; ++s) {
    p[s] = std::exp(p[s] - mx);
    sum += p[s];
  }
  return 1.f / sum;
}
// What attention_cached's table chooses now (mxtrain info).
PathChoice attention_cached_choice();

// The path of the kernel attention_forward/backward take for precision p now (their dispatch
// table in ops_attention.cc): avx512bf16 or scalar.
Path attention_path(AttnPrecision p);
// What that table chooses now (mxtrain info).
PathChoice attention_choice();

}  // namespace mxtrain::nn_detail
