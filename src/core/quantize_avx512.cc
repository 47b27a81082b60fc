// core/quantize_avx512.cc — AVX-512 colwise, 32x32 and dual-axis MX quantization kernels and
// the AVX-512 kernel table (compiled with AVX-512 flags).
//
// Same contract and same bytes as quantize_ref.cc. Layout of the work:
//  - rowwise (quantize_rowwise_avx512.cc): 128 columns at a time, all in registers.
//  - colwise, 32x32 tiles and dual-axis: a 32-row strip is processed in chunks of kChunk
//    columns. Pass 1 streams the chunk's rows once from memory (long sequential runs, which
//    the hardware prefetchers follow), keeping per-column amax in an L1 buffer and, for
//    dual-axis, writing each row block's scale; pass 2 re-reads the chunk from L2 and writes
//    the codes row by row. So the dual-axis kernel reads the input from memory once.
//    Pass 1 of the next chunk runs interleaved with pass 2 of the current one.
//    (Narrow 32-row panels would be L1-sized but, with a power-of-two row pitch, all their
//    rows fall into the same few cache sets and evict each other.)
// Full 128-column pieces take the fast path (mx_blocks_avx512.h: four-block horizontal
// max, codes packed 64 per store); ragged edges take a simpler one with masked loads (zeros
// do not change amax) and masked stores. Both produce the reference bytes.
// For big tensors (kStreamMin) the full pieces' codes go out as non-temporal stores through
// RowWriter (mx_blocks_avx512.h), which realigns each row run to 64-byte lines; the bytes
// are the same either way.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/mx_blocks_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

// Columns per strip chunk: a 32 x 2048 FP32 chunk is 256 KiB, so pass 2 re-reads it from L2.
constexpr int64_t kChunk = 2048;

enum class Mode { colwise, tile32, dual };

// ---- one 32-row strip x one chunk of columns (see the file comment) ----------------------
// `row` receives the rowwise copy (dual) or the tile copy (tile32); `col` the colwise copy
// (colwise, dual). Columns are handled in 128-wide pieces; only the last piece of a chunk
// that ends at a ragged K is partial and takes the masked 16-lane code.

// Scales of a piece's four row blocks as written in pass 1, for pass 2.
inline Quad quad_from_bytes(const uint8_t* s, __mmask16 zero, __mmask16 nan) {
  int v;
  __builtin_memcpy(&v, s, 4);
  const __m512i b = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
      _mm512_cvtepu8_epi32(_mm_cvtsi32_si128(v)));
  return {inv_scales(b), zero, nan};
}

// What pass 1 learns about one chunk (rows rb..rb+nr, columns c0..c0+pc), for pass 2.
struct Chunk {
  int64_t rb, c0, pc;
  int nr, nfull;     // rows; full 128-column pieces
  int64_t ct;        // first column (relative) of the partial piece, = 128 * nfull
  __mmask16 m[8];    // lanes of the partial piece's vectors
  // Per 16 columns: amax bits during pass 1, then 2^-e bits (colwise / dual).
  __m512i cm[kChunk / 16];
  __mmask16 czero[kChunk / 16], cnan[kChunk / 16];
  bool cspecial;
  Quad tq[kChunk / 128];                           // tile32: tile scales per piece
  uint32_t tab[4];                                 // tile32: partial piece tile amax
  __mmask16 rzero[32][kChunk / 128], rnan[32][kChunk / 128];  // dual: row-block flags
  uint32_t rab[32][4];                             // dual: partial piece row-block amax
};

inline void chunk_begin(Chunk& s, int64_t rb, int nr, int64_t c0, int64_t pc) {
  s.rb = rb;
  s.nr = nr;
  s.c0 = c0;
  s.pc = pc;
  s.nfull = int(pc / 128);
  s.ct = int64_t(s.nfull) * 128;
  for (int h = 0; h < 8; ++h) s.m[h] = lanes(pc - s.ct - 16 * h);
  for (int v = 0; v < 8 * s.nfull + (pc > s.ct ? 8 : 0); ++v) s.cm[v] = _mm512_setzero_si512();
}

// Pass 1, one row: per-column amax; for dual-axis also the row's block scales.
template <class T, Elem E, Mode MODE>
inline void pass1_row(Chunk& s, const T* x, const QParams& p, int i, QOut row) {
  const bool rceil = p.rounding == ScaleRounding::rceil;
  const T* xr = x + (s.rb + i) * p.K + s.c0;
  for (int q = 0; q < s.nfull; ++q) {
    __m512i a[8];
#pragma GCC unroll 8
    for (int h = 0; h < 8; ++h) {
      a[h] = abs_bits(load_bits(xr + 128 * q + 16 * h));
      s.cm[8 * q + h] = _mm512_max_epu32(s.cm[8 * q + h], a[h]);
    }
    if constexpr (MODE == Mode::dual) {
      const Quad rq = quad_scales<E>(
          _mm512_max_epu32(a[0], a[1]), _mm512_max_epu32(a[2], a[3]),
          _mm512_max_epu32(a[4], a[5]), _mm512_max_epu32(a[6], a[7]), rceil,
          row.scales + (s.rb + i) * row.scale_ld + (s.c0 + 128 * q) / 32);
      s.rzero[i][q] = rq.zero;
      s.rnan[i][q] = rq.nan;
    }
  }
  const int vt = 8 * s.nfull;
  for (int j = 0; j < 4 && s.m[2 * j]; ++j) {
    const __m512i a0 = abs_bits(load_bits(xr + s.ct + 32 * j, s.m[2 * j]));
    const __m512i a1 = abs_bits(load_bits(xr + s.ct + 32 * j + 16, s.m[2 * j + 1]));
    s.cm[vt + 2 * j] = _mm512_max_epu32(s.cm[vt + 2 * j], a0);
    s.cm[vt + 2 * j + 1] = _mm512_max_epu32(s.cm[vt + 2 * j + 1], a1);
    if constexpr (MODE == Mode::dual) {
      s.rab[i][j] = hmax(a0, a1);
      row.scales[(s.rb + i) * row.scale_ld + (s.c0 + s.ct) / 32 + j] =
          scale_byte(s.rab[i][j], E, p.rounding);
    }
  }
}

// Between the passes: column scales (colwise, dual) or tile scales (tile32).
template <Elem E, Mode MODE>
void chunk_scales(Chunk& s, const QParams& p, QOut row, QOut col) {
  const bool rceil = p.rounding == ScaleRounding::rceil;
  const int vt = 8 * s.nfull;
  if constexpr (MODE == Mode::tile32) {
    uint8_t* ts = row.scales + (s.rb / 32) * row.scale_ld + s.c0 / 32;
    for (int q = 0; q < s.nfull; ++q) {
      const __m512i* c = s.cm + 8 * q;
      s.tq[q] = quad_scales<E>(_mm512_max_epu32(c[0], c[1]), _mm512_max_epu32(c[2], c[3]),
                               _mm512_max_epu32(c[4], c[5]), _mm512_max_epu32(c[6], c[7]),
                               rceil, ts + 4 * q);
    }
    for (int j = 0; j < 4 && s.m[2 * j]; ++j) {
      s.tab[j] = hmax(s.cm[vt + 2 * j], s.cm[vt + 2 * j + 1]);
      ts[4 * s.nfull + j] = scale_byte(s.tab[j], E, p.rounding);
    }
  } else {
    uint8_t* cs = col.scales + (s.rb / 32) * col.scale_ld + s.c0;
    s.cspecial = false;
    const int nvec = int((s.pc + 15) / 16);
    for (int v = 0; v < nvec; ++v) {
      const __m512i b = scale_bytes<E>(s.cm[v], rceil);
      const __mmask16 valid = v < vt ? __mmask16(0xFFFF) : s.m[v - vt];
      store_codes(cs + 16 * v, b, valid);
      s.czero[v] = _mm512_cmpeq_epi32_mask(s.cm[v], _mm512_setzero_si512());
      s.cnan[v] = _mm512_cmpge_epu32_mask(s.cm[v], set1(0x7F800000u));
      s.cspecial |= ((s.czero[v] | s.cnan[v]) & valid) != 0;
      s.cm[v] = _mm512_castps_si512(inv_scales(b));
    }
  }
}

// Pass 2, one row: codes, re-reading the row of the chunk from cache.
// `pf` (may be null): a row of a later chunk to prefetch into L2, `pf_bytes` long.
template <class T, Elem E, bool CLAMP, Mode MODE>
inline void pass2_row(const Chunk& s, const T* x, const QParams& p, int i, QOut row, QOut col,
                      const char* pf, int64_t pf_bytes, bool nt) {
  const T* xr = x + (s.rb + i) * p.K + s.c0;
  const int64_t off = (s.rb + i) * p.K + s.c0;
  RowWriter rw(row.data + off, nt && MODE != Mode::colwise);
  RowWriter cw(col.data + off, nt && MODE != Mode::tile32);
  for (int q = 0; q < s.nfull; ++q) {
    if (pf) {
      for (int64_t b = 128 * q * int64_t(sizeof(T)), e = b + 128 * int64_t(sizeof(T));
           b < e && b < pf_bytes; b += 64)
        _mm_prefetch(pf + b, _MM_HINT_T1);
    }
    __m512i u[8];
#pragma GCC unroll 8
    for (int h = 0; h < 8; ++h) u[h] = load_bits(xr + 128 * q + 16 * h);
    if constexpr (MODE == Mode::tile32) {
      encode_quad<E, CLAMP>(u, s.tq[q], rw);
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < 2; ++g) {
        __m512i k[4];
#pragma GCC unroll 8
        for (int h = 0; h < 4; ++h) {
          const int v = 8 * q + 4 * g + h;
          k[h] = encode_abs<E, CLAMP>(abs_f(u[4 * g + h]), sign_byte(u[4 * g + h]),
                                      _mm512_castsi512_ps(s.cm[v]));
          if (s.cspecial) k[h] = fix<E>(k[h], s.czero[v], s.cnan[v]);
        }
        cw.put(pack4(k[0], k[1], k[2], k[3]));
      }
      if constexpr (MODE == Mode::dual) {
        const Quad rq =
            quad_from_bytes(row.scales + (s.rb + i) * row.scale_ld + (s.c0 + 128 * q) / 32,
                            s.rzero[i][q], s.rnan[i][q]);
        encode_quad<E, CLAMP>(u, rq, rw);
      }
    }
  }
  rw.finish();
  cw.finish();
  for (int h = 0; h < 8 && s.m[h]; ++h) {
    const __m512i u = load_bits(xr + s.ct + 16 * h, s.m[h]);
    uint8_t* d = row.data + off + s.ct + 16 * h;
    if constexpr (MODE == Mode::tile32) {
      const uint8_t tb = row.scales[(s.rb / 32) * row.scale_ld + (s.c0 + s.ct) / 32 + h / 2];
      store_codes(d, block_codes<E>(u, s.tab[h / 2], tb), s.m[h]);
    } else {
      const int v = 8 * s.nfull + h;
      const __m512i k = encode<E>(_mm512_mul_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(s.cm[v])));
      store_codes(col.data + off + s.ct + 16 * h, fix<E>(k, s.czero[v], s.cnan[v]), s.m[h]);
      if constexpr (MODE == Mode::dual) {
        const uint8_t rbyte = row.scales[(s.rb + i) * row.scale_ld + (s.c0 + s.ct) / 32 + h / 2];
        store_codes(d, block_codes<E>(u, s.rab[i][h / 2], rbyte), s.m[h]);
      }
    }
  }
}

// All chunks of the region in order (strips top to bottom, chunks left to right), software
// pipelined: pass 2 of chunk n is interleaved row by row with pass 1 of chunk n+1, so the
// memory reads of the next chunk overlap with the encoding of this one, and chunk n+2 is
// prefetched into L2 meanwhile (each chunk row is a separate stream, which the hardware
// prefetchers pick up too late on their own).
template <class T, Elem E, bool CLAMP, Mode MODE>
void strip_impl(const T* x, const QParams& p, Region g, QOut row, QOut col) {
  if (g.r0 >= g.r1 || g.c0 >= g.c1) return;
  const bool nt = p.M * p.K >= kStreamMin;
  Chunk st[2];
  auto begin = [&](Chunk& s, int64_t rb, int64_t c0) {
    chunk_begin(s, rb, int(imin(32, p.M - rb)), c0, imin(kChunk, g.c1 - c0));
  };
  auto advance = [&](int64_t& rb, int64_t& c0) {
    c0 += kChunk;
    if (c0 >= g.c1) {
      c0 = g.c0;
      rb += 32;
    }
    return rb < g.r1;
  };
  int64_t rb = g.r0, c0 = g.c0;
  begin(st[0], rb, c0);
  for (int i = 0; i < st[0].nr; ++i) pass1_row<T, E, MODE>(st[0], x, p, i, row);
  chunk_scales<E, MODE>(st[0], p, row, col);
  for (int cur = 0;; cur ^= 1) {
    int64_t nrb = rb, nc0 = c0;
    const bool more = advance(nrb, nc0);
    int64_t frb = nrb, fc0 = nc0;
    const bool far = more && advance(frb, fc0);
    const int far_rows = far ? int(imin(32, p.M - frb)) : 0;
    const int64_t far_bytes = far ? imin(kChunk, g.c1 - fc0) * int64_t(sizeof(T)) : 0;
    Chunk& a = st[cur];
    Chunk& b = st[cur ^ 1];
    if (more) begin(b, nrb, nc0);
    const int rows = more ? (a.nr > b.nr ? a.nr : b.nr) : a.nr;
    for (int i = 0; i < rows; ++i) {
      const char* pf =
          i < far_rows ? reinterpret_cast<const char*>(x + (frb + i) * p.K + fc0) : nullptr;
      if (i < a.nr) pass2_row<T, E, CLAMP, MODE>(a, x, p, i, row, col, pf, far_bytes, nt);
      if (more && i < b.nr) pass1_row<T, E, MODE>(b, x, p, i, row);
    }
    if (!more) break;
    chunk_scales<E, MODE>(b, p, row, col);
    rb = nrb;
    c0 = nc0;
  }
  if (nt) _mm_sfence();  // order the streamed lines before the caller's threads join
}
template <class T, Mode MODE>
void strip_any(const T* x, const QParams& p, Region g, QOut row, QOut col) {
  const bool fl = p.rounding == ScaleRounding::floor;
  if (p.elem == Elem::e4m3) {
    fl ? strip_impl<T, Elem::e4m3, true, MODE>(x, p, g, row, col)
       : strip_impl<T, Elem::e4m3, false, MODE>(x, p, g, row, col);
  } else {
    fl ? strip_impl<T, Elem::e5m2, true, MODE>(x, p, g, row, col)
       : strip_impl<T, Elem::e5m2, false, MODE>(x, p, g, row, col);
  }
}

}  // namespace

void quantize_mx_colwise_f32__avx512(const float* x, const QParams& p, Region g, QOut out) {
  strip_any<float, Mode::colwise>(x, p, g, out, out);
}
void quantize_mx_colwise_bf16__avx512(const uint16_t* x, const QParams& p, Region g, QOut out) {
  strip_any<uint16_t, Mode::colwise>(x, p, g, out, out);
}
void quantize_mx_tile32_f32__avx512(const float* x, const QParams& p, Region g, QOut out) {
  strip_any<float, Mode::tile32>(x, p, g, out, out);
}
void quantize_mx_tile32_bf16__avx512(const uint16_t* x, const QParams& p, Region g, QOut out) {
  strip_any<uint16_t, Mode::tile32>(x, p, g, out, out);
}
void quantize_mx_dual_f32__avx512(const float* x, const QParams& p, Region g, QOut row,
                                  QOut col) {
  strip_any<float, Mode::dual>(x, p, g, row, col);
}
void quantize_mx_dual_bf16__avx512(const uint16_t* x, const QParams& p, Region g, QOut row,
                                   QOut col) {
  strip_any<uint16_t, Mode::dual>(x, p, g, row, col);
}

const QuantKernels& quant_kernels_avx512() {
  static const QuantKernels k{Isa::avx512,
                              quantize_mx_rowwise_f32__avx512,
                              quantize_mx_colwise_f32__avx512,
                              quantize_mx_tile32_f32__avx512,
                              quantize_mx_rowwise_bf16__avx512,
                              quantize_mx_colwise_bf16__avx512,
                              quantize_mx_tile32_bf16__avx512,
                              quantize_mx_dual_f32__avx512,
                              quantize_mx_dual_bf16__avx512,
                              dequantize_mx_f32__avx512,
                              dequantize_mx_bf16__avx512,
                              convert_f32_to_bf16__avx512,
                              convert_bf16_to_f32__avx512,
                              has_nonfinite_f32__avx512};
  return k;
}

}  // namespace mxtrain::kern
