// gemm/mx_gemm_amx.cc — the AMX-BF16 tile product of the panel kernels (mx_gemm_avx512.cc):
// the same BF16 panels, multiplied by TDPBF16PS on tiles instead of the 6x64 VDPBF16PS
// micro-kernel. Compiled with the AMX flags; run only where path amx_bf16 is enabled
// (mxtrain/isa.h: the CPU has AMX-BF16, Linux granted the tile state, AMX is on).
//
// Tiles (palette 1, every tile 16 rows x 64 bytes): tmm0-3 hold a 32x32 block of FP32 sums
// (rows 0-15 and 16-31 by columns 0-15 and 16-31 of one half of a 64-column panel), tmm4-5
// two A tiles (16 rows x 16 BF16 pairs, read from the row-of-pairs panel Ap with its row
// stride), tmm6-7 two B tiles (16 pairs x 16 columns, read from the panel Bp [kp][64] with
// its 256-byte stride: Bp is already AMX's pair layout). The sums go through a 32x64 FP32
// block in the caller's stack: loaded from C (or zero), summed over the K pairs in steps of
// 16, then stored back under the row and column masks, finished as the 4-bit products say.
//
// TDPBF16PS computes each output's pairs in K order but does not round as VDPBF16PS does
// (measured on a Xeon with AMX-BF16: about a third of the outputs of one 16x16x32 product
// differ from VDPBF16PS's in the last bits), so this path agrees with the others within the
// FP32 summation bound of docs/numerics.md ("MX products"), not byte for byte.
// GCC 12 reports the undefined-source operands inside its own AVX-512 intrinsics as
// maybe-uninitialized; they are not read.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "core/amx_tiles.h"
#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {

void amx_tiles_begin() { amx::load_tiles_16x64(); }

void amx_tiles_end() { _tile_release(); }

void amx_block(int64_t kp16, const uint32_t* a, int64_t lda, const uint32_t* b, float* C,
               int64_t ldc, int rows, int ncols, bool load, const Finish* fin) {
  alignas(64) float s[32][64];
  __mmask16 mask[4];
  for (int v = 0; v < 4; ++v) {
    const int n = std::clamp(ncols - 16 * v, 0, 16);
    mask[v] = __mmask16((1u << n) - 1);
  }
  for (int m = 0; m < 32; ++m)
    for (int v = 0; v < 4; ++v)
      _mm512_store_ps(&s[m][16 * v], load && m < rows
                                         ? _mm512_maskz_loadu_ps(mask[v], C + m * ldc + 16 * v)
                                         : _mm512_setzero_ps());
  const bool two = rows > 16;  // the second row tile holds rows of this block
  const int64_t sa = lda * int64_t(sizeof(uint32_t)), sb = 64 * int64_t(sizeof(uint32_t));
  for (int h = 0; h < 2 && 32 * h < ncols; ++h) {
    _tile_loadd(0, &s[0][32 * h], sizeof(s[0]));
    _tile_loadd(1, &s[0][32 * h + 16], sizeof(s[0]));
    if (two) {
      _tile_loadd(2, &s[16][32 * h], sizeof(s[0]));
      _tile_loadd(3, &s[16][32 * h + 16], sizeof(s[0]));
    }
    for (int64_t p = 0; p < kp16; p += 16) {
      _tile_loadd(4, a + p, sa);
      _tile_loadd(6, b + p * 64 + 32 * h, sb);
      _tile_loadd(7, b + p * 64 + 32 * h + 16, sb);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if (two) {
        _tile_loadd(5, a + 16 * lda + p, sa);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, &s[0][32 * h], sizeof(s[0]));
    _tile_stored(1, &s[0][32 * h + 16], sizeof(s[0]));
    if (two) {
      _tile_stored(2, &s[16][32 * h], sizeof(s[0]));
      _tile_stored(3, &s[16][32 * h + 16], sizeof(s[0]));
    }
  }
  constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int m = 0; m < rows; ++m)
    for (int v = 0; v < 4; ++v) {
      if (!mask[v]) continue;
      float* c = C + m * ldc + 16 * v;
      __m512 u = _mm512_load_ps(&s[m][16 * v]);
      if (fin) {
        if (fin->alpha != 1.f) u = _mm512_mul_round_ps(_mm512_set1_ps(fin->alpha), u, R);
        if (fin->add_c) u = _mm512_add_round_ps(_mm512_maskz_loadu_ps(mask[v], c), u, R);
      }
      _mm512_mask_storeu_ps(c, mask[v], u);
    }
}

}  // namespace mxtrain::gemm_detail
