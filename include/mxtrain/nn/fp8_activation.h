// mxtrain/nn/fp8_activation.h — an FP32 activation kept between forward and backward as MX
// E4M3 or 4-bit codes (docs/design.md, "Saved for backward"; docs/numerics.md, "SwiGLU input
// in FP8", "SwiGLU input in 4 bits").
//
// The model keeps SwiGLU's input (the fc1 output a = [gate | up], [N, 2F]) for the SwiGLU
// backward. With precision.swiglu_input: fp8 (or auto, the default, where fc1 runs an FP8
// recipe) it is kept as E4M3 codes with one E8M0 scale per
// 32 elements along F — viewed as [2N, F], so the gate half and the up half of a row never
// share a block — instead of FP32: 1 + 1/32 bytes per element instead of 4. With fp4 (opt-in,
// 4-bit recipes) it is kept in fc1's 4-bit format, on the same [2N, F] view: NVFP4 1x16 blocks
// (E4M3 scales, the tensor's FP32 scale) or MXFP4 1x32 (E8M0), nearest rounding: 1/2 + 1/16
// (or 1/32) bytes per element. The forward is unchanged (it reads the FP32 values before
// they are quantized); the backward reads the dequantized values, as DeepSeek-V3 does for its
// SwiGLU inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mxtrain/quantize.h"

namespace mxtrain {

// What a SwiGLU input is kept in for backward (config: precision.swiglu_input): FP32, FP8,
// follow_fc1 ("auto"): FP8 where the fc1 that makes it runs a quantized recipe and keeps a
// quantized copy of its own input (defer_backward_quant off), FP32 elsewhere — so a layer
// kept in BF16 (overrides, an adaptive policy) keeps what the bf16 recipe keeps; or fp4: the
// 4-bit format of fc1's input role where fc1 runs a 4-bit recipe, what auto keeps elsewhere.
// auto never picks 4 bits: NVIDIA's NVFP4 recipe keeps the activations outside the products
// in higher precision, so fp4 is the user's choice.
enum class SwigluInput : uint8_t { fp32, fp8, follow_fc1, fp4 };
SwigluInput parse_swiglu_input(const std::string& name);  // throws naming the valid values
const char* swiglu_input_name(SwigluInput s);             // "fp32" | "fp8" | "auto" | "fp4"
struct LinearPrecision;  // nn/linear.h
struct Recipe;           // recipe.h
// Whether setting s makes sense for a run whose recipe is `run_recipe`: fp8 keeps every
// layer's SwiGLU input in E4M3, which only a quantized recipe's layers do; fp4 needs a 4-bit
// recipe (nvfp4, mxfp4). The one statement of this rule (the config parser asks it).
bool swiglu_input_applies(SwigluInput s, const Recipe& run_recipe);
// How a SwiGLU input is kept under setting s, given the precision of the fc1 that makes it.
struct SwigluStorage {
  enum Kind : uint8_t { fp32, fp8, fp4 } kind = fp32;
  Fp4Config format;  // kind fp4: rowwise, nearest rounding, fc1's input role's kind and scales
};
SwigluStorage swiglu_storage(SwigluInput s, const LinearPrecision& fc1);
// Whether it is kept in FP8 (follow_fc1: a quantized recipe without deferred quantization;
// fp4: the same where fc1 is not 4-bit).
bool swiglu_input_fp8(SwigluInput s, const LinearPrecision& fc1);

class Fp8Activation {
 public:
  // x: [rows, cols] FP32, quantized rowwise (blocks of 32 along cols) with E4M3 elements and
  // the given scale rounding. Storage is reused across calls of the same or smaller size.
  void keep(const float* x, int64_t rows, int64_t cols, ScaleRounding rounding);
  // The same in 4 bits (quantize_fp4, rowwise: blocks of 16 or 32 along cols): cfg must be
  // rowwise-able (no transform). NVFP4's tensor scale from x's amax, or `amax` when given.
  void keep(const float* x, int64_t rows, int64_t cols, const Fp4Config& cfg,
            std::optional<float> amax = {});
  // keep in the storage's format (fp8: E4M3 with `rounding`; fp4: storage.format).
  void keep(const float* x, int64_t rows, int64_t cols, const SwigluStorage& storage,
            ScaleRounding rounding);
  // out: [rows, cols] = the kept values, dequantized (E4M3: exact, codes times powers of two;
  // 4-bit: dequantize's, e2m1 times the scales).
  void restore(float* out) const;
  // x = restore(keep(x)) in place, a few rows at a time: the values the backward would read,
  // without holding the whole copy (the blocks lie along cols, so rows are independent, and
  // NVFP4's tensor scale comes from the whole x's amax: the bytes equal those of one keep +
  // restore).
  void round_trip(float* x, int64_t rows, int64_t cols, const SwigluStorage& storage,
                  ScaleRounding rounding);
  void round_trip(float* x, int64_t rows, int64_t cols, ScaleRounding rounding) {
    round_trip(x, rows, cols, SwigluStorage{SwigluStorage::fp8, {}}, rounding);
  }
  size_t bytes() const { return q_.bytes(); }
  void clear() { q_ = ScaledTensor(); }
  const ScaledTensor& kept() const { return q_; }

 private:
  ScaledTensor q_;
};

}  // namespace mxtrain
