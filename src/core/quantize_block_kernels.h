// core/quantize_block_kernels.h — private: the kernels of FP32-scaled block quantization
// (docs/numerics.md, "Blockwise FP32 scaling") and their tables.
//
// quantize.cc (API checks, dispatch, OpenMP split) calls these through one PathTable for
// quantizing and one for dequantizing. A kernel works on one Region of X[M,K] whose first
// row and column are multiples of 128 (the block edge), so a block never straddles two calls
// and the bytes do not depend on how the work is split. Blocks: rowwise 1x128 along K,
// colwise 128x1 along M, tile 128x128; partial blocks at every edge. quantize_block_ref.cc
// holds the scalar reference, quantize_block_avx512.cc the AVX-512 kernels. The scale rule
// below is shared by every kernel, so all paths agree bit for bit.
#pragma once

#include <cfloat>
#include <cstdint>

#include "core/quantize_kernels.h"

namespace mxtrain::kern {

constexpr int64_t kFp32Block = kFp32ScaleBlock;

// Shape and settings of one blockwise quantization.
struct BParams {
  int64_t M, K;
  Elem elem;
  bool pow2;           // fp32_pow2 scales (else fp32)
  float amax_epsilon;  // >= 0, finite
};

// One FP32-scaled copy being written: data [M, K]; scale_inv [.., ld] per its layout.
struct BOut {
  uint8_t* data;
  float* scale_inv;
  int64_t ld;  // row stride of the scale grid (= ScaledTensor::scale_cols())
};

// Internal linkage on purpose (see quantize_kernels.h): the AVX-512 files include these too.
namespace {

// The scale of a block from its amax (max |x| over the block, NaN ignored):
//   amax < eps -> eps; amax == 0 or Inf -> 1; else max_elem / amax in FP32, Inf -> FLT_MAX;
//   pow2: the mantissa bits cleared (a power of two, rounded toward zero).
inline float block_scale(float amax, float max_elem, float eps, bool pow2) {
  if (amax < eps) amax = eps;
  if (amax == 0.f || amax == __builtin_inff()) return 1.f;
  float s = max_elem / amax;
  if (s == __builtin_inff()) s = FLT_MAX;
  if (pow2) s = __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, s) & 0xFF800000u);
  return s;
}

// |x| bits with NaN counted as 0: max over these is the NaN-ignoring amax (fmaxf semantics).
inline uint32_t amax_bits(float v) {
  const uint32_t a = f32_bits(v) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

// Saturating cast of a scaled value: RNE + satfinite, +-Inf -> +-max, NaN -> NaN.
inline uint8_t sat_code(float v, Elem e) {
  const uint32_t u = f32_bits(v);
  if ((u & 0x7FFFFFFFu) == 0x7F800000u)
    return uint8_t((u >> 24) & 0x80u) | (e == Elem::e4m3 ? 0x7E : 0x7B);
  return f32_to_fp8(v, e);
}

}  // namespace

// ---- kernel signatures ---------------------------------------------------------------------
using BQuantF32 = void (*)(const float* x, const BParams& p, Region g, BOut out);
using BQuantBF16 = void (*)(const uint16_t* x, const BParams& p, Region g, BOut out);
using BDualF32 = void (*)(const float* x, const BParams& p, Region g, BOut row, BOut col);
using BDualBF16 = void (*)(const uint16_t* x, const BParams& p, Region g, BOut row, BOut col);
// Rows [r0, r1) of a whole copy to FP32 code value * scale_inv; out: [M, K].
using BDequantF32 = void (*)(const uint8_t* data, const float* scale_inv, int64_t ld,
                             MXLayout layout, const BParams& p, int64_t r0, int64_t r1,
                             float* out);

// One FP32 scale for the whole tensor (docs/numerics.md, "Per-tensor FP32 scaling"): the
// tensor's elements are contiguous, so these run on n elements of it (a chunk; the caller
// max-reduces the chunks' amaxes, exactly). The amax is returned as |x| bits, NaN ignored;
// the cast writes sat_code(fl32(x * s)) per element, the blockwise element rule.
using TAmaxF32 = uint32_t (*)(const float* x, int64_t n);
using TAmaxBF16 = uint32_t (*)(const uint16_t* x, int64_t n);
using TCastF32 = void (*)(const float* x, int64_t n, Elem e, float s, uint8_t* d);
using TCastBF16 = void (*)(const uint16_t* x, int64_t n, Elem e, float s, uint8_t* d);

struct TensorScaleKernels {
  TAmaxF32 amax_f32;
  TAmaxBF16 amax_bf16;
  TCastF32 cast_f32;
  TCastBF16 cast_bf16;
};

struct BlockQuantizeKernels {
  BQuantF32 rowwise_f32, colwise_f32, tile_f32;
  BQuantBF16 rowwise_bf16, colwise_bf16, tile_bf16;
  BDualF32 dual_f32;
  BDualBF16 dual_bf16;
};

// ---- scalar reference (quantize_block_ref.cc) ----------------------------------------------
void quantize_b128_rowwise_f32_ref(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_rowwise_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_colwise_f32_ref(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_colwise_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_tile_f32_ref(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_tile_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_dual_f32_ref(const float* x, const BParams& p, Region g, BOut row, BOut col);
void quantize_b128_dual_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut row,
                                 BOut col);
void dequantize_b128_f32_ref(const uint8_t* data, const float* scale_inv, int64_t ld,
                             MXLayout layout, const BParams& p, int64_t r0, int64_t r1,
                             float* out);

uint32_t tensor_amax_f32_ref(const float* x, int64_t n);
uint32_t tensor_amax_bf16_ref(const uint16_t* x, int64_t n);
void tensor_cast_f32_ref(const float* x, int64_t n, Elem e, float s, uint8_t* d);
void tensor_cast_bf16_ref(const uint16_t* x, int64_t n, Elem e, float s, uint8_t* d);
// out[i] = fp8(data[i]) * scale_inv for n elements; NaN -> 0x7FC00000.
void dequantize_tensor_f32_ref(const uint8_t* data, int64_t n, Elem e, float scale_inv,
                               float* out);

// ---- AVX-512 (quantize_block_avx512.cc) ----------------------------------------------------
void quantize_b128_rowwise_f32_avx512(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_rowwise_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_colwise_f32_avx512(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_colwise_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_tile_f32_avx512(const float* x, const BParams& p, Region g, BOut out);
void quantize_b128_tile_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut out);
void quantize_b128_dual_f32_avx512(const float* x, const BParams& p, Region g, BOut row,
                                   BOut col);
void quantize_b128_dual_bf16_avx512(const uint16_t* x, const BParams& p, Region g, BOut row,
                                    BOut col);

uint32_t tensor_amax_f32_avx512(const float* x, int64_t n);
uint32_t tensor_amax_bf16_avx512(const uint16_t* x, int64_t n);
void tensor_cast_f32_avx512(const float* x, int64_t n, Elem e, float s, uint8_t* d);
void tensor_cast_bf16_avx512(const uint16_t* x, int64_t n, Elem e, float s, uint8_t* d);

}  // namespace mxtrain::kern
