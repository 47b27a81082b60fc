// gemm/mx_decode_avx512.h — exact FP8 -> BF16 decoding with the block scale folded in, for
// the AVX-512 MX product kernels (included by mx_gemm_avx512.cc and mx_gemv_avx512vbmi.cc;
// internal linkage, so each build keeps its own copy).
//
// decode32: zero-extend 32 codes to 16 bits, move them into FP16 bit positions (E5M2 is the
// upper byte of an FP16; E4M3's exponent and mantissa fit FP16's fields and give the value
// times 2^-8, subnormals included; its NaN code is patched to an FP16 NaN), convert to FP32,
// multiply by the power-of-two multiplier of the block (2^(s-127), times 2^8 for E4M3, NaN for
// s = 0xFF) and round to BF16, which is exact: at most four significant bits. Values below
// 2^-126 become BF16 subnormals or zero, which VDPBF16PS reads as zero.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "mxtrain/formats.h"

namespace mxtrain::gemm_detail {
namespace {

// mult[s]: the FP32 factor that turns a decoded code (times 2^-8 for E4M3) into its value.
struct Multipliers {
  alignas(64) float v[256];
  explicit Multipliers(Elem e) {
    const int bias = e == Elem::e4m3 ? 119 : 127;
    for (int s = 0; s < 256; ++s) v[s] = s == 0xFF ? NAN : std::ldexp(1.f, std::min(s - bias, 127));
  }
};

const Multipliers& multipliers(Elem e) {
  static const Multipliers m4(Elem::e4m3), m5(Elem::e5m2);
  return e == Elem::e4m3 ? m4 : m5;
}

// 32 codes -> 32 BF16 values (one vector), multipliers for elements 0-15 and 16-31.
inline __m512i decode32(__m256i codes, __m512 m_lo, __m512 m_hi, bool e4m3) {
  const __m512i w = _mm512_cvtepu8_epi16(codes);
  __m512i h;
  if (e4m3) {
    const __m512i a = _mm512_and_si512(_mm512_slli_epi16(w, 7), _mm512_set1_epi16(0x3F80));
    h = _mm512_ternarylogic_epi32(a, _mm512_slli_epi16(w, 8),
                                  _mm512_set1_epi16(int16_t(0x8000)), 0xF8);  // a | (b & c)
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, _mm512_set1_epi16(0x7F)),
                                                  _mm512_set1_epi16(0x7F));
    h = _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7E00));
  } else {
    h = _mm512_slli_epi16(w, 8);
  }
  const __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), m_lo);
  const __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), m_hi);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Codes [p, p + n) (n <= 32; the rest read as zero).
inline __m256i load_codes(const uint8_t* p, int64_t n) {
  if (n >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (n <= 0) return _mm256_setzero_si256();
  return _mm256_maskz_loadu_epi8(__mmask32((1ull << n) - 1), p);
}

}  // namespace
}  // namespace mxtrain::gemm_detail
