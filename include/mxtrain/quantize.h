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
#include <optional>
#include <string>
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
constexpr int64_t kNvfp4Block = 16;       // the edge of an NVFP4 block (1x16, 16x1, 16x16)
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
// The element format, scale type and block size travel with the copy. The codes are stored
// row by row as the element format packs them (formats.h: a byte per 8-bit code, two E2M1
// codes per byte), so data holds data_bytes() = rows * row_bytes() bytes. 4-bit copies
// (NVFP4: E4M3 scales per 16; MXFP4: E8M0 per 32) may carry a second, per-tensor FP32 decode
// scale (tensor_scale): an element's value is code * block scale * tensor scale. The MX
// kernels of this file make and read 8-bit codes with E8M0 scales per 32-element block (MX);
// a copy with other ones (FP32 scales, 128-element blocks, 4-bit codes) is the same struct,
// and the functions below refuse it with an error naming it.
struct ScaledTensor {
  int64_t rows = 0, cols = 0;
  MXLayout layout = MXLayout::rowwise;
  Elem elem = Elem::e4m3;
  ScaleType scale_type = ScaleType::e8m0;
  int64_t block = kMXBlock;
  ByteBuffer data;    // [rows, row_bytes()] codes, packed per elem (64-byte aligned)
  ByteBuffer scales;  // [scale_rows(), scale_cols()] scales, scale_type_bytes() each
  // 4-bit copies: the per-tensor FP32 decode scale, when the copy has one (NVFP4's second
  // level). false/1 for every other copy.
  bool has_tensor_scale = false;
  float tensor_scale = 1.f;
  // Whether the codes are of the random-Hadamard-transformed matrix (docs/numerics.md, "The
  // random Hadamard transform"): a colwise wgrad operand; a product needs both or neither.
  bool rht = false;

  int64_t scale_rows() const;
  int64_t scale_cols() const;
  size_t scale_bytes() const;  // scale_rows() * scale_cols() * bytes per scale
  // Bytes of one stored row of codes, and of all of them (what data must hold).
  int64_t row_bytes() const { return elem_row_bytes(elem, cols); }
  size_t data_bytes() const { return size_t(rows * row_bytes()); }
  size_t bytes() const { return data.size() + scales.size() + (has_tensor_scale ? 4 : 0); }
  // Whether the MX kernels read and write this copy (8-bit codes, E8M0 scales, 32-element
  // blocks).
  bool is_mx() const {
    return scale_type == ScaleType::e8m0 && block == kMXBlock && !elem_is_4bit(elem);
  }
  // Whether the 4-bit kernels read and write it: NVFP4 (E2M1 codes, E4M3 scales per 16) or
  // MXFP4 (E2M1 codes, E8M0 scales per 32); 1-D blocks or square tiles of that edge.
  bool is_nvfp4() const {
    return elem == Elem::e2m1 && scale_type == ScaleType::e4m3 && block == kNvfp4Block;
  }
  bool is_mxfp4() const {
    return elem == Elem::e2m1 && scale_type == ScaleType::e8m0 && block == kMXBlock;
  }
  bool is_fp4() const { return is_nvfp4() || is_mxfp4(); }
  // Whether the blockwise kernels read and write it (FP32 scale_inv per 128-element block).
  bool is_fp32_blocks() const {
    return (scale_type == ScaleType::fp32 || scale_type == ScaleType::fp32_pow2) &&
           block == kFp32ScaleBlock && !elem_is_4bit(elem);
  }
  // Whether it holds one FP32 scale_inv for the whole tensor (block 0, scale grid [1, 1]).
  bool is_fp32_tensor() const {
    return scale_type == ScaleType::fp32 && block == 0 && !elem_is_4bit(elem);
  }
  // E8M0 scale byte that applies to element (r, c) (an MX copy).
  uint8_t scale_at(int64_t r, int64_t c) const;
  // Allocate data and scales for the given shape and layout (contents unspecified), MX.
  static ScaledTensor empty(int64_t rows, int64_t cols, MXLayout layout, Elem elem);
};

// Scale exponent rule (docs/numerics.md, "The scale exponent") for one block's amax (finite,
// >= 0). Returns the E8M0 byte.
uint8_t mx_scale_byte(float amax, const QuantConfig& cfg);

// ---- quantize -----------------------------------------------------------------------------
// x: [M, K] row-major, FP32 or BF16 bits. NaN/Inf anywhere in a block -> scale 0xFF and NaN
// elements for that block (the tensor-level API never throws on NaN; callers that must
// reject NaN use has_nonfinite()).
ScaledTensor quantize(const float* x, int64_t M, int64_t K, MXLayout layout,
                      const QuantConfig& cfg);
ScaledTensor quantize(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                      const QuantConfig& cfg);
// Into preallocated output (shape/layout taken from `out`, which must match M, K).
void quantize_into(const float* x, int64_t M, int64_t K, const QuantConfig& cfg, ScaledTensor& out);
void quantize_into(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& out);

// Dual-axis: rowwise and colwise copies from one read of x (both from the original values).
void quantize_dual(const float* x, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& rowwise, ScaledTensor& colwise);
void quantize_dual(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& rowwise, ScaledTensor& colwise);

// ---- FP32-scaled blocks (docs/numerics.md, "Blockwise FP32 scaling") ----------------------
// Blocks of 128: rowwise 1x128 along K, colwise 128x1 along M, tile 128x128 (partial blocks
// at every edge). Each block stores its codes and scale_inv = fl32(1 / scale) as one FP32
// (ScaledTensor::scales holds the FP32 values' bytes; scale_type fp32 or fp32_pow2, block 128).
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
ScaledTensor quantize_blocks(const float* x, int64_t M, int64_t K, MXLayout layout,
                             const BlockQuantConfig& cfg);
ScaledTensor quantize_blocks(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                             const BlockQuantConfig& cfg);
// Into `out` (any ScaledTensor; reshaped to M x K with that layout, its storage reused).
void quantize_blocks_into(const float* x, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, ScaledTensor& out);
void quantize_blocks_into(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, ScaledTensor& out);
// Rowwise (1x128) and colwise (128x1) copies from one read of x.
void quantize_blocks_dual(const float* x, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                          ScaledTensor& rowwise, ScaledTensor& colwise);
void quantize_blocks_dual(const uint16_t* x_bf16, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                          ScaledTensor& rowwise, ScaledTensor& colwise);

// ---- one FP32 scale for the whole tensor (docs/numerics.md, "Per-tensor FP32 scaling") ----
// The copy is a ScaledTensor with layout tile, scale_type fp32, block 0 (one scale for the
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
                             ScaledTensor& out);
float quantize_tensor_scaled(const uint16_t* x_bf16, int64_t M, int64_t K,
                             const TensorQuantConfig& cfg, ScaledTensor& out);
// A given scale (delayed scaling; finite and > 0): x [M, K] quantized with it. Returns the
// amax of x, for the history that gives the next step's scale.
float quantize_tensor_given_scale(const float* x, int64_t M, int64_t K, Elem elem, float scale,
                                  ScaledTensor& out);
float quantize_tensor_given_scale(const uint16_t* x_bf16, int64_t M, int64_t K, Elem elem,
                                  float scale, ScaledTensor& out);

// ---- 4-bit: NVFP4 and MXFP4 (docs/numerics.md, "4-bit formats") ----------------------------
// E2M1 codes, two per byte (formats.h), in blocks along one axis or square tiles:
//   NVFP4: blocks of 16 (rowwise 1x16, colwise 16x1, tile 16x16), one E4M3 decode scale per
//          block, and (tensor_scale) one FP32 decode scale for the tensor from its amax, so
//          that the block scales use E4M3's range: torchao's NVFP4Tensor.to_nvfp4 /
//          nvfp4_quantize, or TransformerEngine's order of the same operations (Nvfp4Order);
//   MXFP4: blocks of 32 (1x32, 32x1, 32x32), one E8M0 scale per block by rceil or floor, as
//          torchao's to_mx(..., float4_e2m1fn_x2) computes them.
// Elements round to nearest even, or stochastically (Fp4Config::stochastic) with random bits
// from Philox4x32-10 keyed by (seed, step, tensor, element) (mxtrain/philox.h), so the bytes
// are the same on every kernel path, thread count and after a resume.
enum class Fp4Kind : uint8_t { nvfp4, mxfp4 };
const char* fp4_kind_name(Fp4Kind k);  // "nvfp4" | "mxfp4"
inline int64_t fp4_block(Fp4Kind k) { return k == Fp4Kind::nvfp4 ? kNvfp4Block : kMXBlock; }

// NVFP4's order of operations (docs/numerics.md, "NVFP4: torchao's and TransformerEngine's
// order"): torchao's (decode scale amax / (448*6), block scale (amax_b / 6) / p, element
// multiplier (1 / p) / s) or TransformerEngine's (encode scale 448*6 / amax, block scale
// amax_b * (S_enc * (1/6)), element multiplier 1 / (s * (1 / S_enc))).
enum class Nvfp4Order : uint8_t { torchao, te };
const char* nvfp4_order_name(Nvfp4Order o);        // "torchao" | "te"
Nvfp4Order parse_nvfp4_order(const std::string&);  // throws listing the choices

// The random bits of stochastic rounding: element i (row-major index r * cols + c of the
// logical matrix) of the copy `copy` (0 rowwise, 1 colwise, 2 tile) draws word i % 4 of
// Philox4x32-10 at counter {i / 4 (low, high 32 bits; copy in bits 16-17 of the high word),
// tensor, step} with key {seed low, seed high 32 bits}.
struct SrKey {
  uint64_t seed = 0;
  uint32_t step = 0;    // the training step (and micro-batch) it is drawn for
  uint32_t tensor = 0;  // which tensor of the step (layer, role, group)
  bool operator==(const SrKey&) const = default;
};

struct Fp4Config {
  Fp4Kind kind = Fp4Kind::nvfp4;
  ScaleRounding rounding = ScaleRounding::rceil;  // MXFP4's E8M0 exponent rule
  bool tensor_scale = true;                       // NVFP4: the second-level FP32 scale
  Nvfp4Order order = Nvfp4Order::torchao;         // NVFP4 with tensor_scale
  bool stochastic = false;                        // stochastic element rounding, keyed by sr
  SrKey sr;
  // The copy's matrix is x after the random Hadamard transform along its rows (colwise copies
  // only: the wgrad operands; docs/numerics.md, "The random Hadamard transform").
  bool rht = false;
};

// max |x| over n elements (FP32 or BF16 bits), NaN if any is NaN (torch.amax's rule), 0 for
// n == 0.
float fp4_amax(const float* x, int64_t n);
float fp4_amax(const uint16_t* x_bf16, int64_t n);
// max |T x| over the random Hadamard transform of x [M, K] along its rows (rht_rows), NaN
// winning, without holding the transformed matrix: the amax an RHT copy's NVFP4 tensor scale
// comes from (quantize_fp4 computes it when not given; a sharded tensor's ranks agree it).
float fp4_rht_amax(const float* x, int64_t M, int64_t K);
// Both: fp4_amax(x, M * K) and fp4_rht_amax(x, M, K), bit for bit, from one read of x where
// the kernels transform as they read (an NVFP4 input whose rowwise copy and transformed
// colwise copy are made together).
struct Fp4Amaxes {
  float plain, rht;
};
Fp4Amaxes fp4_amaxes(const float* x, int64_t M, int64_t K);
// NVFP4's per-tensor decode scale from the tensor's amax, in torchao's order: amax / 2688
// (448 * 6, exact) in FP32; NaN for a NaN amax; 1 where that is not a normal float (amax
// zero, below 2688 * 2^-126, or Inf: TransformerEngine's rule for a zero or infinite amax,
// where torchao's formulas divide by zero or overflow).
float nvfp4_tensor_scale(float amax);

// x [M, K] (FP32 or BF16 bits) into `out` (reshaped, storage reused) with the layout's blocks
// (B = 16 NVFP4, 32 MXFP4; cfg.rht only with colwise). NVFP4 with tensor_scale takes the
// tensor's amax from `amax` when given (e.g. the maximum over ranks of a sharded tensor; of
// the transformed matrix for an RHT copy), else computes it (fp4_amax, after the transform).
// Returns that amax (0 when the copy has no tensor scale). Never throws on NaN/Inf: special
// blocks follow torchao's rules (docs/numerics.md, "4-bit formats").
float quantize_fp4(const float* x, int64_t M, int64_t K, MXLayout layout, const Fp4Config& cfg,
                   ScaledTensor& out, std::optional<float> amax = {});
float quantize_fp4(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                   const Fp4Config& cfg, ScaledTensor& out, std::optional<float> amax = {});
// NVFP4 with a given per-tensor decode scale (torchao's per_tensor_scale argument, taken as
// it is: 0, Inf or NaN give what torchao's formulas give); torchao order only.
void quantize_nvfp4_given_scale(const float* x, int64_t M, int64_t K, MXLayout layout,
                                const Fp4Config& cfg, float tensor_scale, ScaledTensor& out);

// The random Hadamard transform of x [M, K] along its rows (docs/numerics.md, "The random
// Hadamard transform"): each group of 16 consecutive rows, per column, becomes
// (1/4) · H16 · diag(signs) · v, with H16 the Sylvester Hadamard matrix (entries ±1, H·Hᵀ =
// 16·I) and TransformerEngine's fixed signs; a last group of fewer than 16 rows is copied
// unchanged. The transform is orthogonal, so (T·dy)ᵀ(T·x) = dyᵀx. out: [M, K] FP32.
void rht_rows(const float* x, int64_t M, int64_t K, float* out);
void rht_rows(const uint16_t* x_bf16, int64_t M, int64_t K, float* out);
// TransformerEngine's signs (its wgrad sign vector), +1 or -1 each.
const float* rht_signs();
constexpr int64_t kRhtSize = 16;

// ---- dequantize ---------------------------------------------------------------------------
// out: [rows, cols]. MX: value = fp8(code) * 2^(scale-127); a 0xFF scale gives NaN.
// FP32-scaled blocks and per-tensor copies: value = fp8(code) * scale_inv in FP32.
// NVFP4: value = e2m1(code) * fl32(tensor_scale * e4m3(scale)) (torchao's dequantize; the
// block scale alone without a tensor scale); MXFP4: e2m1(code) * 2^(scale-127). A NaN scale
// gives NaN. RHT copies give the transformed matrix's values.
void dequantize(const ScaledTensor& q, float* out);
// BF16 output with the power-of-two scale folded in (MX copies only). Exact while fp8 * 2^e
// stays inside BF16's range (which equals FP32's; below 2^-133 results are BF16
// subnormals/rounded).
void dequantize_bf16(const ScaledTensor& q, uint16_t* out);

// ---- helpers --------------------------------------------------------------------------------
bool has_nonfinite(const float* x, int64_t n);
void f32_to_bf16_array(const float* x, uint16_t* out, int64_t n);   // RNE, dispatched
void bf16_to_f32_array(const uint16_t* x, float* out, int64_t n);

}  // namespace mxtrain
