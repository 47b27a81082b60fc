// core/quantize_rowwise_avx512.h — private: the AVX-512 rowwise (1x32) MX quantization
// kernel (rowwise_any), included by quantize_avx512.cc (without VBMI) and
// quantize_avx512vbmi.cc (with), each compiled with its own flags.
//
// Same bytes as quantize_mx_rowwise_*_ref. Each row is taken in bands of up to 512 columns
// (16 blocks, 16 word vectors of the 16-bit encoder in simd16_avx512.h): a first sweep finds
// the 16 block amax values (four-way horizontal maxima, then one 16-way step) and computes
// the 16 scales together (scales16); a second sweep re-reads the band from L1 (FP32: and
// makes its words again, which measured faster for large inputs than keeping them) and
// encodes it 128 columns (four blocks) at a time, one saturating subtract per code. The
// codes leave as 64-byte stores (non-temporal for big outputs, through RowWriter as in the
// strip kernels). A 128-column piece with a lane the 16-bit encoder cannot finish, or with a
// zero / NaN block, is redone by fix_row_piece. The row's last, ragged blocks use the 32-bit
// encoder with masked loads (zeros do not change amax) and masked stores.
#pragma once

#include "core/mx_blocks_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

// The rare path for a piece (blocks 4q..4q+3 of the band): each block again with
// block_codes16 (0x00 for zero blocks, slow16 for NaN/Inf blocks and blocks with a slow
// lane). Codes carry their sign.
template <class T, Elem E, bool CLAMP>
[[gnu::noinline]] void fix_row_piece(const T* x, const __m512i* raw, const YTB* yt,
                                     const uint8_t* scales, __mmask16 zero, __mmask16 nan,
                                     __m512i* c) {
  for (int k = 0; k < 4; ++k) {
    c[k] = block_codes16<T, E, CLAMP>(x + 32 * k, word16<E>(raw[k]), set1_16(yt[k].y),
                                      set1_16(yt[k].tb), (zero >> k) & 1, (nan >> k) & 1,
                                      scales[k]);
  }
}

// One band of n full 128-column pieces (n <= 4) of a row: x its input, scales its 4n scale
// bytes.
template <class T, Elem E, bool CLAMP>
inline void rowwise_band(const T* x, int n, RowWriter& d, uint8_t* scales, bool rceil) {
  __m512i zq[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    if (q >= n) {
      zq[q] = _mm512_setzero_si512();
      continue;
    }
    __m512i t[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      t[k] = abs16(raw16(x + 128 * q + 32 * k));
    }
    zq[q] = hmax4_16_lanes(t[0], t[1], t[2], t[3]);
  }
  alignas(64) YTB yt[16];
  __mmask16 zero, nan;
  scales16<E>(zq, n, rceil, scales, yt, zero, nan);
  for (int q = 0; q < n; ++q) {
    __m512i raw[4], c[4], acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      raw[k] = raw16(x + 128 * q + 32 * k);
      __m512i slow;
      c[k] = encode16u<E, CLAMP>(word16<E>(raw[k]), set1_16(yt[4 * q + k].y),
                                 set1_16(yt[4 * q + k].tb), slow);
      acc = _mm512_or_si512(acc, slow);
    }
    const __mmask16 odd = __mmask16(((zero | nan) >> (4 * q)) & 0xF);
    if (__builtin_expect(_mm512_test_epi16_mask(acc, acc) != 0 || odd != 0, 0)) {
      fix_row_piece<T, E, CLAMP>(x + 128 * q, raw, yt + 4 * q, scales + 4 * q,
                                 __mmask16(zero >> (4 * q)), __mmask16(nan >> (4 * q)), c);
      put_codes(d, c);
    } else {
      put_codes(d, c, Signs(raw));
    }
  }
}

template <class T, Elem E, bool CLAMP>
void rowwise_impl(const T* x, const QParams& p, Region g, QOut out) {
  const bool nt = p.M * p.K >= kStreamMin;
  const bool rceil = p.rounding == ScaleRounding::rceil;
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * p.K;
    uint8_t* sr = out.scales + r * out.scale_ld;
    int64_t c = g.c0;
    RowWriter w(dr + c, nt);
    for (; c + 128 <= g.c1; c += 512) {
      const int n = int(imin(4, (g.c1 - c) / 128));
      rowwise_band<T, E, CLAMP>(xr + c, n, w, sr + c / 32, rceil);
      if (n < 4) {
        c += 128 * n;
        break;
      }
    }
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
}  // namespace mxtrain::kern
