// nn/attention_cached_avx512.cc — the AVX-512 kernel of attention over a KV cache, bit for bit
// attention_cached_ref (attention_cached.cc states the operations and their order).
//
// Scores: sixteen keys per vector, read from kT's rows (contiguous in the key), each lane
// summing its key's products over j in order; four such vectors in flight hide the adds'
// latency. The scaling by 1/sum is elementwise; the maximum, exp and the sum are the
// reference's own scalar code (softmax_numerators). Output: sixteen head dimensions per
// vector, summed over the keys in order. Multiplies and adds are core/vexp_avx512.h's
// explicitly rounded forms, so the compiler cannot fuse them into FMAs the reference does not
// have.
// GCC 12 reports the undefined-source operands inside its own AVX-512 intrinsics as
// maybe-uninitialized; they are not read.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "core/vexp_avx512.h"
#include "nn/attention_kernels.h"

namespace mxtrain::nn_detail {

namespace {

using kern::avx512::add_rn;
using kern::avx512::mul_rn;
using kern::avx512::tail_mask;

// p[s] for s < keys: the scores of the scaled query qs [hd] against kT's columns s.
void scores(float* p, const float* qs, const float* k, int64_t hd, int64_t Tc, int64_t keys) {
  int64_t s = 0;
  for (; s + 64 <= keys; s += 64) {  // four vectors of keys at a time
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < hd; ++j) {
      const __m512 q = _mm512_set1_ps(qs[j]);
      const float* kr = k + j * Tc + s;
      a0 = add_rn(a0, mul_rn(q, _mm512_loadu_ps(kr)));
      a1 = add_rn(a1, mul_rn(q, _mm512_loadu_ps(kr + 16)));
      a2 = add_rn(a2, mul_rn(q, _mm512_loadu_ps(kr + 32)));
      a3 = add_rn(a3, mul_rn(q, _mm512_loadu_ps(kr + 48)));
    }
    _mm512_storeu_ps(p + s, a0);
    _mm512_storeu_ps(p + s + 16, a1);
    _mm512_storeu_ps(p + s + 32, a2);
    _mm512_storeu_ps(p + s + 48, a3);
  }
  for (; s < keys; s += 16) {
    const __mmask16 m = tail_mask(keys - s);
    __m512 a = _mm512_setzero_ps();
    for (int64_t j = 0; j < hd; ++j)
      a = add_rn(a, mul_rn(_mm512_set1_ps(qs[j]), _mm512_maskz_loadu_ps(m, k + j * Tc + s)));
    _mm512_mask_storeu_ps(p + s, m, a);
  }
}

}  // namespace

void attention_cached_avx512(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                             int64_t H, const float* kT, const float* v, int64_t Tc,
                             float* probs) {
  const int64_t hd = D / H;
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel if (n * H > 1)
  {
    std::vector<float> qs(static_cast<size_t>(hd));  // fl(q_j · scale)
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv + i * 3 * D + h * hd;
        float* p = probs + (i * H + h) * Tc;
        const int64_t keys = pos + i + 1;
        for (int64_t j = 0; j < hd; ++j) qs[size_t(j)] = q[j] * scale;
        scores(p, qs.data(), kT + h * hd * Tc, hd, Tc, keys);
        const __m512 inv = _mm512_set1_ps(softmax_numerators(p, keys));
        for (int64_t s = 0; s < keys; s += 16) {
          const __mmask16 m = tail_mask(keys - s);
          _mm512_mask_storeu_ps(p + s, m, mul_rn(_mm512_maskz_loadu_ps(m, p + s), inv));
        }
        float* o = out + i * D + h * hd;
        for (int64_t j = 0; j < hd; j += 16) {
          const __mmask16 m = tail_mask(hd - j);
          const float* vj = v + h * hd + j;
          __m512 acc = _mm512_setzero_ps();
          for (int64_t s = 0; s < keys; ++s)
            acc = add_rn(acc, mul_rn(_mm512_set1_ps(p[s]), _mm512_maskz_loadu_ps(m, vj + s * D)));
          _mm512_mask_storeu_ps(o + j, m, acc);
        }
      }
    }
  }
}

}  // namespace mxtrain::nn_detail
