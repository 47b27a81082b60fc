// core/simd16_avx512.h — private: MX encoding in 16-bit lanes (32 elements per vector), used
// by the AVX-512 quantize kernels for their full 128-column pieces (AVX-512 files only).
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
// Encoding with scale byte b (e = b - 127): y = |x| * 2^-e has the word t - 128e, a shift of
// the exponent field only. Where y is at least the format's smallest normal, its code is
// RNE(word >> shift) - bias, and since 128e is a multiple of 2^shift this splits into a part
// per element and a part per block:
//     u = t + bit_shift(t)  (the tie-to-even bit),  q = (u + round) >> shift
//     code = q - Y,  Y = (b - 128 + emin_field) << mbits
// q is shared by the rowwise and colwise copies of a dual-axis pass; each copy then costs
// one saturating subtract. Lanes with code < 2^mbits are zero (code 0, plus the sign) or
// rare: y in the FP8 subnormal range, or an FP32-subnormal input (its word lacks the
// implicit bit; it always falls below the slow bound). The caller recomputes a vector with
// such a lane with the exact 32-bit encoder (slow16), on the original input: that is also
// where a subnormal's bits below the word matter. NaN/Inf blocks are routed there too.
#pragma once

#include "core/simd_avx512.h"

namespace mxtrain::kern::avx512 {
// Internal linkage: files built with different ISA flags (quantize_avx512.cc and
// quantize_avx512vbmi.cc) each keep their own copies, so a call from a plain AVX-512 file
// can never resolve to a copy compiled with VBMI.
namespace {

inline __m512i set1_16(int v) { return _mm512_set1_epi16(short(v)); }

template <Elem E>
struct Enc16 {
  static constexpr int mbits = Fp8<E>::mbits;
  static constexpr int shift = 7 - mbits;          // word bits dropped by the code
  static constexpr int round = (1 << (shift - 1)) - 1;  // RNE: add round + tie bit, shift
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
  // 128-bit lanes 0-1 of x: the max of m0's two halves; lanes 2-3: the same for m1; y
  // likewise for m2, m3. Then lane j of the result: eight words of m_j's maximum.
  const __m512i x = _mm512_max_epu16(_mm512_shuffle_i32x4(m0, m1, 0x44),
                                     _mm512_shuffle_i32x4(m0, m1, 0xEE));
  const __m512i y = _mm512_max_epu16(_mm512_shuffle_i32x4(m2, m3, 0x44),
                                     _mm512_shuffle_i32x4(m2, m3, 0xEE));
  return _mm512_max_epu16(_mm512_shuffle_i32x4(x, y, 0x88), _mm512_shuffle_i32x4(x, y, 0xDD));
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

// Per-block constants from scale bytes b, in 32-bit lanes (the kernels keep the low 16 bits):
//   Y  = (b - 128 + emin_field) << mbits        code = q - Y (see encode16)
//   TB = 128 (b - 127 + emin_field) - round - 1  a lane is slow when 0 < u <= TB
// For the smallest bytes (b <= 127 - emin_field) both are negative and their 16 bits
// (>= 0xF800) exceed every q and u: codes saturate to 0 and every non-zero lane is slow, as
// it must be (such a block holds only tiny values). NaN scales: the caller routes the block
// to slow16.
template <Elem E>
inline __m512i code_offset(__m512i b) {
  return _mm512_slli_epi32(_mm512_sub_epi32(b, set1(128 - Fp8<E>::emin_field)), Fp8<E>::mbits);
}
template <Elem E>
inline __m512i slow_bound(__m512i b) {
  constexpr int k = (127 - int(Fp8<E>::emin_field)) * 128 + Enc16<E>::round + 1;
  return _mm512_sub_epi32(_mm512_slli_epi32(b, 7), set1(uint32_t(k)));
}

// The per-element part shared by every copy encoded from one raw word vector.
struct Word16 {
  __m512i q;    // (u + round) >> shift, u = |word| + tie-to-even bit
  __m512i um1;  // u - 1 (0xFFFF for zero lanes)
  __m512i s8;   // raw >> 8: the sign in bit 7
};
template <Elem E>
inline Word16 word16(__m512i raw) {
  // um1 = t + tie - 1 = t - (1 - tie): (~(raw >> shift)) & 1 is 1 - tie (bit `shift` of raw
  // is that of t). For a zero lane um1 wraps to 0xFFFF and q = (0xFFFF + 2^(shift-1)) >> shift
  // wraps to 0.
  const __m512i t = abs16(raw);
  const __m512i one = set1_16(1);
  const __m512i not_tie =  // ~a & b
      _mm512_ternarylogic_epi32(_mm512_srli_epi16(raw, Enc16<E>::shift), one, one, 0x0C);
  const __m512i um1 = _mm512_sub_epi16(t, not_tie);
  const __m512i q =
      _mm512_srli_epi16(_mm512_add_epi16(um1, set1_16(Enc16<E>::round + 1)), Enc16<E>::shift);
  return {q, um1, _mm512_srli_epi16(raw, 8)};
}

// Codes (one per word lane) with code offsets y and slow bounds tb, without the sign (the
// caller fixes zero blocks: they encode as 0x00). q - y saturates to 0, so zero lanes give
// code 0 without a mask. `slow` gets a non-zero word in every slow lane (0 < u <= tb, i.e.
// u - 1 < tb unsigned). Codes are at most max_code (rceil scales keep amax in range; floor
// clamps), so they fit 7 bits and the sign goes in bit 7.
template <Elem E, bool CLAMP>
inline __m512i encode16u(const Word16& w, __m512i y, __m512i tb, __m512i& slow) {
  slow = _mm512_subs_epu16(tb, w.um1);
  __m512i c = _mm512_subs_epu16(w.q, y);
  if constexpr (CLAMP) c = _mm512_min_epu16(c, set1_16(Enc16<E>::max_code));
  return c;
}

// c | (s8 & 0x80): the sign (bit 7 of s8 = raw >> 8) added to word codes.
inline __m512i with_sign16(__m512i c, __m512i s8) {
  return _mm512_ternarylogic_epi32(c, s8, set1_16(0x80), 0xF8);
}

// Codes with the sign added in every lane.
template <Elem E, bool CLAMP>
inline __m512i encode16(const Word16& w, __m512i y, __m512i tb, __m512i& slow) {
  return with_sign16(encode16u<E, CLAMP>(w, y, tb, slow), w.s8);
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

#ifdef __AVX512VBMI__
// Byte indexes 2j + H (j = 0..63) into the 128 bytes of a VBMI two-source permute.
template <int H>
struct ByteIdx {
  alignas(64) uint8_t v[64];
  constexpr ByteIdx() : v{} {
    for (int j = 0; j < 64; ++j) v[j] = uint8_t(2 * j + H);
  }
};
inline constexpr ByteIdx<0> kLoBytes{};
inline constexpr ByteIdx<1> kHiBytes{};

// The low bytes of the 64 words of a, b, in order (64 word codes -> 64 bytes), and their
// high bytes (the sign bytes of 64 input words): one byte permute each.
inline __m512i lo_bytes(__m512i a, __m512i b) {
  return _mm512_permutex2var_epi8(a, _mm512_load_si512(kLoBytes.v), b);
}
inline __m512i hi_bytes(__m512i a, __m512i b) {
  return _mm512_permutex2var_epi8(a, _mm512_load_si512(kHiBytes.v), b);
}

// c | (s & 0x80) on bytes: the sign bytes s added to byte codes.
inline __m512i with_sign8(__m512i c, __m512i s) {
  return _mm512_ternarylogic_epi32(c, s, _mm512_set1_epi8(char(0x80)), 0xF8);
}
#endif

// 32-bit lanes of codes (lo: elements 0..15, hi: 16..31) -> one word vector.
inline __m512i words(__m512i lo, __m512i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                            _mm512_cvtepi32_epi16(hi), 1);
}

}  // namespace
}  // namespace mxtrain::kern::avx512
