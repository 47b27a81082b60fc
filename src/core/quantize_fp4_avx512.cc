// core/quantize_fp4_avx512.cc — AVX-512 kernels of 4-bit quantization (NVFP4, MXFP4) and of
// the random Hadamard transform; bit for bit the scalar reference (quantize_fp4_ref.cc).
//
// Sixteen consecutive elements of one row sit in one vector: a 1x16 block is one vector, a
// 1x32 block two; colwise blocks take sixteen columns at a time (a vector per row, the block
// amax a vertical maximum), tiles both. A block's scale comes from the scalar block rule of
// quantize_fp4_kernels.h, called per block (once per 16-256 elements), so the rule has one
// statement. Elements: y = x * multiplier and the clamp to ±6 are the reference's IEEE
// operations; nearest-even E2M1 is a sum of seven threshold compares (the midpoints, each tie
// on the side of the even code), a different mechanism from the integer rounding of
// f32_to_e2m1, so the path tests are a real cross-check. Stochastic rounding computes the same
// Philox4x32-10 words as sr_bits, sixteen lanes at a time (32x32 -> 64-bit multiplies on even
// and odd lanes). Codes are packed two per byte (even column in the low nibble) and stored with
// byte masks, so ragged rows write exactly their bytes.
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

// The random words of elements idx0 .. idx0 + 15 (sr_bits lane by lane).
inline __m512i sr_bits16(const Fp4Params& p, uint64_t idx0) {
  const uint64_t q0 = idx0 >> 2;
  const __m512i j = _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                                      3, 2, 1, 0),
                                     set1(uint32_t(idx0 & 3)));
  const __m512i d = _mm512_srli_epi32(j, 2), word = _mm512_and_si512(j, set1(3));
  const __m512i base = set1(uint32_t(q0));
  __m512i c0 = _mm512_add_epi32(base, d);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);
  __m512i c1 = _mm512_mask_add_epi32(set1(uint32_t(q0 >> 32) | (p.copy << 16)), carry,
                                     set1(uint32_t(q0 >> 32) | (p.copy << 16)), set1(1));
  __m512i c2 = set1(p.tensor), c3 = set1(p.step);
  uint32_t k0 = uint32_t(p.seed), k1 = uint32_t(p.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(c0, kPhiloxM0, hi0, lo0);
    mulhilo(c2, kPhiloxM1, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), set1(k0));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), set1(k1));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  __m512i r = c0;
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(1)), c1);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(2)), c2);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(word, set1(3)), c3);
  return r;
}

// ---- element rounding ---------------------------------------------------------------------

// Nearest-even E2M1 magnitude of a = |y| (finite or Inf; >= 6 saturates): the thresholds
// 0.25 < , 0.75 <=, 1.25 <, 1.75 <=, 2.5 <, 3.5 <=, 5 < (ties go to the even code).
inline __m512i e2m1_magnitude(__m512 a) {
  __m512i c = _mm512_setzero_si512();
  const __m512i one = set1(1);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.f), _CMP_GT_OQ), c, one);
  return c;
}

// Bit 3 of each lane: the sign of y.
inline __m512i sign_nibble(__m512 y) {
  return _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(y), 28), set1(8));
}

// Nearest-even codes of y (e2m1_nearest): NaN -> 0xB.
inline __m512i e2m1_nearest16(__m512 y) {
  const __m512 a = _mm512_castsi512_ps(abs_bits(y));
  const __m512i c = _mm512_or_si512(e2m1_magnitude(a), sign_nibble(y));
  return _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), set1(0xB));
}

// Stochastic codes of y (|y| <= 6 or NaN) with random words r (e2m1_stochastic).
inline __m512i e2m1_stochastic16(__m512 y, __m512i r) {
  const __m512 a = _mm512_castsi512_ps(abs_bits(y));
  const __mmask16 lt2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.f), _CMP_LT_OQ);
  const __mmask16 lt4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.f), _CMP_LT_OQ);
  __m512 step = _mm512_mask_mov_ps(_mm512_set1_ps(2.f), lt4, _mm512_set1_ps(1.f));
  step = _mm512_mask_mov_ps(step, lt2, _mm512_set1_ps(0.5f));
  const __m512 t = _mm512_div_ps(a, step);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_sub_ps(t, n);
  const __m512 u =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), _mm512_set1_ps(0x1p-24f));
  const __m512 up = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, frac, _CMP_LT_OQ),
                                        _mm512_set1_ps(1.f));
  const __m512 q = _mm512_mul_ps(_mm512_add_ps(n, up), step);
  const __m512i c = _mm512_or_si512(e2m1_magnitude(q), sign_nibble(y));
  return _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), set1(0xB));
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

inline LaneRules uniform(const Fp4Block& b) {
  LaneRules l;
  l.mult = _mm512_set1_ps(b.mult);
  l.fill = b.fill >= 0 ? 0xFFFF : 0;
  l.fill_code = set1(uint32_t(b.fill >= 0 ? b.fill : 0));
  l.floor_nan = b.fill == kFillFloorNan ? 0xFFFF : 0;
  return l;
}

// Codes of 16 elements x (consecutive in a row; element index idx0 for lane 0).
inline __m512i codes16(__m512 x, const LaneRules& l, const Fp4Params& p, uint64_t idx0) {
  __m512 y = _mm512_mul_ps(x, l.mult);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, _mm512_set1_ps(6.f), _CMP_GT_OQ),
                         _mm512_set1_ps(6.f));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, _mm512_set1_ps(-6.f), _CMP_LT_OQ),
                         _mm512_set1_ps(-6.f));
  __m512i c = p.stochastic ? e2m1_stochastic16(y, sr_bits16(p, idx0)) : e2m1_nearest16(y);
  if (l.floor_nan) c = _mm512_mask_mov_epi32(c, l.floor_nan, nan_block16(x));
  if (l.fill) c = _mm512_mask_mov_epi32(c, l.fill, l.fill_code);
  return c;
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

// ---- layouts ----------------------------------------------------------------------------------

template <class T>
void rowwise(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  const int64_t B = p.B;
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * out.row_bytes;
    for (int64_t c = g.c0; c < g.c1; c += B) {
      const int64_t n = std::min(B, g.c1 - c);
      __m512 v[2];
      __m512i m = _mm512_setzero_si512();
      for (int64_t h = 0; h * 16 < n; ++h) {
        v[h] = load16(xr + c + h * 16, n - h * 16);
        m = _mm512_max_epu32(m, abs_bits(v[h]));
      }
      const Fp4Block b = fp4_block(hmax(m), p);
      out.scales[r * out.scale_ld + c / B] = b.scale;
      const LaneRules l = uniform(b);
      for (int64_t h = 0; h * 16 < n; ++h)
        store_codes(dr + (c + h * 16) / 2, codes16(v[h], l, p, uint64_t(r * p.K + c + h * 16)),
                    std::min<int64_t>(16, n - h * 16));
    }
  }
}

template <class T>
void colwise(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  const int64_t B = p.B;
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = std::min(B, p.M - rb);
    for (int64_t c = g.c0; c < g.c1; c += 16) {
      const int64_t nc = std::min<int64_t>(16, g.c1 - c);
      __m512i m = _mm512_setzero_si512();
      for (int64_t i = 0; i < nr; ++i) m = _mm512_max_epu32(m, abs_bits(load16(x + (rb + i) * p.K + c, nc)));
      alignas(64) uint32_t am[16];
      alignas(64) float mult[16];
      alignas(64) uint32_t fill_code[16];
      _mm512_store_si512(am, m);
      LaneRules l;
      l.fill = 0;
      l.floor_nan = 0;
      for (int64_t j = 0; j < 16; ++j) {
        mult[j] = 0.f;
        fill_code[j] = 0;
        if (j >= nc) continue;
        const Fp4Block b = fp4_block(am[j], p);
        out.scales[(rb / B) * out.scale_ld + c + j] = b.scale;
        mult[j] = b.mult;
        if (b.fill >= 0) {
          l.fill |= __mmask16(1u << j);
          fill_code[j] = uint32_t(b.fill);
        }
        if (b.fill == kFillFloorNan) l.floor_nan |= __mmask16(1u << j);
      }
      l.mult = _mm512_load_ps(mult);
      l.fill_code = _mm512_load_si512(fill_code);
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = rb + i;
        store_codes(out.data + r * out.row_bytes + c / 2,
                    codes16(load16(x + r * p.K + c, nc), l, p, uint64_t(r * p.K + c)), nc);
      }
    }
  }
}

template <class T>
void tile(const T* x, const Fp4Params& p, Region g, Fp4Out out) {
  const int64_t B = p.B;
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = std::min(B, p.M - rb);
    for (int64_t cb = g.c0; cb < g.c1; cb += B) {
      const int64_t nc = std::min(B, g.c1 - cb);
      __m512i m = _mm512_setzero_si512();
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t h = 0; h * 16 < nc; ++h)
          m = _mm512_max_epu32(m, abs_bits(load16(x + (rb + i) * p.K + cb + h * 16, nc - h * 16)));
      const Fp4Block b = fp4_block(hmax(m), p);
      out.scales[(rb / B) * out.scale_ld + cb / B] = b.scale;
      const LaneRules l = uniform(b);
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = rb + i;
        for (int64_t h = 0; h * 16 < nc; ++h) {
          const int64_t c = cb + h * 16;
          store_codes(out.data + r * out.row_bytes + c / 2,
                      codes16(load16(x + r * p.K + c, nc - h * 16), l, p, uint64_t(r * p.K + c)),
                      std::min<int64_t>(16, nc - h * 16));
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

// The butterflies of rht_rows_f32_ref, sixteen columns per vector.
void rht_rows_f32_avx512(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1,
                         float* out) {
  const float* s = rht_signs();
  const int64_t full = M / kRhtSize * kRhtSize;
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
      for (int i = 0; i < kRhtSize; ++i)
        v[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + (g + i) * K + c),
                             _mm512_set1_ps(s[i]));
      for (int h = 1; h < kRhtSize; h *= 2)
        for (int i = 0; i < kRhtSize; ++i)
          if ((i & h) == 0) {
            const __m512 a = v[i], b = v[i + h];
            v[i] = _mm512_add_ps(a, b);
            v[i + h] = _mm512_sub_ps(a, b);
          }
      for (int i = 0; i < kRhtSize; ++i)
        _mm512_mask_storeu_ps(out + (g + i) * K + c, mk, _mm512_mul_ps(v[i], _mm512_set1_ps(0.25f)));
    }
  }
}

}  // namespace mxtrain::kern
