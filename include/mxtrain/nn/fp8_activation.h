// mxtrain/nn/fp8_activation.h — an FP32 activation kept between forward and backward as MX
// E4M3 (docs/design.md, "Saved for backward"; docs/numerics.md, "SwiGLU input in FP8").
//
// The model keeps SwiGLU's input (the fc1 output a = [gate | up], [N, 2F]) for the SwiGLU
// backward. With precision.swiglu_input: fp8 (or auto, the default, where fc1 runs an FP8
// recipe) it is kept as E4M3 codes with one E8M0 scale per
// 32 elements along F — viewed as [2N, F], so the gate half and the up half of a row never
// share a block — instead of FP32: 1 + 1/32 bytes per element instead of 4. The forward is
// unchanged (it reads the FP32 values before they are quantized); the backward reads the
// dequantized values, as DeepSeek-V3 does for its SwiGLU inputs.
#pragma once

#include <cstdint>
#include <string>

#include "mxtrain/quantize.h"

namespace mxtrain {

// What a SwiGLU input is kept in for backward (config: precision.swiglu_input): FP32, FP8,
// or follow_fc1 ("auto"): FP8 where the fc1 that makes it runs an FP8 recipe and keeps a
// quantized copy of its own input (defer_backward_quant off), FP32 elsewhere — so a layer
// kept in BF16 (overrides, an adaptive policy) keeps what the bf16 recipe keeps.
enum class SwigluInput : uint8_t { fp32, fp8, follow_fc1 };
SwigluInput parse_swiglu_input(const std::string& name);  // throws naming the valid values
const char* swiglu_input_name(SwigluInput s);             // "fp32" | "fp8" | "auto"
struct LinearPrecision;  // nn/linear.h
struct Recipe;           // recipe.h
// Whether setting s makes sense for a run whose recipe is `run_recipe`: fp8 keeps every
// layer's SwiGLU input in E4M3, which only an FP8 recipe's layers do. The one statement of
// this rule (the config parser asks it).
bool swiglu_input_applies(SwigluInput s, const Recipe& run_recipe);
// Whether a SwiGLU input is kept in FP8 under setting s, given the precision of the fc1 that
// makes it (follow_fc1: an FP8 recipe without deferred quantization).
bool swiglu_input_fp8(SwigluInput s, const LinearPrecision& fc1);

class Fp8Activation {
 public:
  // x: [rows, cols] FP32, quantized rowwise (blocks of 32 along cols) with E4M3 elements and
  // the given scale rounding. Storage is reused across calls of the same or smaller size.
  void keep(const float* x, int64_t rows, int64_t cols, ScaleRounding rounding);
  // out: [rows, cols] = the kept values, dequantized (exact: codes times powers of two).
  void restore(float* out) const;
  // x = restore(keep(x)) in place, a few rows at a time: the values the backward would read,
  // without holding the whole FP8 copy (the blocks lie along cols, so rows are independent and
  // the bytes equal those of one keep + restore).
  void round_trip(float* x, int64_t rows, int64_t cols, ScaleRounding rounding);
  size_t bytes() const { return q_.bytes(); }
  void clear() { q_ = ScaledTensor(); }

 private:
  ScaledTensor q_;
};

}  // namespace mxtrain
