// gemm/mx_pairs_avx512.h — packing pairs of consecutive stored rows (k, k+1) of an MX
// operand stored [K, cols] with blocks along K (colwise or tile32) into BF16 pair panels, for
// the AVX-512 panel kernels: nn and tn's B panels and tn's A blocks (included by
// mx_gemm_avx512.cc, and by mx_pack_avx512vbmi.cc for the pieces its table decoder cannot
// fold; internal linkage, so each build keeps its own copy).
//
// pack_pairs is the general packer: each row of a pair decoded with decode32
// (gemm/mx_decode_avx512.h; the per-column multipliers fetched once per 32-row block), the two
// interleaved by a word permute. pack_pairs_avx512vbmi_bf16 (mx_pack_avx512vbmi.cc) writes the
// same words with VBMI table decoding.
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "gemm/mx_decode_avx512.h"
#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {
namespace {

// Multipliers of 16 consecutive columns c0.. of stored row r whose scales vary per column
// (colwise), or per 32 columns (tile32); columns past `cols` get multiplier 0.
inline __m512 col_multipliers(const MXOperand& t, const float* mult, int64_t r, int64_t c0) {
  const int64_t n = std::min<int64_t>(16, t.cols - c0);
  if (n <= 0) return _mm512_setzero_ps();
  const __mmask16 k = __mmask16((1u << n) - 1);
  if (t.layout == MXLayout::colwise) {
    const uint8_t* s = t.scales + (r / kMXBlock) * t.scale_ld + c0;
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, s));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, mult, 4);
  }
  return _mm512_maskz_mov_ps(k, _mm512_set1_ps(mult[t.scale(r, c0)]));  // tile32: 16 | 32
}

// Interleaves two rows of 32 BF16 (a = row k, b = row k+1) into 32 pairs: lo gets columns
// 0-15, hi 16-31.
inline void interleave(__m512i a, __m512i b, __m512i& lo, __m512i& hi) {
  alignas(64) static const uint16_t ilo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                               8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t ihi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                               24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  lo = _mm512_permutex2var_epi16(a, _mm512_load_si512(ilo), b);
  hi = _mm512_permutex2var_epi16(a, _mm512_load_si512(ihi), b);
}

// Multipliers of columns c0 .. c0 + 32·nv at stored row k of a matrix stored [K, cols] with
// blocks along K (colwise/tile32): m[q] (q < 2·nv) for columns c0 + 16q... They hold for all
// 32 rows of k's block, so the packers fetch them once per block, not per row pair.
inline void block_multipliers(const MXOperand& S, int64_t k, int64_t c0, int nv, __m512* m) {
  const float* mult = multipliers(S.elem).v;
  for (int q = 0; q < 2 * nv; ++q) m[q] = col_multipliers(S, mult, k, c0 + 16 * q);
}

// Pairs of stored rows k, k+1 (k even, k < K) over columns c0 .. c0 + 32·nv of a matrix stored
// [K, cols] with blocks along K (colwise/tile32), with m from block_multipliers for k's
// block: out[q] (q < 2·nv) = 16 pairs, columns c0 + 16q... Columns past `cols` and a row
// k+1 = K are zero.
inline void row_pairs(const MXOperand& S, int64_t k, int64_t c0, int nv, const __m512* m,
                      __m512i* out) {
  const bool e4m3 = S.elem == Elem::e4m3, has_b = k + 1 < S.rows;
  const uint8_t* ra = S.codes + k * S.cols;
  for (int v = 0; v < nv; ++v) {
    const int64_t c = c0 + 32 * v;
    if (c >= S.cols) {
      out[2 * v] = out[2 * v + 1] = _mm512_setzero_si512();
      continue;
    }
    const __m512 m_lo = m[2 * v], m_hi = m[2 * v + 1];
    const __m512i a = decode32(load_codes(ra + c, S.cols - c), m_lo, m_hi, e4m3);
    const __m512i b = has_b ? decode32(load_codes(ra + S.cols + c, S.cols - c), m_lo, m_hi, e4m3)
                            : _mm512_setzero_si512();
    interleave(a, b, out[2 * v], out[2 * v + 1]);
  }
}


// The general pair packer (PackPairs, gemm/mx_gemm.h): out[p * ld + 16j] for j < nstore =
// pairs of stored rows k0 + 2p, k0 + 2p + 1 over columns c0 + 16j .. c0 + 16j + 15.
inline void pack_pairs(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                       int64_t kc, uint32_t* out, int64_t ld) {
  __m512i v[6];  // nv <= 3
  __m512 m[6];
  for (int64_t p = 0; 2 * p < kc; ++p) {
    const int64_t k = k0 + 2 * p;
    if (p == 0 || k % kMXBlock == 0) block_multipliers(S, k, c0, nv, m);
    row_pairs(S, k, c0, nv, m, v);
    for (int j = 0; j < nstore; ++j) _mm512_storeu_si512(out + p * ld + 16 * j, v[j]);
  }
}

}  // namespace
}  // namespace mxtrain::gemm_detail
