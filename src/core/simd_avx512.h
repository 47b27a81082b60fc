// core/simd_avx512.h — private: AVX-512 building blocks shared by the *_avx512.cc kernels.
//
// Include only from files compiled with the AVX-512 flags (the *_avx512.cc files).
// Everything works on 16 FP32 lanes and reproduces the scalar reference bit for bit:
//   load_bits  FP32 or BF16 input -> FP32 bit patterns (BF16 widening is exact)
//   encode     scaled FP32 -> FP8 code per lane: RNE + satfinite through a float "magic
//              add" (a different mechanism from the integer rounding in formats.cc)
//   scale_bytes / inv_scales  the scale rule (docs/numerics.md, "The scale exponent") on 16
//                             amax values at once
//   decode     FP8 code -> FP32 value
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "mxtrain/formats.h"

namespace mxtrain::kern::avx512 {
// Internal linkage: files built with different ISA flags (quantize_avx512.cc and
// quantize_avx512vbmi.cc) each keep their own copies, so a call from a plain AVX-512 file
// can never resolve to a copy compiled with VBMI.
namespace {

inline __m512i set1(uint32_t v) { return _mm512_set1_epi32(int(v)); }

// ---- inputs ------------------------------------------------------------------------------
inline __m512i load_bits(const float* p) { return _mm512_castps_si512(_mm512_loadu_ps(p)); }
inline __m512i load_bits(const float* p, __mmask16 m) {
  return _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p));
}
inline __m512i load_bits(const uint16_t* p) {
  return _mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
}
inline __m512i load_bits(const uint16_t* p, __mmask16 m) {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16);
}
inline __m512i abs_bits(__m512i u) { return _mm512_and_si512(u, set1(0x7FFFFFFFu)); }

// Lanes [0, n) of a 16-lane mask (n may be <= 0 or >= 16).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// ---- FP8 element formats -------------------------------------------------------------------
template <Elem E>
struct Fp8;
template <>
struct Fp8<Elem::e4m3> {
  static constexpr int mbits = 3, emax = 8;
  static constexpr uint32_t max_bits = 0x43E00000u;  // 448
  static constexpr uint32_t emin_field = 121;        // FP32 exponent field of 2^-6
  static constexpr uint32_t nan = 0x7F;
};
template <>
struct Fp8<Elem::e5m2> {
  static constexpr int mbits = 2, emax = 15;
  static constexpr uint32_t max_bits = 0x47600000u;  // 57344
  static constexpr uint32_t emin_field = 113;        // 2^-14
  static constexpr uint32_t nan = 0x7E;
};

// Encoding one 16-lane vector: `a` = |x| (FP32 bits, finite; the caller masks NaN/Inf
// blocks), `sgn` = x_bits >> 24 (bit 7 = sign; shared by every copy made of x), `inv` = 2^-e.
// y = |x| * 2^-e is exact (see quantize_kernels.h). Let E = max(exponent(y), emin) after the
// satfinite clamp and C = 2^(E + 23 - mbits). In y + C the float adder rounds y to a multiple
// of 2^(E - mbits) — one FP8 step in that binade — ties to even, and the low bits of the sum
// then hold n = y / step, so code = ((E_field - emin_field) << mbits) + n. A carry into the
// next binade (n = 2^(mbits+1)) lands exactly on the next code. CLAMP (satfinite) is needed
// only for the floor rule: with rceil, |x| <= amax <= max_elem * 2^e by construction.
template <Elem E, bool CLAMP>
inline __m512i encode_abs(__m512 a, __m512i sgn, __m512 inv) {
  using F = Fp8<E>;
  __m512i ya = _mm512_castps_si512(_mm512_mul_ps(a, inv));
  if constexpr (CLAMP) ya = _mm512_min_epu32(ya, set1(F::max_bits));
  const __m512i ec = _mm512_max_epu32(_mm512_and_si512(ya, set1(0x7F800000u)),
                                      set1(F::emin_field << 23));
  const __m512i c = _mm512_add_epi32(ec, set1(uint32_t(23 - F::mbits) << 23));
  const __m512i s =
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(ya), _mm512_castsi512_ps(c)));
  const __m512i mag = _mm512_sub_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(s, c), _mm512_srli_epi32(ec, 23 - F::mbits)),
      set1(F::emin_field << F::mbits));
  return _mm512_ternarylogic_epi32(mag, sgn, set1(0x80), 0xF8);  // mag | (sgn & 0x80)
}

// Shared per-element parts for encode_abs.
inline __m512 abs_f(__m512i u) { return _mm512_castsi512_ps(abs_bits(u)); }
inline __m512i sign_byte(__m512i u) { return _mm512_srli_epi32(u, 24); }

// Scaled value y (any sign, finite) -> code; the convenience form of encode_abs.
template <Elem E>
inline __m512i encode(__m512 y) {
  const __m512i u = _mm512_castps_si512(y);
  return encode_abs<E, true>(abs_f(u), sign_byte(u), _mm512_set1_ps(1.0f));
}

// Scale bytes (docs/numerics.md, "The scale exponent") of 16 blocks from their amax bits
// (same rule as scale_exponent() in
// quantize_kernels.h): e = exp(amax) - 127 - emax (+1 for rceil when the fraction exceeds
// 0.75), clamped to [-127, 127]; amax < 2^-126 falls below -127 by itself. NaN/Inf -> 0xFF.
template <Elem E>
inline __m512i scale_bytes(__m512i ab, bool rceil) {
  __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(ab, 23), set1(127 + Fp8<E>::emax));
  if (rceil) {
    const __mmask16 up =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(ab, set1(0x7FFFFFu)), set1(0x600000u));
    e = _mm512_mask_add_epi32(e, up, e, set1(1));
  }
  e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(-127)), set1(127));
  const __m512i b = _mm512_add_epi32(e, set1(127));
  return _mm512_mask_mov_epi32(b, _mm512_cmpge_epu32_mask(ab, set1(0x7F800000u)), set1(0xFF));
}

// 2^-e = bits (254 - b) << 23 for finite scale bytes (b <= 247, see quantize_kernels.h).
inline __m512 inv_scales(__m512i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(set1(254), b), 23));
}

// Stores the low byte of each of the first 16 lanes (all, or the lanes in m).
inline void store_codes(uint8_t* p, __m512i codes) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(codes));
}
inline void store_codes(uint8_t* p, __m512i codes, __mmask16 m) {
  _mm512_mask_cvtepi32_storeu_epi8(p, m, codes);
}

// ---- decode --------------------------------------------------------------------------------
// FP8 code (one per lane) -> FP32. Normal codes: the code's exponent/mantissa bits shifted
// into FP32 position plus the bias difference. Subnormal codes: mantissa * 2^(emin-mbits).
// NaN codes -> canonical quiet NaN; E5M2 Inf codes -> +-Inf.
template <Elem E>
inline __m512 decode(__m512i code) {
  using F = Fp8<E>;
  const __m512i mag = _mm512_and_si512(code, set1(0x7F));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(code, set1(0x80)), 24);
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 23 - F::mbits),
                                          set1((F::emin_field - 1) << 23));
  const __m512 sub = _mm512_mul_ps(
      _mm512_cvtepi32_ps(mag),
      _mm512_castsi512_ps(set1((F::emin_field - F::mbits) << 23)));  // 2^(emin - mbits)
  __m512i v = _mm512_mask_mov_epi32(normal, _mm512_cmplt_epu32_mask(mag, set1(1u << F::mbits)),
                                    _mm512_castps_si512(sub));
  if constexpr (E == Elem::e4m3) {
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(mag, set1(0x7F)), set1(0x7FC00000u));
  } else {
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(mag, set1(0x7C)), set1(0x7F800000u));
    v = _mm512_mask_mov_epi32(v, _mm512_cmpgt_epu32_mask(mag, set1(0x7C)), set1(0x7FC00000u));
  }
  return _mm512_castsi512_ps(_mm512_or_si512(v, sign));
}

// E8M0 bytes (one per lane) -> 2^(b-127) as FP32; 0 -> 2^-127 (subnormal), 0xFF -> NaN.
inline __m512 scale_values(__m512i b) {
  __m512i v = _mm512_slli_epi32(b, 23);
  v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                            set1(0x00400000u));
  v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(b, set1(0xFF)), set1(0x7FC00000u));
  return _mm512_castsi512_ps(v);
}

// Canonical quiet NaN (0x7FC00000) in every NaN lane, so that results do not depend on
// which operand's NaN a multiply propagated.
inline __m512 canonical_nan(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(set1(0x7FC00000u)));
}

// FP32 -> BF16 bits per lane (round to nearest even; NaN -> quiet NaN keeping sign/payload).
inline __m512i to_bf16_bits(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), set1(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, set1(0x7FFF))), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), set1(0x40));
  return _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(abs_bits(u), set1(0x7F800000u)), q);
}

}  // namespace
}  // namespace mxtrain::kern::avx512
