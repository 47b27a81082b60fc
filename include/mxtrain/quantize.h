// mxtrain/quantize.h — MX block quantization (docs/numerics.md, "MX block scaling" and
// "Layouts") and FP32-scaled block quantization ("Blockwise FP32 scaling"): the public entry
// points.
//
// A 2-D row-major tensor X[M,K] (FP32 or BF16) is cut into blocks of 32 elements along one
// axis (rowwise 1x32 along K, colwise 32x1 along M) or into 32x32 tiles (layout tile). Each block gets one
// E8M0 scale 2^e and each element is stored as fp8(x / 2^e). Data always stays in [M,K]
// order; only the scale grid depends on the layout. Ragged edges are partial blocks.
//
// API (checks once, throws mxtrain::Error) -> dispatch on active_isa() (quantize.cc) ->
// kernels (quantize_ref.cc scalar reference, quantize_avx512.cc, ...). Work is split over
// OpenMP threads by rows / row-blocks / tiles; results do not depend on thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/formats.h"

namespace mxtrain {

enum class ScaleRounding : uint8_t { rceil, floor };
const char* rounding_name(ScaleRounding r);
ScaleRounding parse_rounding(const char* name);  // "rceil" | "floor"

// Which way a copy's blocks run: along cols (rowwise, 1xB), along rows (colwise, Bx1), or
// 2-D (tile, BxB).
enum class MXLayout : uint8_t { rowwise, colwise, tile };
const char* layout_name(MXLayout l);  // "rowwise" | "colwise" | "tile"

constexpr int64_t kMXBlock = 32;
constexpr int64_t kFp32ScaleBlock = 128;  // the edge of an FP32-scaled block
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct QuantConfig {
  Elem elem = Elem::e4m3;
  ScaleRounding rounding = ScaleRounding::rceil;
};

// One block-scaled copy of a logical matrix [rows, cols], B = block:
//   rowwise: scales [rows, ceil(cols/B)]     (blocks along cols)
//   colwise: scales [ceil(rows/B), cols]     (blocks along rows)
//   tile   : scales [ceil(rows/B), ceil(cols/B)]
// block 0 means one scale for the whole tensor (scale grid [1, 1]).
// The scale type and block size travel with the copy. The MX kernels of this file make and
// read E8M0 scales per 32-element block (MX); a copy with other ones (FP32 scales, 128-element
// blocks) is the same struct, and the functions below refuse it with an error naming it.
struct MXTensor {
  int64_t rows = 0, cols = 0;
  MXLayout layout = MXLayout::rowwise;
  Elem elem = Elem::e4m3;
  ScaleType scale_type = ScaleType::e8m0;
  int64_t block = kMXBlock;
  ByteBuffer data;    // [rows, cols] fp8 codes (64-byte aligned)
  ByteBuffer scales;  // [scale_rows(), scale_cols()] scales, scale_type_bytes() each

  int64_t scale_rows() const;
  int64_t scale_cols() const;
  size_t scale_bytes() const;  // scale_rows() * scale_cols() * bytes per scale
  size_t bytes() const { return data.size() + scales.size(); }
  // Whether the MX kernels read and write this copy (E8M0 scales, 32-element blocks).
  bool is_mx() const { return scale_type == ScaleType::e8m0 && block == kMXBlock; }
  // Whether the blockwise kernels read and write it (FP32 scale_inv per 128-element block).
  bool is_fp32_blocks() const {
    return (scale_type == ScaleType::fp32 || scale_type == ScaleType::fp32_pow2) &&
           block == kFp32ScaleBlock;
  }
  // Whether it holds one FP32 scale_inv for the whole tensor (block 0, scale grid [1, 1]).
  bool is_fp32_tensor() const { return scale_type == ScaleType::fp32 && block == 0; }
  // E8M0 scale byte that applies to element (r, c) (an MX copy).
  uint8_t scale_at(int64_t r, int64_t c) const;
  // Allocate data and scales for the given shape and layout (contents unspecified), MX.
  static MXTensor empty(int64_t rows, int64_t cols, MXLayout layout, Elem elem);
};

// Scale exponent rule (docs/numerics.md, "The scale exponent") for one block's amax (finite,
// >= 0). Returns the E8M0 byte.
uint8_t mx_scale_byte(float amax, const QuantConfig& cfg);

// ---- quantize -----------------------------------------------------------------------------
// x: [M, K] row-major, FP32 or BF16 bits. NaN/Inf anywhere in a block -> scale 0xFF and NaN
// elements for that block (the tensor-level API never throws on NaN; callers that must
// reject NaN use has_nonfinite()).
MXTensor quantize(const float* x, int64_t M, int64_t K, MXLayout layout, const QuantConfig& cfg);
MXTensor quantize(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                  const QuantConfig& cfg);
// Into preallocated output (shape/layout taken from `out`, which must match M, K).
void quantize_into(const float* x, int64_t M, int64_t K, const QuantConfig& cfg, MXTensor& out);
void quantize_into(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   MXTensor& out);

// Dual-axis: rowwise and colwise copies from one read of x (both from the original values).
void quantize_dual(const float* x, int64_t M, int64_t K, const QuantConfig& cfg,
                   MXTensor& rowwise, MXTensor& colwise);
void quantize_dual(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   MXTensor& rowwise, MXTensor& colwise);

// ---- FP32-scaled blocks (docs/numerics.md, "Blockwise FP32 scaling") ----------------------
// Blocks of 128: rowwise 1x128 along K, colwise 128x1 along M, tile 128x128 (partial blocks
// at every edge). Each block stores its codes and scale_inv = fl32(1 / scale) as one FP32
// (MXTensor::scales holds the FP32 values' bytes; scale_type fp32 or fp32_pow2, block 128).
struct BlockQuantConfig {
  Elem elem = Elem::e4m3;
  ScaleType scale = ScaleType::fp32_pow2;  // fp32_pow2 (scales truncated to 2^k) or fp32
  float amax_epsilon = 0.f;                // >= 0 and finite; a smaller amax counts as it
};

// The scale of one block from its amax (max |x| with NaN ignored; >= 0): amax < eps -> eps;
// amax == 0 or Inf -> 1; else fl32(max_elem / amax), Inf -> FLT_MAX; fp32_pow2 clears the
// mantissa bits.
float block_scale(float amax, const BlockQuantConfig& cfg);

// x: [M, K] FP32 or BF16 bits. Never throws on NaN/Inf: NaN is ignored by the amax and stays
// NaN; +-Inf saturates to +-max_elem.
MXTensor quantize_blocks(const float* x, int64_t M, int64_t K, MXLayout layout,
                         const BlockQuantConfig& cfg);
MXTensor quantize_blocks(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                         const BlockQuantConfig& cfg);
// Into `out` (any MXTensor; reshaped to M x K with that layout, its storage reused).
void quantize_blocks_into(const float* x, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, MXTensor& out);
void quantize_blocks_into(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, MXTensor& out);
// Rowwise (1x128) and colwise (128x1) copies from one read of x.
void quantize_blocks_dual(const float* x, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                          MXTensor& rowwise, MXTensor& colwise);
void quantize_blocks_dual(const uint16_t* x_bf16, int64_t M, int64_t K,
                          const BlockQuantConfig& cfg, MXTensor& rowwise, MXTensor& colwise);

// ---- one FP32 scale for the whole tensor (docs/numerics.md, "Per-tensor FP32 scaling") ----
// The copy is an MXTensor with layout tile, scale_type fp32, block 0 (one scale for the
// tensor) and a [1, 1] scale grid holding scale_inv = fl32(1 / scale) as one FP32. Elements
// are the blockwise ones: saturating RNE of fl32(x * scale); NaN stays NaN.
struct TensorQuantConfig {
  Elem elem = Elem::e4m3;
  float amax_epsilon = 0.f;  // >= 0 and finite; a smaller amax counts as it
};

// max |x| over x [n] (FP32 or BF16 bits) with NaN ignored (0 for n == 0).
float tensor_amax(const float* x, int64_t n);
float tensor_amax(const uint16_t* x_bf16, int64_t n);
// The scale from the tensor's amax: block_scale's rule with FP32 scales (not a power of two).
float tensor_scale(float amax, const TensorQuantConfig& cfg);
// Current scaling: x [M, K] quantized with tensor_scale(tensor_amax(x)) into `out` (reshaped,
// storage reused). Returns that amax.
float quantize_tensor_scaled(const float* x, int64_t M, int64_t K, const TensorQuantConfig& cfg,
                             MXTensor& out);
float quantize_tensor_scaled(const uint16_t* x_bf16, int64_t M, int64_t K,
                             const TensorQuantConfig& cfg, MXTensor& out);
// A given scale (delayed scaling; finite and > 0): x [M, K] quantized with it. Returns the
// amax of x, for the history that gives the next step's scale.
float quantize_tensor_given_scale(const float* x, int64_t M, int64_t K, Elem elem, float scale,
                                  MXTensor& out);
float quantize_tensor_given_scale(const uint16_t* x_bf16, int64_t M, int64_t K, Elem elem,
                                  float scale, MXTensor& out);

// ---- dequantize ---------------------------------------------------------------------------
// out: [rows, cols]. MX: value = fp8(code) * 2^(scale-127); a 0xFF scale gives NaN.
// FP32-scaled blocks and per-tensor copies: value = fp8(code) * scale_inv in FP32.
void dequantize(const MXTensor& q, float* out);
// BF16 output with the power-of-two scale folded in (MX copies only). Exact while fp8 * 2^e
// stays inside BF16's range (which equals FP32's; below 2^-133 results are BF16
// subnormals/rounded).
void dequantize_bf16(const MXTensor& q, uint16_t* out);

// ---- helpers --------------------------------------------------------------------------------
bool has_nonfinite(const float* x, int64_t n);
void f32_to_bf16_array(const float* x, uint16_t* out, int64_t n);   // RNE, dispatched
void bf16_to_f32_array(const uint16_t* x, float* out, int64_t n);

}  // namespace mxtrain
