// core/vexp_avx512.h — private: exp and sigmoid on 16 FP32 lanes; unfused mul/add; tail masks.
//
// Include only from files compiled with the AVX-512 flags (the *_avx512.cc files). The
// algorithm, its range handling (overflow to +inf, gradual underflow to subnormals and 0,
// NaN kept) and its measured error are described in core/vexp.h, whose exp_approx() is the
// scalar twin of vexp() here, bit for bit.
//
// mul_rn / add_rn / sub_rn: one IEEE operation each, written with embedded rounding
// (round-to-nearest-even, the default mode). GCC treats these builtins as opaque, so with its
// default -ffp-contract=fast it never fuses them into an FMA — which it does to plain
// _mm512_mul_ps + _mm512_add_ps. Kernels that must reproduce a scalar reference bit for bit
// (built without FMA) use them.
#pragma once

#include <immintrin.h>

#include "core/vexp.h"

namespace mxtrain::kern::avx512 {
// Internal linkage, as in simd_avx512.h: every file keeps its own copies.
namespace {

constexpr int kRn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m512 mul_rn(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, kRn); }
inline __m512 add_rn(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, kRn); }
inline __m512 sub_rn(__m512 a, __m512 b) { return _mm512_sub_round_ps(a, b, kRn); }

// exp(x) per lane (core/vexp.h).
inline __m512 vexp(__m512 x) {
  // MINPS/MAXPS return their second operand when either is NaN, so NaN lanes pass.
  x = _mm512_max_ps(_mm512_set1_ps(kExpLo), _mm512_min_ps(_mm512_set1_ps(kExpHi), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpC1), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpC2), r);
  __m512 p = _mm512_set1_ps(kExpP[0]);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[1]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[2]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[3]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[4]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[5]));
  const __m512 r2 = mul_rn(r, r);
  const __m512 y = add_rn(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, n);  // y * 2^n, one rounding: +inf above, subnormals below
}

// 1 / (1 + exp(-x)) per lane (IEEE division): sigmoid(+inf) = 1, sigmoid(-inf) = 0.
inline __m512 vsigmoid(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  return _mm512_div_ps(one, _mm512_add_ps(one, vexp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// Lanes [0, n) of a 16-lane mask (n may be <= 0 or >= 16).
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

}  // namespace
}  // namespace mxtrain::kern::avx512
