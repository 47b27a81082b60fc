// core/quantize_rowwise_avx512.cc — AVX-512 rowwise (1x32) MX quantization kernels.
//
// Same bytes as quantize_mx_rowwise_*__ref. Each row is taken 128 columns (four blocks,
// eight 16-lane vectors) at a time: one four-way horizontal max gives the four amax values,
// the scales are computed together, and the codes leave as two 64-byte stores. The row's
// last, ragged blocks use masked loads (zeros do not change amax) and masked stores.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/mx_blocks_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

template <class T, Elem E, bool CLAMP>
inline void rowwise128(const T* x, uint8_t* d, uint8_t* scales, bool rceil) {
  __m512i u[8], a[8];
#pragma GCC unroll 8
  for (int h = 0; h < 8; ++h) {
    u[h] = load_bits(x + 16 * h);
    a[h] = abs_bits(u[h]);
  }
  const Quad q = quad_scales<E>(_mm512_max_epu32(a[0], a[1]), _mm512_max_epu32(a[2], a[3]),
                                _mm512_max_epu32(a[4], a[5]), _mm512_max_epu32(a[6], a[7]),
                                rceil, scales);
  encode_quad<E, CLAMP>(u, q, d);
}

template <class T, Elem E, bool CLAMP>
void rowwise_impl(const T* x, const QParams& p, Region g, QOut out) {
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * p.K;
    uint8_t* sr = out.scales + r * out.scale_ld;
    int64_t c = g.c0;
    for (; c + 128 <= g.c1; c += 128)
      rowwise128<T, E, CLAMP>(xr + c, dr + c, sr + c / 32, p.rounding == ScaleRounding::rceil);
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
