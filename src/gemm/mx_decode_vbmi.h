// gemm/mx_decode_vbmi.h — FP8 -> BF16 decoding of 64 codes by VBMI table lookup, with the
// block scale folded into the BF16 exponent (included by the *_avx512vbmi.cc files only: it
// needs AVX512-VBMI; internal linkage, so each keeps its own copy).
//
// Two byte permutes look the magnitude (7 bits) up in 128-entry tables of the BF16 high and
// low bytes of the unscaled value, the sign bit is merged into the high byte, and unpacking the
// two byte vectors gives two vectors of 32 BF16 words in the lane order of the unpack: words
// 8L..8L+7 of the first are codes 16L..16L+7, of the second codes 16L+8..16L+15 (L = 0..3).
// The scale is folded in exactly by adding (s - 127) to the exponent of every non-zero word,
// which stays exact while every result is a normal BF16 number: scale bytes 10..246 (E4M3) and
// 17..239 (E5M2), and no NaN/Inf code. decode64 reports a piece outside that; the caller then
// decodes it with decode32 (gemm/mx_decode_avx512.h), which gives the same values where both
// apply. scale_row / piece_scales find the scale bytes of a piece of a rowwise or tile32 row.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "gemm/mx_gemm.h"
#include "mxtrain/formats.h"

namespace mxtrain::gemm_detail {
namespace {

struct Tables {
  alignas(64) uint8_t hi[128], lo[128];
  int s_min, s_max;    // scale bytes that fold exactly
  uint8_t bad_mag;     // magnitudes from here up are NaN/Inf codes
  explicit Tables(Elem e) {
    for (int c = 0; c < 128; ++c) {
      const float v = fp8_to_f32(uint8_t(c), e);
      const uint16_t b = std::isnan(v) ? 0 : f32_to_bf16(v);  // exact for finite codes
      hi[c] = uint8_t(b >> 8);
      lo[c] = uint8_t(b & 0xFF);
    }
    const bool e4 = e == Elem::e4m3;
    s_min = e4 ? 10 : 17;
    s_max = e4 ? 246 : 239;
    bad_mag = e4 ? 0x7F : 0x7C;
  }
};

const Tables& tables(Elem e) {
  static const Tables t4(Elem::e4m3), t5(Elem::e5m2);
  return e == Elem::e4m3 ? t4 : t5;
}

// 64 codes of one row at p (n valid, the rest zero) with block scales s0 (codes 0-31) and
// s1 (32-63) -> 64 BF16 values in unpack order, by the table path. Returns true when the
// piece cannot be folded exactly (scale out of range, NaN/Inf code); the values are then
// wrong and the caller decodes the piece with the general decoder (the streaming forward
// redoes the whole tile afterwards). Branch-free, so a caller's accumulators stay in registers.
__attribute__((always_inline)) inline bool decode64(const uint8_t* p, int64_t n, uint8_t s0,
                                                    uint8_t s1, const Tables& t, __m512i& lo,
                                                    __m512i& hi) {
  const __m512i c = n >= 64 ? _mm512_loadu_si512(p)
                            : _mm512_maskz_loadu_epi8(__mmask64((1ull << n) - 1), p);
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi8(0x7F));
  const unsigned range = unsigned(t.s_max - t.s_min);
  const bool bad = (unsigned(s0 - t.s_min) > range) | (unsigned(s1 - t.s_min) > range) |
                   (_mm512_cmpge_epu8_mask(mag, _mm512_set1_epi8(char(t.bad_mag))) != 0);
  __m512i h = _mm512_permutex2var_epi8(_mm512_load_si512(t.hi), mag,
                                       _mm512_load_si512(t.hi + 64));
  const __m512i l = _mm512_permutex2var_epi8(_mm512_load_si512(t.lo), mag,
                                             _mm512_load_si512(t.lo + 64));
  h = _mm512_ternarylogic_epi32(h, c, _mm512_set1_epi8(char(0x80)), 0xF8);  // h | (c & 0x80)
  const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
  const __m512i d = _mm512_inserti64x4(_mm512_set1_epi16(int16_t((int(s0) - 127) * 128)),
                                       _mm256_set1_epi16(int16_t((int(s1) - 127) * 128)), 1);
  const __m512i m15 = _mm512_set1_epi16(0x7FFF);
  lo = _mm512_maskz_add_epi16(_mm512_test_epi16_mask(w0, m15), w0, d);
  hi = _mm512_maskz_add_epi16(_mm512_test_epi16_mask(w1, m15), w1, d);
  return bad;
}

// Scale row of stored row r of a rowwise or tile32 operand (one byte per 32 columns).
inline const uint8_t* scale_row(const MXOperand& t, int64_t r) {
  return t.scales + (t.layout == MXLayout::rowwise ? r : r / kMXBlock) * t.scale_ld;
}

// Scale bytes of the 64-code piece at column k of a row (the second block may lie past K).
inline void piece_scales(const uint8_t* srow, int64_t k, int64_t K, uint8_t& s0, uint8_t& s1) {
  s0 = srow[k / 32];
  s1 = k + 32 < K ? srow[k / 32 + 1] : s0;
}

}  // namespace
}  // namespace mxtrain::gemm_detail
