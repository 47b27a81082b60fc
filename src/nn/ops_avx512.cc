// nn/ops_avx512.cc — AVX-512 kernels of nn/ops.h (table and contracts in nn/ops_kernels.h).
//
// 16 FP32 lanes, a masked tail for widths that are not multiples of 16. Against the scalar
// kernels (ops_ref.cc):
//   bit for bit   embedding forward/backward, residual, axpy, AdamW, cross-entropy backward,
//                 RMSNorm dgain (the same per-column sums in token order), the sum of squares
//                 (the reference's 32 accumulators, as lanes) and the finite check — every FP32
//                 operation is the reference's, in its order, with mul_rn/add_rn where the
//                 compiler could otherwise fuse a multiply and an add;
//   within tolerance
//                 RMSNorm forward and dx: the row sums (in double, as in the reference) are
//                 taken 16 lanes at a time, i.e. reassociated; everything after them is the
//                 reference's arithmetic, so results differ only when the rounded row scale
//                 does (rarely, by 1 ulp);
//                 SwiGLU and cross-entropy forward: exp is avx512::vexp (core/vexp.h, at most
//                 kExpMaxUlp ulp) instead of std::exp, and FMAs are used freely.
// NaN and Inf propagate as in the reference (same formulas; vexp keeps NaN, gives 0 and inf
// at the ends).
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cmath>

#include "core/vexp_avx512.h"
#include "nn/ops_kernels.h"

namespace mxtrain::opk {
namespace {

using kern::avx512::add_rn;
using kern::avx512::mul_rn;
using kern::avx512::sub_rn;
using kern::avx512::tail_mask;
using kern::avx512::vexp;
using kern::avx512::vsigmoid;

// f(i, mask) for i = 0, 16, 32, ... < n: whole vectors first, then one masked tail.
template <class F>
inline void each16(int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) f(i, __mmask16(0xFFFF));
  if (i < n) f(i, tail_mask(n - i));
}

inline __m512 ld(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline void st(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

// Lanes 0..7 and 8..15 widened to double (exact).
inline __m512d lo_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
inline __m512d hi_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }

void embed_fwd(float* out, const int32_t* tokens, const float* table, int64_t D, int64_t n0,
               int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* src = table + int64_t(tokens[n]) * D;
    float* dst = out + n * D;
    each16(D, [&](int64_t d, __mmask16 m) { st(dst + d, m, ld(src + d, m)); });
  }
}

void embed_bwd(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t D,
               int64_t d0, int64_t d1) {
  for (int64_t n = 0; n < N; ++n) {
    float* dst = dtable + int64_t(tokens[n]) * D + d0;
    const float* src = dout + n * D + d0;
    each16(d1 - d0, [&](int64_t d, __mmask16 m) {
      st(dst + d, m, _mm512_add_ps(ld(dst + d, m), ld(src + d, m)));
    });
  }
}

void rms_fwd(float* out, float* rstd, const float* x, const float* gain, int64_t D, float eps,
             int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * D;
    // Squares of floats are exact in double, so the FMA is the reference's mul + add.
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    each16(D, [&](int64_t d, __mmask16 m) {
      const __m512 v = ld(xr + d, m);
      const __m512d a = lo_pd(v), b = hi_pd(v);
      s0 = _mm512_fmadd_pd(a, a, s0);
      s1 = _mm512_fmadd_pd(b, b, s1);
    });
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const float r = float(1.0 / std::sqrt(ss / double(D) + double(eps)));
    rstd[n] = r;
    const __m512 vr = _mm512_set1_ps(r);
    float* o = out + n * D;
    each16(D, [&](int64_t d, __mmask16 m) {
      st(o + d, m, _mm512_mul_ps(_mm512_mul_ps(ld(xr + d, m), vr), ld(gain + d, m)));
    });
  }
}

// dx[n,d] += r * (dout[n,d] g[d] - (x[n,d] r) m), m = mean_d(dout[n,:] g (x[n,:] r)).
void rms_bwd_dx(float* dx, const float* dout, const float* x, const float* gain,
                const float* rstd, int64_t D, int64_t n0, int64_t n1, bool write) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * D;
    const float* g = dout + n * D;
    float* o = dx + n * D;
    const __m512 vr = _mm512_set1_ps(rstd[n]);
    // Each term as the reference forms it: (dout * gain) exact in double, times (x r) in FP32.
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    each16(D, [&](int64_t d, __mmask16 m) {
      const __m512 gv = ld(g + d, m), gn = ld(gain + d, m);
      const __m512 xh = _mm512_mul_ps(ld(xr + d, m), vr);
      s0 = _mm512_fmadd_pd(_mm512_mul_pd(lo_pd(gv), lo_pd(gn)), lo_pd(xh), s0);
      s1 = _mm512_fmadd_pd(_mm512_mul_pd(hi_pd(gv), hi_pd(gn)), hi_pd(xh), s1);
    });
    const double dot = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 vm = _mm512_set1_ps(float(dot / double(D)));
    each16(D, [&](int64_t d, __mmask16 m) {
      const __m512 xh = _mm512_mul_ps(ld(xr + d, m), vr);
      const __m512 t = sub_rn(mul_rn(ld(g + d, m), ld(gain + d, m)), mul_rn(xh, vm));
      st(o + d, m, add_rn(write ? _mm512_setzero_ps() : ld(o + d, m), mul_rn(vr, t)));
    });
  }
}

// Up to 64 columns (four vectors) per pass over the rows; each column summed in token order.
void rms_bwd_dgain(float* dgain, const float* dout, const float* x, const float* rstd,
                   int64_t N, int64_t D, int64_t d0, int64_t d1, bool write) {
  for (int64_t c0 = d0; c0 < d1; c0 += 64) {
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = tail_mask(d1 - c0 - 16 * j);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t n = 0; n < N; ++n) {
      const __m512 vr = _mm512_set1_ps(rstd[n]);
      const float* xr = x + n * D + c0;
      const float* g = dout + n * D + c0;
      for (int j = 0; j < 4; ++j) {
        const __m512 xh = _mm512_mul_ps(ld(xr + 16 * j, m[j]), vr);
        acc[j] = add_rn(acc[j], mul_rn(ld(g + 16 * j, m[j]), xh));
      }
    }
    for (int j = 0; j < 4; ++j)
      st(dgain + c0 + 16 * j, m[j],
         _mm512_add_ps(write ? _mm512_setzero_ps() : ld(dgain + c0 + 16 * j, m[j]), acc[j]));
  }
}

void swiglu_fwd(float* h, const float* a, int64_t F, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    float* o = h + n * F;
    each16(F, [&](int64_t f, __mmask16 m) {
      const __m512 gt = ld(gate + f, m);
      st(o + f, m, _mm512_mul_ps(_mm512_mul_ps(gt, vsigmoid(gt)), ld(up + f, m)));
    });
  }
}

// silu'(g) = s + g s (1 - s), s = sigmoid(g).
void swiglu_bwd(float* da, const float* dh, const float* a, int64_t F, int64_t n0, int64_t n1,
                bool write) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    const float* g = dh + n * F;
    float* dgate = da + n * 2 * F;
    float* dup = dgate + F;
    each16(F, [&](int64_t f, __mmask16 m) {
      const __m512 gt = ld(gate + f, m), gv = ld(g + f, m);
      const __m512 s = vsigmoid(gt);
      const __m512 silu = _mm512_mul_ps(gt, s);
      const __m512 dsilu = _mm512_fmadd_ps(silu, _mm512_sub_ps(one, s), s);
      const __m512 zero = _mm512_setzero_ps();
      st(dgate + f, m, _mm512_fmadd_ps(_mm512_mul_ps(gv, ld(up + f, m)), dsilu,
                                       write ? zero : ld(dgate + f, m)));
      st(dup + f, m, _mm512_fmadd_ps(gv, silu, write ? zero : ld(dup + f, m)));
    });
  }
}

void ce_fwd(float* probs, float* losses, const float* logits, const int32_t* targets, int64_t V,
            int64_t n0, int64_t n1) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t n = n0; n < n1; ++n) {
    const float* l = logits + n * V;
    float* p = probs + n * V;
    __m512 vmx = ninf;
    each16(V, [&](int64_t v, __mmask16 m) {
      vmx = _mm512_max_ps(vmx, _mm512_mask_loadu_ps(ninf, m, l + v));
    });
    const float mx = _mm512_reduce_max_ps(vmx);
    const float lt = l[targets[n]];  // read before p may overwrite l (aliasing allowed)
    const __m512 vmxv = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    each16(V, [&](int64_t v, __mmask16 m) {
      const __m512 e = _mm512_maskz_mov_ps(m, vexp(_mm512_sub_ps(ld(l + v, m), vmxv)));
      st(p + v, m, e);
      s0 = _mm512_add_pd(s0, lo_pd(e));
      s1 = _mm512_add_pd(s1, hi_pd(e));
    });
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 inv = _mm512_set1_ps(float(1.0 / sum));
    each16(V, [&](int64_t v, __mmask16 m) { st(p + v, m, _mm512_mul_ps(ld(p + v, m), inv)); });
    losses[n] = float(std::log(sum) - double(lt - mx));
  }
}

void ce_bwd(float* dlogits, const float* probs, const int32_t* targets, int64_t V, float dloss,
            int64_t n0, int64_t n1) {
  const __m512 dl = _mm512_set1_ps(dloss);
  for (int64_t n = n0; n < n1; ++n) {
    const float* p = probs + n * V;
    float* d = dlogits + n * V;
    each16(V, [&](int64_t v, __mmask16 m) { st(d + v, m, _mm512_mul_ps(ld(p + v, m), dl)); });
    d[targets[n]] -= dloss;
  }
}

void add(float* out, const float* a, const float* b, int64_t i0, int64_t i1) {
  each16(i1 - i0, [&](int64_t i, __mmask16 m) {
    st(out + i0 + i, m, _mm512_add_ps(ld(a + i0 + i, m), ld(b + i0 + i, m)));
  });
}

void acc(float* y, const float* x, int64_t i0, int64_t i1) {
  each16(i1 - i0, [&](int64_t i, __mmask16 m) {
    st(y + i0 + i, m, _mm512_add_ps(ld(y + i0 + i, m), ld(x + i0 + i, m)));
  });
}

void axpy(float* y, const float* x, float alpha, int64_t i0, int64_t i1) {
  const __m512 va = _mm512_set1_ps(alpha);
  each16(i1 - i0, [&](int64_t i, __mmask16 m) {
    st(y + i0 + i, m, add_rn(ld(y + i0 + i, m), mul_rn(va, ld(x + i0 + i, m))));
  });
}

// The reference's operations in its order; sqrt and division are IEEE.
void adamw(float* w, const float* g, float* m, float* v, const AdamWStep& s, int64_t i0,
           int64_t i1) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), b2 = _mm512_set1_ps(s.beta2);
  const __m512 c1 = _mm512_set1_ps(s.one_minus_beta1), c2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 step = _mm512_set1_ps(s.step_size), ibc2 = _mm512_set1_ps(s.inv_sqrt_bc2);
  const __m512 eps = _mm512_set1_ps(s.eps), wd = _mm512_set1_ps(s.wd);
  const __m512 gs = _mm512_set1_ps(s.grad_scale);
  for (int64_t i = i0; i < i1; i += 16) {
    const __mmask16 k = tail_mask(i1 - i);
    const __m512 gv = mul_rn(_mm512_maskz_loadu_ps(k, g + i), gs);
    const __m512 mv = add_rn(mul_rn(b1, _mm512_maskz_loadu_ps(k, m + i)), mul_rn(c1, gv));
    const __m512 vv =
        add_rn(mul_rn(b2, _mm512_maskz_loadu_ps(k, v + i)), mul_rn(mul_rn(c2, gv), gv));
    const __m512 denom = add_rn(mul_rn(_mm512_sqrt_ps(vv), ibc2), eps);
    __m512 wv = _mm512_maskz_loadu_ps(k, w + i);
    wv = sub_rn(wv, mul_rn(wd, wv));
    wv = sub_rn(wv, _mm512_div_ps(mul_rn(step, mv), denom));
    _mm512_mask_storeu_ps(m + i, k, mv);
    _mm512_mask_storeu_ps(v + i, k, vv);
    _mm512_mask_storeu_ps(w + i, k, wv);
  }
}

// Accumulator l of the reference's 32 is lane l % 8 of a[l / 8]; the squares are exact in
// double, so each FMA is the reference's add. Masked lanes add +0, which changes no sum (the
// accumulators start at +0 and only grow).
double sumsq_block(const float* x, int64_t n) {
  __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                  _mm512_setzero_pd()};
  for (int64_t i = 0; i < n; i += 32) {
    const __m512 v0 = ld(x + i, tail_mask(n - i)), v1 = ld(x + i + 16, tail_mask(n - i - 16));
    const __m512d p[4] = {lo_pd(v0), hi_pd(v0), lo_pd(v1), hi_pd(v1)};
    for (int j = 0; j < 4; ++j) a[j] = _mm512_fmadd_pd(p[j], p[j], a[j]);
  }
  const __m512d s8 = _mm512_add_pd(_mm512_add_pd(a[0], a[2]), _mm512_add_pd(a[1], a[3]));
  const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

bool nonfinite(const float* x, int64_t n) {
  __mmask16 bad = 0;  // fpclass 0x99: QNaN, SNaN, +Inf, -Inf
  each16(n, [&](int64_t i, __mmask16 m) { bad |= _mm512_mask_fpclass_ps_mask(m, ld(x + i, m), 0x99); });
  return bad != 0;
}

}  // namespace

const Kernels& kernels_avx512() {
  static const Kernels k{embed_fwd,  embed_bwd,  rms_fwd, rms_bwd_dx, rms_bwd_dgain,
                         swiglu_fwd, swiglu_bwd, ce_fwd,  ce_bwd,     add,
                         acc,        axpy,       adamw,   sumsq_block, nonfinite};
  return k;
}

}  // namespace mxtrain::opk
