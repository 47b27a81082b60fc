// gemm/fp4_decode_avx512.h — 4-bit codes to the BF16 values the products multiply
// (gemm/fp4_gemm.h), for the AVX512-BF16 kernels (included by fp4_pack_avx512.cc and
// fp4_gemv_avx512.cc; internal linkage, so each keeps its own copy).
//
// decode32_rows: 32 consecutive codes of a row (16 bytes, even code in the low nibble) into
// 32 BF16 words in order — 16 BF16 pairs along the row — by one word permute: each byte is
// zero-extended to a 32-bit lane and its two nibbles moved to the lane's two words, which
// index a 32-word table holding the 16 values of the first block's scale and the 16 of the
// second's (Fp4Tables::bf16, made from the definition, so the values are the reference's).
// Codes past the row's end give +0 (masked), whatever their block's scale.
// values16: 16 codes (8 bytes) whose scales differ per lane, in FP32: the E2M1 value by a
// float permute, times the lane's scale (exact: at most six significant bits), values below
// 2^-126 made ±0 — bit for bit the BF16 value in the upper half of each lane.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "gemm/fp4_gemm.h"

namespace mxtrain::gemm_detail {
namespace {

inline __mmask32 first32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1u);
}

// Codes [c, c + 32) of a packed row (n = codes from c to the row's end) with the 16-word
// tables t0 (codes c .. c + 15) and t1 (c + 16 .. c + 31).
inline __m512i decode32_rows(const uint8_t* row, int64_t c, int64_t n, const uint16_t* t0,
                             const uint16_t* t1) {
  if (n <= 0) return _mm512_setzero_si512();
  const uint8_t* p = row + c / 2;
  const __m128i b = n >= 32 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                            : _mm_maskz_loadu_epi8(__mmask16((1u << ((n + 1) / 2)) - 1u), p);
  const __m512i d = _mm512_cvtepu8_epi32(b);
  // Lane i: word 0 = low nibble (code 2i), word 1 = high nibble (code 2i + 1); lanes 8-15
  // index the second table (+16).
  const __m512i idx = _mm512_or_si512(
      _mm512_ternarylogic_epi32(d, _mm512_slli_epi32(d, 12), _mm512_set1_epi32(0x000F000F), 0xA8),
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00100010, 0x00100010, 0x00100010, 0x00100010,
                        0x00100010, 0x00100010, 0x00100010, 0x00100010));
  const __m512i table = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t0))),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(t1)), 1);
  return _mm512_maskz_permutexvar_epi16(first32(n), idx, table);
}

// The two tables of codes [c, c + 32) of a row whose scale bytes (one per block of B) start at
// srow: rowwise or tile rows (blocks along the row).
inline void row_tables(const Fp4Tables& t, const uint8_t* srow, int64_t c, int64_t K, int64_t B,
                       const uint16_t*& t0, const uint16_t*& t1) {
  t0 = t.bf16[srow[c / B]];
  t1 = B == 16 && c + 16 < K ? t.bf16[srow[c / B + 1]] : t0;
}

// 16 codes from 8 bytes at p (n codes valid, the rest +0 through their zero scale) into
// 32-bit lanes.
inline __m512i codes16(const uint8_t* p, int64_t n) {
  if (n <= 0) return _mm512_setzero_si512();
  const int64_t nb = std::min<int64_t>(8, (n + 1) / 2);
  const __m128i b = nb >= 8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))
                            : _mm_maskz_loadu_epi8(__mmask16((1u << nb) - 1u), p);
  const __m512i q = _mm512_cvtepu8_epi64(b);  // byte i -> lane 2i
  return _mm512_ternarylogic_epi64(q, _mm512_slli_epi64(q, 28),
                                   _mm512_set1_epi64(0x0000000F0000000Fll), 0xA8);
}

// The values of 16 codes (codes16) with per-lane scales s (FP32; 0 for lanes past the row),
// as FP32 bits whose upper halves are the BF16 values.
inline __m512i values16(__m512i codes, __m512 s) {
  const __m512 table = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f,
                                      -1.5f, -2.f, -3.f, -4.f, -6.f);
  const __m512i v = _mm512_castps_si512(_mm512_mul_ps(_mm512_permutexvar_ps(codes, table), s));
  const __m512i a = _mm512_and_si512(v, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000));
  return _mm512_mask_and_epi32(v, tiny, v, _mm512_set1_epi32(int(0x80000000u)));
}

// Pairs (row k, row k+1) of 16 columns from their values16: lane j = row k's BF16 value in
// the low word, row k+1's in the high word.
inline __m512i pair16(__m512i vk, __m512i vk1) {
  return _mm512_ternarylogic_epi32(vk1, _mm512_srli_epi32(vk, 16), _mm512_set1_epi32(int(0xFFFF0000u)),
                                   0xE4);  // (vk1 & mask) | ((vk >> 16) & ~mask)
}

}  // namespace
}  // namespace mxtrain::gemm_detail
