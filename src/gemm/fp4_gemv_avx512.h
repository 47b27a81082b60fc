// gemm/fp4_gemv_avx512.h — forward products of 4-bit copies with few rows,
// y[M, N] = alpha · x[M, K] · W[N, K]^T (+ y) for M <= kGemvMaxRows (a few tokens: decoding,
// small micro-batches), reading each byte of W's codes once. Included by fp4_gemv_avx512.cc
// (AVX512-BF16) and fp4_gemv_avx512vbmi.cc (the same, with VBMI byte permutes); internal
// linkage, so each keeps its own copy.
//
// With few rows the product is bound by reading W, and a 4-bit weight is a quarter of BF16's
// bytes. The kernel takes W sixteen rows at a time and, per 32 codes, forms for every pair q
// of the step a vector whose lane n holds row n's pair, fed to VDPBF16PS against each x row's
// pair broadcast. So lane n of x row m's accumulator is output (m, n) summed pair after pair
// from +0 — exactly the panel kernels' order (fp4_gemm_panel_ref) — and the accumulators are
// finished (alpha, + C) lane-wise with no horizontal sum. x is decoded once into BF16 pairs.
// Two ways to form the pair vectors, with the same values:
//   words — each row decoded by the word table lookup of the panel packers (decode32_rows),
//           then the sixteen rows of pairs transposed (transpose16); any layout, any step;
//   bytes (VBMI, 16x16 tiles: the sixteen rows share their scales) — the sixteen rows' code
//           bytes transposed first (a byte holds one pair; eight two-source byte permutes)
//           and split into nibbles, then each pair vector looked up in the tile's table by one
//           masked byte permute (the word indices) and one word permute: about half the
//           shuffles. Whole 32-code steps only; a ragged last step takes the words way.
// Threads split N in 64-row units; each output is summed by one thread.
#pragma once
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

#if defined(__AVX512VBMI__)
// The bytes way, 1: the code bytes of a whole 32-code step of sixteen rows (16 bytes each),
// transposed and split into nibbles: nib[j][0] byte 16q' + i = pair 4j + q''s low code of
// rows[i], nib[j][1] its high code (j, q' < 4).
[[gnu::always_inline]] inline void transpose_nibbles(const uint8_t* const* rows, int64_t k,
                                                     uint8_t (*nib)[2][64]) {
  __m512i z[4];  // z[j]: rows 4j .. 4j + 3, 16 bytes each
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const auto row = [&](int i) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 * j + i] + k / 2));
    };
    z[j] = _mm512_castsi128_si512(row(0));
    z[j] = _mm512_inserti32x4(z[j], row(1), 1);
    z[j] = _mm512_inserti32x4(z[j], row(2), 2);
    z[j] = _mm512_inserti32x4(z[j], row(3), 3);
  }
  // Step 1, eight rows at a time: lo[8p + r] = pair p of row r (p < 8), hi the same for pairs
  // 8 .. 15. Step 2: T_j[16q' + i] = pair 4j + q' of row i, from the two halves of the rows.
  alignas(64) static constexpr auto idx = [] {
    struct {
      uint8_t lo[64], hi[64], a[64], b[64];
    } x{};
    for (int p = 0; p < 8; ++p)
      for (int r = 0; r < 8; ++r) {
        const int at = (r < 4 ? 16 * r : 64 + 16 * (r - 4)) + p;
        x.lo[8 * p + r] = uint8_t(at);
        x.hi[8 * p + r] = uint8_t(at + 8);
      }
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 16; ++i) {
        const int at = i < 8 ? i : 64 + i - 8;
        x.a[16 * q + i] = uint8_t(8 * q + at);
        x.b[16 * q + i] = uint8_t(8 * (q + 4) + at);
      }
    return x;
  }();
  const __m512i lo = _mm512_load_si512(idx.lo), hi = _mm512_load_si512(idx.hi);
  const __m512i ia = _mm512_load_si512(idx.a), ib = _mm512_load_si512(idx.b);
  const __m512i a0 = _mm512_permutex2var_epi8(z[0], lo, z[1]);  // rows 0-7, pairs 0-7
  const __m512i b0 = _mm512_permutex2var_epi8(z[0], hi, z[1]);  // rows 0-7, pairs 8-15
  const __m512i a1 = _mm512_permutex2var_epi8(z[2], lo, z[3]);  // rows 8-15, pairs 0-7
  const __m512i b1 = _mm512_permutex2var_epi8(z[2], hi, z[3]);  // rows 8-15, pairs 8-15
  const __m512i t[4] = {_mm512_permutex2var_epi8(a0, ia, a1), _mm512_permutex2var_epi8(a0, ib, a1),
                        _mm512_permutex2var_epi8(b0, ia, b1), _mm512_permutex2var_epi8(b0, ib, b1)};
  const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm512_store_si512(nib[j][0], _mm512_and_si512(t[j], m4));
    _mm512_store_si512(nib[j][1], _mm512_and_si512(_mm512_srli_epi16(t[j], 4), m4));
  }
}

// The bytes way, 2: pair vector q' of one nibble pair (lo, hi) of transpose_nibbles, by the
// 16-word table `table` (the tile's block of that pair): lane i = the BF16 values of row i's
// two codes, low code first. One masked byte permute forms the word indices (low code in
// word 0, high code in word 1), one word permute looks them up.
[[gnu::always_inline]] inline __m512i pairs_of_nibbles(int qq, __m512i lo, __m512i hi,
                                                       __m512i table) {
  alignas(64) static constexpr auto idx = [] {
    struct {
      uint8_t e[4][64];
    } x{};
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 16; ++i) {
        x.e[q][4 * i] = uint8_t(16 * q + i);
        x.e[q][4 * i + 2] = uint8_t(64 + 16 * q + i);
      }
    return x;
  }();
  const __m512i w = _mm512_maskz_permutex2var_epi8(0x5555555555555555ull, lo,
                                                   _mm512_load_si512(idx.e[qq]), hi);
  return _mm512_permutexvar_epi16(w, table);
}
#endif

// An x row's pair broadcast to every lane. With several groups (G > 1) the pair vectors are
// made once per step and kept (x_pair); with one group, which is when there are the most
// accumulators (nine to sixteen x rows), each product reads its pair from memory as it goes
// (x_operand: a broadcast memory operand), so the sixteen accumulators keep the registers.
template <int G>
[[gnu::always_inline]] inline __m512i x_pair(const uint32_t* xk, int64_t at) {
  if constexpr (G > 1) return _mm512_set1_epi32(int(xk[at]));
  return _mm512_setzero_si512();
}
template <int G>
[[gnu::always_inline]] inline __m512i x_operand(__m512i kept, const uint32_t* xk, int64_t at) {
  if constexpr (G > 1) return kept;
  return _mm512_set1_epi32(int(xk[at]));
}

// y rows [0, MB) and columns n0 .. n0 + 16·G (those below N) of alpha · x · W^T (+ y): xs
// holds the x rows' BF16 pairs, pair-major (xs[p · MB + m]). W is taken in G groups of sixteen
// rows, and every pair meets all G groups, so MB · G accumulators advance together (one
// accumulator's steps are sequential, and a VDPBF16PS waits for the previous one's result).
// kTile: each group's sixteen rows share their scales (a tile layout; n0 a multiple of 16), one
// pair of tables per 32 codes. kBytes: the bytes way for whole steps of a tile layout.
template <int MB, int G, bool kTile, bool kBytes>
void gemv_block(const MXOperand& W, const Fp4Tables& t, const uint32_t* xs, int64_t n0,
                float alpha, float* C, int64_t ldc, bool accumulate) {
  static_assert(!kBytes || kTile, "the bytes way needs the sixteen rows' shared scales");
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
  __m512 acc[MB][G];
#pragma GCC unroll 16
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) acc[m][g] = _mm512_setzero_ps();
  alignas(64) uint32_t wt[G][16][16];  // the words way: [group][pair][row]
  for (int64_t k = 0; k < K; k += 32) {
    const uint32_t* xk = xs + (k / 2) * MB;
#if defined(__AVX512VBMI__)
    if (kBytes && K - k >= 32) {
      alignas(64) uint8_t nib[G][4][2][64];
      __m512i t0[G], t1[G];  // the group's tables: codes k .. k + 15, k + 16 .. k + 31
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        if ((k & 127) == 0)
          for (int i = 0; i < 16; ++i)
            _mm_prefetch(reinterpret_cast<const char*>(rows[16 * g + i] + k / 2 + kAhead),
                         _MM_HINT_T0);
        transpose_nibbles(rows + 16 * g, k, nib[g]);
        // With more than 4 x rows the nibbles are read back from memory as operands: kept in
        // registers they would push the accumulators out to the stack. With at most 4 (8
        // accumulators) there is room, and keeping them measured 10% faster.
        if constexpr (MB > 4) asm volatile("" : : "r"(nib) : "memory");
        const uint8_t* sc = srows[16 * g] + k / 16;  // 16x16 tiles (gemv_rows)
        const auto table = [&](uint8_t scale) {
          return _mm512_castsi256_si512(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(t.bf16[scale])));
        };
        t0[g] = table(sc[0]);
        t1[g] = table(sc[1]);
      }
      // Each pair against all groups. The words way below writes the same loop out again: a
      // version sharing it through a lambda (and the words decode through a helper) made
      // MXFP4's rowwise forward 10-25% slower.
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        __m512i xb[MB];
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) xb[m] = x_pair<G>(xk, q * MB + m);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          const __m512bh w = (__m512bh)pairs_of_nibbles(
              q % 4, _mm512_load_si512(nib[g][q / 4][0]), _mm512_load_si512(nib[g][q / 4][1]),
              q < 8 ? t0[g] : t1[g]);
#pragma GCC unroll 16
          for (int m = 0; m < MB; ++m)
            acc[m][g] =
                _mm512_dpbf16_ps(acc[m][g], w, (__m512bh)x_operand<G>(xb[m], xk, q * MB + m));
        }
      }
      continue;
    }
#endif
    // The words way: each row decoded (its own tables, or the group's when kTile), then the
    // sixteen rows of pairs transposed.
    for (int g = 0; g < G; ++g) {
      __m512i r[16];
      const uint16_t *t0, *t1;
      if (kTile) row_tables(t, srows[16 * g], k, K, W.block, t0, t1);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const uint8_t* row = rows[16 * g + i];
        if ((k & 127) == 0)
          _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + kAhead), _MM_HINT_T0);
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
    for (int q = 0; q < np; ++q) {
      __m512i xb[MB];
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) xb[m] = x_pair<G>(xk, q * MB + m);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512bh w = (__m512bh)_mm512_load_si512(wt[g][q]);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m)
          acc[m][g] = _mm512_dpbf16_ps(acc[m][g], w, (__m512bh)x_operand<G>(xb[m], xk, q * MB + m));
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

// Groups of sixteen W rows per block: two for up to 8 x rows, one for 9 to 16 (at most 16
// accumulators), so that every x row meets each W byte in one pass. (Four groups for up to 4
// x rows, which keeps more products in flight, measured 10-20% slower: the decode, not the
// products, bounds those.)
template <int MB>
constexpr int kGroups = MB <= 8 ? 2 : 1;

template <int MB, bool kBytes>
void gemv_rows(const MXOperand& W, const Fp4Tables& t, const uint32_t* xs, int64_t n0,
               float alpha, float* C, int64_t ldc, bool accumulate) {
  if (W.layout == MXLayout::tile && W.block == 16)  // NVFP4's 16x16 weights
    gemv_block<MB, kGroups<MB>, true, kBytes>(W, t, xs, n0, alpha, C, ldc, accumulate);
  else if (W.layout == MXLayout::tile)
    gemv_block<MB, kGroups<MB>, true, false>(W, t, xs, n0, alpha, C, ldc, accumulate);
  else
    gemv_block<MB, kGroups<MB>, false, false>(W, t, xs, n0, alpha, C, ldc, accumulate);
}

// The product (fp4_gemm.h, fp4_gemv_nt_avx512bf16), the bytes way where kBytes allows.
template <bool kBytes>
void fp4_gemv_nt(const MXOperand& X, const MXOperand& W, float alpha, float* C, int64_t ldc,
                 bool accumulate) {
  const int64_t M = X.rows, N = W.rows, K = X.cols;
  MXT_CHECK(M >= 1 && M <= kGemvMaxRows, "internal: fp4_gemv_nt streams 1 to ", kGemvMaxRows,
            " rows, got ", M);
  // x's BF16 pairs, pair-major: xs[p · M + m] = pair p of row m (zero padded to 32 codes), so
  // a step's M pairs are M words at fixed offsets from one pointer.
  const int64_t kp2 = ceil_div(K, 32) * 16;
  thread_local std::vector<uint32_t, AlignedAllocator<uint32_t>> xs;
  xs.resize(size_t(M * kp2));
  const Fp4Tables& tx = fp4_tables(X.nvfp4);
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* row = X.codes + m * X.row_bytes();
    const uint8_t* srow = scale_row(X, m);
    for (int64_t k = 0; k < K; k += 32) {
      const uint16_t *t0, *t1;
      row_tables(tx, srow, k, K, X.block, t0, t1);
      alignas(64) uint32_t pairs[16];
      _mm512_store_si512(pairs, decode32_rows(row, k, K - k, t0, t1));
      for (int64_t q = 0; q < 16; ++q) xs[size_t((k / 2 + q) * M + m)] = pairs[q];
    }
  }
  const Fp4Tables& tw = fp4_tables(W.nvfp4);
  // Threads split N in units of 64 rows (every block: 2 or 1 group of 16).
  constexpr int64_t kUnit = 64;
  const int64_t units = ceil_div(N, kUnit);
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), units));
  const uint32_t* xp = xs.data();
  const int64_t step = 16 * (M <= 8 ? 2 : 1);
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t n1 = std::min(N, units * (id + 1) / T * kUnit);
    for (int64_t n0 = units * id / T * kUnit; n0 < n1; n0 += step) {
      switch (M) {
        case 16: gemv_rows<16, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 15: gemv_rows<15, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 14: gemv_rows<14, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 13: gemv_rows<13, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 12: gemv_rows<12, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 11: gemv_rows<11, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 10: gemv_rows<10, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 9: gemv_rows<9, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 8: gemv_rows<8, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 7: gemv_rows<7, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 6: gemv_rows<6, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 5: gemv_rows<5, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 4: gemv_rows<4, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 3: gemv_rows<3, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        case 2: gemv_rows<2, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
        default: gemv_rows<1, kBytes>(W, tw, xp, n0, alpha, C, ldc, accumulate); break;
      }
    }
  }
}

}  // namespace
}  // namespace mxtrain::gemm_detail
