// core/quantize_block_avx512.cc — AVX-512 kernels of FP32-scaled block quantization
// (1x128 rowwise, 128x1 colwise, 128x128 tiles, rowwise + colwise from one read; and the amax
// and cast of one scale for the whole tensor, 16 lanes a step), compiled
// with the AVX-512 flags; byte-identical to quantize_block_ref.cc.
//
// Rowwise runs row by row: each full 1x128 block is loaded once into eight registers, its
// amax and scale found, and its codes made from the registers. Colwise, tile and dual walk
// the region in 128x128 pieces (partial at the edges; lanes past the edge are masked off): a
// first pass reads the piece from memory (the next piece is prefetched: its rows lie one row
// pitch apart, which the hardware prefetcher does not follow) into a per-thread contiguous
// buffer, keeping the 16-lane amax vectors of its columns (and each row's amax), the scales
// follow — colwise 16 at a time, the scalar rule of quantize_block_kernels.h in vector form
// (the same IEEE operations, so every path agrees) — and a second pass reads the buffer
// (from L2: a power-of-two row pitch would put all 128 rows of the piece in the same few
// cache sets of the input) and writes the codes. Elements: fl32(x * scale) (one IEEE
// multiply, as in the reference), encoded by simd_avx512.h's encode (RNE + satfinite, which
// also takes +-Inf to +-max). A block (rowwise) or piece (the others) with a NaN lane takes
// the variant that gives NaN lanes the NaN code with the input's sign, and its amax is found
// again with NaN lanes ignored; the common case needs neither. Full vectors load and store
// unmasked (masked loads measured several times slower on this path), four vectors of codes
// packed into one 64-byte store.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <memory>
#include <type_traits>

#include "core/quantize_block_kernels.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern::avx512 {
namespace {

constexpr int64_t B = kFp32Block;
constexpr int kVecs = int(B / 16);  // 16-lane vectors across a 128-wide piece

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

// ---- colwise, tile, dual: 128-row strips in chunks of 128x128 pieces ------------------------

constexpr int kChunkPieces = 4;  // pieces per chunk: 128 x 512 columns

// The per-thread copy of one chunk (FP32 bits; piece q's row i at q * B * B + i * B) that pass
// 2 reads; allocated on a thread's first call, 256 KiB.
inline uint32_t* chunk_buffer() {
  static thread_local std::unique_ptr<uint32_t[]> buf;
  if (!buf) buf.reset(new uint32_t[kChunkPieces * B * B + 16]);
  const uintptr_t a = (reinterpret_cast<uintptr_t>(buf.get()) + 63) & ~uintptr_t(63);
  return reinterpret_cast<uint32_t*>(a);
}

// Prefetch distance in chunk rows, in walk order (at a chunk's end, the next chunk's first
// rows).
constexpr int64_t kAhead = 8;

// Prefetches `bytes` bytes at p (one row's run of a chunk).
inline void prefetch_run(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// What pass 1 learns about one piece for its scales and pass 2.
struct PieceMax {
  __m512i cmax[kVecs];  // per column: max |x| bits (NaN lanes included until fixed up)
  uint32_t rab[B];      // dual: per row: max |x| bits
};

// Colwise, tile, dual (see the file comment). The region's strips are read in chunks of up
// to kChunkPieces pieces: pass 1 reads each row's run of the chunk (a few KiB, which the
// hardware prefetcher follows) into the chunk buffer; then each piece gets its scales and pass
// 2 from the buffer.
template <class T, Elem E, BMode MODE>
void walk(const T* x, const BParams& p, Region g, BOut row, BOut col) {
  static_assert(MODE != BMode::rowwise, "rowwise runs rows()");
  constexpr bool kRow = MODE == BMode::dual;
  constexpr bool kCol = MODE == BMode::colwise || MODE == BMode::dual;
  constexpr bool kTile = MODE == BMode::tile;
  constexpr int64_t W = kChunkPieces * B;
  const float maxe = elem_info(E).max_value;
  const int64_t K = p.K;
  uint32_t* buf = chunk_buffer();
  alignas(64) PieceMax pm[kChunkPieces];
  for (int64_t rb = g.r0; rb < g.r1; rb += B) {
    const int64_t nr = imin(B, p.M - rb);
    for (int64_t c0 = g.c0; c0 < g.c1; c0 += W) {
      const int64_t cw = imin(W, g.c1 - c0);          // the chunk's columns
      const int np = int((cw + B - 1) / B);           // its pieces; only the last may be partial
      const int64_t tail = cw - int64_t(np - 1) * B;  // the last piece's columns
      const int tnv = int((tail + 15) / 16);
      const bool tail_full = tail == B;
      // The run kAhead rows ahead in walk order.
      const int64_t nc0 = c0 + W < g.c1 ? c0 + W : g.c0;
      const int64_t nrb = c0 + W < g.c1 ? rb : rb + B;
      const int64_t nnr = nrb < g.r1 ? imin(B, p.M - nrb) : 0;
      const int64_t nbytes = imin(W, g.c1 - nc0) * int64_t(sizeof(T));
      const auto prefetch_ahead = [&](int64_t i) {
        const int64_t j = i + kAhead;
        if (j < nr)
          prefetch_run(x + (rb + j) * K + c0, cw * int64_t(sizeof(T)));
        else if (j - nr < nnr)
          prefetch_run(x + (nrb + j - nr) * K + nc0, nbytes);
      };
      for (int q = 0; q < np; ++q)
        for (int v = 0; v < kVecs; ++v) pm[q].cmax[v] = _mm512_setzero_si512();
      // Pass 1: into the buffer; column maxima of |x| over every lane (a NaN lane makes the
      // maximum exceed Inf's bits, which sends its piece to the NaN path below), and each
      // row's (dual).
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (rb + i) * K + c0;
        prefetch_ahead(i);
        for (int q = 0; q < np; ++q) {
          uint32_t* br = buf + q * B * B + i * B;
          __m512i rm = _mm512_setzero_si512();
          PieceMax& P = pm[q];
          if (q + 1 < np || tail_full) {
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v) {
              const __m512i u = ld(xr + q * B + 16 * v);
              _mm512_store_si512(br + 16 * v, u);
              const __m512i a = abs_bits(u);
              if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
              P.cmax[v] = _mm512_max_epu32(P.cmax[v], a);
            }
          } else {
            for (int v = 0; v < tnv; ++v) {
              const __m512i u = ld(xr + q * B + 16 * v, lanes(tail - 16 * v));
              _mm512_store_si512(br + 16 * v, u);
              const __m512i a = abs_bits(u);
              if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
              P.cmax[v] = _mm512_max_epu32(P.cmax[v], a);
            }
          }
          if constexpr (kRow) P.rab[i] = uint32_t(_mm512_reduce_max_epu32(rm));
        }
      }
      for (int q = 0; q < np; ++q) {
        PieceMax& P = pm[q];
        const int64_t cb = c0 + q * B;
        const int64_t nc = q + 1 < np ? B : tail;
        const bool full = nc == B;
        const int nv = int((nc + 15) / 16);
        const uint32_t* pb = buf + q * B * B;
        __mmask16 m[kVecs];
        for (int v = 0; v < kVecs; ++v) m[v] = lanes(nc - 16 * v);
        __m512i call = P.cmax[0];
        for (int v = 1; v < nv; ++v) call = _mm512_max_epu32(call, P.cmax[v]);
        const bool nan = uint32_t(_mm512_reduce_max_epu32(call)) > kInfBits;
        if (__builtin_expect(nan, 0)) {  // the maxima again, NaN lanes ignored
          for (int v = 0; v < kVecs; ++v) P.cmax[v] = _mm512_setzero_si512();
          for (int64_t i = 0; i < nr; ++i) {
            __m512i rm = _mm512_setzero_si512();
            for (int v = 0; v < nv; ++v) {
              const __m512i a = amax_lanes(_mm512_load_si512(pb + i * B + 16 * v));
              if constexpr (kRow) rm = _mm512_max_epu32(rm, a);
              P.cmax[v] = _mm512_max_epu32(P.cmax[v], a);
            }
            if constexpr (kRow) P.rab[i] = uint32_t(_mm512_reduce_max_epu32(rm));
          }
        }
        // Scales: each row's (dual), the piece's columns' (colwise, dual) or the tile's.
        alignas(64) float rs[B];
        if constexpr (kRow) {
          for (int64_t i = 0; i < nr; ++i) {
            const float s = block_scale(bits_f32(P.rab[i]), maxe, p.amax_epsilon, p.pow2);
            row.scale_inv[(rb + i) * row.ld + cb / B] = 1.f / s;
            rs[i] = s;
          }
        }
        __m512 cs[kVecs];
        float ts = 1.f;
        if constexpr (kCol) {
          float* si = col.scale_inv + (rb / B) * col.ld + cb;
          for (int v = 0; v < nv; ++v) {
            cs[v] = block_scales(P.cmax[v], maxe, p.amax_epsilon, p.pow2);
            const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.f), cs[v]);
            _mm512_mask_storeu_ps(si + 16 * v, m[v], inv);
          }
        }
        if constexpr (kTile) {
          __m512i t = P.cmax[0];
          for (int v = 1; v < nv; ++v) t = _mm512_max_epu32(t, P.cmax[v]);
          ts = block_scale(bits_f32(uint32_t(_mm512_reduce_max_epu32(t))), maxe,
                           p.amax_epsilon, p.pow2);
          row.scale_inv[(rb / B) * row.ld + cb / B] = 1.f / ts;
        }
        // Pass 2: the codes, from the buffer.
        const __m512 tsv = _mm512_set1_ps(ts);
        const auto pass2 = [&](auto nan_tag) {
          constexpr bool N = decltype(nan_tag)::value;
          for (int64_t i = 0; i < nr; ++i) {
            const uint32_t* br = pb + i * B;
            const int64_t o = (rb + i) * K + cb;
            const __m512 rsv = _mm512_set1_ps(kRow ? rs[i] : 1.f);
            if (full) {
              __m512i u[kVecs], c[kVecs];
#pragma GCC unroll 8
              for (int v = 0; v < kVecs; ++v) u[v] = _mm512_load_si512(br + 16 * v);
              if constexpr (kRow) {
#pragma GCC unroll 8
                for (int v = 0; v < kVecs; ++v) c[v] = codes<E, N>(u[v], rsv);
                put128(row.data + o, c);
              }
              if constexpr (kCol) {
#pragma GCC unroll 8
                for (int v = 0; v < kVecs; ++v) c[v] = codes<E, N>(u[v], cs[v]);
                put128(col.data + o, c);
              }
              if constexpr (kTile) {
#pragma GCC unroll 8
                for (int v = 0; v < kVecs; ++v) c[v] = codes<E, N>(u[v], tsv);
                put128(row.data + o, c);
              }
              continue;
            }
            for (int v = 0; v < nv; ++v) {
              const __m512i u = _mm512_load_si512(br + 16 * v);
              if constexpr (kRow) put16(row.data + o + 16 * v, codes<E, N>(u, rsv), m[v]);
              if constexpr (kCol) put16(col.data + o + 16 * v, codes<E, N>(u, cs[v]), m[v]);
              if constexpr (kTile) put16(row.data + o + 16 * v, codes<E, N>(u, tsv), m[v]);
            }
          }
        };
        if (__builtin_expect(nan, 0))
          pass2(std::true_type{});
        else
          pass2(std::false_type{});
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
