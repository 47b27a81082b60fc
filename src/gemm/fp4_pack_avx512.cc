// gemm/fp4_pack_avx512.cc — the panel kernel's packers for 4-bit operands (gemm/fp4_gemm.h),
// the PackRows, PackPairs and PackTransposed that mx_gemm_avx512.cc's panel product calls for
// fp4_gemm_avx512bf16. They write exactly the words the MX packers would for the same BF16
// values: the panel product, its blocking and its sums are the MX kernels' own.
//   fp4_pack_rows_avx512bf16       A stored [M, K] (rowwise or tile): 32 codes of a row per
//                                  step by a word table lookup (decode32_rows);
//   fp4_pack_transposed_avx512bf16 B stored [N, K] (rowwise or tile): 16 rows decoded so, then
//                                  16x16 transposed into pair-major panels;
//   fp4_pack_pairs_avx512bf16      S stored [K, cols] (colwise or tile): pairs of stored rows,
//                                  16 columns at a time in FP32 with each column's scale
//                                  (values16), the two rows' BF16 halves merged into pairs.
// Every word is the element's BF16 value as fp4_value_bf16 defines it (+0 past the matrix),
// so the products read exactly the values of the reference (fp4_gemm_panel_ref).
#if !defined(__clang__)  // GCC 12's AVX-512 intrinsics; see mx_gemm_avx512.cc
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "gemm/fp4_decode_avx512.h"
#include "gemm/fp4_gemm.h"
#include "gemm/mx_transpose_avx512.h"

namespace mxtrain::gemm_detail {

namespace {

constexpr int64_t kPanelCols = 64;  // the panel kernel's NR: columns of a B panel

// Scale bytes of stored row r of a rowwise or tile operand (one per block along the row).
inline const uint8_t* scale_row(const MXOperand& t, int64_t r) {
  return t.scales + (t.layout == MXLayout::rowwise ? r : r / t.block) * t.scale_ld;
}

// FP32 scales of columns c .. c + 15 for stored row k of an operand with blocks along its rows
// (colwise: one per column; tile: one per tile), 0 past the last column.
inline __m512 column_scales(const MXOperand& S, const Fp4Tables& t, int64_t k, int64_t c) {
  const int64_t n = std::min<int64_t>(16, S.cols - c);
  if (n <= 0) return _mm512_setzero_ps();
  const __mmask16 valid = __mmask16((1u << n) - 1u);
  if (S.layout == MXLayout::colwise) {
    const __m512i idx = _mm512_cvtepu8_epi32(
        _mm_maskz_loadu_epi8(valid, S.scales + (k / S.block) * S.scale_ld + c));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, idx, t.scale, 4);
  }
  return _mm512_maskz_mov_ps(valid, _mm512_set1_ps(t.scale[S.scale(k, c)]));  // 16 | B
}

}  // namespace

void fp4_pack_rows_avx512bf16(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0,
                              int64_t kc, uint32_t* Ap, int64_t ld) {
  const Fp4Tables& t = fp4_tables(A.nvfp4);
  const int64_t rb = A.row_bytes(), K = A.cols;
  for (int64_t m = 0; m < mc; ++m) {
    const int64_t r = r0 + m;
    const uint8_t* row = A.codes + r * rb;
    const uint8_t* srow = scale_row(A, r);
    const uint8_t* ahead = m + kPackRowsAhead < mc ? row + kPackRowsAhead * rb : nullptr;
    for (int64_t j = 0; j * 32 < kc; ++j) {
      const int64_t k = k0 + j * 32;
      if (ahead && j % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(ahead + k / 2), _MM_HINT_T0);
      const uint16_t *t0, *t1;
      row_tables(t, srow, k, K, A.block, t0, t1);
      _mm512_storeu_si512(Ap + m * ld + j * 16, decode32_rows(row, k, K - k, t0, t1));
    }
  }
}

void fp4_pack_transposed_avx512bf16(const MXOperand& B, int64_t c0, int64_t k0, int64_t kc,
                                    uint32_t* Bp) {
  const Fp4Tables& t = fp4_tables(B.nvfp4);
  const int64_t rb = B.row_bytes(), K = B.cols;
  for (int g = 0; g < kPanelCols / 16; ++g) {
    for (int64_t j = 0; j * 32 < kc; ++j) {
      const int64_t k = k0 + j * 32;
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = c0 + g * 16 + i;
        if (n >= B.rows) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const uint8_t* row = B.codes + n * rb;
        // 16 rows a row stride apart, 16 bytes each: each row's line four lines ahead is asked
        // for, as the MX transposing packer does.
        if ((j & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + 256), _MM_HINT_T0);
        const uint16_t *t0, *t1;
        row_tables(t, scale_row(B, n), k, K, B.block, t0, t1);
        r[i] = decode32_rows(row, k, K - k, t0, t1);
      }
      transpose16(r);  // r[q] = pair j * 16 + q of the 16 rows
      for (int q = 0; q < 16; ++q)
        _mm512_storeu_si512(Bp + (j * 16 + q) * kPanelCols + g * 16, r[q]);
    }
  }
}

void fp4_pack_pairs_avx512bf16(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                               int64_t kc, uint32_t* out, int64_t ld) {
  (void)nv;  // nstore <= 2 * nv groups of 16 columns are what is read
  const Fp4Tables& t = fp4_tables(S.nvfp4);
  const int64_t rb = S.row_bytes();
  __m512 sc[6];  // per 16 columns: the scales of k's block
  for (int64_t p = 0; 2 * p < kc; ++p) {
    const int64_t k = k0 + 2 * p;
    if (p == 0 || k % S.block == 0)
      for (int q = 0; q < nstore; ++q) sc[q] = column_scales(S, t, k, c0 + 16 * q);
    const bool has_b = k + 1 < S.rows;
    const uint8_t* ra = S.codes + k * rb;
    if (k + 2 * kPairsAhead + 1 < S.rows) {  // the rows kPairsAhead pairs on (see kPairsAhead)
      const uint8_t* pa = ra + 2 * kPairsAhead * rb + c0 / 2;
      _mm_prefetch(reinterpret_cast<const char*>(pa), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pa + rb), _MM_HINT_T0);
    }
    for (int q = 0; q < nstore; ++q) {
      const int64_t c = c0 + 16 * q, n = S.cols - c;
      __m512i v = _mm512_setzero_si512();
      if (n > 0) {
        const __m512i a = values16(codes16(ra + c / 2, n), sc[q]);
        const __m512i b = has_b ? values16(codes16(ra + rb + c / 2, n), sc[q])
                                : _mm512_setzero_si512();
        v = pair16(a, b);
      }
      _mm512_storeu_si512(out + p * ld + 16 * q, v);
    }
  }
}

}  // namespace mxtrain::gemm_detail
