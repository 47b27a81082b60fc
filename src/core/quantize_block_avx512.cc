// core/quantize_block_avx512.cc — AVX-512 kernels of FP32-scaled block quantization
// (1x128 rowwise, 128x1 colwise, 128x128 tiles, rowwise + colwise from one read; and the amax
// and cast of one scale for the whole tensor, 16 lanes a step), compiled
// with the AVX-512 flags; byte-identical to quantize_block_ref.cc.
//
// Rowwise runs row by row: each full 1x128 block is loaded once into eight registers, its
// amax and scale found, and its codes made from the registers. Colwise, tile and dual walk
// the region by 128-row strips (the last one partial; columns past the region's last full
// 128-block masked off) in two passes: the first reads the strip's rows across the region in
// order (for a region of whole rows one contiguous stream, which the hardware prefetcher
// follows as it would a copy; the rows a few ahead are prefetched too), keeping each column's
// max |x| and (dual) each row block's in per-thread scratch; the scales follow — colwise 16 at
// a time, the scalar rule of quantize_block_kernels.h in vector form (the same IEEE
// operations, so every path agrees); the second pass reads the strip again, from the caches,
// and writes the codes. (Reading 128x128 pieces instead, the rows of a piece lie one row pitch
// apart — for a power-of-two pitch in the same few cache sets — and neither the prefetcher nor
// the caches keep up: measured 15-25% slower.) Elements: fl32(x * scale) (one IEEE multiply,
// as in the reference), encoded by simd_avx512.h's encode (RNE + satfinite, which also takes
// +-Inf to +-max). A block (rowwise) or strip (the others) with a NaN lane takes the variant
// that gives NaN lanes the NaN code with the input's sign, and its maxima are found again with
// NaN lanes ignored; the common case needs neither. Full vectors load and store unmasked
// (masked loads measured several times slower on this path), four vectors of codes packed into
// one 64-byte store.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <type_traits>
#include <vector>

#include "core/quantize_block_kernels.h"
#include "core/simd_avx512.h"
#include "mxtrain/aligned.h"

namespace mxtrain::kern::avx512 {
namespace {

constexpr int64_t B = kFp32Block;
constexpr int kVecs = int(B / 16);  // 16-lane vectors across a 128-wide block

enum class BMode { rowwise, colwise, tile, dual };

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr uint32_t kInfBits = 0x7F800000u;

// |x| bits per lane with NaN lanes as 0 (the NaN-ignoring amax).
inline __m512i amax_lanes(__m512i u) {
  const __m512i a = abs_bits(u);
  return _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a, set1(kInfBits)), a);
}

// Codes of one vector: sat(fl32(x * s)); with NAN, NaN lanes -> sign | NaN code.
template <Elem E, bool NAN>
inline __m512i codes(__m512i u, __m512 s) {
  const __m512 y = _mm512_mul_ps(_mm512_castsi512_ps(u), s);
  const __m512i k = encode<E>(y);
  if constexpr (!NAN) {
    return k;
  } else {
    const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
    const __m512i nk =
        _mm512_or_si512(_mm512_and_si512(sign_byte(_mm512_castps_si512(y)), set1(0x80)),
                        set1(Fp8<E>::nan));
    return _mm512_mask_mov_epi32(k, nan, nk);
  }
}

// Four vectors of codes (0..255 per 32-bit lane) -> 64 bytes in order a, b, c, d. The packs
// work within 128-bit lanes: lane L of the packed bytes holds a, b, c, d's elements
// 4L..4L+3 as dwords 4L..4L+3; one dword permute puts them in order.
inline __m512i pack4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), w);
}

// 128 codes (eight vectors) at d.
inline void put128(uint8_t* d, const __m512i* c) {
  _mm512_storeu_si512(d, pack4(c[0], c[1], c[2], c[3]));
  _mm512_storeu_si512(d + 64, pack4(c[4], c[5], c[6], c[7]));
}

// Stores a vector's codes under mask m (a partial vector).
inline void put16(uint8_t* p, __m512i k, __mmask16 m) {
  if (m == 0xFFFF)
    store_codes(p, k);
  else if (m)
    store_codes(p, k, m);
}

// 16 loaded lanes as FP32 bits, all or those in m (the rest zero).
template <class T>
inline __m512i ld(const T* p) {
  return load_bits(p);
}
template <class T>
inline __m512i ld(const T* p, __mmask16 m) {
  return load_bits(p, m);
}

// The scale rule of block_scale (quantize_block_kernels.h) on 16 amax values (NaN-free, as
// FP32 bits) at once, with the same IEEE operations: amax < eps -> eps; amax 0 or Inf -> 1;
// max_elem / amax, Inf -> FLT_MAX; pow2: the mantissa bits cleared.
inline __m512 block_scales(__m512i ab, float maxe, float eps, bool pow2) {
  __m512 a = _mm512_castsi512_ps(ab);
  a = _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(a, _mm512_set1_ps(eps), _CMP_LT_OQ),
                         _mm512_set1_ps(eps));
  const __mmask16 one = _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_EQ_OQ) |
                        _mm512_cmp_ps_mask(a, _mm512_castsi512_ps(set1(kInfBits)), _CMP_EQ_OQ);
  __m512 s = _mm512_div_ps(_mm512_set1_ps(maxe), a);
  s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, _mm512_castsi512_ps(set1(kInfBits)), _CMP_EQ_OQ),
                         _mm512_set1_ps(FLT_MAX));
  if (pow2) s = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(s), set1(0xFF800000u)));
  return _mm512_mask_mov_ps(s, one, _mm512_set1_ps(1.f));
}

// ---- rowwise ---------------------------------------------------------------------------------

// Rowwise: row by row (sequential reads the hardware prefetcher follows). A full 1x128 block
// stays in registers from its load to its codes; a partial last block is read twice, masked.
template <class T, Elem E>
void rows(const T* x, const BParams& p, Region g, BOut row) {
  const float maxe = elem_info(E).max_value;
  const int64_t K = p.K;
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * K;
    uint8_t* dr = row.data + r * K;
    float* sr = row.scale_inv + r * row.ld;
    int64_t cb = g.c0;
    for (; cb + B <= g.c1; cb += B) {
      __m512i u[kVecs], c[kVecs];
      __m512i all = _mm512_setzero_si512();
      for (int v = 0; v < kVecs; ++v) {
        u[v] = ld(xr + cb + 16 * v);
        all = _mm512_max_epu32(all, abs_bits(u[v]));
      }
      uint32_t ab = uint32_t(_mm512_reduce_max_epu32(all));
      const bool nan = ab > kInfBits;
      if (__builtin_expect(nan, 0)) {  // the amax without the NaN lanes
        __m512i m = _mm512_setzero_si512();
        for (int v = 0; v < kVecs; ++v) m = _mm512_max_epu32(m, amax_lanes(u[v]));
        ab = uint32_t(_mm512_reduce_max_epu32(m));
      }
      const float s = block_scale(bits_f32(ab), maxe, p.amax_epsilon, p.pow2);
      sr[cb / B] = 1.f / s;
      const __m512 sv = _mm512_set1_ps(s);
      if (__builtin_expect(nan, 0)) {
        for (int v = 0; v < kVecs; ++v) c[v] = codes<E, true>(u[v], sv);
      } else {
        for (int v = 0; v < kVecs; ++v) c[v] = codes<E, false>(u[v], sv);
      }
      put128(dr + cb, c);
    }
    if (cb < g.c1) {  // the row's partial last block
      const int64_t nc = imin(B, K - cb);
      const int nv = int((nc + 15) / 16);
      __m512i rm = _mm512_setzero_si512();
      for (int v = 0; v < nv; ++v)
        rm = _mm512_max_epu32(rm, amax_lanes(ld(xr + cb + 16 * v, lanes(nc - 16 * v))));
      const float s = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(rm))), maxe,
                                  p.amax_epsilon, p.pow2);
      sr[cb / B] = 1.f / s;
      const __m512 sv = _mm512_set1_ps(s);
      for (int v = 0; v < nv; ++v) {
        const __mmask16 m = lanes(nc - 16 * v);
        put16(dr + cb + 16 * v, codes<E, true>(ld(xr + cb + 16 * v, m), sv), m);
      }
    }
  }
}

// ---- colwise, tile, dual: whole 128-row strips ----------------------------------------------

// Prefetch distance in rows within a strip.
constexpr int64_t kAhead = 8;

// Prefetches `bytes` bytes at p (one row's run).
inline void prefetch_run(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// Per-thread scratch of walk, grown when a wider region comes (never shrunk): per 16 columns
// the max |x| bits (cmax) and the colwise scales (cs), per 128 columns the tile scales (ts), and
// (dual) per row and 128 columns the max |x| bits, then the scales in their place (rab / rs).
struct StripScratch {
  std::vector<uint32_t, AlignedAllocator<uint32_t>> cmax, rab;
  FloatBuffer cs;
  std::vector<float> ts;
  void reserve(int64_t ncols, int64_t nblk) {  // ncols a multiple of 16
    if (cmax.size() < size_t(ncols)) {
      cmax.resize(size_t(ncols));
      cs.resize(size_t(ncols));
    }
    if (ts.size() < size_t(nblk)) {
      ts.resize(size_t(nblk));
      rab.resize(size_t(B * nblk));
    }
  }
};
inline StripScratch& strip_scratch() {
  static thread_local StripScratch s;
  return s;
}

// Colwise, tile, dual by whole 128-row strips, two passes each (see the file comment).
template <class T, Elem E, BMode MODE>
void walk(const T* x, const BParams& p, Region g, BOut row, BOut col) {
  constexpr bool kRow = MODE == BMode::dual;
  constexpr bool kCol = MODE == BMode::colwise || MODE == BMode::dual;
  constexpr bool kTile = MODE == BMode::tile;
  const float maxe = elem_info(E).max_value;
  const int64_t K = p.K, W = g.c1 - g.c0;
  const int64_t nfull = W / B;                   // full 128-column blocks
  const int64_t tail = W - nfull * B;            // columns of the partial last block
  const int64_t nblk = nfull + (tail > 0);
  const int tnv = int((tail + 15) / 16);
  StripScratch& sc = strip_scratch();
  sc.reserve(nblk * B, nblk);
  uint32_t* cmax = sc.cmax.data();  // 16 per vector v: cmax + 16 v
  float* cs = sc.cs.data();
  float* ts = sc.ts.data();
  uint32_t* rab = sc.rab.data();
  float* rs = reinterpret_cast<float*>(rab);
  const int64_t run = W * int64_t(sizeof(T));
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = imin(B, p.M - rb);
    for (int64_t v = 0; v < nblk * kVecs; ++v) _mm512_store_si512(cmax + 16 * v, _mm512_setzero_si512());
    // Pass 1: maxima over every lane (a NaN makes a maximum exceed Inf's bits: the strip then
    // takes the NaN path below).
    for (int64_t i = 0; i < nr; ++i) {
      const T* xr = x + (rb + i) * K + g.c0;
      if (i + kAhead < nr) prefetch_run(xr + kAhead * K, run);
      for (int64_t b = 0; b < nfull; ++b) {
        __m512i rm = _mm512_setzero_si512();
        uint32_t* cm = cmax + b * B;
#pragma GCC unroll 8
        for (int v = 0; v < kVecs; ++v) {
          const __m512i a = abs_bits(ld(xr + b * B + 16 * v));
          if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
          _mm512_store_si512(cm + 16 * v, _mm512_max_epu32(_mm512_load_si512(cm + 16 * v), a));
        }
        if constexpr (kRow) rab[i * nblk + b] = uint32_t(_mm512_reduce_max_epu32(rm));
      }
      if (tail) {
        __m512i rm = _mm512_setzero_si512();
        uint32_t* cm = cmax + nfull * B;
        for (int v = 0; v < tnv; ++v) {
          const __m512i a = abs_bits(ld(xr + nfull * B + 16 * v, lanes(tail - 16 * v)));
          if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
          _mm512_store_si512(cm + 16 * v, _mm512_max_epu32(_mm512_load_si512(cm + 16 * v), a));
        }
        if constexpr (kRow) rab[i * nblk + nfull] = uint32_t(_mm512_reduce_max_epu32(rm));
      }
    }
    __m512i all = _mm512_setzero_si512();
    for (int64_t v = 0; v < nblk * kVecs; ++v)
      all = _mm512_max_epu32(all, _mm512_load_si512(cmax + 16 * v));
    const bool nan = uint32_t(_mm512_reduce_max_epu32(all)) > kInfBits;
    if (__builtin_expect(nan, 0)) {  // the maxima again, NaN lanes ignored
      for (int64_t v = 0; v < nblk * kVecs; ++v)
        _mm512_store_si512(cmax + 16 * v, _mm512_setzero_si512());
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (rb + i) * K + g.c0;
        for (int64_t b = 0; b < nblk; ++b) {
          const int64_t nc = b < nfull ? B : tail;
          __m512i rm = _mm512_setzero_si512();
          for (int v = 0; v * 16 < nc; ++v) {
            const __m512i a = amax_lanes(ld(xr + b * B + 16 * v, lanes(nc - 16 * v)));
            if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
            uint32_t* cm = cmax + b * B + 16 * v;
            _mm512_store_si512(cm, _mm512_max_epu32(_mm512_load_si512(cm), a));
          }
          if constexpr (kRow) rab[i * nblk + b] = uint32_t(_mm512_reduce_max_epu32(rm));
        }
      }
    }
    // Scales.
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t nc = b < nfull ? B : tail;
      const int nv = int((nc + 15) / 16);
      const int64_t cb = g.c0 + b * B;
      if constexpr (kCol) {
        float* si = col.scale_inv + (rb / B) * col.ld + cb;
        for (int v = 0; v < nv; ++v) {
          const __m512 s =
              block_scales(_mm512_load_si512(cmax + b * B + 16 * v), maxe, p.amax_epsilon, p.pow2);
          _mm512_store_ps(cs + b * B + 16 * v, s);
          _mm512_mask_storeu_ps(si + 16 * v, lanes(nc - 16 * v),
                                _mm512_div_ps(_mm512_set1_ps(1.f), s));
        }
      }
      if constexpr (kTile) {
        __m512i t = _mm512_load_si512(cmax + b * B);
        for (int v = 1; v < nv; ++v) t = _mm512_max_epu32(t, _mm512_load_si512(cmax + b * B + 16 * v));
        ts[b] = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(t))), maxe,
                            p.amax_epsilon, p.pow2);
        row.scale_inv[(rb / B) * row.ld + cb / B] = 1.f / ts[b];
      }
      if constexpr (kRow) {
        for (int64_t i = 0; i < nr; ++i) {
          const float s = block_scale(bits_f32(rab[i * nblk + b]), maxe, p.amax_epsilon, p.pow2);
          row.scale_inv[(rb + i) * row.ld + cb / B] = 1.f / s;
          rs[i * nblk + b] = s;
        }
      }
    }
    // Pass 2: the codes.
    const auto pass2 = [&](auto nan_tag) {
      constexpr bool N = decltype(nan_tag)::value;
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (rb + i) * K + g.c0;
        const int64_t o = (rb + i) * K + g.c0;
        for (int64_t b = 0; b < nfull; ++b) {
          __m512i u[kVecs], c[kVecs];
#pragma GCC unroll 8
          for (int v = 0; v < kVecs; ++v) u[v] = ld(xr + b * B + 16 * v);
          if constexpr (kRow) {
            const __m512 rsv = _mm512_set1_ps(rs[i * nblk + b]);
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v) c[v] = codes<E, N>(u[v], rsv);
            put128(row.data + o + b * B, c);
          }
          if constexpr (kCol) {
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v)
              c[v] = codes<E, N>(u[v], _mm512_load_ps(cs + b * B + 16 * v));
            put128(col.data + o + b * B, c);
          }
          if constexpr (kTile) {
            const __m512 tsv = _mm512_set1_ps(ts[b]);
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v) c[v] = codes<E, N>(u[v], tsv);
            put128(row.data + o + b * B, c);
          }
        }
        if (tail) {
          const int64_t b = nfull, ob = o + b * B;
          for (int v = 0; v < tnv; ++v) {
            const __mmask16 m = lanes(tail - 16 * v);
            const __m512i u = ld(xr + b * B + 16 * v, m);
            if constexpr (kRow)
              put16(row.data + ob + 16 * v, codes<E, N>(u, _mm512_set1_ps(rs[i * nblk + b])), m);
            if constexpr (kCol)
              put16(col.data + ob + 16 * v, codes<E, N>(u, _mm512_load_ps(cs + b * B + 16 * v)), m);
            if constexpr (kTile) put16(row.data + ob + 16 * v, codes<E, N>(u, _mm512_set1_ps(ts[b])), m);
          }
        }
      }
    };
    if (__builtin_expect(nan, 0))
      pass2(std::true_type{});
    else
      pass2(std::false_type{});
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
    put16(d + i, codes<E, true>(load_bits(x + i, m), sv), m);
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
