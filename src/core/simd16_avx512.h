// core/simd16_avx512.h — private: MX encoding in 16-bit lanes (32 elements per vector), used
// by the colwise / 32x32 / dual-axis kernels of quantize_avx512.cc (AVX-512 files only).
//
// Why: encoding is what bounds those kernels, and half-width lanes halve its cost. Each
// element is viewed as a 16-bit word "t": the upper half of its FP32 bits (its BF16
// truncation) with bit 0 ORed with "the dropped half is non-zero". That sticky bit keeps
// every rounding exact: E4M3/E5M2 round at word bit 4/5, so the rounding decision needs
// the bits below only as "exactly zero or not". BF16 inputs are their own words.
// Block amax, the scale rule and the NaN/Inf test give the same answers on the words as
// on the FP32 bits (max is monotone; the rceil test "fraction > 0x600000" is
// "word fraction > 0x60" with the sticky bit; Inf/NaN is word >= 0x7F80).
//
// Encoding with scale byte b (e = b - 127): y = |x| * 2^-e has the word t - 128e. Where y is
// at least the format's smallest normal, the code is RNE(word >> shift) - bias, computed as
//     v = u + D,  u = t + bit_shift(t) (the tie-to-even bit),  D = base - 128 b
//     code = v >> shift
// (u is shared by the rowwise and colwise copies of a dual-axis pass; the kernels use
// X = -D and a saturating subtract, see encode16). v >= fast (= 128 + 2^(shift-1) - 1) says
// y is in that range. Lanes below it are zero (code 0, plus the sign) or rare: y in the FP8
// subnormal range, or an FP32-subnormal input (its word lacks the implicit bit; with u <= 128
// it is always below the slow bound X + fast - 1 >= 134). The caller recomputes a vector
// with such a lane with the exact 32-bit encoder (slow16), on the original input: that is
// also where a subnormal's bits below the word matter. NaN/Inf blocks are routed there too.
#pragma once

#include "core/simd_avx512.h"

namespace mxtrain::kern::avx512 {

inline __m512i set1_16(int v) { return _mm512_set1_epi16(short(v)); }

template <Elem E>
struct Enc16 {
  static constexpr int mbits = Fp8<E>::mbits;
  static constexpr int shift = 7 - mbits;          // word bits dropped by the code
  static constexpr int round = (1 << (shift - 1)) - 1;  // RNE: add round + tie bit, shift
  static constexpr int fast = 128 + round;         // v >= fast <=> y >= 2^emin
  static constexpr int base = round - int((Fp8<E>::emin_field - 1) << 7) + 127 * 128;
  static constexpr int max_code = E == Elem::e4m3 ? 0x7E : 0x7B;
};

// 32 FP32 values -> 32 words (sign kept in bit 15), in element order.
inline __m512i raw16(const float* p) {
  alignas(64) static constexpr uint16_t kOdd[32] = {
      1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
      33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i lo16 = set1(0xFFFFu), one = set1(0x10000u);
  __m512i a = load_bits(p), b = load_bits(p + 16);
  a = _mm512_mask_or_epi32(a, _mm512_test_epi32_mask(a, lo16), a, one);
  b = _mm512_mask_or_epi32(b, _mm512_test_epi32_mask(b, lo16), b, one);
  return _mm512_permutex2var_epi16(a, _mm512_load_si512(kOdd), b);
}
inline __m512i raw16(const uint16_t* p) { return _mm512_loadu_si512(p); }

inline __m512i abs16(__m512i raw) { return _mm512_and_si512(raw, set1_16(0x7FFF)); }

// First stage of a horizontal word max over m0..m3: 128-bit lane j of the result holds
// eight words whose max is the max of m_j.
inline __m512i hmax4_16_lanes(__m512i m0, __m512i m1, __m512i m2, __m512i m3) {
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const __m512i x = _mm512_max_epu16(_mm512_permutex2var_epi32(m0, lo, m1),
                                     _mm512_permutex2var_epi32(m0, hi, m1));
  const __m512i y = _mm512_max_epu16(_mm512_permutex2var_epi32(m2, lo, m3),
                                     _mm512_permutex2var_epi32(m2, hi, m3));
  const __m512i lo2 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i hi2 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  return _mm512_max_epu16(_mm512_permutex2var_epi32(x, lo2, y),
                          _mm512_permutex2var_epi32(x, hi2, y));
}

// Horizontal max of the 32 words of each of m0..m3, as FP32 bits (word << 16): lanes
// 4j..4j+3 of the result hold the max of m_j. Words compare like the FP32 bits they stand for.
inline __m512i hmax4_16(__m512i m0, __m512i m1, __m512i m2, __m512i m3) {
  __m512i z = hmax4_16_lanes(m0, m1, m2, m3);
  z = _mm512_max_epu16(z, _mm512_shuffle_epi32(z, _MM_PERM_BADC));
  z = _mm512_max_epu16(z, _mm512_shuffle_epi32(z, _MM_PERM_CDAB));
  z = _mm512_max_epu16(z, _mm512_srli_epi32(z, 16));
  return _mm512_slli_epi32(z, 16);
}

// Sixteen block maxima at once from four hmax4_16_lanes results (z_p for blocks
// 4p..4p+3): a 4x4 dword transpose inside each 128-bit lane, then lane 4p + j of the result
// holds the max of block 4p + j, as FP32 bits.
inline __m512i hmax16_16(__m512i z0, __m512i z1, __m512i z2, __m512i z3) {
  const __m512i m1 =
      _mm512_max_epu16(_mm512_unpacklo_epi32(z0, z1), _mm512_unpackhi_epi32(z0, z1));
  const __m512i m2 =
      _mm512_max_epu16(_mm512_unpacklo_epi32(z2, z3), _mm512_unpackhi_epi32(z2, z3));
  __m512i r = _mm512_max_epu16(_mm512_unpacklo_epi64(m1, m2), _mm512_unpackhi_epi64(m1, m2));
  r = _mm512_max_epu16(r, _mm512_srli_epi32(r, 16));  // here: lane 4j + p = block 4p + j
  r = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
  return _mm512_slli_epi32(r, 16);
}

// The offset X = -D = 128 b - base per 32-bit lane from scale bytes b (the kernels keep its
// low 16 bits). For the smallest bytes (b < 8 for E4M3, < 16 for E5M2) X is negative and its
// 16 bits (>= 0xF800) exceed every word u (<= 0x7F81): then u - X saturates to 0 and every
// non-zero lane is below the bound, so zero lanes encode as 0 and all others take the exact
// path, as they must (such a block holds only tiny values). NaN scales: the caller routes
// the block to slow16.
template <Elem E>
inline __m512i offset32(__m512i b) {
  return _mm512_sub_epi32(_mm512_slli_epi32(b, 7), set1(uint32_t(Enc16<E>::base)));
}

// The slow-lane bound T = X + fast - 1 (saturating: 0xFFFF stays).
template <Elem E>
inline __m512i slow_bound(__m512i x) {
  return _mm512_adds_epu16(x, set1_16(Enc16<E>::fast - 1));
}

// The per-element part shared by every copy encoded from one raw word vector.
struct Word16 {
  __m512i u;    // |word| + tie-to-even bit
  __m512i um1;  // u - 1 (0xFFFF for zero lanes)
  __m512i s8;   // raw >> 8: the sign in bit 7
};
template <Elem E>
inline Word16 word16(__m512i raw) {
  const __m512i t = abs16(raw);
  const __m512i tie = _mm512_and_si512(_mm512_srli_epi16(t, Enc16<E>::shift), set1_16(1));
  const __m512i u = _mm512_add_epi16(t, tie);
  return {u, _mm512_sub_epi16(u, set1_16(1)), _mm512_srli_epi16(raw, 8)};
}

// Codes (one per word lane) under per-lane offsets x (bounds tb = slow_bound(x)), the sign
// bit added where sm has 0x80 (the caller clears it for zero blocks: they encode as 0x00).
// v = u - x saturates to 0, so zero lanes give code 0 without a mask. A lane is slow when
// 0 < u < x + fast, i.e. u - 1 < tb unsigned; `acc` becomes non-zero if any lane is.
template <Elem E, bool CLAMP>
inline __m512i encode16(const Word16& w, __m512i x, __m512i tb, __m512i sm, __m512i& acc) {
  acc = _mm512_or_si512(acc, _mm512_subs_epu16(tb, w.um1));
  __m512i c = _mm512_srli_epi16(_mm512_subs_epu16(w.u, x), Enc16<E>::shift);
  if constexpr (CLAMP) c = _mm512_min_epu16(c, set1_16(Enc16<E>::max_code));
  return _mm512_ternarylogic_epi32(c, w.s8, sm, 0xF8);  // c | (s8 & sm)
}

// The slow lanes of one vector (for the rare fix-up path).
inline __mmask32 slow_lanes(const Word16& w, __m512i tb) {
  return _mm512_cmpgt_epu16_mask(tb, w.um1);
}

// Two vectors of word codes (0..255) -> 64 bytes in lane order a, b.
inline __m512i pack2(__m512i a, __m512i b) {
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
                                  _mm512_packus_epi16(a, b));
}

// 32-bit lanes of codes (lo: elements 0..15, hi: 16..31) -> one word vector.
inline __m512i words(__m512i lo, __m512i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                            _mm512_cvtepi32_epi16(hi), 1);
}

}  // namespace mxtrain::kern::avx512
