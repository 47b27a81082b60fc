// gemm/fp4_gemv_avx512.cc — forward products of 4-bit copies with few rows,
// y[M, N] = alpha · x[M, K] · W[N, K]^T (+ y) for M <= kGemvMaxRows (a few tokens: decoding,
// small micro-batches), reading each byte of W's codes once.
//
// With few rows the product is bound by reading W, and a 4-bit weight is a quarter of BF16's
// bytes. The kernel takes W sixteen rows at a time: per 32 codes it decodes each row by the
// word table lookup of the panel packers (decode32_rows), transposes the sixteen rows of pairs
// (transpose16) so that lane n holds row n's pair, and feeds VDPBF16PS against each x row's
// pair broadcast. So lane n of x row m's accumulator is output (m, n) summed pair after pair
// from +0 — exactly the panel kernels' order (fp4_gemm_panel_ref) — and the accumulators are
// finished (alpha, + C) lane-wise with no horizontal sum. x is decoded once into BF16 pairs.
// Threads split N in 64-row units; each output is summed by one thread.
#if !defined(__clang__)  // GCC 12's AVX-512 intrinsics; see mx_gemm_avx512.cc
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "gemm/fp4_decode_avx512.h"
#include "gemm/fp4_gemm.h"
#include "gemm/mx_transpose_avx512.h"
#include "mxtrain/aligned.h"

namespace mxtrain::gemm_detail {

namespace {

// Bytes of each W row asked for ahead of the decoder (every fourth 32-code step: one line).
constexpr int64_t kAhead = 512;

// Scale bytes of stored row r of a rowwise or tile operand.
inline const uint8_t* scale_row(const MXOperand& t, int64_t r) {
  return t.scales + (t.layout == MXLayout::rowwise ? r : r / t.block) * t.scale_ld;
}

// y rows [0, MB) and columns n0 .. n0 + 16·G (those below N) of alpha · x · W^T (+ y): xs
// holds the x rows' BF16 pairs, kp2 per row. W is taken in G groups of sixteen rows: per 32
// codes each group is decoded and transposed into wt, then every pair meets all G groups, so
// MB · G accumulators advance together (one accumulator's steps are sequential, and a
// VDPBF16PS waits for the previous one's result). kTile: each group's sixteen rows share their
// scales (a tile layout; n0 a multiple of 16), one pair of tables per 32 codes.
template <int MB, int G, bool kTile>
void gemv_block(const MXOperand& W, const Fp4Tables& t, const uint32_t* xs, int64_t kp2,
                int64_t n0, float alpha, float* C, int64_t ldc, bool accumulate) {
  const int64_t K = W.cols, rb = W.row_bytes();
  const int64_t valid = std::min<int64_t>(16 * G, W.rows - n0);
  // Rows past N read the last row again; their lanes are not stored.
  const uint8_t* rows[16 * G];
  const uint8_t* srows[16 * G];
  for (int i = 0; i < 16 * G; ++i) {
    const int64_t n = n0 + std::min<int64_t>(i, valid - 1);
    rows[i] = W.codes + n * rb;
    srows[i] = scale_row(W, n);
  }
  alignas(64) uint32_t wt[G][16][16];  // [group][pair][row]
  __m512 acc[MB][G];
#pragma GCC unroll 16
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) acc[m][g] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    for (int g = 0; g < G; ++g) {
      __m512i r[16];
      const uint16_t *t0, *t1;
      if (kTile) row_tables(t, srows[16 * g], k, K, W.block, t0, t1);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const uint8_t* row = rows[16 * g + i];
        if ((k & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + kAhead), _MM_HINT_T0);
        if (!kTile) row_tables(t, srows[16 * g + i], k, K, W.block, t0, t1);
        r[i] = decode32_rows(row, k, K - k, t0, t1);
      }
      transpose16(r);  // r[q]: lane i = pair k/2 + q of row n0 + 16g + i
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) _mm512_store_si512(wt[g][q], r[q]);
    }
    // All sixteen pairs, or the last ones only: a further +0 · +0 step would turn a -0 sum
    // into +0.
    const int np = int(std::min<int64_t>(16, (K - k + 1) / 2));
    const uint32_t* xk = xs + k / 2;
    for (int q = 0; q < np; ++q) {
      __m512i xb[MB];
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) xb[m] = _mm512_set1_epi32(int(xk[m * kp2 + q]));
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512bh w = (__m512bh)_mm512_load_si512(wt[g][q]);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) acc[m][g] = _mm512_dpbf16_ps(acc[m][g], w, (__m512bh)xb[m]);
      }
    }
  }
  constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 av = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    const int64_t n = std::clamp<int64_t>(valid - 16 * g, 0, 16);
    if (n == 0) break;
    const __mmask16 mask = __mmask16((1u << n) - 1u);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      float* c = C + m * ldc + n0 + 16 * g;
      __m512 u = alpha == 1.f ? acc[m][g] : _mm512_mul_round_ps(av, acc[m][g], R);
      if (accumulate) u = _mm512_add_round_ps(_mm512_maskz_loadu_ps(mask, c), u, R);
      _mm512_mask_storeu_ps(c, mask, u);
    }
  }
}

// Groups of sixteen W rows per block: four for up to 4 x rows, two for 5 to 8 (16
// accumulators either way).
template <int MB>
constexpr int kGroups = MB <= 4 ? 4 : 2;

template <int MB>
void gemv_rows(const MXOperand& W, const Fp4Tables& t, const uint32_t* xs, int64_t kp2,
               int64_t n0, float alpha, float* C, int64_t ldc, bool accumulate) {
  if (W.layout == MXLayout::tile)
    gemv_block<MB, kGroups<MB>, true>(W, t, xs, kp2, n0, alpha, C, ldc, accumulate);
  else
    gemv_block<MB, kGroups<MB>, false>(W, t, xs, kp2, n0, alpha, C, ldc, accumulate);
}

}  // namespace

void fp4_gemv_nt_avx512bf16(const MXOperand& X, const MXOperand& W, float alpha, float* C,
                            int64_t ldc, bool accumulate) {
  const int64_t M = X.rows, N = W.rows, K = X.cols;
  const int64_t kp2 = ceil_div(K, 32) * 16;  // pairs per x row, zero padded to 32 codes
  thread_local std::vector<uint32_t, AlignedAllocator<uint32_t>> xs;
  xs.resize(size_t(M * kp2));
  const Fp4Tables& tx = fp4_tables(X.nvfp4);
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* row = X.codes + m * X.row_bytes();
    const uint8_t* srow = scale_row(X, m);
    for (int64_t k = 0; k < K; k += 32) {
      const uint16_t *t0, *t1;
      row_tables(tx, srow, k, K, X.block, t0, t1);
      _mm512_storeu_si512(xs.data() + m * kp2 + k / 2, decode32_rows(row, k, K - k, t0, t1));
    }
  }
  const Fp4Tables& tw = fp4_tables(W.nvfp4);
  // Threads split N in units of 64 rows (every pass's block: 4 or 2 groups of 16).
  constexpr int64_t kUnit = 64;
  const int64_t units = ceil_div(N, kUnit);
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), units));
  const uint32_t* xp = xs.data();
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t n1 = std::min(N, units * (id + 1) / T * kUnit);
    for (int64_t m = 0; m < M; m += 8) {
      const int mb = int(std::min<int64_t>(8, M - m));
      const int64_t step = mb <= 4 ? 64 : 32;
      for (int64_t n0 = units * id / T * kUnit; n0 < n1; n0 += step) {
        const uint32_t* x = xp + m * kp2;
        float* c = C + m * ldc;
        switch (mb) {
          case 8: gemv_rows<8>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 7: gemv_rows<7>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 6: gemv_rows<6>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 5: gemv_rows<5>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 4: gemv_rows<4>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 3: gemv_rows<3>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          case 2: gemv_rows<2>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
          default: gemv_rows<1>(W, tw, x, kp2, n0, alpha, c, ldc, accumulate); break;
        }
      }
    }
  }
}

}  // namespace mxtrain::gemm_detail
