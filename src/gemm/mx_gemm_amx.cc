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
// An FP32-scaled product (amx_block_promoted) sums each 128-deep K chunk from zero on the
// tiles, stores them to the stack block and promotes them into C with the chunk's scales.
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

#include "mxtrain/quantize.h"

#include "core/amx_tiles.h"
#include "gemm/mx_gemm.h"
#include "gemm/mx_promote_avx512.h"

namespace mxtrain::gemm_detail {

void amx_tiles_begin() { amx::load_tiles_16x64(); }

void amx_tiles_end() { _tile_release(); }

namespace {

// The lane masks of a block's four 16-column vectors for ncols valid columns.
void column_masks(int ncols, __mmask16 mask[4]) {
  for (int v = 0; v < 4; ++v) {
    const int n = std::clamp(ncols - 16 * v, 0, 16);
    mask[v] = __mmask16((1u << n) - 1);
  }
}

// Columns 32h .. 32h + 31 of the block s: (from_s ? s : 0) + Σ over pairs p0 .. p1 (a
// multiple of 16 apart) of a(m, p) · b(p, :) on tmm0-3, stored back to s. Rows 16 .. 31 only
// when `two`.
void tile_sums(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t p0, int64_t p1, int h,
               bool two, bool from_s, float (*s)[64]) {
  constexpr int64_t ls = 64 * sizeof(float);
  const int64_t sa = lda * int64_t(sizeof(uint32_t)), sb = 64 * int64_t(sizeof(uint32_t));
  if (from_s) {
    _tile_loadd(0, &s[0][32 * h], ls);
    _tile_loadd(1, &s[0][32 * h + 16], ls);
    if (two) {
      _tile_loadd(2, &s[16][32 * h], ls);
      _tile_loadd(3, &s[16][32 * h + 16], ls);
    }
  } else {
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
      _tile_zero(2);
      _tile_zero(3);
    }
  }
  for (int64_t p = p0; p < p1; p += 16) {
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
  _tile_stored(0, &s[0][32 * h], ls);
  _tile_stored(1, &s[0][32 * h + 16], ls);
  if (two) {
    _tile_stored(2, &s[16][32 * h], ls);
    _tile_stored(3, &s[16][32 * h + 16], ls);
  }
}

}  // namespace

void amx_block(int64_t kp16, const uint32_t* a, int64_t lda, const uint32_t* b, float* C,
               int64_t ldc, int rows, int ncols, bool load, const Finish* fin) {
  alignas(64) float s[32][64];
  __mmask16 mask[4];
  column_masks(ncols, mask);
  for (int m = 0; m < 32; ++m)
    for (int v = 0; v < 4; ++v)
      _mm512_store_ps(&s[m][16 * v], load && m < rows
                                         ? _mm512_maskz_loadu_ps(mask[v], C + m * ldc + 16 * v)
                                         : _mm512_setzero_ps());
  const bool two = rows > 16;  // the second row tile holds rows of this block
  for (int h = 0; h < 2 && 32 * h < ncols; ++h) tile_sums(a, lda, b, 0, kp16, h, two, true, s);
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

void amx_block_promoted(int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, float* C,
                        int64_t ldc, int rows, int ncols, bool load, const Promotion& pr,
                        const float* sa, const float* sb, int64_t c0) {
  constexpr int64_t kChunkPairs = kFp32ScaleBlock / 2;  // one scale chunk: 4 tile steps
  alignas(64) float s[32][64];
  __mmask16 mask[4];
  column_masks(ncols, mask);
  const bool two = rows > 16;
  for (int64_t q = 0; q * kChunkPairs < kp; ++q) {
    const int64_t p0 = q * kChunkPairs;
    const int64_t pe = std::min(kp, p0 + kChunkPairs), pe16 = p0 + (pe - p0 + 15) / 16 * 16;
    for (int h = 0; h < 2 && 32 * h < ncols; ++h) tile_sums(a, lda, b, p0, pe16, h, two, false, s);
    // C = C + fl(fl(sa · sb) · P), as micro_kernel_promoted rounds it (promote16).
    const float* sac = sa + (c0 + q) * pr.sa_ld;
    const float* sbc = sb + (c0 + q) * pr.sb_ld;
    const bool from_c = load || q > 0;
    __m512 sbv[4];
    for (int v = 0; v < 4; ++v) sbv[v] = _mm512_maskz_loadu_ps(mask[v], sbc + 16 * v);
    for (int m = 0; m < rows; ++m) {
      const __m512 sam = _mm512_set1_ps(sac[m]);
      for (int v = 0; v < 4; ++v)
        if (mask[v])
          promote16(C + m * ldc + 16 * v, mask[v], sam, sbv[v], _mm512_load_ps(&s[m][16 * v]),
                    from_c);
    }
  }
}

}  // namespace mxtrain::gemm_detail
