// core/quantize_avx512vbmi.cc — the MX quantization kernels of quantize_rowwise_avx512.h
// and quantize_strip_avx512.h built with AVX-512 VBMI (byte permutes pack the codes and pick
// the sign bytes; compiled with the AVX-512 flags plus -mavx512vbmi).
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "core/quantize_rowwise_avx512.h"
#include "core/quantize_strip_avx512.h"

#ifndef __AVX512VBMI__
#error "quantize_avx512vbmi.cc must be compiled with -mavx512vbmi"
#endif

namespace mxtrain::kern {

void quantize_mx_rowwise_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out) {
  rowwise_any(x, p, g, out);
}
void quantize_mx_rowwise_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                          QOut out) {
  rowwise_any(x, p, g, out);
}
void quantize_mx_colwise_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out) {
  strip_any<float, Mode::colwise>(x, p, g, out, out);
}
void quantize_mx_colwise_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                          QOut out) {
  strip_any<uint16_t, Mode::colwise>(x, p, g, out, out);
}
void quantize_mx_tile32_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out) {
  strip_any<float, Mode::tile32>(x, p, g, out, out);
}
void quantize_mx_tile32_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                         QOut out) {
  strip_any<uint16_t, Mode::tile32>(x, p, g, out, out);
}
void quantize_mx_dual_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut row,
                                      QOut col) {
  strip_any<float, Mode::dual>(x, p, g, row, col);
}
void quantize_mx_dual_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g, QOut row,
                                       QOut col) {
  strip_any<uint16_t, Mode::dual>(x, p, g, row, col);
}

}  // namespace mxtrain::kern
