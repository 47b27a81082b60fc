// gemm/mx_transpose_avx512.h — the 16x16 transpose of 32-bit lanes the AVX-512 panel kernels
// use to turn rows of BF16 pairs into pair-major panels (included by mx_gemm_avx512.cc and the
// 4-bit kernels, fp4_pack_avx512.cc and fp4_gemv_avx512.cc; internal linkage, so each keeps
// its own copy).
#pragma once

#include <immintrin.h>

namespace mxtrain::gemm_detail {
namespace {

// 16x16 transpose of 32-bit lanes: r[i] lane j -> r[j] lane i. Inlined and unrolled, so the
// sixteen vectors stay in registers.
[[gnu::always_inline]] inline void transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 16
  for (int h = 0; h < 16; h += 8)
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xDD);
    }
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
  }
}

}  // namespace
}  // namespace mxtrain::gemm_detail
