// core/quantize_avx512.cc — AVX-512 MX quantization kernels (compiled with AVX-512 flags).
//
// Same contract and same bytes as quantize_ref.cc. Layout of the work:
//  - rowwise: each 1x32 block is two 16-lane vectors; amax, scale and codes stay in
//    registers.
//  - colwise, 32x32 tiles and dual-axis: a 32-row strip is processed in panels of kPanel
//    columns (32 x 128 FP32 = 16 KiB, L1-resident). Pass 1 streams the panel once from
//    memory, row by row, keeping per-column amax in registers (and, for dual-axis, each
//    row block's amax); pass 2 re-reads the panel from L1 and writes the codes. So the
//    dual-axis kernel reads the high-precision input from memory exactly once.
// Ragged edges use masked loads (zeros do not change amax) and masked stores.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "core/quantize_kernels.h"
#include "core/simd_avx512.h"

namespace mxtrain::kern {

namespace {

using namespace avx512;

constexpr int64_t kPanel = 128;         // columns per panel
constexpr int kHalves = int(kPanel / 16);  // 16-lane vectors across a panel row

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

template <class T, Elem E>
void rowwise_impl(const T* x, const QParams& p, Region g, QOut out) {
  for (int64_t r = g.r0; r < g.r1; ++r) {
    const T* xr = x + r * p.K;
    uint8_t* dr = out.data + r * p.K;
    uint8_t* sr = out.scales + r * out.scale_ld;
    for (int64_t c = g.c0; c < g.c1; c += 32) {
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

enum class Mode { colwise, tile32, dual };

// One 32-row strip x one panel: see the file comment. `row` receives the rowwise copy (dual)
// or the tile copy (tile32); `col` the colwise copy (colwise, dual).
template <class T, Elem E, Mode MODE, bool FULL>
inline void panel(const T* x, const QParams& p, int64_t rb, int nr, int64_t c0, int64_t pc,
                  QOut row, QOut col) {
  const bool rceil = p.rounding == ScaleRounding::rceil;
  const int64_t K = p.K;
  __mmask16 m[kHalves];
  for (int h = 0; h < kHalves; ++h) m[h] = FULL ? __mmask16(0xFFFF) : lanes(pc - 16 * h);
  auto load = [&](const T* ptr, int h) { return FULL ? load_bits(ptr) : load_bits(ptr, m[h]); };

  // Pass 1: column amax (and row-block amax for dual-axis).
  __m512i cmax[kHalves];
  for (int h = 0; h < kHalves; ++h) cmax[h] = _mm512_setzero_si512();
  uint32_t rab[32][kHalves / 2];
  for (int i = 0; i < nr; ++i) {
    const T* xr = x + (rb + i) * K + c0;
    for (int j = 0; j < kHalves / 2; ++j) {
      if (!FULL && !m[2 * j]) break;
      const __m512i a0 = abs_bits(load(xr + 32 * j, 2 * j));
      const __m512i a1 = abs_bits(load(xr + 32 * j + 16, 2 * j + 1));
      cmax[2 * j] = _mm512_max_epu32(cmax[2 * j], a0);
      cmax[2 * j + 1] = _mm512_max_epu32(cmax[2 * j + 1], a1);
      if constexpr (MODE == Mode::dual) rab[i][j] = hmax(a0, a1);
    }
  }

  // Scales.
  __m512 cinv[kHalves];
  __mmask16 cnan[kHalves], czero[kHalves];
  bool cspecial = false;
  if constexpr (MODE != Mode::tile32) {
    uint8_t* cs = col.scales + (rb / 32) * col.scale_ld + c0;
    for (int h = 0; h < kHalves; ++h) {
      if (!FULL && !m[h]) break;
      const __m512i b = scale_bytes<E>(cmax[h], rceil);
      FULL ? store_codes(cs + 16 * h, b) : store_codes(cs + 16 * h, b, m[h]);
      cinv[h] = inv_scales(b);
      cnan[h] = _mm512_cmpge_epu32_mask(cmax[h], set1(0x7F800000u));
      czero[h] = _mm512_cmpeq_epi32_mask(cmax[h], _mm512_setzero_si512());
      cspecial |= ((cnan[h] | czero[h]) & m[h]) != 0;
    }
  }
  uint32_t tab[kHalves / 2];
  uint8_t tbyte[kHalves / 2];
  if constexpr (MODE == Mode::tile32) {
    for (int j = 0; j < kHalves / 2; ++j) {
      if (!FULL && !m[2 * j]) break;
      tab[j] = hmax(cmax[2 * j], cmax[2 * j + 1]);
      tbyte[j] = scale_byte(tab[j], E, p.rounding);
      row.scales[(rb / 32) * row.scale_ld + c0 / 32 + j] = tbyte[j];
    }
  }
  uint8_t rbyte[32][kHalves / 2];
  if constexpr (MODE == Mode::dual) {
    for (int i = 0; i < nr; ++i) {
      uint8_t* rs = row.scales + (rb + i) * row.scale_ld + c0 / 32;
      for (int j = 0; j < kHalves / 2; ++j) {
        if (!FULL && !m[2 * j]) break;
        rs[j] = rbyte[i][j] = scale_byte(rab[i][j], E, p.rounding);
      }
    }
  }

  // Pass 2: codes, from the L1-resident panel.
  const __m512i nan = set1(Fp8<E>::nan), zero = _mm512_setzero_si512();
  auto store = [&](uint8_t* ptr, __m512i codes, int h) {
    FULL ? store_codes(ptr, codes) : store_codes(ptr, codes, m[h]);
  };
  for (int i = 0; i < nr; ++i) {
    const T* xr = x + (rb + i) * K + c0;
    const int64_t off = (rb + i) * K + c0;
    for (int h = 0; h < kHalves; ++h) {
      if (!FULL && !m[h]) break;
      const __m512i u = load(xr + 16 * h, h);
      if constexpr (MODE == Mode::tile32) {
        store(row.data + off + 16 * h, block_codes<E>(u, tab[h / 2], tbyte[h / 2]), h);
      } else {
        __m512i k = encode<E>(_mm512_mul_ps(_mm512_castsi512_ps(u), cinv[h]));
        if (cspecial) {
          k = _mm512_mask_mov_epi32(k, czero[h], zero);
          k = _mm512_mask_mov_epi32(k, cnan[h], nan);
        }
        store(col.data + off + 16 * h, k, h);
        if constexpr (MODE == Mode::dual) {
          store(row.data + off + 16 * h, block_codes<E>(u, rab[i][h / 2], rbyte[i][h / 2]), h);
        }
      }
    }
  }
}

template <class T, Elem E, Mode MODE>
void strip_impl(const T* x, const QParams& p, Region g, QOut row, QOut col) {
  for (int64_t rb = g.r0; rb < g.r1; rb += 32) {
    const int nr = int(imin(32, p.M - rb));
    for (int64_t c0 = g.c0; c0 < g.c1; c0 += kPanel) {
      const int64_t pc = imin(kPanel, g.c1 - c0);
      if (pc == kPanel) panel<T, E, MODE, true>(x, p, rb, nr, c0, pc, row, col);
      else panel<T, E, MODE, false>(x, p, rb, nr, c0, pc, row, col);
    }
  }
}

template <class T>
void rowwise_any(const T* x, const QParams& p, Region g, QOut out) {
  if (p.elem == Elem::e4m3) rowwise_impl<T, Elem::e4m3>(x, p, g, out);
  else rowwise_impl<T, Elem::e5m2>(x, p, g, out);
}

template <class T, Mode MODE>
void strip_any(const T* x, const QParams& p, Region g, QOut row, QOut col) {
  if (p.elem == Elem::e4m3) strip_impl<T, Elem::e4m3, MODE>(x, p, g, row, col);
  else strip_impl<T, Elem::e5m2, MODE>(x, p, g, row, col);
}

}  // namespace

void quantize_mx_rowwise_f32__avx512(const float* x, const QParams& p, Region g, QOut out) {
  rowwise_any(x, p, g, out);
}
void quantize_mx_rowwise_bf16__avx512(const uint16_t* x, const QParams& p, Region g, QOut out) {
  rowwise_any(x, p, g, out);
}
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
