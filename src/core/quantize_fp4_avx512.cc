// core/quantize_fp4_avx512.cc — AVX-512 kernels of 4-bit quantization (NVFP4, MXFP4) and of
// the random Hadamard transform; bit for bit the scalar reference (quantize_fp4_ref.cc).
//
// Sixteen consecutive elements of one row sit in one vector: a 1x16 block is one vector, a
// 1x32 block two; colwise blocks take sixteen columns at a time (a vector per row, the block
// amax a vertical maximum), tiles both. Rowwise and colwise blocks take their rules sixteen at
// a time in one vector (rules16: each order of quantize_fp4_kernels.h's block rule restated
// lane by lane), tiles too, sixteen side by side. Elements: y = x * multiplier and the clamp to
// ±6 are the reference's IEEE operations; nearest-even E2M1 scales by the binade's step and
// converts with the nearest-even mode, a different mechanism from the integer rounding of
// f32_to_e2m1, so the path tests are a real cross-check. Stochastic rounding computes the same
// Philox4x32-10 words as sr_bits, sixteen lanes at a time (32x32 -> 64-bit multiplies on even
// and odd lanes). Codes are packed two per byte (even column in the low nibble) and stored
// with byte masks, so ragged rows write exactly their bytes.
// GCC 12 reports the undefined-source operands inside its own AVX-512 intrinsics as
// maybe-uninitialized; they are not read.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/quantize_fp4_kernels.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern {

namespace {

using avx512::lanes;
using avx512::load_bits;
using avx512::set1;

template <class T>
inline __m512 load16(const T* p, int64_t n) {
  return _mm512_castsi512_ps(n >= 16 ? load_bits(p) : load_bits(p, lanes(n)));
}

inline __m512i abs_bits(__m512 v) {
  return _mm512_and_si512(_mm512_castps_si512(v), set1(0x7FFFFFFFu));
}

// ---- Philox4x32-10, 16 lanes ------------------------------------------------------------------

// (hi, lo) of a * m per 32-bit lane.
inline void mulhilo(__m512i a, uint32_t m, __m512i& hi, __m512i& lo) {
  const __m512i mv = set1(m);
  const __m512i pe = _mm512_mul_epu32(a, mv);
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mv);
  lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

// The ten rounds on counters (c0, c1, c2, c3) with p's key; the four words come back in c.
inline void philox_rounds(const Fp4Params& p, __m512i c[4]) {
  uint32_t k0 = uint32_t(p.seed), k1 = uint32_t(p.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(c[0], kPhiloxM0, hi0, lo0);
    mulhilo(c[2], kPhiloxM1, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c[1]), set1(k0));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c[3]), set1(k1));
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

// Counters {q0 + d (low 32 bits), high bits | copy << 16 (plus a carry), tensor, step} for the
// lanes' offsets d.
inline void counters(const Fp4Params& p, uint64_t q0, __m512i d, __m512i c[4]) {
  const __m512i base = set1(uint32_t(q0));
  c[0] = _mm512_add_epi32(base, d);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c[0], base);
  const __m512i hi = set1(uint32_t(q0 >> 32) | (p.copy << 16));
  c[1] = _mm512_mask_add_epi32(hi, carry, hi, set1(1));
  c[2] = set1(p.tensor);
  c[3] = set1(p.step);
}

// The random words of elements idx0 .. idx0 + 15 (sr_bits lane by lane): each lane runs the
// generator for its own element's counter.
inline __m512i sr_bits16(const Fp4Params& p, uint64_t idx0) {
  const __m512i j = _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                                      3, 2, 1, 0),
                                     set1(uint32_t(idx0 & 3)));
  const __m512i word = _mm512_and_si512(j, set1(3));
  __m512i c[4];
  counters(p, idx0 >> 2, _mm512_srli_epi32(j, 2), c);
  philox_rounds(p, c);
  __m512i r = c[0];
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(1)), c[1]);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(2)), c[2]);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(3)), c[3]);
  return r;
}

// The ten rounds on eight counters held in the even 32-bit lanes (the odd lanes are scratch):
// each multiply is one 32x32 -> 64-bit product per 64-bit lane, its low half already in the
// even lane and its high half one shift away, so a round is two multiplies, two shifts and two
// three-way XORs.
[[gnu::always_inline]] inline void philox_rounds_even(const Fp4Params& p, __m512i c[4]) {
  uint32_t k0 = uint32_t(p.seed), k1 = uint32_t(p.seed >> 32);
  const __m512i m0 = set1(kPhiloxM0), m1 = set1(kPhiloxM1);
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const __m512i p0 = _mm512_mul_epu32(c[0], m0), p1 = _mm512_mul_epu32(c[2], m1);
    const __m512i n0 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c[1], set1(k0), 0x96);
    const __m512i n2 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p0, 32), c[3], set1(k1), 0x96);
    c[0] = n0;
    c[1] = p1;  // lo1
    c[2] = n2;
    c[3] = p0;  // lo0
  }
}

// The random words of the 64 elements idx0 .. idx0 + 63, idx0 a multiple of 4: one generator
// run per four elements (sixteen counters, all four words used), out[v] = elements
// idx0 + 16v ...: lane l takes word l % 4 of counter 4v + l / 4. Run h holds counters
// 8h + {0, 4, 1, 5, 2, 6, 3, 7} in the even 32-bit lanes of w[h], so that 64-bit lanes 2L and
// 2L + 1 (counters 8h + L and 8h + 4 + L) end up in 128-bit lane L of out[2h] and out[2h + 1]:
// each counter's four words are put side by side in its lane (one shift and one blend per
// two words) and two in-lane unpacks make the elements' order.
inline void sr_words64(const Fp4Params& p, uint64_t idx0, __m512i out[4]) {
  __m512i w[2][4];
  for (int h = 0; h < 2; ++h) {
    counters(p, (idx0 >> 2) + uint64_t(8 * h),
             _mm512_setr_epi32(0, 0, 4, 0, 1, 0, 5, 0, 2, 0, 6, 0, 3, 0, 7, 0), w[h]);
    philox_rounds_even(p, w[h]);
  }
  for (int h = 0; h < 2; ++h) {
    const __m512i* c = w[h];  // the words in the even lanes (c[1], c[3]: 64-bit products)
    const __m512i c01 = _mm512_mask_blend_epi32(0xAAAA, c[0], _mm512_slli_epi64(c[1], 32));
    const __m512i c23 = _mm512_mask_blend_epi32(0xAAAA, c[2], _mm512_slli_epi64(c[3], 32));
    out[2 * h] = _mm512_unpacklo_epi64(c01, c23);
    out[2 * h + 1] = _mm512_unpackhi_epi64(c01, c23);
  }
}

// The words of 16 * n elements from idx0 (n <= 4 vectors): sr_words64 when idx0 is a multiple
// of 4 and all four vectors are wanted, else one sr_bits16 per vector.
inline void sr_words(const Fp4Params& p, uint64_t idx0, int n, __m512i out[4]) {
  if (n == 4 && (idx0 & 3) == 0) return sr_words64(p, idx0, out);
  for (int v = 0; v < n; ++v) out[v] = sr_bits16(p, idx0 + uint64_t(16 * v));
}

// ---- element rounding ---------------------------------------------------------------------

// The E2M1 magnitude code of a = |y| <= 6 (not NaN) rounded to nearest, ties to the even code:
// scaled by the reciprocal of its binade's step (2, 1 or 1/2: exact), rounded to an integer
// by the conversion's nearest-even mode, then offset into the codes of that binade.
[[gnu::always_inline]] inline __m512i e2m1_magnitude(__m512 a) {
  const __mmask16 ge2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.f), _CMP_GE_OQ);
  const __mmask16 ge4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.f), _CMP_GE_OQ);
  __m512 inv = _mm512_mask_mov_ps(_mm512_set1_ps(2.f), ge2, _mm512_set1_ps(1.f));
  inv = _mm512_mask_mov_ps(inv, ge4, _mm512_set1_ps(0.5f));
  __m512i t = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, inv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  t = _mm512_mask_add_epi32(t, ge2, t, set1(2));
  return _mm512_mask_add_epi32(t, ge4, t, set1(2));
}

// Bit 3 of each lane: the sign of y.
inline __m512i sign_nibble(__m512 y) {
  return _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(y), 28), set1(8));
}

// Stochastic magnitude of a = |y| <= 6 with random words r (e2m1_stochastic): between the grid
// points n · step <= a < (n + 1) · step, up when u = (r >> 8) · 2^-24 < a / step - n. In steps
// of its binade, grid point n + up is the code n + up offset into the binade's codes, as
// e2m1_magnitude counts them (the same codes as coding the value (n + up) · step).
[[gnu::always_inline]] inline __m512i e2m1_stochastic_magnitude(__m512 a, __m512i r) {
  const __mmask16 ge2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.f), _CMP_GE_OQ);
  const __mmask16 ge4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.f), _CMP_GE_OQ);
  __m512 inv = _mm512_mask_mov_ps(_mm512_set1_ps(2.f), ge2, _mm512_set1_ps(1.f));
  inv = _mm512_mask_mov_ps(inv, ge4, _mm512_set1_ps(0.5f));
  const __m512 t = _mm512_mul_ps(a, inv);  // a / step, exactly
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_sub_ps(t, n);
  const __m512 u =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), _mm512_set1_ps(0x1p-24f));
  __m512i c = _mm512_cvttps_epi32(n);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(u, frac, _CMP_LT_OQ), c, set1(1));
  c = _mm512_mask_add_epi32(c, ge2, c, set1(2));
  return _mm512_mask_add_epi32(c, ge4, c, set1(2));
}

// MXFP4 floor's NaN block, per lane (nan_block_code).
inline __m512i nan_block16(__m512 x) {
  const __m512i a = abs_bits(x);
  const __m512i s = sign_nibble(x);
  __m512i c = s;
  c = _mm512_mask_mov_epi32(c, _mm512_cmpgt_epu32_mask(a, set1(0x7F800000u)),
                            _mm512_or_si512(s, set1(3)));
  return _mm512_mask_mov_epi32(c, _mm512_cmpeq_epi32_mask(a, set1(0x7F800000u)), set1(0xB));
}

// How the 16 lanes of a vector are coded: each lane's multiplier, and the lanes whose block
// fills every code (fill codes) or is MXFP4 floor's NaN block.
struct LaneRules {
  __m512 mult;
  __mmask16 fill;
  __m512i fill_code;
  __mmask16 floor_nan;
};

// Codes of 16 elements x with random words r (stochastic rounding): y = x · multiplier, then
// |y| clamped to 6 (min keeps a NaN), the magnitude coded and y's sign attached; NaN -> 0xB.
[[gnu::always_inline]] inline __m512i codes16(__m512 x, const LaneRules& l, bool stochastic,
                                               __m512i r) {
  const __m512 y = _mm512_mul_ps(x, l.mult);
  const __m512 a = _mm512_min_ps(_mm512_set1_ps(6.f), _mm512_castsi512_ps(abs_bits(y)));
  const __m512i m = stochastic ? e2m1_stochastic_magnitude(a, r) : e2m1_magnitude(a);
  __m512i c = _mm512_or_si512(m, sign_nibble(y));
  c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), set1(0xB));
  if (l.floor_nan) c = _mm512_mask_mov_epi32(c, l.floor_nan, nan_block16(x));
  if (l.fill) c = _mm512_mask_mov_epi32(c, l.fill, l.fill_code);
  return c;
}

// codes16 for a vector none of whose elements is NaN and whose blocks are not NaN blocks:
// the same codes without the NaN and fill steps.
template <bool SR>
[[gnu::always_inline]] inline __m512i plain_codes16(__m512 x, __m512 mult, __m512i r) {
  const __m512 y = _mm512_mul_ps(x, mult);
  const __m512 a = _mm512_min_ps(_mm512_set1_ps(6.f), _mm512_castsi512_ps(abs_bits(y)));
  const __m512i m = SR ? e2m1_stochastic_magnitude(a, r) : e2m1_magnitude(a);
  return _mm512_or_si512(m, sign_nibble(y));
}

// Stores the 16 codes (lanes [0, n) valid, n >= 1) as ceil(n/2) bytes at d.
inline void store_codes(uint8_t* d, __m512i c, int64_t n) {
  if (n < 16) c = _mm512_maskz_mov_epi32(lanes(n), c);
  const __m512i packed = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
  const __m128i bytes = _mm512_cvtepi64_epi8(packed);
  const int64_t nb = (n + 1) / 2;
  if (nb >= 8)
    _mm_storel_epi64(reinterpret_cast<__m128i*>(d), bytes);
  else
    _mm_mask_storeu_epi8(d, __mmask16((1u << nb) - 1u), bytes);
}

inline uint32_t hmax(__m512i v) { return _mm512_reduce_max_epu32(v); }

// ---- block rules, sixteen blocks at a time ------------------------------------------------------

// The rules of 16 blocks (lane j: block amax bits ab), lane by lane what fp4_block gives: the
// scale bytes (one per lane, in the low byte), the multipliers and the fill lanes.
struct Rules16 {
  __m512i scale;
  LaneRules lane;
};

// NVFP4 in TransformerEngine's order (nvfp4_block's first branch): b = amax · te_mult, at most
// 448 (Inf and overflow included; NaN stays), coded to E4M3 with subnormals — at or above
// 2^-6 by rounding the FP32 significand to three bits, below it as the nearest-even multiple
// of E4M3's step 2^-9 (b · 2^9 is exact, and code 8 there is 2^-6's code) — then
// 1 / (value · te_sdec), at most FLT_MAX (a zero scale gives Inf, so FLT_MAX). NaN blocks fill
// with code 0.
inline Rules16 te_rules16(__m512i ab, const Fp4Params& p) {
  Rules16 r;
  r.lane.floor_nan = 0;
  __m512 b = _mm512_mul_ps(_mm512_castsi512_ps(ab), _mm512_set1_ps(p.te_mult));
  b = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(b, _mm512_set1_ps(448.f), _CMP_GT_OQ),
                         _mm512_set1_ps(448.f));
  const __mmask16 nan = _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
  const __mmask16 sub = _mm512_cmp_ps_mask(b, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
  const __m512i u = _mm512_castps_si512(b);
  const __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(u, _mm512_add_epi32(set1(0x7FFFFu),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 20), set1(1)))),
      set1(0xFFF00000u));
  const __m512i sub_code = _mm512_cvt_roundps_epi32(
      _mm512_mul_ps(b, _mm512_set1_ps(0x1p9f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512i code = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), set1(960));
  code = _mm512_mask_mov_epi32(code, sub, sub_code);
  const __m512 value = _mm512_mask_mov_ps(
      _mm512_castsi512_ps(rounded), sub,
      _mm512_mul_ps(_mm512_cvtepi32_ps(sub_code), _mm512_set1_ps(0x1p-9f)));
  __m512 enc = _mm512_div_ps(_mm512_set1_ps(1.f),
                             _mm512_mul_ps(value, _mm512_set1_ps(p.te_sdec)));
  enc = _mm512_min_ps(enc, _mm512_set1_ps(FLT_MAX));
  r.scale = _mm512_mask_mov_epi32(code, nan, set1(0x7F));
  r.lane.mult = _mm512_maskz_mov_ps(__mmask16(~nan), enc);
  r.lane.fill = nan;
  r.lane.fill_code = _mm512_setzero_si512();
  return r;
}

inline Rules16 rules16(__m512i ab, const Fp4Params& p) {
  if (p.kind == Fp4Kind::nvfp4 && p.mode == TensorScaleMode::te) return te_rules16(ab, p);
  Rules16 r;
  r.lane.floor_nan = 0;
  if (p.kind == Fp4Kind::nvfp4) {
    // nvfp4_block: b = amax / 6 (/ p), clamped to [2^-6, 448] (NaN stays), then E4M3 by
    // rounding the FP32 significand to three bits, nearest even (b is in E4M3's normal range,
    // so that is f32_to_e4m3, and the rounded float is its value).
    __m512 b = _mm512_div_ps(_mm512_castsi512_ps(ab), _mm512_set1_ps(6.f));
    if (p.mode == TensorScaleMode::torchao) b = _mm512_div_ps(b, _mm512_set1_ps(p.p));
    b = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(b, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ),
                           _mm512_set1_ps(0x1p-6f));
    b = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(b, _mm512_set1_ps(448.f), _CMP_GT_OQ),
                           _mm512_set1_ps(448.f));
    const __mmask16 nan = _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    const __m512i u = _mm512_castps_si512(b);
    const __m512i rounded = _mm512_and_si512(
        _mm512_add_epi32(u, _mm512_add_epi32(set1(0x7FFFFu),
                                             _mm512_and_si512(_mm512_srli_epi32(u, 20), set1(1)))),
        set1(0xFFF00000u));
    r.scale = _mm512_mask_mov_epi32(_mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), set1(960)),
                                    nan, set1(0x7F));
    const __m512 num = _mm512_set1_ps(p.mode == TensorScaleMode::torchao ? p.inv_p : 1.f);
    r.lane.mult = _mm512_maskz_div_ps(__mmask16(~nan), num, _mm512_castsi512_ps(rounded));
    r.lane.fill = nan;
    r.lane.fill_code = set1(p.nan_fill);
    return r;
  }
  // mxfp4_block.
  const bool floor = p.rounding == ScaleRounding::floor;
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(ab, set1(0x7F800000u));
  const __m512i ef = _mm512_srli_epi32(ab, 23);  // exponent field
  __m512i e;  // the exponent, then clamped
  __m512i mult;
  if (floor) {
    e = _mm512_max_epi32(_mm512_sub_epi32(ef, set1(129)), _mm512_set1_epi32(-127));
    const __m512i byte = _mm512_add_epi32(e, set1(127));
    mult = _mm512_slli_epi32(_mm512_sub_epi32(set1(254), byte), 23);
    mult = _mm512_mask_mov_epi32(mult, _mm512_cmpeq_epi32_mask(byte, _mm512_setzero_si512()),
                                 _mm512_castps_si512(_mm512_set1_ps(0x1p126f)));
    r.scale = byte;
  } else {
    const __mmask16 up = _mm512_cmpgt_epu32_mask(_mm512_and_si512(ab, set1(0x7FFFFFu)),
                                                 set1(0x400000u));
    e = _mm512_sub_epi32(ef, set1(129));
    e = _mm512_mask_add_epi32(e, up, e, set1(1));
    e = _mm512_mask_mov_epi32(e, _mm512_cmplt_epu32_mask(ab, set1(0x00800000u)),
                              _mm512_set1_epi32(-127));
    e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    __m512i byte = _mm512_add_epi32(e, set1(127));
    mult = _mm512_slli_epi32(_mm512_sub_epi32(set1(254), byte), 23);
    mult = _mm512_mask_mov_epi32(mult, _mm512_cmpeq_epi32_mask(byte, _mm512_setzero_si512()),
                                 _mm512_castps_si512(_mm512_set1_ps(1.f)));
    const __mmask16 inf = _mm512_cmpeq_epi32_mask(ab, set1(0x7F800000u));
    byte = _mm512_mask_mov_epi32(byte, inf, set1(254));
    mult = _mm512_mask_mov_epi32(mult, inf, set1(0x00400000u));  // 2^-127
    r.scale = byte;
  }
  r.scale = _mm512_mask_mov_epi32(r.scale, nan, set1(kE8M0Nan));
  r.lane.mult = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(__mmask16(~nan), mult));
  r.lane.fill = floor ? 0 : nan;
  r.lane.fill_code = set1(3);
  r.lane.floor_nan = floor ? nan : 0;
  return r;
}

// Lane j of the 16 rules as one vector's uniform rule.
inline LaneRules lane_rule(const Rules16& r, int j) {
  const __m512i jj = set1(uint32_t(j));
  LaneRules l;
  l.mult = _mm512_permutexvar_ps(jj, r.lane.mult);
  l.fill = (r.lane.fill >> j) & 1 ? 0xFFFF : 0;
  l.fill_code = _mm512_permutexvar_epi32(jj, r.lane.fill_code);
  l.floor_nan = (r.lane.floor_nan >> j) & 1 ? 0xFFFF : 0;
  return l;
}

// Lane j = max over the lanes of m[j] (16 vectors of absolute bits): a reduction tree of
// in-lane unpacks, then two levels across the 128-bit lanes.
inline __m512i reduce16(const __m512i m[16]) {
  __m512i a[8], b[4];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_max_epu32(_mm512_unpacklo_epi32(m[2 * i], m[2 * i + 1]),
                            _mm512_unpackhi_epi32(m[2 * i], m[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    b[i] = _mm512_max_epu32(_mm512_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
                            _mm512_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
  // b[i], 128-bit lane L, dword k: the maximum of m[4i + k] over lane L.
  const __m512i c0 = _mm512_max_epu32(_mm512_shuffle_i32x4(b[0], b[1], 0x44),
                                      _mm512_shuffle_i32x4(b[0], b[1], 0xEE));
  const __m512i c1 = _mm512_max_epu32(_mm512_shuffle_i32x4(b[2], b[3], 0x44),
                                      _mm512_shuffle_i32x4(b[2], b[3], 0xEE));
  return _mm512_max_epu32(_mm512_shuffle_i32x4(c0, c1, 0x88), _mm512_shuffle_i32x4(c0, c1, 0xDD));
}

// Scale bytes of lanes [0, n) to d.
inline void store_scales(uint8_t* d, __m512i s, int64_t n) {
  _mm_mask_storeu_epi8(d, lanes(n), _mm512_cvtepi32_epi8(s));
}

// ---- the random Hadamard transform in registers ----------------------------------------------

// rht_rows_f32_ref's steps on 16 rows of 16 columns: signs (s: rht_signs(), asked for by the
// caller outside its loops — a call here would spill the sixteen rows), butterflies, 1/4. The
// loops are unrolled whole, so that the rows stay in registers.
[[gnu::always_inline]] inline void rht16(__m512 v[kRhtSize], const float* s) {
#pragma GCC unroll 16
  for (int i = 0; i < kRhtSize; ++i) v[i] = _mm512_mul_ps(v[i], _mm512_set1_ps(s[i]));
#pragma GCC unroll 4
  for (int h = 1; h < kRhtSize; h *= 2)
#pragma GCC unroll 16
    for (int i = 0; i < kRhtSize; ++i)
      if ((i & h) == 0) {
        const __m512 a = v[i], b = v[i + h];
        v[i] = _mm512_add_ps(a, b);
        v[i + h] = _mm512_sub_ps(a, b);
      }
#pragma GCC unroll 16
  for (int i = 0; i < kRhtSize; ++i) v[i] = _mm512_mul_ps(v[i], _mm512_set1_ps(0.25f));
}

// Rows [rb, rb + nr) (rb a multiple of 16) of columns c .. c + nc of x, transformed when p.rht
// (full groups of 16 rows; a last partial group as it is), into t[i * 64 + 16v ...] for
// vectors v < ceil(nc / 16); lanes past nc are 0.
template <class T>
void band_values(const T* x, const Fp4Params& p, int64_t rb, int64_t nr, int64_t c, int64_t nc,
                 float* t) {
  const int nv = int((nc + 15) / 16);
  const float* signs = rht_signs();
  for (int v = 0; v < nv; ++v) {
    const int64_t n = std::min<int64_t>(16, nc - 16 * v);
    for (int64_t g = 0; g < nr; g += kRhtSize) {
      const int64_t rows = std::min<int64_t>(kRhtSize, nr - g);
      __m512 w[kRhtSize];
      for (int64_t i = 0; i < rows; ++i) w[i] = load16(x + (rb + g + i) * p.K + c + 16 * v, n);
      if (p.rht && rows == kRhtSize && rb + g + kRhtSize <= p.M) rht16(w, signs);
      for (int64_t i = 0; i < rows; ++i) _mm512_store_ps(t + (g + i) * 64 + 16 * v, w[i]);
    }
  }
}

// ---- layouts ----------------------------------------------------------------------------------

// The rules of the blocks of B columns in a row's n columns from xr (at most sixteen; the last
// one ragged where n is not a multiple of B), lanes past them 0. Unrolled and inlined, a whole
// run (n = 16 B) takes its loads unmasked.
template <class T, int B>
[[gnu::always_inline]] inline Rules16 chunk_rules(const T* xr, int64_t n, const Fp4Params& p) {
  __m512i m[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    m[j] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < B / 16; ++h) {
      const int64_t k = std::clamp<int64_t>(n - j * B - h * 16, 0, 16);
      if (k > 0) m[j] = _mm512_max_epu32(m[j], abs_bits(load16(xr + j * B + h * 16, k)));
    }
  }
  return rules16(reduce16(m), p);
}

// Rowwise: sixteen whole blocks of a row at a time (the block amaxes reduced into one vector,
// the rule on all sixteen, the random words 64 elements per generator run); the next sixteen
// blocks' rules are made before this sixteen's codes, so that their chain of divisions runs
// beside the coding. The last, fewer blocks take the same rule on a vector of their amaxes.
// B (16 or 32) and stochastic rounding are template arguments.
template <class T, int B, bool SR>
void rowwise_impl(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  constexpr int nvb = B / 16;  // vectors per block
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * out.row_bytes;
    uint8_t* sr = out.scales + r * out.scale_ld;
    int64_t c = g.c0;
    Rules16 next;
    if (c + 16 * B <= g.c1) next = chunk_rules<T, B>(xr + c, 16 * B, p);
    for (; c + 16 * B <= g.c1; c += 16 * B) {
      const Rules16 rr = next;
      if (c + 32 * B <= g.c1) next = chunk_rules<T, B>(xr + c + 16 * B, 16 * B, p);
      store_scales(sr + c / B, rr.scale, 16);
      __m512i words[4] = {};
      if (!rr.lane.fill && !rr.lane.floor_nan) {
        // No block of the sixteen is a NaN block, so no element is NaN: each vector is its
        // block's multiplier and the plain coding (plain_codes16).
#pragma GCC unroll 4
        for (int j = 0; j < 16; ++j) {
          const __m512 mult = _mm512_permutexvar_ps(_mm512_set1_epi32(j), rr.lane.mult);
#pragma GCC unroll 2
          for (int h = 0; h < nvb; ++h) {
            const int e = j * B + h * 16;  // element offset in the chunk
            if (SR && e % 64 == 0) sr_words(p, uint64_t(r * p.K + c + e), 4, words);
            store_codes(dr + (c + e) / 2,
                        plain_codes16<SR>(load16(xr + c + e, 16), mult, words[(e / 16) % 4]), 16);
          }
        }
        continue;
      }
      for (int j = 0; j < 16; ++j) {
        const LaneRules l = lane_rule(rr, j);
        for (int h = 0; h < nvb; ++h) {
          const int e = j * B + h * 16;  // element offset in the chunk
          if (SR && e % 64 == 0) sr_words(p, uint64_t(r * p.K + c + e), 4, words);
          store_codes(dr + (c + e) / 2, codes16(load16(xr + c + e, 16), l, SR, words[(e / 16) % 4]),
                      16);
        }
      }
    }
    if (c < g.c1) {
      // The last blocks, fewer than sixteen (the last one ragged where the row is): the same
      // vector rule on their amaxes, lanes past them 0 and not stored.
      const int64_t n = g.c1 - c;
      const int nb = int((n + B - 1) / B);
      const Rules16 rr = chunk_rules<T, B>(xr + c, n, p);
      store_scales(sr + c / B, rr.scale, nb);
      for (int j = 0; j < nb; ++j) {
        const LaneRules l = lane_rule(rr, j);
        for (int h = 0; h < nvb; ++h) {
          const int64_t e = j * B + h * 16, k = std::min<int64_t>(16, n - e);
          if (k <= 0) break;
          const __m512i w = SR ? sr_bits16(p, uint64_t(r * p.K + c + e)) : _mm512_setzero_si512();
          store_codes(dr + (c + e) / 2, codes16(load16(xr + c + e, k), l, SR, w), k);
        }
      }
    }
  }
}

template <class T>
void rowwise(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  if (p.B == 16) {
    if (p.stochastic) return rowwise_impl<T, 16, true>(x, p, g, out);
    return rowwise_impl<T, 16, false>(x, p, g, out);
  }
  if (p.stochastic) return rowwise_impl<T, 32, true>(x, p, g, out);
  rowwise_impl<T, 32, false>(x, p, g, out);
}

// Colwise: per band of B rows, 64 columns at a time: the band's values (transformed when
// p.rht) in a small buffer, the column amaxes, the rule on 16 columns per vector, then the
// codes row by row (random words 64 elements per generator run; the plain coding when the 64
// columns are whole and none is in a NaN block).
template <class T, bool SR>
void colwise_impl(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  const int64_t B = p.B;
  alignas(64) float t[32 * 64];
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = std::min(B, p.M - rb);
    for (int64_t c = g.c0; c < g.c1; c += 64) {
      const int64_t nc = std::min<int64_t>(64, g.c1 - c);
      const int nv = int((nc + 15) / 16);
      band_values(x, p, rb, nr, c, nc, t);
      Rules16 rr[4];
      __mmask16 nan_blocks = 0;  // fill or floor-NaN lanes of any of the vectors
      for (int v = 0; v < nv; ++v) {
        __m512i m = _mm512_setzero_si512();
        for (int64_t i = 0; i < nr; ++i)
          m = _mm512_max_epu32(m, abs_bits(_mm512_load_ps(t + i * 64 + 16 * v)));
        const int64_t n = std::min<int64_t>(16, nc - 16 * v);
        rr[v] = rules16(m, p);
        store_scales(out.scales + (rb / B) * out.scale_ld + c + 16 * v, rr[v].scale, n);
        nan_blocks |= rr[v].lane.fill | rr[v].lane.floor_nan;
      }
      if (nc == 64 && !nan_blocks) {
        // 64 whole columns, none in a NaN block: the plain coding (plain_codes16).
        for (int64_t i = 0; i < nr; ++i) {
          const int64_t r = rb + i;
          __m512i words[4] = {};
          if (SR) sr_words(p, uint64_t(r * p.K + c), 4, words);
          uint8_t* d = out.data + r * out.row_bytes + c / 2;
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v)
            store_codes(d + 8 * v,
                        plain_codes16<SR>(_mm512_load_ps(t + i * 64 + 16 * v), rr[v].lane.mult,
                                          words[v]),
                        16);
        }
        continue;
      }
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = rb + i;
        __m512i words[4] = {};
        if (SR) sr_words(p, uint64_t(r * p.K + c), nv, words);
        for (int v = 0; v < nv; ++v)
          store_codes(out.data + r * out.row_bytes + (c + 16 * v) / 2,
                      codes16(_mm512_load_ps(t + i * 64 + 16 * v), rr[v].lane, SR,
                              words[v]),
                      std::min<int64_t>(16, nc - 16 * v));
      }
    }
  }
}

template <class T>
void colwise(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  p.stochastic ? colwise_impl<T, true>(x, p, g, out) : colwise_impl<T, false>(x, p, g, out);
}

// Tiles: up to sixteen side by side at a time, their amaxes (over the band's rows) reduced into
// one vector and the rule on all of them, then each tile's codes row by row.
template <class T>
void tile(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  const int64_t B = p.B;
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = std::min(B, p.M - rb);
    for (int64_t cb = g.c0; cb < g.c1; cb += 16 * B) {
      const int nt = int(std::min<int64_t>(16, (g.c1 - cb + B - 1) / B));
      __m512i m[16];
      for (int j = 0; j < 16; ++j) {
        m[j] = _mm512_setzero_si512();
        if (j >= nt) continue;
        const int64_t c0 = cb + j * B, nc = std::min(B, g.c1 - c0);
        for (int64_t i = 0; i < nr; ++i)
          for (int64_t h = 0; h * 16 < nc; ++h)
            m[j] = _mm512_max_epu32(
                m[j], abs_bits(load16(x + (rb + i) * p.K + c0 + h * 16, nc - h * 16)));
      }
      const Rules16 rr = rules16(reduce16(m), p);
      store_scales(out.scales + (rb / B) * out.scale_ld + cb / B, rr.scale, nt);
      const bool plain = !rr.lane.fill && !rr.lane.floor_nan;  // no NaN block, no NaN element
      for (int j = 0; j < nt; ++j) {
        const int64_t c0 = cb + j * B, nc = std::min(B, g.c1 - c0);
        const LaneRules l = lane_rule(rr, j);
        for (int64_t i = 0; i < nr; ++i) {
          const int64_t r = rb + i;
          for (int64_t h = 0; h * 16 < nc; ++h) {
            const int64_t c = c0 + h * 16;
            const __m512 v = load16(x + r * p.K + c, nc - h * 16);
            __m512i code;
            if (p.stochastic) {
              const __m512i w = sr_bits16(p, uint64_t(r * p.K + c));
              code = plain ? plain_codes16<true>(v, l.mult, w) : codes16(v, l, true, w);
            } else {
              const __m512i w = _mm512_setzero_si512();
              code = plain ? plain_codes16<false>(v, l.mult, w) : codes16(v, l, false, w);
            }
            store_codes(out.data + r * out.row_bytes + c / 2, code,
                        std::min<int64_t>(16, nc - h * 16));
          }
        }
      }
    }
  }
}

template <class T>
uint32_t amax(const T* x, int64_t n) {
  __m512i m = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_epu32(m, abs_bits(load16(x + i, 16)));
  if (i < n) m = _mm512_max_epu32(m, abs_bits(load16(x + i, n - i)));
  return hmax(m);
}

// max |x| and max |T x| bits over rows [r0, r1) (r0 a multiple of 16) of x [M, K] from one
// read: each vector's bits before the transform in registers, then after it; nothing stored.
// A last partial group of rows is not transformed, so it counts as it is in both.
template <class T>
AmaxBits rht_amax(const T* x, int64_t M, int64_t K, int64_t r0, int64_t r1) {
  const int64_t full = M / kRhtSize * kRhtSize;
  const float* signs = rht_signs();
  __m512i m = _mm512_setzero_si512(), mt = _mm512_setzero_si512();
  for (int64_t g = r0; g < r1; g += kRhtSize) {
    if (g >= full) {  // the last rows, contiguous
      const __m512i a = _mm512_set1_epi32(int(amax(x + g * K, (std::min(r1, M) - g) * K)));
      m = _mm512_max_epu32(m, a);
      mt = _mm512_max_epu32(mt, a);
      continue;
    }
    for (int64_t c = 0; c < K; c += 16) {
      const int64_t nc = std::min<int64_t>(16, K - c);
      __m512 v[kRhtSize];
#pragma GCC unroll 16
      for (int i = 0; i < kRhtSize; ++i) {
        v[i] = load16(x + (g + i) * K + c, nc);
        m = _mm512_max_epu32(m, abs_bits(v[i]));
      }
      rht16(v, signs);
#pragma GCC unroll 16
      for (int i = 0; i < kRhtSize; ++i) mt = _mm512_max_epu32(mt, abs_bits(v[i]));
    }
  }
  return {hmax(m), hmax(mt)};
}

}  // namespace

void quantize_fp4_rowwise_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  rowwise(x, p, g, out);
}
void quantize_fp4_rowwise_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g,
                                      Fp4Out out) {
  rowwise(x, p, g, out);
}
void quantize_fp4_colwise_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  colwise(x, p, g, out);
}
void quantize_fp4_colwise_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g,
                                      Fp4Out out) {
  colwise(x, p, g, out);
}
void quantize_fp4_tile_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  tile(x, p, g, out);
}
void quantize_fp4_tile_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out) {
  tile(x, p, g, out);
}
uint32_t fp4_amax_f32_avx512(const float* x, int64_t n) { return amax(x, n); }
uint32_t fp4_amax_bf16_avx512(const uint16_t* x, int64_t n) { return amax(x, n); }

AmaxBits fp4_rht_amax_f32_avx512(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1) {
  return rht_amax(x, M, K, r0, r1);
}
AmaxBits fp4_rht_amax_bf16_avx512(const uint16_t* x, int64_t M, int64_t K, int64_t r0,
                                  int64_t r1) {
  return rht_amax(x, M, K, r0, r1);
}

// The butterflies of rht_rows_f32_ref, sixteen columns per vector.
void rht_rows_f32_avx512(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1,
                         float* out) {
  const int64_t full = M / kRhtSize * kRhtSize;
  const float* signs = rht_signs();
  for (int64_t g = r0; g < r1; g += kRhtSize) {
    if (g >= full) {
      for (int64_t r = g; r < std::min(r1, M); ++r)
        std::memcpy(out + r * K, x + r * K, sizeof(float) * size_t(K));
      continue;
    }
    for (int64_t c = 0; c < K; c += 16) {
      const int64_t nc = std::min<int64_t>(16, K - c);
      const __mmask16 mk = lanes(nc);
      __m512 v[kRhtSize];
      for (int i = 0; i < kRhtSize; ++i) v[i] = _mm512_maskz_loadu_ps(mk, x + (g + i) * K + c);
      rht16(v, signs);
      for (int i = 0; i < kRhtSize; ++i) _mm512_mask_storeu_ps(out + (g + i) * K + c, mk, v[i]);
    }
  }
}

}  // namespace mxtrain::kern
