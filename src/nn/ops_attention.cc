// nn/ops_attention.cc — causal multi-head self-attention core (nn/ops.h).
//
// Sits between the qkv projection and the output projection of every transformer layer:
// packed qkv [B*T, 3*D] -> out [B*T, D]. Sizes are small (T <= a few hundred, head_dim
// 32-64), so plain loops over (batch, head, query) are used instead of GEMM calls. The forward
// saves the softmax probabilities [B, H, T, T] for the backward. Work is split by (batch, head)
// pairs; every output element is written by one thread, so the result does not depend on the
// thread count. Each pair first transposes its K (forward) or V (backward) columns to [hd, T],
// which turns the per-key dot products into contiguous multiply-adds over keys that vectorise
// without reordering any sum.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {
namespace {

void check_attention_args(int64_t B, int64_t T, int64_t D, int64_t H, const char* fn) {
  MXT_CHECK(B >= 1 && T >= 1 && D >= 1 && H >= 1, fn, ": B, T, D, H must be >= 1 (got ", B,
            ", ", T, ", ", D, ", ", H, ")");
  MXT_CHECK(D % H == 0, fn, ": d_model ", D, " is not divisible by n_heads ", H);
}

}  // namespace

namespace {

// kt: [hd, T] = the head's K (or V) columns transposed, so that q·k_s for all s becomes hd
// contiguous axpy passes over s (vectorisable without reassociating any sum).
void transpose_head(float* kt, const float* base, int64_t T, int64_t C3, int64_t hd) {
  for (int64_t s = 0; s < T; ++s)
    for (int64_t i = 0; i < hd; ++i) kt[i * T + s] = base[s * C3 + i];
}

}  // namespace

void attention_forward(float* out, float* probs, const float* qkv, int64_t B, int64_t T,
                       int64_t D, int64_t H) {
  MXT_CHECK(out && probs && qkv, "attention_forward: null pointer");
  check_attention_args(B, T, D, H, "attention_forward");
  const int64_t hd = D / H, C3 = 3 * D;
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel
  {
    std::vector<float> kt(hd * T);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        transpose_head(kt.data(), qkv + b * T * C3 + D + h * hd, T, C3, hd);
        for (int64_t t = 0; t < T; ++t) {
          const float* q = qkv + (b * T + t) * C3 + h * hd;
          float* p = probs + ((b * H + h) * T + t) * T;
          const int64_t n = t + 1;  // keys 0..t
          for (int64_t s = 0; s < n; ++s) p[s] = 0.f;
          for (int64_t i = 0; i < hd; ++i) {
            const float qi = q[i] * scale;
            const float* k = kt.data() + i * T;
#pragma omp simd
            for (int64_t s = 0; s < n; ++s) p[s] += qi * k[s];
          }
          float mx = p[0];
          for (int64_t s = 1; s < n; ++s) mx = std::max(mx, p[s]);
          float sum = 0.f;
          for (int64_t s = 0; s < n; ++s) {
            p[s] = std::exp(p[s] - mx);
            sum += p[s];
          }
          const float inv = 1.f / sum;
          for (int64_t s = 0; s < n; ++s) p[s] *= inv;
          for (int64_t s = n; s < T; ++s) p[s] = 0.f;
          float* o = out + (b * T + t) * D + h * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] = 0.f;
          for (int64_t s = 0; s < n; ++s) {
            const float* v = qkv + (b * T + s) * C3 + 2 * D + h * hd;
            const float ps = p[s];
#pragma omp simd
            for (int64_t i = 0; i < hd; ++i) o[i] += ps * v[i];
          }
        }
      }
    }
  }
}

// For one (b, h) and query t, with p = probs row, g = dout row:
//   dp[s]  = g · v_s            dv_s += p[s] g
//   ds[s]  = p[s] (dp[s] - Σ_u p[u] dp[u])
//   dq_t  += scale Σ_s ds[s] k_s      dk_s += scale ds[s] q_t
// dk and dv collect contributions from every query, so one thread owns a whole (b, h).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        int64_t B, int64_t T, int64_t D, int64_t H) {
  MXT_CHECK(dqkv && dout && qkv && probs, "attention_backward: null pointer");
  check_attention_args(B, T, D, H, "attention_backward");
  const int64_t hd = D / H, C3 = 3 * D;
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel
  {
    std::vector<float> ds(T), vt(hd * T);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        transpose_head(vt.data(), qkv + b * T * C3 + 2 * D + h * hd, T, C3, hd);
        for (int64_t t = 0; t < T; ++t) {
          const float* p = probs + ((b * H + h) * T + t) * T;
          const float* g = dout + (b * T + t) * D + h * hd;
          const float* q = qkv + (b * T + t) * C3 + h * hd;
          float* dq = dqkv + (b * T + t) * C3 + h * hd;
          const int64_t n = t + 1;
          for (int64_t s = 0; s < n; ++s) ds[s] = 0.f;
          for (int64_t i = 0; i < hd; ++i) {
            const float gi = g[i];
            const float* v = vt.data() + i * T;
#pragma omp simd
            for (int64_t s = 0; s < n; ++s) ds[s] += gi * v[s];
          }
          float psum = 0.f;
          for (int64_t s = 0; s < n; ++s) psum += p[s] * ds[s];
          for (int64_t s = 0; s < n; ++s) {
            const float ps = p[s];
            const float d = ps * (ds[s] - psum) * scale;
            const float* k = qkv + (b * T + s) * C3 + D + h * hd;
            float* dk = dqkv + (b * T + s) * C3 + D + h * hd;
            float* dv = dk + D;
#pragma omp simd
            for (int64_t i = 0; i < hd; ++i) {
              dq[i] += d * k[i];
              dk[i] += d * q[i];
              dv[i] += ps * g[i];
            }
          }
        }
      }
    }
  }
}

}  // namespace mxtrain
