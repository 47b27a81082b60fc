// train/optim_avx512.cc — AdamW on 16 FP32 lanes (train/optim_kernels.h).
//
// Per element, the reference's operations in its order (adamw_range_ref, optim.cc):
//   m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g;  denom = sqrt(v) / sqrt(bc2) + eps;
//   w = w - wd w;  w = w - (step_size m) / denom.
// Multiplies and adds go through mul_rn / add_rn / sub_rn so the compiler cannot fuse them
// into FMAs; sqrt and division are IEEE. The result is the reference's bit for bit.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/vexp_avx512.h"
#include "train/optim_kernels.h"

namespace mxtrain::optk {

using kern::avx512::add_rn;
using kern::avx512::mul_rn;
using kern::avx512::sub_rn;
using kern::avx512::tail_mask;

void adamw_range_avx512(float* w, const float* g, float* m, float* v, const AdamWStep& s,
                         int64_t i0, int64_t i1) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), b2 = _mm512_set1_ps(s.beta2);
  const __m512 c1 = _mm512_set1_ps(s.one_minus_beta1), c2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 step = _mm512_set1_ps(s.step_size), ibc2 = _mm512_set1_ps(s.inv_sqrt_bc2);
  const __m512 eps = _mm512_set1_ps(s.eps), wd = _mm512_set1_ps(s.wd);
  for (int64_t i = i0; i < i1; i += 16) {
    const __mmask16 k = tail_mask(i1 - i);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
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

}  // namespace mxtrain::optk
