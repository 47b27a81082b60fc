// core/mx_blocks_avx512.h — private: MX block-level AVX-512 helpers shared by the
// quantize_*_avx512.cc kernels (include only from files compiled with AVX-512 flags).
//
// Built on simd_avx512.h and simd16_avx512.h: codes for a block with one scale (ragged
// edges), the scales of four blocks (Quad) and their byte / word stores, the zero/NaN block
// fix-ups, RowWriter, which stores a row's 64-byte vectors (non-temporal for big outputs),
// and slow16, the exact path behind the 16-bit encoder. The fast paths keep a row piece's
// vectors in registers; the "#pragma GCC unroll" on their short fixed loops lets -O2 do that
// instead of spilling the arrays to the stack. Internal linkage: these call the scale
// helpers of quantize_kernels.h, which are internal to each file too.
#pragma once

#include "core/quantize_kernels.h"
#include "core/simd16_avx512.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern::avx512 {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline uint32_t hmax(__m512i a, __m512i b) {
  return uint32_t(_mm512_reduce_max_epu32(_mm512_max_epu32(a, b)));
}

// Codes for one 16-lane vector of a block with a uniform scale (rowwise / tile).
template <Elem E>
inline __m512i block_codes(__m512i u, uint32_t ab, uint8_t byte) {
  if (byte == kE8M0Nan) return set1(Fp8<E>::nan);
  if (ab == 0) return _mm512_setzero_si512();
  return encode<E>(_mm512_mul_ps(_mm512_castsi512_ps(u), _mm512_set1_ps(inv_scale(byte))));
}

// Scales of four blocks (tile32: a piece's four tiles): 2^-e in lanes 4j..4j+3 for block j,
// and the zero / NaN blocks (bit 4j set for block j).
struct Quad {
  __m512 inv;
  __mmask16 zero, nan;
};

template <Elem E>
inline __m512i fix(__m512i k, __mmask16 zero, __mmask16 nan) {
  k = _mm512_mask_mov_epi32(k, zero, _mm512_setzero_si512());
  return _mm512_mask_mov_epi32(k, nan, set1(Fp8<E>::nan));
}

// Tensors with at least this many elements write their codes with non-temporal stores
// (RowWriter), skipping the read of each written line: from 8 Mi codes an output is a
// quarter of a 32 MiB L3 or more while its 2-4x larger input streams through the caches
// too. Smaller outputs stay cached for the GEMM that usually reads them next.
constexpr int64_t kStreamMin = int64_t(1) << 23;

// Writes one output row run (a contiguous byte range) 64 bytes at a time, in order. With
// `nt`, and when the run's start is 4-byte aligned, it uses non-temporal stores. A run that
// starts on a 64-byte line (the usual case: ScaledTensor buffers are 64-byte aligned) streams
// each vector as it comes. Otherwise the bytes up to the first 64-byte boundary go out with
// a masked ordinary store, each later line is assembled from two consecutive input vectors
// (a dword permute) and streamed to its aligned address, and the bytes after the last
// boundary go out with a masked ordinary store in finish(). Non-temporal stores skip the
// read-for-ownership of each written line; the kernel issues _mm_sfence() before returning.
// Otherwise: plain unaligned stores.
struct RowWriter {
  uint8_t* d;        // next destination (plain), or the first 64-byte boundary (stream)
  bool stream;
  int head;          // bytes before the first boundary (multiple of 4, 0..60)
  bool started = false;
  __m512i prev, idx;

  RowWriter(uint8_t* p, bool nt) : d(p) {
    const int a = int((-reinterpret_cast<uintptr_t>(p)) & 63);
    stream = nt && (a & 3) == 0;
    head = a;
    if (stream) {
      // Output dword t of a line = dword t + a/4 of (prev, next): indexes >= 16 pick next.
      idx = _mm512_add_epi32(
          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
          _mm512_set1_epi32(a / 4));
      d = p + a;
    }
  }
  void put(__m512i v) {
    if (!stream) {
      _mm512_storeu_si512(d, v);
      d += 64;
      return;
    }
    if (head == 0) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d), v);
      d += 64;
      return;
    }
    if (!started) {
      _mm512_mask_storeu_epi8(d - head, (__mmask64(1) << head) - 1, v);
      started = true;
    } else {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_permutex2var_epi32(prev, idx, v));
      d += 64;
    }
    prev = v;
  }
  void finish() {
    if (stream && head != 0 && started) {
      _mm512_mask_storeu_epi8(d, ~__mmask64(0) >> head,
                              _mm512_permutex2var_epi32(prev, idx, _mm512_setzero_si512()));
    }
  }
};

// Writing a piece row's four word vectors of codes as 128 bytes. The fast path's codes
// lack the sign, which Signs supplies from the input words: with VBMI as sign bytes picked
// once (shared by the copies of a dual-axis pass), else as raw >> 8 per vector.
struct Signs {
#ifdef __AVX512VBMI__
  __m512i b[2];
  explicit Signs(const __m512i* raw) : b{hi_bytes(raw[0], raw[1]), hi_bytes(raw[2], raw[3])} {}
#else
  __m512i s8[4];
  explicit Signs(const __m512i* raw)
      : s8{_mm512_srli_epi16(raw[0], 8), _mm512_srli_epi16(raw[1], 8),
           _mm512_srli_epi16(raw[2], 8), _mm512_srli_epi16(raw[3], 8)} {}
#endif
};
inline void put_codes(RowWriter& w, const __m512i* c, const Signs& sg) {
#ifdef __AVX512VBMI__
  w.put(with_sign8(lo_bytes(c[0], c[1]), sg.b[0]));
  w.put(with_sign8(lo_bytes(c[2], c[3]), sg.b[1]));
#else
  w.put(pack2(with_sign16(c[0], sg.s8[0]), with_sign16(c[1], sg.s8[1])));
  w.put(pack2(with_sign16(c[2], sg.s8[2]), with_sign16(c[3], sg.s8[3])));
#endif
}
// Codes that already carry their sign (the rare path).
inline void put_codes(RowWriter& w, const __m512i* c) {
#ifdef __AVX512VBMI__
  w.put(lo_bytes(c[0], c[1]));
  w.put(lo_bytes(c[2], c[3]));
#else
  w.put(pack2(c[0], c[1]));
  w.put(pack2(c[2], c[3]));
#endif
}

// A block's code offset Y and slow bound TB (simd16_avx512.h) as one pair of 16-bit words.
struct YTB {
  int16_t y, tb;
};

// Scales of 16 blocks from four hmax4_16_lanes results (zq[p] for blocks 4p..4p+3), of
// which the first 4n are real: their bytes to rs[0..4n), Y / TB pairs to ytb[0..16) (one
// whole vector store, so ytb needs room for 16), zero / NaN blocks as mask bits.
template <Elem E>
inline void scales16(const __m512i* zq, int n, bool rceil, uint8_t* rs, YTB* ytb,
                     __mmask16& zero, __mmask16& nan) {
  const __m512i ab = hmax16_16(zq[0], zq[1], zq[2], zq[3]);
  const __m512i b = scale_bytes<E>(ab, rceil);
  _mm_mask_storeu_epi8(rs, lanes(4 * n), _mm512_cvtepi32_epi8(b));
  _mm512_storeu_si512(ytb, _mm512_mask_blend_epi16(0xAAAAAAAAu, code_offset<E>(b),
                                                   _mm512_slli_epi32(slow_bound<E>(b), 16)));
  zero = _mm512_cmpeq_epi32_mask(ab, _mm512_setzero_si512());
  nan = _mm512_cmpge_epu32_mask(ab, set1(0x7F800000u));
}

// Four scale bytes (lanes 0, 4, 8, 12 of b) to out[0..3].
inline void store_quad(uint8_t* out, __m512i b) {
  const __m128i sel = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const int v = _mm_cvtsi128_si32(_mm_shuffle_epi8(_mm512_cvtepi32_epi8(b), sel));
  __builtin_memcpy(out, &v, 4);
}
// Four 16-bit values (lanes 0, 4, 8, 12 of d) to out[0..3].
inline void store_quad16(int16_t* out, __m512i d) {
  const __m512i g = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), d);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out),
                   _mm256_castsi256_si128(_mm512_cvtepi32_epi16(g)));
}

// Exact codes of the 32 elements x[0..31] of one word vector with the 32-bit encoder, for
// the vectors encode16 cannot finish: inv0 / inv1 = 2^-e of elements 0..15 / 16..31; lanes
// of zero / NaN blocks (bit per element) get 0x00 / the NaN code.
template <class T, Elem E, bool CLAMP>
[[gnu::noinline]] __m512i slow16(const T* x, __m512 inv0, __m512 inv1, __mmask32 zero,
                                 __mmask32 nan) {
  const __m512i u0 = load_bits(x), u1 = load_bits(x + 16);
  const __m512i k0 = fix<E>(encode_abs<E, CLAMP>(abs_f(u0), sign_byte(u0), inv0),
                            __mmask16(zero), __mmask16(nan));
  const __m512i k1 = fix<E>(encode_abs<E, CLAMP>(abs_f(u1), sign_byte(u1), inv1),
                            __mmask16(zero >> 16), __mmask16(nan >> 16));
  return words(k0, k1);
}

// Codes of one 32-element block with one scale (a row block or a tile row) on the rare
// path: 0x00 for a zero block, slow16 for a NaN/Inf block or one with a slow lane, else the
// 16-bit codes. x: the block's 32 input elements, w: their words, y / tb: the block's code
// offset and slow bound, byte: its scale byte.
template <class T, Elem E, bool CLAMP>
inline __m512i block_codes16(const T* x, const Word16& w, __m512i y, __m512i tb, bool zero,
                             bool nan, uint8_t byte) {
  if (zero) return _mm512_setzero_si512();
  if (nan || slow_lanes(w, tb) != 0) {
    const __m512 inv = _mm512_set1_ps(inv_scale(byte));
    return slow16<T, E, CLAMP>(x, inv, inv, 0, nan ? ~__mmask32(0) : 0);
  }
  __m512i slow;
  return encode16<E, CLAMP>(w, y, tb, slow);
}

}  // namespace
}  // namespace mxtrain::kern::avx512
