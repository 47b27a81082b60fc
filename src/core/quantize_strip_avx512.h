// core/quantize_strip_avx512.h — private: the AVX-512 colwise, 32x32 and dual-axis MX
// quantization kernels (strip_any), included by quantize_avx512.cc (without VBMI) and
// quantize_avx512vbmi.cc (with), each compiled with its own flags.
//
// Same contract and same bytes as quantize_ref.cc. Layout of the work:
//  - rowwise (quantize_rowwise_avx512.h): a row at a time, in bands of 512 columns.
//  - colwise, 32x32 tiles and dual-axis: a 32-row strip is processed in chunks of
//    kChunkCols columns. Pass 1 reads the chunk once from memory (prefetched into L2 two
//    chunks ahead, see strip_impl), by rows or by 512-column bands (see pass1_units),
//    finding per-column amax and, for dual-axis, each row block's scale; pass 2 re-reads the
//    chunk (BF16: the input; FP32: its 16-bit words, see below) from L2 and writes the codes
//    row by row. So the dual-axis kernel reads the input from memory once.
//    Pass 1 of the next chunk runs interleaved with pass 2 of the current one.
//    (Narrow 32-row panels would be L1-sized but, with a power-of-two row pitch, all their
//    rows fall into the same few cache sets and evict each other.)
// Full 128-column pieces take the fast path: 16-bit lanes (simd16_avx512.h), four 32-word
// vectors per piece row, one saturating subtract per code; FP32 inputs become words once, in
// pass 1, kept in a per-thread buffer for pass 2. A vector with a lane the words cannot
// encode (FP8-subnormal results, FP32-subnormal inputs, NaN/Inf blocks) is recomputed by
// slow16 with the 32-bit encoder on the original input. Ragged edges take a simpler 32-bit
// path with masked loads (zeros do not change amax) and masked stores. All produce the
// reference bytes.
// Packing the 16-bit codes into bytes: with AVX-512 VBMI one byte permute per 64 codes, and
// the sign bytes are picked from the input words once for all the copies of a dual-axis
// pass; without VBMI a pack, a lane fix-up and a sign merge per copy.
// For big tensors (kStreamMin) the full pieces' codes go out as non-temporal stores through
// RowWriter (mx_blocks_avx512.h), whole 64-byte lines (ScaledTensor buffers are 64-byte aligned;
// a row that does not start on a line is realigned); the bytes are the same either way.
#pragma once

#include <memory>

#include "core/mx_blocks_avx512.h"
#include "core/simd16_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

// Columns per strip chunk: 32 x 4096 BF16 or 32 x 2048 FP32 is 256 KiB read from memory in
// pass 1, and pass 2 re-reads 256 KiB (BF16) or 128 KiB (FP32 words) from L2. (Measured:
// FP32 chunks of 4096 columns were slower, BF16 chunks of 2048 slower too.)
template <class T>
constexpr int64_t kChunkCols = sizeof(T) == 2 ? 4096 : 2048;

enum class Mode { colwise, tile32, dual };

// ---- one 32-row strip x one chunk of columns (see the file comment) ----------------------
// `row` receives the rowwise copy (dual) or the tile copy (tile32); `col` the colwise copy
// (colwise, dual). Columns are handled in 128-wide pieces; only the last piece of a chunk
// that ends at a ragged K is partial and takes the masked 16-lane code.

// What pass 1 learns about one chunk (rows rb..rb+nr, columns c0..c0+pc, pc <= kChunk), for
// pass 2.
// Full pieces work on 32-column word vectors (index w = 4 * piece + k); the partial piece
// and slow16 on 16-column FP32-lane vectors (index v).
template <int64_t kChunk>
struct ChunkW {
  int64_t rb, c0, pc;
  int nr, nfull;     // rows; full 128-column pieces
  int64_t ct;        // first column (relative) of the partial piece, = 128 * nfull
  __mmask16 m[8];    // lanes of the partial piece's vectors
  const uint16_t* words;  // FP32 input: the chunk's words from pass 1, row stride kWordLd
  // Full pieces: word amax per column during pass 1; then (colwise / dual) the code offsets
  // Y (in cw) and the slow bounds TB (cb); zero columns.
  __m512i cw[kChunk / 32], cb[kChunk / 32];
  __mmask32 cwzero[kChunk / 32];
  bool cwodd[kChunk / 128];  // piece has a zero or NaN/Inf column (colwise fix-up)
  // Per 16 columns: amax bits of the partial piece during pass 1, then 2^-e bits of every
  // column (partial piece and slow16; colwise / dual).
  __m512i cm[kChunk / 16];
  __mmask16 czero[kChunk / 16], cnan[kChunk / 16];
  Quad tq[kChunk / 128];                           // tile32: tile scales per piece
  int16_t ty[kChunk / 32], ttb[kChunk / 32];      // tile32: tile offsets Y, bounds TB
  uint32_t tab[4];                                 // tile32: partial piece tile amax
  __mmask16 rzero[32][kChunk / 512], rnan[32][kChunk / 512];  // dual: row-block flags, bit
                                                   // per block of 16 (see row_scales16)
  // dual: row-block Y and TB, one 32-bit pair per block (row_scales16 stores 16 at once)
  alignas(64) YTB ryb[32][kChunk / 32];
  uint32_t rab[32][4];                             // dual: partial piece row-block amax
};
template <class T>
using Chunk = ChunkW<kChunkCols<T>>;

// Per-thread word buffers (64-byte aligned) for the two chunks in flight, FP32 inputs only;
// allocated on a thread's first call, 256 KiB. Row stride kWordLd.
constexpr int64_t kWordLd = kChunkCols<float>;
inline uint16_t* word_buffer(int which) {
  static thread_local std::unique_ptr<uint16_t[]> buf;
  if (!buf) buf.reset(new uint16_t[2 * 32 * kWordLd + 32]);
  const uintptr_t a = (reinterpret_cast<uintptr_t>(buf.get()) + 63) & ~uintptr_t(63);
  return reinterpret_cast<uint16_t*>(a) + int64_t(which) * 32 * kWordLd;
}

template <class C>
inline void chunk_begin(C& s, int64_t rb, int nr, int64_t c0, int64_t pc) {
  s.rb = rb;
  s.nr = nr;
  s.c0 = c0;
  s.pc = pc;
  s.nfull = int(pc / 128);
  s.ct = int64_t(s.nfull) * 128;
  for (int h = 0; h < 8; ++h) s.m[h] = lanes(pc - s.ct - 16 * h);
  for (int w = 0; w < 4 * s.nfull; ++w) s.cw[w] = _mm512_setzero_si512();
  for (int v = 8 * s.nfull; v < 8 * s.nfull + (pc > s.ct ? 8 : 0); ++v)
    s.cm[v] = _mm512_setzero_si512();
}

// Block scales from four-way word amax (hmax4_16): bytes to `out`, code offsets and slow
// bounds to y / tb, flags.
template <Elem E>
inline Quad word_quad(__m512i ab, bool rceil, uint8_t* out, int16_t* y, int16_t* tb) {
  const __m512i b = scale_bytes<E>(ab, rceil);
  store_quad(out, b);
  store_quad16(y, code_offset<E>(b));
  store_quad16(tb, slow_bound<E>(b));
  return {inv_scales(b), __mmask16(_mm512_cmpeq_epi32_mask(ab, _mm512_setzero_si512()) & 0x1111),
          __mmask16(_mm512_cmpge_epu32_mask(ab, set1(0x7F800000u)) & 0x1111)};
}

// Dual-axis row scales of n <= 4 pieces q0.. of row i (16 blocks at a time, scales16):
// bytes to rs (the row's scales for the chunk), Y and TB to ryb, zero / NaN flags bit
// 4 (q - q0) + k for block k of piece q.
template <Elem E, class C>
inline void row_scales16(C& s, int i, int q0, int n, const __m512i* zq, bool rceil,
                         uint8_t* rs) {
  scales16<E>(zq, n, rceil, rs + 4 * q0, &s.ryb[i][4 * q0], s.rzero[i][q0 / 4],
              s.rnan[i][q0 / 4]);
}

// Pass 1 works in units, run interleaved with pass 2 of the previous chunk (strip_impl).
// A unit is one row of the chunk (FP32 colwise and 32x32), or a band of columns over all
// rows: up to four full pieces (512 columns, whose 16 column-amax vectors then stay in
// registers across the rows) or the partial piece. Bands measured faster for dual-axis
// (both inputs) and BF16 colwise, rows for FP32 colwise and 32x32 (BF16 32x32: the same).
template <class T, Mode MODE>
constexpr bool kByRows = sizeof(T) == 4 && MODE != Mode::dual;

template <class T, Mode MODE>
inline int pass1_units(const Chunk<T>& s) {
  if constexpr (kByRows<T, MODE>) return s.nr;
  return (s.nfull + 3) / 4 + (s.pc > s.ct ? 1 : 0);
}

// Full pieces q0..q0+n-1 (n <= 4) of every row.
template <class T, Elem E, Mode MODE>
inline void pass1_pieces(Chunk<T>& s, const T* x, const QParams& p, int q0, QOut row,
                         uint16_t* wb) {
  const bool rceil = p.rounding == ScaleRounding::rceil;
  const int n = s.nfull - q0 < 4 ? s.nfull - q0 : 4;
  __m512i acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_si512();
  for (int i = 0; i < s.nr; ++i) {
    const T* xr = x + (s.rb + i) * p.K + s.c0 + 128 * q0;
    __m512i zq[4];  // dual: first-stage row-block maxima of the pieces
#pragma GCC unroll 4
    for (int qq = 0; qq < 4; ++qq) {
      if (qq >= n) {
        zq[qq] = _mm512_setzero_si512();
        continue;
      }
      __m512i t[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i raw = raw16(xr + 128 * qq + 32 * k);
        if constexpr (sizeof(T) == 4)
          _mm512_store_si512(wb + i * kWordLd + 128 * (q0 + qq) + 32 * k, raw);
        t[k] = abs16(raw);
        acc[4 * qq + k] = _mm512_max_epu16(acc[4 * qq + k], t[k]);
      }
      if constexpr (MODE == Mode::dual) zq[qq] = hmax4_16_lanes(t[0], t[1], t[2], t[3]);
    }
    if constexpr (MODE == Mode::dual)
      row_scales16<E>(s, i, q0, n, zq, rceil, row.scales + (s.rb + i) * row.scale_ld + s.c0 / 32);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)
    if (j < 4 * n) s.cw[4 * q0 + j] = acc[j];
}

// The partial piece of every row (ragged K).
template <class T, Elem E, Mode MODE>
inline void pass1_partial(Chunk<T>& s, const T* x, const QParams& p, QOut row) {
  const int vt = 8 * s.nfull;
  for (int i = 0; i < s.nr; ++i) {
    const T* xr = x + (s.rb + i) * p.K + s.c0;
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
}

// Pass 1, one row (colwise / 32x32 by rows): per-column amax.
template <class T>
inline void pass1_row(Chunk<T>& s, const T* x, const QParams& p, int i, uint16_t* wb) {
  const T* xr = x + (s.rb + i) * p.K + s.c0;
  for (int q = 0; q < s.nfull; ++q) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i raw = raw16(xr + 128 * q + 32 * k);
      if constexpr (sizeof(T) == 4)
        _mm512_store_si512(wb + i * kWordLd + 128 * q + 32 * k, raw);
      s.cw[4 * q + k] = _mm512_max_epu16(s.cw[4 * q + k], abs16(raw));
    }
  }
  const int vt = 8 * s.nfull;
  for (int j = 0; j < 4 && s.m[2 * j]; ++j) {
    const __m512i a0 = abs_bits(load_bits(xr + s.ct + 32 * j, s.m[2 * j]));
    const __m512i a1 = abs_bits(load_bits(xr + s.ct + 32 * j + 16, s.m[2 * j + 1]));
    s.cm[vt + 2 * j] = _mm512_max_epu32(s.cm[vt + 2 * j], a0);
    s.cm[vt + 2 * j + 1] = _mm512_max_epu32(s.cm[vt + 2 * j + 1], a1);
  }
}

// Pass 1 unit u (0 <= u < pass1_units).
template <class T, Elem E, Mode MODE>
inline void pass1_unit(Chunk<T>& s, const T* x, const QParams& p, int u, QOut row,
                       uint16_t* wb) {
  if constexpr (kByRows<T, MODE>) pass1_row<T>(s, x, p, u, wb);
  else if (4 * u < s.nfull) pass1_pieces<T, E, MODE>(s, x, p, 4 * u, row, wb);
  else pass1_partial<T, E, MODE>(s, x, p, row);
}

// Between the passes: column scales (colwise, dual) or tile scales (tile32).
template <Elem E, Mode MODE, class C>
void chunk_scales(C& s, const QParams& p, QOut row, QOut col) {
  const bool rceil = p.rounding == ScaleRounding::rceil;
  const int vt = 8 * s.nfull;
  if constexpr (MODE == Mode::tile32) {
    uint8_t* ts = row.scales + (s.rb / 32) * row.scale_ld + s.c0 / 32;
    for (int q = 0; q < s.nfull; ++q) {
      const __m512i* c = s.cw + 4 * q;
      s.tq[q] = word_quad<E>(hmax4_16(c[0], c[1], c[2], c[3]), rceil, ts + 4 * q, s.ty + 4 * q,
                             s.ttb + 4 * q);
    }
    for (int j = 0; j < 4 && s.m[2 * j]; ++j) {
      s.tab[j] = hmax(s.cm[vt + 2 * j], s.cm[vt + 2 * j + 1]);
      ts[4 * s.nfull + j] = scale_byte(s.tab[j], E, p.rounding);
    }
  } else {
    uint8_t* cs = col.scales + (s.rb / 32) * col.scale_ld + s.c0;
    for (int q = 0; q < s.nfull; ++q) s.cwodd[q] = false;
    for (int w = 0; w < 4 * s.nfull; ++w) {
      __m512i y[2], tb[2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int v = 2 * w + h;
        const __m256i half =
            h ? _mm512_extracti64x4_epi64(s.cw[w], 1) : _mm512_castsi512_si256(s.cw[w]);
        const __m512i ab = _mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16);
        const __m512i b = scale_bytes<E>(ab, rceil);
        store_codes(cs + 16 * v, b);
        s.czero[v] = _mm512_cmpeq_epi32_mask(ab, _mm512_setzero_si512());
        s.cnan[v] = _mm512_cmpge_epu32_mask(ab, set1(0x7F800000u));
        s.cwodd[w / 4] |= (s.czero[v] | s.cnan[v]) != 0;
        s.cm[v] = _mm512_castps_si512(inv_scales(b));
        y[h] = code_offset<E>(b);
        tb[h] = slow_bound<E>(b);
      }
      s.cw[w] = words(y[0], y[1]);
      s.cb[w] = words(tb[0], tb[1]);
      s.cwzero[w] = __mmask32(s.czero[2 * w]) | (__mmask32(s.czero[2 * w + 1]) << 16);
    }
    const int nvec = int((s.pc + 15) / 16);
    for (int v = vt; v < nvec; ++v) {
      const __m512i b = scale_bytes<E>(s.cm[v], rceil);
      store_codes(cs + 16 * v, b, s.m[v - vt]);
      s.czero[v] = _mm512_cmpeq_epi32_mask(s.cm[v], _mm512_setzero_si512());
      s.cnan[v] = _mm512_cmpge_epu32_mask(s.cm[v], set1(0x7F800000u));
      s.cm[v] = _mm512_castps_si512(inv_scales(b));
    }
  }
}

// Pass 2 helpers. The raw words of vector w (32 columns) of row i of the chunk.
template <class T>
inline __m512i load_words(const Chunk<T>& s, const T* xr, int i, int w) {
  if constexpr (sizeof(T) == 4) {
    return _mm512_load_si512(s.words + i * kWordLd + 32 * w);
  } else {
    return raw16(xr + 32 * w);
  }
}

// Zero / NaN flags of block k of piece q in the row direction (dual: row i) or of tile k;
// and whether piece q has any such block.
template <Mode MODE, class C>
inline bool row_zero(const C& s, int i, int q, int k) {
  if constexpr (MODE == Mode::dual) return (s.rzero[i][q / 4] >> (4 * (q & 3) + k)) & 1;
  else return (s.tq[q].zero >> (4 * k)) & 1;
}
template <Mode MODE, class C>
inline bool row_nan(const C& s, int i, int q, int k) {
  if constexpr (MODE == Mode::dual) return (s.rnan[i][q / 4] >> (4 * (q & 3) + k)) & 1;
  else return (s.tq[q].nan >> (4 * k)) & 1;
}
template <Mode MODE, class C>
inline bool row_odd(const C& s, int i, int q) {
  if constexpr (MODE == Mode::dual)
    return ((s.rzero[i][q / 4] | s.rnan[i][q / 4]) >> (4 * (q & 3))) & 0xF;
  else return (s.tq[q].zero | s.tq[q].nan) != 0;
}

// Codes of one piece row: colwise (c) and row / tile copy (r).
struct PieceCodes {
  __m512i c[4], r[4];
};

// The rare path for a piece row with a slow lane or a zero / NaN block: every vector again,
// the fast codes where they hold, 0x00 for zero blocks, slow16 where a lane is slow or the
// block is NaN/Inf.
template <class T, Elem E, bool CLAMP, Mode MODE>
[[gnu::noinline]] PieceCodes fix_piece(const Chunk<T>& s, const T* xr, int i, int q,
                                       const uint8_t* rs) {
  PieceCodes out;
  for (int k = 0; k < 4; ++k) {
    const int w = 4 * q + k;
    const Word16 wd = word16<E>(load_words<T>(s, xr, i, w));
    if constexpr (MODE != Mode::tile32) {
      __m512i slow;
      out.c[k] = encode16<E, CLAMP>(wd, s.cw[w], s.cb[w], slow);
      out.c[k] = _mm512_mask_mov_epi16(out.c[k], s.cwzero[w], _mm512_setzero_si512());
      const __mmask32 nan = __mmask32(s.cnan[2 * w]) | (__mmask32(s.cnan[2 * w + 1]) << 16);
      if (nan != 0 || slow_lanes(wd, s.cb[w]) != 0) {
        out.c[k] = slow16<T, E, CLAMP>(xr + 32 * w, _mm512_castsi512_ps(s.cm[2 * w]),
                                       _mm512_castsi512_ps(s.cm[2 * w + 1]), s.cwzero[w], nan);
      }
    }
    if constexpr (MODE != Mode::colwise) {
      out.r[k] = block_codes16<T, E, CLAMP>(
          xr + 32 * w, wd, set1_16(MODE == Mode::dual ? s.ryb[i][w].y : s.ty[w]),
          set1_16(MODE == Mode::dual ? s.ryb[i][w].tb : s.ttb[w]), row_zero<MODE>(s, i, q, k),
          row_nan<MODE>(s, i, q, k), rs[w]);
    }
  }
  return out;
}

// Pass 2, one row: codes. Full pieces re-read the row's words (FP32: the word buffer;
// BF16: the input, from cache); the partial piece re-reads the input.
// `pf` (may be null): a row of a later chunk to prefetch into L2, `pf_bytes` long.
template <class T, Elem E, bool CLAMP, Mode MODE>
inline void pass2_row(const Chunk<T>& s, const T* x, const QParams& p, int i, QOut row, QOut col,
                      const char* pf, int64_t pf_bytes, bool nt) {
  const T* xr = x + (s.rb + i) * p.K + s.c0;
  const int64_t off = (s.rb + i) * p.K + s.c0;
  RowWriter rw(row.data + off, nt && MODE != Mode::colwise);
  RowWriter cw(col.data + off, nt && MODE != Mode::tile32);
  // Row-direction scale bytes of this row's 32-column blocks (dual) or tiles (tile32).
  const uint8_t* rs = MODE == Mode::dual ? row.scales + (s.rb + i) * row.scale_ld + s.c0 / 32
                                         : row.scales + (s.rb / 32) * row.scale_ld + s.c0 / 32;
  for (int q = 0; q < s.nfull; ++q) {
    if (pf) {
      for (int64_t b = 128 * q * int64_t(sizeof(T)), e = b + 128 * int64_t(sizeof(T));
           b < e && b < pf_bytes; b += 64)
        _mm_prefetch(pf + b, _MM_HINT_T1);
    }
    __m512i raw[4], cc[4], rc[4];  // input words; codes without sign: colwise, row / tile
    __m512i acc = _mm512_setzero_si512();  // non-zero: a slow lane
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int w = 4 * q + k;
      raw[k] = load_words<T>(s, xr, i, w);
      const Word16 wd = word16<E>(raw[k]);
      __m512i sc = _mm512_setzero_si512(), sr = sc;
      if constexpr (MODE != Mode::tile32) cc[k] = encode16u<E, CLAMP>(wd, s.cw[w], s.cb[w], sc);
      if constexpr (MODE != Mode::colwise) {
        rc[k] = encode16u<E, CLAMP>(
            wd, set1_16(MODE == Mode::dual ? s.ryb[i][w].y : s.ty[w]),
            set1_16(MODE == Mode::dual ? s.ryb[i][w].tb : s.ttb[w]), sr);
      }
      acc = _mm512_ternarylogic_epi32(acc, sc, sr, 0xFE);  // acc | sc | sr
    }
    bool odd = _mm512_test_epi16_mask(acc, acc) != 0;
    if constexpr (MODE != Mode::tile32) odd |= s.cwodd[q];
    if constexpr (MODE != Mode::colwise) odd |= row_odd<MODE>(s, i, q);
    if (__builtin_expect(odd, 0)) {
      const PieceCodes f = fix_piece<T, E, CLAMP, MODE>(s, xr, i, q, rs);  // signed codes
      if constexpr (MODE != Mode::tile32) put_codes(cw, f.c);
      if constexpr (MODE != Mode::colwise) put_codes(rw, f.r);
    } else {
      const Signs sg(raw);
      if constexpr (MODE != Mode::tile32) put_codes(cw, cc, sg);
      if constexpr (MODE != Mode::colwise) put_codes(rw, rc, sg);
    }
  }
  rw.finish();
  cw.finish();
  for (int h = 0; h < 8 && s.m[h]; ++h) {
    const __m512i u = load_bits(xr + s.ct + 16 * h, s.m[h]);
    uint8_t* d = row.data + off + s.ct + 16 * h;
    if constexpr (MODE == Mode::tile32) {
      store_codes(d, block_codes<E>(u, s.tab[h / 2], rs[s.ct / 32 + h / 2]), s.m[h]);
    } else {
      const int v = 8 * s.nfull + h;
      const __m512i k =
          encode<E>(_mm512_mul_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(s.cm[v])));
      store_codes(col.data + off + s.ct + 16 * h, fix<E>(k, s.czero[v], s.cnan[v]), s.m[h]);
      if constexpr (MODE == Mode::dual) {
        store_codes(d, block_codes<E>(u, s.rab[i][h / 2], rs[s.ct / 32 + h / 2]), s.m[h]);
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
  Chunk<T> st[2];
  uint16_t* wb[2] = {nullptr, nullptr};
  if constexpr (sizeof(T) == 4) wb[0] = word_buffer(0), wb[1] = word_buffer(1);
  auto begin = [&](int n, int64_t rb, int64_t c0) {
    chunk_begin(st[n], rb, int(imin(32, p.M - rb)), c0, imin(kChunkCols<T>, g.c1 - c0));
    st[n].words = wb[n];
  };
  auto advance = [&](int64_t& rb, int64_t& c0) {
    c0 += kChunkCols<T>;
    if (c0 >= g.c1) {
      c0 = g.c0;
      rb += 32;
    }
    return rb < g.r1;
  };
  int64_t rb = g.r0, c0 = g.c0;
  begin(0, rb, c0);
  for (int u = 0; u < pass1_units<T, MODE>(st[0]); ++u)
    pass1_unit<T, E, MODE>(st[0], x, p, u, row, wb[0]);
  chunk_scales<E, MODE>(st[0], p, row, col);
  for (int cur = 0;; cur ^= 1) {
    int64_t nrb = rb, nc0 = c0;
    const bool more = advance(nrb, nc0);
    int64_t frb = nrb, fc0 = nc0;
    const bool far = more && advance(frb, fc0);
    const int far_rows = far ? int(imin(32, p.M - frb)) : 0;
    const int64_t far_bytes = far ? imin(kChunkCols<T>, g.c1 - fc0) * int64_t(sizeof(T)) : 0;
    Chunk<T>& a = st[cur];
    Chunk<T>& b = st[cur ^ 1];
    if (more) begin(cur ^ 1, nrb, nc0);
    const int rows = more ? (a.nr > b.nr ? a.nr : b.nr) : a.nr;
    const int units = more ? pass1_units<T, MODE>(b) : 0;
    int done = 0;  // pass 1 units of b run so far: spread evenly over the rows of a
    for (int i = 0; i < rows; ++i) {
      const char* pf =
          i < far_rows ? reinterpret_cast<const char*>(x + (frb + i) * p.K + fc0) : nullptr;
      if (i < a.nr) pass2_row<T, E, CLAMP, MODE>(a, x, p, i, row, col, pf, far_bytes, nt);
      for (const int due = (i + 1) * units / rows; done < due; ++done)
        pass1_unit<T, E, MODE>(b, x, p, done, row, wb[cur ^ 1]);
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
}  // namespace mxtrain::kern
