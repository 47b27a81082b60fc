// core/quantize_block_avx512.cc — AVX-512 kernels of FP32-scaled block quantization
// (1x128 rowwise, 128x1 colwise, 128x128 tiles, rowwise + colwise from one read; and the amax
// and cast of one scale for the whole tensor, 16 lanes a step), compiled
// with the AVX-512 flags; byte-identical to quantize_block_ref.cc.
//
// Rowwise runs row by row: each 1x128 block is read once for its amax and again from L1 for
// its codes. Colwise, tile and dual walk the region in 128x128 pieces (partial at the edges;
// lanes past the edge are masked off; the next piece is prefetched): a first pass over the
// piece keeps the 16-lane amax vectors of its columns (and each row's amax), the scales follow
// from block_scale — the scalar rule of quantize_block_kernels.h, so every path agrees — and
// a second pass over the piece (from L2) writes the codes. Elements: fl32(x * scale) (one
// IEEE multiply, as in the reference), encoded by simd_avx512.h's encode (RNE + satfinite,
// which also takes +-Inf to +-max); NaN lanes then get the NaN code with the input's sign.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/quantize_block_kernels.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern::avx512 {
namespace {

constexpr int64_t B = kFp32Block;
constexpr int kVecs = int(B / 16);  // 16-lane vectors across a 128-wide piece

enum class BMode { rowwise, colwise, tile, dual };

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// |x| bits per lane with NaN lanes as 0 (the NaN-ignoring amax).
inline __m512i amax_lanes(__m512i u) {
  const __m512i a = abs_bits(u);
  return _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a, set1(0x7F800000u)), a);
}

// Stores a vector's 16 codes; a full vector without a mask (the masked byte-narrowing store
// is several times slower).
inline void put16(uint8_t* p, __m512i k, __mmask16 m) {
  if (m == 0xFFFF)
    store_codes(p, k);
  else
    store_codes(p, k, m);
}

// Codes of one vector: sat(fl32(x * s)); NaN -> sign | NaN code.
template <Elem E>
inline __m512i codes(__m512i u, __m512 s) {
  const __m512 y = _mm512_mul_ps(_mm512_castsi512_ps(u), s);
  const __m512i k = encode<E>(y);
  const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
  const __m512i nk =
      _mm512_or_si512(_mm512_and_si512(sign_byte(_mm512_castps_si512(y)), set1(0x80)),
                      set1(Fp8<E>::nan));
  return _mm512_mask_mov_epi32(k, nan, nk);
}

// Rowwise: row by row (sequential reads the hardware prefetcher follows), each 1x128 block
// read once for its amax and again from L1 for its codes.
template <class T, Elem E>
void rows(const T* x, const BParams& p, Region g, BOut row) {
  const float maxe = elem_info(E).max_value;
  const int64_t K = p.K;
  for (int64_t r = g.r0; r < g.r1; ++r)
    for (int64_t cb = g.c0; cb < g.c1; cb += B) {
      const int64_t nc = imin(B, K - cb);
      const int nv = int((nc + 15) / 16);
      const T* xr = x + r * K + cb;
      __m512i rm = _mm512_setzero_si512();
      for (int v = 0; v < nv; ++v)
        rm = _mm512_max_epu32(rm, amax_lanes(load_bits(xr + 16 * v, lanes(nc - 16 * v))));
      const float s = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(rm))), maxe,
                                  p.amax_epsilon, p.pow2);
      row.scale_inv[r * row.ld + cb / B] = 1.f / s;
      const __m512 sv = _mm512_set1_ps(s);
      uint8_t* d = row.data + r * K + cb;
      for (int v = 0; v < nv; ++v) {
        const __mmask16 m = lanes(nc - 16 * v);
        put16(d + 16 * v, codes<E>(load_bits(xr + 16 * v, m), sv), m);
      }
    }
}

// Prefetches the next piece's part of a row (the rows of a piece lie a page or more apart,
// which the hardware prefetcher does not follow).
template <class T>
inline void prefetch_next(const T* xr, int64_t cb, int64_t K) {
  if (cb + B >= K) return;
  const char* p = reinterpret_cast<const char*>(xr + B);
  const int64_t bytes = imin(B, K - cb - B) * int64_t(sizeof(T));
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// Colwise, tile, dual: 128x128 pieces, two passes each (see the file comment).
template <class T, Elem E, BMode MODE>
void walk(const T* x, const BParams& p, Region g, BOut row, BOut col) {
  static_assert(MODE != BMode::rowwise, "rowwise runs rows()");
  constexpr bool kRow = MODE == BMode::dual;
  constexpr bool kCol = MODE == BMode::colwise || MODE == BMode::dual;
  constexpr bool kTile = MODE == BMode::tile;
  const float maxe = elem_info(E).max_value;
  const int64_t K = p.K;
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = imin(B, p.M - rb);
    for (int64_t cb = g.c0; cb < g.c1; cb += B) {
      const int64_t nc = imin(B, K - cb);
      const int nv = int((nc + 15) / 16);
      __mmask16 m[kVecs];
      for (int v = 0; v < kVecs; ++v) m[v] = lanes(nc - 16 * v);
      __m512i cmax[kVecs];
      for (int v = 0; v < kVecs; ++v) cmax[v] = _mm512_setzero_si512();
      alignas(64) float rs[B];
      // Pass 1: amaxes.
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (rb + i) * K + cb;
        prefetch_next(xr, cb, K);
        __m512i rm = _mm512_setzero_si512();
        for (int v = 0; v < nv; ++v) {
          const __m512i a = amax_lanes(load_bits(xr + 16 * v, m[v]));
          if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
          if constexpr (kCol || kTile) cmax[v] = _mm512_max_epu32(cmax[v], a);
        }
        if constexpr (kRow) {
          const float s = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(rm))), maxe,
                                      p.amax_epsilon, p.pow2);
          row.scale_inv[(rb + i) * row.ld + cb / B] = 1.f / s;
          rs[i] = s;
        }
      }
      // Scales of the piece's columns (colwise, dual) or of the tile.
      __m512 cs[kVecs];
      float ts = 1.f;
      if constexpr (kCol) {
        for (int v = 0; v < nv; ++v) {
          alignas(64) uint32_t ab[16];
          alignas(64) float sv[16];
          _mm512_store_si512(ab, cmax[v]);
          const int n = int(imin(16, nc - 16 * v));
          for (int l = 0; l < 16; ++l) {
            sv[l] = block_scale(bits_f32(ab[l]), maxe, p.amax_epsilon, p.pow2);
            if (l < n) col.scale_inv[(rb / B) * col.ld + cb + 16 * v + l] = 1.f / sv[l];
          }
          cs[v] = _mm512_load_ps(sv);
        }
      }
      if constexpr (kTile) {
        __m512i t = cmax[0];
        for (int v = 1; v < nv; ++v) t = _mm512_max_epu32(t, cmax[v]);
        ts = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(t))), maxe, p.amax_epsilon,
                         p.pow2);
        row.scale_inv[(rb / B) * row.ld + cb / B] = 1.f / ts;
      }
      // Pass 2: the codes.
      const __m512 tsv = _mm512_set1_ps(ts);
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (rb + i) * K + cb;
        const int64_t o = (rb + i) * K + cb;
        const __m512 rsv = _mm512_set1_ps(kRow ? rs[i] : 1.f);
        for (int v = 0; v < nv; ++v) {
          const __m512i u = load_bits(xr + 16 * v, m[v]);
          if constexpr (kRow) put16(row.data + o + 16 * v, codes<E>(u, rsv), m[v]);
          if constexpr (kCol) put16(col.data + o + 16 * v, codes<E>(u, cs[v]), m[v]);
          if constexpr (kTile) put16(row.data + o + 16 * v, codes<E>(u, tsv), m[v]);
        }
      }
    }
  }
}

template <class T, BMode MODE>
void walk_any(const T* x, const BParams& p, Region g, BOut a, BOut b) {
  if constexpr (MODE == BMode::rowwise) {
    if (p.elem == Elem::e4m3)
      rows<T, Elem::e4m3>(x, p, g, a);
    else
      rows<T, Elem::e5m2>(x, p, g, a);
  } else if (p.elem == Elem::e4m3) {
    walk<T, Elem::e4m3, MODE>(x, p, g, a, b);
  } else {
    walk<T, Elem::e5m2, MODE>(x, p, g, a, b);
  }
}

// One scale for the whole tensor: n contiguous elements, 16 lanes a step.
template <class T>
uint32_t tensor_amax(const T* x, int64_t n) {
  __m512i m = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 16)
    m = _mm512_max_epu32(m, amax_lanes(load_bits(x + i, lanes(n - i))));
  return uint32_t(_mm512_reduce_max_epu32(m));
}

template <class T, Elem E>
void tensor_cast_e(const T* x, int64_t n, float s, uint8_t* d) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    put16(d + i, codes<E>(load_bits(x + i, m), sv), m);
  }
}

template <class T>
void tensor_cast(const T* x, int64_t n, Elem e, float s, uint8_t* d) {
  if (e == Elem::e4m3)
    tensor_cast_e<T, Elem::e4m3>(x, n, s, d);
  else
    tensor_cast_e<T, Elem::e5m2>(x, n, s, d);
}

}  // namespace
}  // namespace mxtrain::kern::avx512

namespace mxtrain::kern {

using avx512::BMode;
using avx512::walk_any;

void quantize_b128_rowwise_f32_avx512(const float* x, const BParams& p, Region g, BOut out) {
  walk_any<float, BMode::rowwise>(x, p, g, out, out);
}
void quantize_b128_rowwise_bf16_avx512(const uint16_t* x, const BParams& p, Region g,
                                       BOut out) {
  walk_any<uint16_t, BMode::rowwise>(x, p, g, out, out);
}
void quantize_b128_colwise_f32_avx512(const float* x, const BParams& p, Region g, BOut out) {
  walk_any<float, BMode::colwise>(x, p, g, out, out);
}
void quantize_b128_colwise_bf16_avx512(const uint16_t* x, const BParams& p, Region g,
                                       BOut out) {
  walk_any<uint16_t, BMode::colwise>(x, p, g, out, out);
}
void quantize_b128_tile_f32_avx512(const float* x, const BParams& p, Region g, BOut out) {
  walk_any<float, BMode::tile>(x, p, g, out, out);
}
void quantize_b128_tile_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut out) {
  walk_any<uint16_t, BMode::tile>(x, p, g, out, out);
}
void quantize_b128_dual_f32_avx512(const float* x, const BParams& p, Region g, BOut row,
                                   BOut col) {
  walk_any<float, BMode::dual>(x, p, g, row, col);
}
void quantize_b128_dual_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut row,
                                    BOut col) {
  walk_any<uint16_t, BMode::dual>(x, p, g, row, col);
}

uint32_t tensor_amax_f32_avx512(const float* x, int64_t n) { return avx512::tensor_amax(x, n); }
uint32_t tensor_amax_bf16_avx512(const uint16_t* x, int64_t n) {
  return avx512::tensor_amax(x, n);
}
void tensor_cast_f32_avx512(const float* x, int64_t n, Elem e, float s, uint8_t* d) {
  avx512::tensor_cast(x, n, e, s, d);
}
void tensor_cast_bf16_avx512(const uint16_t* x, int64_t n, Elem e, float s, uint8_t* d) {
  avx512::tensor_cast(x, n, e, s, d);
}

}  // namespace mxtrain::kern
