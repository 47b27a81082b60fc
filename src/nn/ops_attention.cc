// nn/ops_attention.cc — causal multi-head self-attention core (nn/ops.h): argument checks,
// the kernels' dispatch table, and the portable reference kernel.
//
// Sits between the qkv projection and the output projection of every transformer layer:
// packed qkv [B*T, 3*D] -> out [B*T, D]. The algorithm is FlashAttention-2's: the forward
// walks the key blocks of one query block with an online softmax (running max m and sum l per
// query, the partial output rescaled by exp(m_old - m_new) whenever m grows) and saves only
// lse = m + log l per query; the backward recomputes each score block from qkv and lse
// (P = exp(S - lse)) and needs only D_q = rowsum(dO ∘ O) besides. Block sizes and the
// transposed S^T[key][query] layout are shared with the AVX-512 kernel
// (nn/attention_kernels.h), so the reference differs from it only in summation order inside
// the block products and in exp. Loops are written so that the inner loop runs over
// contiguous queries or head columns and vectorises without reordering any sum.
//
// Work split (both kernels): the forward over (batch, head, query block), the backward over
// (batch, head) — one thread owns a whole head, since dK/dV of a key block collect every later
// query block and dQ of a query block every earlier key block. Every output element is written
// by one thread in a fixed order, so nothing depends on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/profile.h"
#include "nn/attention_kernels.h"

namespace mxtrain {
namespace nn_detail {
namespace {

constexpr int64_t BL = kAttnBlock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// dst[r][c] = op(src[r * ld + c]) for r < rows, c < cols (op = BF16 rounding or identity).
void load_rows(float* dst, const float* src, int64_t ld, int64_t rows, int64_t cols, bool bf16) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = src[r * ld + c];
      dst[r * cols + c] = bf16 ? round_bf16(v) : v;
    }
}

// xt[c][r] = x[r][c]: x [rows, cols] -> xt [cols, ldt].
void transpose(float* xt, int64_t ldt, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * ldt + r] = x[r * cols + c];
}

// st[s][q] = Σ_k a[s][k] · bt[k][q] for s < ns, q < nq, summed in k order.
// a: [ns, hd]; bt: [hd, ldb] (the other operand transposed); st: [ns, BL].
void scores_t(float* st, const float* a, const float* bt, int64_t ldb, int64_t ns, int64_t nq,
              int64_t hd) {
  for (int64_t s = 0; s < ns; ++s) {
    float* row = st + s * BL;
    for (int64_t q = 0; q < nq; ++q) row[q] = 0.f;
    for (int64_t k = 0; k < hd; ++k) {
      const float ak = a[s * hd + k];
      const float* b = bt + k * ldb;
#pragma omp simd
      for (int64_t q = 0; q < nq; ++q) row[q] += ak * b[q];
    }
  }
}

// c[m][n] += Σ_j op(w(m, j)) · x[j][n] for m < M, n < hd, summed in j order; w(m, j) =
// w[m * wm + j * wj] (FP32, rounded here), x: [J, hd] already rounded.
void accumulate(float* c, const float* w, int64_t wm, int64_t wj, const float* x, int64_t M,
                int64_t J, int64_t hd, bool bf16) {
  for (int64_t m = 0; m < M; ++m) {
    float* cm = c + m * hd;
    for (int64_t j = 0; j < J; ++j) {
      const float wv = w[m * wm + j * wj];
      const float f = bf16 ? round_bf16(wv) : wv;
      const float* xj = x + j * hd;
#pragma omp simd
      for (int64_t n = 0; n < hd; ++n) cm[n] += f * xj[n];
    }
  }
}

}  // namespace

// Per (b, h, query block [q0, q0 + nq)), for key blocks [s0, s0 + nk) up to the diagonal:
//   S^T[s][q] = scale · op(k_s)·op(q_q), -inf where s0 + s > q0 + q
//   m_new = max(m, max_s S^T[s][q]); alpha = exp(m - m_new); P^T = exp(S^T - m_new)
//   l = alpha l + Σ_s P^T[s][q];  o_q = alpha o_q + Σ_s op(P^T[s][q]) op(v_s)
// then out_q = o_q · (1 / l), lse_q = m + log l.
namespace {

void forward_ref_core(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t D,
                      int64_t H, AttnPrecision p) {
  const int64_t hd = D / H, C3 = 3 * D, nqb = (T + BL - 1) / BL;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const bool bf16 = p == AttnPrecision::bf16;
#pragma omp parallel
  {
    std::vector<float> qo(BL * hd), qt(hd * BL), ko(BL * hd), vo(BL * hd), o(BL * hd);
    std::vector<float> st(BL * BL), m(BL), l(BL), alpha(BL);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const float* base = qkv + b * T * C3 + h * hd;
          const int64_t q0 = qb * BL, nq = std::min(BL, T - q0);
          load_rows(qo.data(), base + q0 * C3, C3, nq, hd, bf16);
          transpose(qt.data(), BL, qo.data(), nq, hd);
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.f);
          std::fill(o.begin(), o.end(), 0.f);
          for (int64_t kb = 0; kb <= qb; ++kb) {
            const int64_t s0 = kb * BL, nk = std::min(BL, T - s0);
            load_rows(ko.data(), base + s0 * C3 + D, C3, nk, hd, bf16);
            load_rows(vo.data(), base + s0 * C3 + 2 * D, C3, nk, hd, bf16);
            scores_t(st.data(), ko.data(), qt.data(), BL, nk, nq, hd);
            for (int64_t s = 0; s < nk; ++s)
              for (int64_t q = 0; q < nq; ++q) {
                float& x = st[s * BL + q];
                x = s0 + s > q0 + q ? kNegInf : x * scale;
              }
            for (int64_t q = 0; q < nq; ++q) {
              float mb = m[q];
              for (int64_t s = 0; s < nk; ++s) mb = std::max(mb, st[s * BL + q]);
              alpha[q] = std::exp(m[q] - mb);  // exp(-inf) = 0 on the first block
              m[q] = mb;
            }
            for (int64_t s = 0; s < nk; ++s)
              for (int64_t q = 0; q < nq; ++q) {
                float& x = st[s * BL + q];
                x = s0 + s > q0 + q ? 0.f : std::exp(x - m[q]);
              }
            for (int64_t q = 0; q < nq; ++q) {
              float sum = 0.f;
              for (int64_t s = 0; s < nk; ++s) sum += st[s * BL + q];
              l[q] = alpha[q] * l[q] + sum;
              for (int64_t n = 0; n < hd; ++n) o[q * hd + n] *= alpha[q];
            }
            accumulate(o.data(), st.data(), 1, BL, vo.data(), nq, nk, hd, bf16);
          }
          for (int64_t q = 0; q < nq; ++q) {
            const float inv = 1.f / l[q];
            float* dst = out + (b * T + q0 + q) * D + h * hd;
            for (int64_t n = 0; n < hd; ++n) dst[n] = o[q * hd + n] * inv;
            lse[(b * H + h) * T + q0 + q] = m[q] + std::log(l[q]);
          }
        }
  }
}

// Per (b, h): D_q = Σ_n dO[q][n] O[q][n] (FP32, unrounded). Then for every key block and every
// query block from the diagonal on:
//   P^T[s][q] = exp(scale · op(k_s)·op(q_q) - lse_q) (0 where s0 + s > q0 + q)
//   dP^T[s][q] = op(v_s)·op(dO_q);  dS^T = P^T (dP^T - D_q)
//   dv_s += Σ_q op(P^T) op(dO_q);  dk_s += Σ_q op(dS^T) op(q_q);  dq_q += Σ_s op(dS^T) op(k_s)
// and dK = scale · dk, dV = dv, dQ = scale · dq are written.
void backward_ref_core(float* dqkv, const float* dout, const float* qkv, const float* out,
                       const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                       AttnPrecision p) {
  const int64_t hd = D / H, C3 = 3 * D, nb = (T + BL - 1) / BL;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const bool bf16 = p == AttnPrecision::bf16;
#pragma omp parallel
  {
    std::vector<float> qo(T * hd), qt(hd * T), go(T * hd), gt(hd * T), dq(T * hd), dd(T);
    std::vector<float> ko(BL * hd), vo(BL * hd), dk(BL * hd), dv(BL * hd);
    std::vector<float> pt(BL * BL), dst(BL * BL);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float* base = qkv + b * T * C3 + h * hd;
        const float* g = dout + b * T * D + h * hd;
        const float* o = out + b * T * D + h * hd;
        const float* ls = lse + (b * H + h) * T;
        load_rows(qo.data(), base, C3, T, hd, bf16);
        load_rows(go.data(), g, D, T, hd, bf16);
        transpose(qt.data(), T, qo.data(), T, hd);
        transpose(gt.data(), T, go.data(), T, hd);
        for (int64_t q = 0; q < T; ++q) {
          float s = 0.f;
          for (int64_t n = 0; n < hd; ++n) s += g[q * D + n] * o[q * D + n];
          dd[q] = s;
        }
        std::fill(dq.begin(), dq.end(), 0.f);
        for (int64_t kb = 0; kb < nb; ++kb) {
          const int64_t s0 = kb * BL, nk = std::min(BL, T - s0);
          load_rows(ko.data(), base + s0 * C3 + D, C3, nk, hd, bf16);
          load_rows(vo.data(), base + s0 * C3 + 2 * D, C3, nk, hd, bf16);
          std::fill(dk.begin(), dk.end(), 0.f);
          std::fill(dv.begin(), dv.end(), 0.f);
          for (int64_t qb = kb; qb < nb; ++qb) {
            const int64_t q0 = qb * BL, nq = std::min(BL, T - q0);
            scores_t(pt.data(), ko.data(), qt.data() + q0, T, nk, nq, hd);
            scores_t(dst.data(), vo.data(), gt.data() + q0, T, nk, nq, hd);
            for (int64_t s = 0; s < nk; ++s)
              for (int64_t q = 0; q < nq; ++q) {
                float& pv = pt[s * BL + q];
                float& ds = dst[s * BL + q];
                pv = s0 + s > q0 + q ? 0.f : std::exp(pv * scale - ls[q0 + q]);
                ds = pv * (ds - dd[q0 + q]);
              }
            accumulate(dv.data(), pt.data(), BL, 1, go.data() + q0 * hd, nk, nq, hd, bf16);
            accumulate(dk.data(), dst.data(), BL, 1, qo.data() + q0 * hd, nk, nq, hd, bf16);
            accumulate(dq.data() + q0 * hd, dst.data(), 1, BL, ko.data(), nq, nk, hd, bf16);
          }
          for (int64_t s = 0; s < nk; ++s) {
            float* dkr = dqkv + (b * T + s0 + s) * C3 + D + h * hd;
            for (int64_t n = 0; n < hd; ++n) {
              dkr[n] = scale * dk[s * hd + n];
              dkr[D + n] = dv[s * hd + n];
            }
          }
        }
        for (int64_t q = 0; q < T; ++q)
          for (int64_t n = 0; n < hd; ++n)
            dqkv[(b * T + q) * C3 + h * hd + n] = scale * dq[q * hd + n];
      }
  }
}

// qkv with q and k rotated by rope, in a buffer kept across calls (grown, never shrunk).
const float* rotated_copy(const float* qkv, int64_t B, int64_t T, int64_t D, int64_t H,
                          const RopeTable& rope) {
  thread_local std::vector<float> copy;
  copy.assign(qkv, qkv + B * T * 3 * D);
  rope_forward(copy.data(), rope, B, T, D, H);
  return copy.data();
}

}  // namespace

void attention_forward_ref(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                           int64_t D, int64_t H, AttnPrecision p, const RopeTable* rope) {
  forward_ref_core(out, lse, rope ? rotated_copy(qkv, B, T, D, H, *rope) : qkv, B, T, D, H, p);
}

void attention_backward_ref(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                            AttnPrecision p, const RopeTable* rope) {
  backward_ref_core(dqkv, dout, rope ? rotated_copy(qkv, B, T, D, H, *rope) : qkv, out, lse, B,
                    T, D, H, p);
  if (rope) rope_backward(dqkv, *rope, B, T, D, H);
}

}  // namespace nn_detail

namespace {

using nn_detail::AttnForward;
using nn_detail::AttnBackward;

void forward_avx512bf16(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                        int64_t D, int64_t H, AttnPrecision, const RopeTable* rope) {
  nn_detail::attention_forward_avx512bf16(out, lse, qkv, B, T, D, H, rope);
}
void backward_avx512bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                         const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                         AttnPrecision, const RopeTable* rope) {
  nn_detail::attention_backward_avx512bf16(dqkv, dout, qkv, out, lse, B, T, D, H, rope);
}

// One path's kernels per precision (index: AttnPrecision). The AVX-512 kernel computes the
// bf16 precision only; fp32 runs the reference on every path.
struct AttnKernels {
  AttnForward forward[2];
  AttnBackward backward[2];
};

const PathTable<AttnKernels>& attention_table() {
  using nn_detail::attention_backward_ref;
  using nn_detail::attention_forward_ref;
  static const PathTable<AttnKernels> t(
      "attention",
      {{Path::scalar, "attention_{forward,backward}_ref",
        {{attention_forward_ref, attention_forward_ref},
         {attention_backward_ref, attention_backward_ref}}},
       {Path::avx512bf16, "attention_{forward,backward}_avx512bf16 (bf16; fp32: _ref)",
        {{attention_forward_ref, forward_avx512bf16},
         {attention_backward_ref, backward_avx512bf16}}}});
  return t;
}
void check_attention_args(int64_t B, int64_t T, int64_t D, int64_t H, const RopeTable* rope,
                          const char* fn) {
  MXT_CHECK(B >= 1 && T >= 1 && D >= 1 && H >= 1, fn, ": B, T, D, H must be >= 1 (got ", B,
            ", ", T, ", ", D, ", ", H, ")");
  MXT_CHECK(D % H == 0, fn, ": d_model ", D, " is not divisible by n_heads ", H);
  MXT_CHECK(!rope || (2 * rope->half() == D / H && T <= rope->max_positions()), fn,
            ": the RoPE table is for head dimension ", rope ? 2 * rope->half() : 0, " and ",
            rope ? rope->max_positions() : 0, " positions, got ", D / H, " and ", T);
}

}  // namespace

Path nn_detail::attention_path(AttnPrecision p) {
  return p == AttnPrecision::bf16 ? attention_table().path() : Path::scalar;
}

PathChoice nn_detail::attention_choice() { return attention_table().choice(); }

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t D, int64_t H, AttnPrecision p, const RopeTable* rope) {
  MXT_PROFILE(attention, fwd);
  MXT_CHECK(out && lse && qkv, "attention_forward: null pointer");
  check_attention_args(B, T, D, H, rope, "attention_forward");
  attention_table().get().forward[int(p)](out, lse, qkv, B, T, D, H, p, rope);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                        AttnPrecision p, const RopeTable* rope) {
  MXT_PROFILE(attention, bwd);
  MXT_CHECK(dqkv && dout && qkv && out && lse, "attention_backward: null pointer");
  check_attention_args(B, T, D, H, rope, "attention_backward");
  attention_table().get().backward[int(p)](dqkv, dout, qkv, out, lse, B, T, D, H, p, rope);
}

}  // namespace mxtrain
