// gemm/mx_gemv_avx512vbmi.cc — forward products with few rows, y[M, N] = x[M, K] · W[N, K]^T
// for small M (a few tokens: decoding, small micro-batches), streaming W's FP8 codes once.
//
// With few rows the product is bound by reading W, so FP8 (one byte per element) is where MX
// pays: the kernel reads each W row once, decodes 64 codes at a time in registers and feeds
// VDPBF16PS dot products against x, which is decoded once into BF16 (scale folded in, flushed
// like every MX path, docs/numerics.md "MX products"). Accumulators hold 16 FP32 partial sums
// per (row of x, row of W); each is reduced once at the end. Threads split N; every output is
// summed by one thread in a fixed order.
//
// W is decoded 64 codes at a time by VBMI table lookup (gemm/mx_decode_vbmi.h), in the lane
// order of the unpack; x is stored in the same order, so the products pair up. A 64-code piece
// the table path cannot fold exactly takes the general decoder (mx_decode_avx512.h) and is
// reordered to match.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 AVX-512 intrinsics; see mx_gemm_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"       // the same, inside _mm512_reduce_add_ps
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "gemm/mx_decode_avx512.h"
#include "gemm/mx_decode_vbmi.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/aligned.h"

namespace mxtrain::gemm_detail {
namespace {

// Natural order (a = codes 0-31, b = 32-63) -> the unpack order of gemm/mx_decode_vbmi.h.
inline void to_unpack_order(__m512i a, __m512i b, __m512i& lo, __m512i& hi) {
  alignas(64) static const uint16_t ilo[32] = {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18,
                                               19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
                                               38, 39, 48, 49, 50, 51, 52, 53, 54, 55};
  alignas(64) static const uint16_t ihi[32] = {8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26,
                                               27, 28, 29, 30, 31, 40, 41, 42, 43, 44, 45,
                                               46, 47, 56, 57, 58, 59, 60, 61, 62, 63};
  lo = _mm512_permutex2var_epi16(a, _mm512_load_si512(ilo), b);
  hi = _mm512_permutex2var_epi16(a, _mm512_load_si512(ihi), b);
}

// The general decoder for a 64-code piece the table path cannot fold exactly, in unpack order.
__attribute__((always_inline)) inline void decode64_general(const uint8_t* p, int64_t n,
                                                           uint8_t s0,
                                                uint8_t s1, Elem e, __m512i& lo, __m512i& hi) {
  const float* mult = multipliers(e).v;
  const bool e4m3 = e == Elem::e4m3;
  const __m512 f0 = _mm512_set1_ps(mult[s0]), f1 = _mm512_set1_ps(mult[s1]);
  const __m512i a = decode32(load_codes(p, n), f0, f0, e4m3);
  const __m512i b = decode32(load_codes(p + 32, n - 32), f1, f1, e4m3);
  to_unpack_order(a, b, lo, hi);
}

// x rows [M, Kp] in unpack order, scale folded in (Kp = K rounded up to 64, zero padded).
void prepare_x(const MXOperand& x, int64_t Kp, uint16_t* xs) {
  const float* mult = multipliers(x.elem).v;
  const bool e4m3 = x.elem == Elem::e4m3;
  for (int64_t m = 0; m < x.rows; ++m)
    for (int64_t k = 0; k < Kp; k += 64) {
      uint8_t s0 = 0, s1 = 0;
      if (k < x.cols) piece_scales(scale_row(x, m), k, x.cols, s0, s1);
      const uint8_t* p = x.codes + m * x.cols + k;
      const int64_t n = x.cols - k;
      const __m512 f0 = _mm512_set1_ps(mult[s0]), f1 = _mm512_set1_ps(mult[s1]);
      const __m512i a = decode32(load_codes(p, n), f0, f0, e4m3);
      const __m512i b = decode32(load_codes(p + 32, n - 32), f1, f1, e4m3);
      __m512i lo, hi;
      to_unpack_order(a, b, lo, hi);
      _mm512_storeu_si512(xs + m * Kp + k, lo);
      _mm512_storeu_si512(xs + m * Kp + k + 32, hi);
    }
}

// Bytes of each W row requested ahead of the decoder. The NBV rows of a tile are NBV streams
// 4 KiB or more apart, which the hardware prefetcher alone leaves the kernel waiting on: three
// cache lines ahead took `bench gemm` m = 4, K = N = 4096 from 0.61-0.65x to 0.55-0.65x of
// BF16 on Zen 5, and 128 to 320 bytes all did about as well (docs/results/gemm.md, "Streaming
// forward: prefetch"). A prefetch past the end of a row touches the next row of W, or at most
// 192 bytes past W (a prefetch never faults).
constexpr int64_t kPrefetchAhead = 192;

// C[MB rows, NBV cols at n0] = (load ? C : 0) + x[MB] · W[n0 .. n0 + NBV)^T, every W piece
// through `Decode` (the table path, or the general decoder when `general`).
template <int MB, int NBV, bool general>
bool gemv_tile_pass(const MXOperand& W, const uint16_t* xs, int64_t Kp, int64_t n0,
                    const Tables& t, float* C, int64_t ldc, bool load) {
  __m512 acc[MB][NBV];
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NBV; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t K = W.cols;
  const uint8_t* srow[NBV];
  const uint8_t* wrow[NBV];
#pragma GCC unroll 8
  for (int j = 0; j < NBV; ++j) {
    srow[j] = scale_row(W, n0 + j);
    wrow[j] = W.codes + (n0 + j) * K;
  }
  bool bad = false;
  for (int64_t k = 0; k < Kp; k += 64) {
    // One W row at a time: its 64 decoded values meet every x row, so only the accumulators
    // and two vectors of W stay live (x is re-read from L1).
#pragma GCC unroll 8
    for (int j = 0; j < NBV; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(wrow[j] + k + kPrefetchAhead), _MM_HINT_T0);
      uint8_t s0, s1;
      piece_scales(srow[j], k, K, s0, s1);
      __m512i wl, wh;
      if (general)
        decode64_general(wrow[j] + k, K - k, s0, s1, W.elem, wl, wh);
      else
        bad |= decode64(wrow[j] + k, K - k, s0, s1, t, wl, wh);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const __m512bh xl = (__m512bh)_mm512_loadu_si512(xs + m * Kp + k);
        const __m512bh xh = (__m512bh)_mm512_loadu_si512(xs + m * Kp + k + 32);
        acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xl, (__m512bh)wl);
        acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xh, (__m512bh)wh);
      }
    }
  }
  if (bad) return false;  // nothing written; the caller redoes the tile
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NBV; ++j) {
      float& c = C[m * ldc + n0 + j];
      c = (load ? c : 0.f) + _mm512_reduce_add_ps(acc[m][j]);
    }
  return true;
}

template <int MB, int NBV>
void gemv_tile(const MXOperand& W, const uint16_t* xs, int64_t Kp, int64_t n0, const Tables& t,
               float* C, int64_t ldc, bool load) {
  if (!gemv_tile_pass<MB, NBV, false>(W, xs, Kp, n0, t, C, ldc, load))
    gemv_tile_pass<MB, NBV, true>(W, xs, Kp, n0, t, C, ldc, load);
}

// Rows of x in passes of up to 8: up to 4 rows meet 4 rows of W at a time, 5 to 8 rows meet
// 2 (16 accumulators either way); W is decoded once per pass.
template <int MB>
void gemv_rows(const MXOperand& W, const uint16_t* xs, int64_t Kp, int64_t n0, int64_t n1,
               const Tables& t, float* C, int64_t ldc, bool load) {
  constexpr int nb = MB <= 4 ? 4 : 2;
  int64_t n = n0;
  for (; n + nb <= n1; n += nb) gemv_tile<MB, nb>(W, xs, Kp, n, t, C, ldc, load);
  for (; n < n1; ++n) gemv_tile<MB, 1>(W, xs, Kp, n, t, C, ldc, load);
}

}  // namespace

void mx_gemv_nt_avx512vbmi_bf16(const MXOperand& X, const MXOperand& W, float* C, int64_t ldc,
                                bool accumulate) {
  const int64_t M = X.rows, N = W.rows, K = X.cols;
  const int64_t Kp = ceil_div(K, 64) * 64;
  thread_local std::vector<uint16_t, AlignedAllocator<uint16_t>> xs;
  xs.resize(size_t(M * Kp));
  prepare_x(X, Kp, xs.data());
  const Tables& t = tables(W.elem);
  constexpr int64_t NB = 4;  // threads split N in multiples of this
  const int64_t units = ceil_div(N, NB);
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), units));
  const uint16_t* xp = xs.data();
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t n0 = std::min(N, units * id / T * NB);
    const int64_t n1 = std::min(N, units * (id + 1) / T * NB);
    for (int64_t m = 0; m < M; m += 8) {
      const uint16_t* x = xp + m * Kp;
      float* c = C + m * ldc;
      switch (std::min<int64_t>(8, M - m)) {
        case 8: gemv_rows<8>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 7: gemv_rows<7>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 6: gemv_rows<6>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 5: gemv_rows<5>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 4: gemv_rows<4>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 3: gemv_rows<3>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        case 2: gemv_rows<2>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
        default: gemv_rows<1>(W, x, Kp, n0, n1, t, c, ldc, accumulate); break;
      }
    }
  }
}

}  // namespace mxtrain::gemm_detail
