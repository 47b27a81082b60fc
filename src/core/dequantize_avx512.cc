// core/dequantize_avx512.cc — AVX-512 dequantize and FP32/BF16 array kernels.
//
// Same contract and same bits as the reference kernels in quantize_ref.cc: an element is
// decode(code) * 2^(scale-127) in one FP32 multiply, NaN results canonical (0x7FC00000);
// the BF16 forms round that FP32 value to nearest even. 16 columns per step, masked tails.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "core/quantize_kernels.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

inline __m512i load_u8(const uint8_t* p, __mmask16 m, bool full) {
  const __m128i b = full ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                         : _mm_maskz_loadu_epi8(m, p);
  return _mm512_cvtepu8_epi32(b);
}

inline void store_out(float* p, __m512 v, __mmask16 m, bool full) {
  if (full) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}

inline void store_out(uint16_t* p, __m512 v, __mmask16 m, bool full) {
  const __m256i b = _mm512_cvtepi32_epi16(to_bf16_bits(_mm512_castps_si512(v)));
  if (full) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), b);
  else _mm256_mask_storeu_epi16(p, m, b);
}

template <Elem E, class Out>
void dequant_rows(const uint8_t* data, const uint8_t* scales, int64_t ld, MXLayout layout,
                  const QParams& p, int64_t r0, int64_t r1, Out* out) {
  const int64_t K = p.K;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* srow = layout == MXLayout::rowwise ? scales + r * ld : scales + (r / 32) * ld;
    for (int64_t c = 0; c < K; c += 16) {
      const bool full = K - c >= 16;
      const __mmask16 m = lanes(K - c);
      const __m512i codes = load_u8(data + r * K + c, m, full);
      __m512i sb;
      if (layout == MXLayout::colwise) sb = load_u8(srow + c, m, full);
      else sb = set1(srow[c / 32]);  // 16-column steps never straddle a 32-block
      const __m512 v = canonical_nan(_mm512_mul_ps(decode<E>(codes), scale_values(sb)));
      store_out(out + r * K + c, v, m, full);
    }
  }
}

}  // namespace

void dequantize_mx_f32_avx512(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                               MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                               float* out) {
  if (p.elem == Elem::e4m3) dequant_rows<Elem::e4m3>(data, scales, scale_ld, layout, p, r0, r1, out);
  else dequant_rows<Elem::e5m2>(data, scales, scale_ld, layout, p, r0, r1, out);
}

void dequantize_mx_bf16_avx512(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                                MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                                uint16_t* out) {
  if (p.elem == Elem::e4m3) dequant_rows<Elem::e4m3>(data, scales, scale_ld, layout, p, r0, r1, out);
  else dequant_rows<Elem::e5m2>(data, scales, scale_ld, layout, p, r0, r1, out);
}

void convert_f32_to_bf16_avx512(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i b = to_bf16_bits(load_bits(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(b));
  }
  if (i < n) {
    const __mmask16 m = lanes(n - i);
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(to_bf16_bits(load_bits(x + i, m))));
  }
}

void convert_bf16_to_f32_avx512(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_si512(out + i, load_bits(x + i));
  if (i < n) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_epi32(out + i, m, load_bits(x + i, m));
  }
}

bool has_nonfinite_f32_avx512(const float* x, int64_t n) {
  const __m512i inf = set1(0x7F800000u);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i a = _mm512_max_epu32(
        _mm512_max_epu32(abs_bits(load_bits(x + i)), abs_bits(load_bits(x + i + 16))),
        _mm512_max_epu32(abs_bits(load_bits(x + i + 32)), abs_bits(load_bits(x + i + 48))));
    if (_mm512_cmpge_epu32_mask(a, inf)) return true;
  }
  for (; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    if (_mm512_mask_cmpge_epu32_mask(m, abs_bits(load_bits(x + i, m)), inf)) return true;
  }
  return false;
}

}  // namespace mxtrain::kern
