// core/quantize_kernels.h — private: the quantize/dequantize kernel layer and its tables.
//
// quantize.cc (API checks + dispatch + OpenMP split) calls kernels through its dispatch
// tables (core/dispatch.h), one per op family, each entry a struct of function pointers.
// Kernels do no checks and no allocation (beyond one scratch buffer per thread, made on its
// first call: quantize_strip_avx512.h); each works on
// one rectangular Region of X[M,K] whose first row and column are multiples of 32, so
// blocks never straddle two calls and the result does not depend on how work is split.
// quantize_ref.cc holds the scalar reference; the AVX-512 versions are in
// quantize_rowwise_avx512.h and quantize_strip_avx512.h (colwise, 32x32, dual-axis), built
// by quantize_avx512.cc, and dequantize_avx512.cc, on top of simd_avx512.h and
// mx_blocks_avx512.h; quantize_avx512vbmi.cc builds the quantize kernels again with VBMI.
// The scale rule below is shared by every kernel so that all paths agree bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dispatch.h"
#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"

namespace mxtrain::kern {

// Rows [r0, r1) and columns [c0, c1) of X[M,K]; r0 and c0 are multiples of 32.
struct Region {
  int64_t r0, r1, c0, c1;
};

// Shape and settings shared by every call of one quantization.
struct QParams {
  int64_t M, K;
  Elem elem;
  ScaleRounding rounding;
};

// One quantized copy being written: data [M, K]; scales [.., scale_ld] per its layout.
struct QOut {
  uint8_t* data;
  uint8_t* scales;
  int64_t scale_ld;  // row stride of the scale grid (= ScaledTensor::scale_cols())
};

// ---- the scale rule (docs/numerics.md, "The scale exponent") -------------------------------
// Exact integer arithmetic on the bits of amax.
// `ab` is the FP32 bit pattern of amax with the sign cleared (max over |x| bits: ordering of
// non-negative floats equals ordering of their bits, so amax is an integer max).
//   floor: e = floor(log2 amax) - emax_elem
//   rceil: e = ceil(log2(amax / max_elem)), max_elem = 1.75 * 2^emax_elem. With
//          amax = 1.m * 2^k: e = k - emax_elem, plus 1 when 1.m > 1.75 (fraction > 0x600000).
// e is clamped to [-127, 127]. amax below 2^-126 (zero or subnormal) always clamps to -127:
// the largest e it could give is -126 - 8 = -134. The largest e any finite amax can give is
// 127 - 8 + 1 = 120, so 2^-e (used to scale elements) is always a normal float.
// These helpers have internal linkage (unnamed namespace) on purpose: the AVX-512 files
// include them too, and a shared out-of-line copy compiled with AVX-512 flags must never be
// what the scalar path ends up calling on a CPU without AVX-512.
namespace {

inline int scale_exponent(uint32_t ab, int emax, bool rceil) {
  if (ab < 0x00800000u) return -127;
  int e = int(ab >> 23) - 127 - emax;
  if (rceil && (ab & 0x7FFFFFu) > 0x600000u) e += 1;
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// E8M0 byte for a block: 0xFF when the block holds NaN/Inf (ab >= Inf bits).
inline uint8_t scale_byte(uint32_t ab, Elem elem, ScaleRounding rounding) {
  if (ab >= 0x7F800000u) return kE8M0Nan;
  return uint8_t(
      scale_exponent(ab, elem == Elem::e4m3 ? 8 : 15, rounding == ScaleRounding::rceil) + 127);
}

// 2^-e for a finite scale byte b = e + 127 (b <= 247 by the bound above): bits (254-b)<<23.
inline float inv_scale(uint8_t b) { return __builtin_bit_cast(float, uint32_t(254 - b) << 23); }

// Canonical NaN code written for every element of a NaN/Inf block.
inline uint8_t nan_code(Elem e) { return e == Elem::e4m3 ? 0x7F : 0x7E; }

}  // namespace

// ---- kernel signatures ---------------------------------------------------------------------
using QuantF32 = void (*)(const float* x, const QParams& p, Region g, QOut out);
using QuantBF16 = void (*)(const uint16_t* x, const QParams& p, Region g, QOut out);
using DualF32 = void (*)(const float* x, const QParams& p, Region g, QOut row, QOut col);
using DualBF16 = void (*)(const uint16_t* x, const QParams& p, Region g, QOut row, QOut col);
// Dequantize rows [r0, r1) of a whole copy; out: [M, K].
using DequantF32 = void (*)(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                            MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                            float* out);
using DequantBF16 = void (*)(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                             MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                             uint16_t* out);
using ToBF16 = void (*)(const float* x, uint16_t* out, int64_t n);
using FromBF16 = void (*)(const uint16_t* x, float* out, int64_t n);
using NonFinite = bool (*)(const float* x, int64_t n);

// The kernels of one path, per op family; quantize.cc keeps one PathTable of each
// (core/dispatch.h): quantize {scalar, avx512, avx512vbmi}, the others {scalar, avx512}.
struct QuantizeKernels {
  QuantF32 rowwise_f32, colwise_f32, tile32_f32;
  QuantBF16 rowwise_bf16, colwise_bf16, tile32_bf16;
  DualF32 dual_f32;
  DualBF16 dual_bf16;
};
struct DequantizeKernels {
  DequantF32 f32;
  DequantBF16 bf16;
};
struct ConvertKernels {
  ToBF16 f32_to_bf16;
  FromBF16 bf16_to_f32;
};
// What the four tables choose now (mxtrain info).
std::vector<PathChoice> quantize_path_choices();

// ---- the scalar reference kernels (quantize_ref.cc) ---------------------------------------
void quantize_mx_rowwise_f32_ref(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_rowwise_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_colwise_f32_ref(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_colwise_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_tile32_f32_ref(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_tile32_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_dual_f32_ref(const float* x, const QParams& p, Region g, QOut row, QOut col);
void quantize_mx_dual_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut row,
                                QOut col);
void dequantize_mx_f32_ref(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                            MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                            float* out);
void dequantize_mx_bf16_ref(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                             MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                             uint16_t* out);
void convert_f32_to_bf16_ref(const float* x, uint16_t* out, int64_t n);
void convert_bf16_to_f32_ref(const uint16_t* x, float* out, int64_t n);
bool has_nonfinite_f32_ref(const float* x, int64_t n);

// ---- AVX-512 kernels (quantize_avx512.cc, dequantize_avx512.cc) ---------------------------
void quantize_mx_rowwise_f32_avx512(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_rowwise_bf16_avx512(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_colwise_f32_avx512(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_colwise_bf16_avx512(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_tile32_f32_avx512(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_tile32_bf16_avx512(const uint16_t* x, const QParams& p, Region g, QOut out);
void quantize_mx_dual_f32_avx512(const float* x, const QParams& p, Region g, QOut row,
                                  QOut col);
void quantize_mx_dual_bf16_avx512(const uint16_t* x, const QParams& p, Region g, QOut row,
                                   QOut col);
void dequantize_mx_f32_avx512(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                               MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                               float* out);
void dequantize_mx_bf16_avx512(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                                MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                                uint16_t* out);
void convert_f32_to_bf16_avx512(const float* x, uint16_t* out, int64_t n);
void convert_bf16_to_f32_avx512(const uint16_t* x, float* out, int64_t n);
bool has_nonfinite_f32_avx512(const float* x, int64_t n);

// ---- AVX-512 + VBMI kernels (quantize_avx512vbmi.cc) --------------------------------------
void quantize_mx_rowwise_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_rowwise_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                          QOut out);
void quantize_mx_colwise_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_colwise_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                          QOut out);
void quantize_mx_tile32_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut out);
void quantize_mx_tile32_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g,
                                         QOut out);
void quantize_mx_dual_f32_avx512vbmi(const float* x, const QParams& p, Region g, QOut row,
                                      QOut col);
void quantize_mx_dual_bf16_avx512vbmi(const uint16_t* x, const QParams& p, Region g, QOut row,
                                       QOut col);

}  // namespace mxtrain::kern
