// gemm/fp4_decode_avx512.cc — 4-bit copies decoded to BF16 for the products (gemm/fp4_gemm.h),
// sixteen elements per vector; byte for byte decode_fp4_bf16_ref.
//
// Eight bytes hold sixteen codes (even element in the low nibble): the nibbles are split into
// 32-bit lanes, the E2M1 values looked up with one permute from a 16-entry table, multiplied by
// the block scales (one per vector for rowwise and tile copies, one per lane for colwise),
// values below 2^-126 flushed to ±0, and rounded to BF16 (exact) with the scalar rounding's
// integer form, so NaN keeps the reference's bits.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gemm/fp4_gemm.h"

namespace mxtrain::gemm_detail {

namespace {

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// Sixteen codes from ceil(n/2) bytes at p (n <= 16) into 32-bit lanes.
inline __m512i load_codes(const uint8_t* p, int64_t n) {
  const int64_t nb = (n + 1) / 2;
  uint64_t w = 0;
  std::memcpy(&w, p, size_t(std::min<int64_t>(nb, 8)));
  const __m512i b = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(int64_t(w)));  // byte i -> lane 2i
  const __m512i lo = _mm512_and_si512(b, _mm512_set1_epi64(0xF));
  const __m512i hi = _mm512_slli_epi64(_mm512_srli_epi64(b, 4), 32);
  return _mm512_or_si512(lo, hi);
}

// f32_to_bf16 of 16 lanes: RNE on the bits, NaN -> (bits >> 16) | 0x40.
inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i r = _mm512_add_epi32(
      u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                          _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  __m512i b = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  b = _mm512_mask_mov_epi32(b, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                                    _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(b);
}

inline __m256i decode16(__m512i codes, __m512 scale) {
  const __m512 table = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f,
                                      -1.5f, -2.f, -3.f, -4.f, -6.f);
  __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(codes, table), scale);
  const __m512 a = _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
  const __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ);
  v = _mm512_castsi512_ps(_mm512_mask_and_epi32(
      _mm512_castps_si512(v), tiny, _mm512_castps_si512(v), _mm512_set1_epi32(int(0x80000000u))));
  return to_bf16(v);
}

inline float scale_value(uint8_t b, bool nv) { return nv ? e4m3_to_f32(b) : e8m0_to_f32(b); }

}  // namespace

void decode_fp4_bf16_avx512(const ScaledTensor& t, int64_t r0, int64_t r1, uint16_t* out) {
  const int64_t ld = t.scale_cols(), rb = t.row_bytes(), B = t.block, K = t.cols;
  const bool nv = t.is_nvfp4();
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = t.data.data() + r * rb;
    for (int64_t c = 0; c < K; c += 16) {
      const int64_t n = std::min<int64_t>(16, K - c);
      __m512 s;
      if (t.layout == MXLayout::colwise) {
        alignas(64) float sv[16];
        const uint8_t* sp = t.scales.data() + (r / B) * ld + c;
        for (int64_t j = 0; j < 16; ++j) sv[j] = j < n ? scale_value(sp[j], nv) : 0.f;
        s = _mm512_load_ps(sv);
      } else {
        const int64_t sr = t.layout == MXLayout::rowwise ? r : r / B;
        s = _mm512_set1_ps(scale_value(t.scales[size_t(sr * ld + c / B)], nv));
      }
      const __m256i v = decode16(load_codes(row + c / 2, n), s);
      _mm256_mask_storeu_epi16(out + r * K + c, lanes(n), v);
    }
  }
}

}  // namespace mxtrain::gemm_detail
