// core/quantize_rowwise_avx512.cc — AVX-512 rowwise (1x32) MX quantization kernels.
//
// Same bytes as quantize_mx_rowwise_*__ref. Each row is taken 128 columns (four blocks, four
// 32-word vectors of the 16-bit encoder in simd16_avx512.h) at a time: one four-way
// horizontal max gives the four amax values, the scales are computed together, each code is
// one saturating subtract, and the codes leave as two 64-byte stores (non-temporal for big
// outputs, through RowWriter as in quantize_avx512.cc). Vectors the 16-bit
// encoder cannot finish go to slow16 (mx_blocks_avx512.h). The row's last, ragged blocks
// use the 32-bit encoder with masked loads (zeros do not change amax) and masked stores.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/mx_blocks_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

// Block k's Y or TB (both words of lanes 4k..4k+3 of v) in every lane.
template <int K>
inline __m512i block_words(__m512i v) {
  return _mm512_shuffle_i32x4(v, v, K * 0x55);
}
inline __m512i block_words(__m512i v, int k) {
  switch (k) {
    case 0: return block_words<0>(v);
    case 1: return block_words<1>(v);
    case 2: return block_words<2>(v);
  }
  return block_words<3>(v);
}

struct RowCodes {
  __m512i c[4];
};

// The rare path for a piece: every block again, with slow16 (exact) for the vectors with a
// lane the 16-bit encoder cannot finish and for NaN/Inf blocks; zero blocks are all 0x00.
template <class T, Elem E, bool CLAMP>
[[gnu::noinline]] RowCodes fix_row_piece(const T* x, const uint8_t* scales, __m512i y2,
                                         __m512i b2, __mmask16 zero, __mmask16 nan) {
  RowCodes out;
  for (int k = 0; k < 4; ++k) {
    out.c[k] = block_codes16<T, E, CLAMP>(x + 32 * k, word16<E>(raw16(x + 32 * k)),
                                          block_words(y2, k), block_words(b2, k),
                                          (zero >> (4 * k)) & 1, (nan >> (4 * k)) & 1,
                                          scales[k]);
  }
  return out;
}

// One 128-column piece of a row: four blocks, one 32-word vector each (simd16_avx512.h).
template <class T, Elem E, bool CLAMP>
inline void rowwise128(const T* x, RowWriter& d, uint8_t* scales, bool rceil) {
  __m512i raw[4], t[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    raw[k] = raw16(x + 32 * k);
    t[k] = abs16(raw[k]);
  }
  const __m512i ab = hmax4_16(t[0], t[1], t[2], t[3]);  // lanes 4k..4k+3: block k
  const __m512i b = scale_bytes<E>(ab, rceil);
  store_quad(scales, b);
  // Y and TB of block k in both words of lanes 4k..4k+3, then broadcast per block.
  const auto both_words = [](__m512i v) {
    return _mm512_or_si512(_mm512_and_si512(v, set1(0xFFFFu)), _mm512_slli_epi32(v, 16));
  };
  const __m512i y2 = both_words(code_offset<E>(b)), b2 = both_words(slow_bound<E>(b));
  __m512i c[4], acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m512i slow;
    c[k] = encode16<E, CLAMP>(word16<E>(raw[k]), block_words(y2, k), block_words(b2, k), slow);
    acc = _mm512_or_si512(acc, slow);
  }
  const __mmask16 zero = _mm512_cmpeq_epi32_mask(ab, _mm512_setzero_si512()) & 0x1111;
  const __mmask16 nan = _mm512_cmpge_epu32_mask(ab, set1(0x7F800000u)) & 0x1111;
  if (__builtin_expect(_mm512_test_epi16_mask(acc, acc) != 0 || (zero | nan) != 0, 0)) {
    const RowCodes f = fix_row_piece<T, E, CLAMP>(x, scales, y2, b2, zero, nan);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) c[k] = f.c[k];
  }
  d.put(pack2(c[0], c[1]));
  d.put(pack2(c[2], c[3]));
}

template <class T, Elem E, bool CLAMP>
void rowwise_impl(const T* x, const QParams& p, Region g, QOut out) {
  const bool nt = p.M * p.K >= kStreamMin;
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * p.K;
    uint8_t* sr = out.scales + r * out.scale_ld;
    int64_t c = g.c0;
    RowWriter w(dr + c, nt);
    for (; c + 128 <= g.c1; c += 128)
      rowwise128<T, E, CLAMP>(xr + c, w, sr + c / 32, p.rounding == ScaleRounding::rceil);
    w.finish();
    for (; c < g.c1; c += 32) {
      const int64_t n = imin(32, p.K - c);
      if (n == 32) {
        const __m512i u0 = load_bits(xr + c), u1 = load_bits(xr + c + 16);
        const uint32_t ab = hmax(abs_bits(u0), abs_bits(u1));
        const uint8_t byte = scale_byte(ab, E, p.rounding);
        sr[c / 32] = byte;
        store_codes(dr + c, block_codes<E>(u0, ab, byte));
        store_codes(dr + c + 16, block_codes<E>(u1, ab, byte));
      } else {
        const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
        const __m512i u0 = load_bits(xr + c, m0), u1 = load_bits(xr + c + 16, m1);
        const uint32_t ab = hmax(abs_bits(u0), abs_bits(u1));
        const uint8_t byte = scale_byte(ab, E, p.rounding);
        sr[c / 32] = byte;
        store_codes(dr + c, block_codes<E>(u0, ab, byte), m0);
        if (m1) store_codes(dr + c + 16, block_codes<E>(u1, ab, byte), m1);
      }
    }
  }
  if (nt) _mm_sfence();  // order the streamed lines before the caller's threads join
}



// floor scales may saturate, so only they need the satfinite clamp in the fast encoder.
template <class T>
void rowwise_any(const T* x, const QParams& p, Region g, QOut out) {
  const bool fl = p.rounding == ScaleRounding::floor;
  if (p.elem == Elem::e4m3) {
    fl ? rowwise_impl<T, Elem::e4m3, true>(x, p, g, out)
       : rowwise_impl<T, Elem::e4m3, false>(x, p, g, out);
  } else {
    fl ? rowwise_impl<T, Elem::e5m2, true>(x, p, g, out)
       : rowwise_impl<T, Elem::e5m2, false>(x, p, g, out);
  }
}

}  // namespace

void quantize_mx_rowwise_f32__avx512(const float* x, const QParams& p, Region g, QOut out) {
  rowwise_any(x, p, g, out);
}
void quantize_mx_rowwise_bf16__avx512(const uint16_t* x, const QParams& p, Region g, QOut out) {
  rowwise_any(x, p, g, out);
}

}  // namespace mxtrain::kern
