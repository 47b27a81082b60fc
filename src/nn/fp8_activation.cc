// nn/fp8_activation.cc — an activation kept for backward as MX E4M3 or 4-bit codes
// (nn/fp8_activation.h): quantize_into / quantize_fp4 / dequantize on storage that is
// allocated once and reused.
#include "mxtrain/nn/fp8_activation.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/profile.h"

namespace mxtrain {

SwigluInput parse_swiglu_input(const std::string& name) {
  if (name == "fp32") return SwigluInput::fp32;
  if (name == "fp8") return SwigluInput::fp8;
  if (name == "auto") return SwigluInput::follow_fc1;
  if (name == "fp4") return SwigluInput::fp4;
  MXT_FAIL("unknown SwiGLU input storage '", name, "': use auto, fp32, fp8 or fp4");
}

const char* swiglu_input_name(SwigluInput s) {
  switch (s) {
    case SwigluInput::fp32: return "fp32";
    case SwigluInput::fp8: return "fp8";
    case SwigluInput::follow_fc1: return "auto";
    case SwigluInput::fp4: return "fp4";
  }
  return "?";
}

bool swiglu_input_applies(SwigluInput s, const Recipe& run_recipe) {
  if (s == SwigluInput::fp4) return is_4bit(run_recipe);
  return s != SwigluInput::fp8 || run_recipe.quantized();
}

SwigluStorage swiglu_storage(SwigluInput s, const LinearPrecision& fc1) {
  SwigluStorage out;
  const TensorFormat& in = fc1.recipe.role(Role::input);
  if (s == SwigluInput::fp4 && in.is_4bit()) {
    out.kind = SwigluStorage::fp4;
    out.format = in.fp4_config(MXLayout::rowwise);
    out.format.stochastic = false;  // a forward activation: nearest, as the input's own copies
    out.format.rht = false;
    return out;
  }
  const bool auto_fp8 = (s == SwigluInput::follow_fc1 || s == SwigluInput::fp4) &&
                        fc1.recipe.quantized() && !fc1.defer_backward_quant;
  if (s == SwigluInput::fp8 || auto_fp8) out.kind = SwigluStorage::fp8;
  return out;
}

bool swiglu_input_fp8(SwigluInput s, const LinearPrecision& fc1) {
  return swiglu_storage(s, fc1).kind == SwigluStorage::fp8;
}

void Fp8Activation::keep(const float* x, int64_t rows, int64_t cols, ScaleRounding rounding) {
  MXT_PROFILE(swiglu_fp8, fwd);
  MXT_CHECK(x && rows >= 1 && cols >= 1, "Fp8Activation::keep: null input or empty shape ",
            rows, "x", cols);
  if (q_.rows != rows || q_.cols != cols) {  // a smaller shape keeps the grown storage
    q_.rows = rows;
    q_.cols = cols;
    q_.layout = MXLayout::rowwise;
    q_.elem = Elem::e4m3;
    q_.data.resize(q_.data_bytes());
    q_.scales.resize(size_t(q_.scale_rows() * q_.scale_cols()));
  }
  quantize_into(x, rows, cols, QuantConfig{Elem::e4m3, rounding}, q_);
}

void Fp8Activation::keep(const float* x, int64_t rows, int64_t cols, const Fp4Config& cfg,
                         std::optional<float> amax) {
  MXT_PROFILE(swiglu_fp8, fwd);
  MXT_CHECK(x && rows >= 1 && cols >= 1, "Fp8Activation::keep: null input or empty shape ",
            rows, "x", cols);
  quantize_fp4(x, rows, cols, MXLayout::rowwise, cfg, q_, amax);  // storage reused
}

void Fp8Activation::keep(const float* x, int64_t rows, int64_t cols,
                         const SwigluStorage& storage, ScaleRounding rounding) {
  MXT_CHECK(storage.kind != SwigluStorage::fp32, "internal: Fp8Activation::keep for FP32");
  if (storage.kind == SwigluStorage::fp4)
    keep(x, rows, cols, storage.format);
  else
    keep(x, rows, cols, rounding);
}

void Fp8Activation::restore(float* out) const {
  MXT_PROFILE(swiglu_fp8, bwd);
  MXT_CHECK(out, "Fp8Activation::restore: null output");
  MXT_CHECK(!q_.data.empty(), "Fp8Activation::restore: nothing kept (no forward ran)");
  dequantize(q_, out);
}

void Fp8Activation::round_trip(float* x, int64_t rows, int64_t cols,
                               const SwigluStorage& storage, ScaleRounding rounding) {
  MXT_CHECK(x && rows >= 1 && cols >= 1, "Fp8Activation::round_trip: null input or empty shape ",
            rows, "x", cols);
  MXT_CHECK(storage.kind != SwigluStorage::fp32, "internal: Fp8Activation::round_trip for FP32");
  const bool fp4 = storage.kind == SwigluStorage::fp4;
  // NVFP4's tensor scale is the whole tensor's: its amax first, then every piece with it.
  std::optional<float> amax;
  if (fp4 && storage.format.kind == Fp4Kind::nvfp4 && storage.format.tensor_scale)
    amax = fp4_amax(x, rows * cols);
  constexpr int64_t kRows = 256;
  for (int64_t r = 0; r < rows; r += kRows) {
    const int64_t n = std::min(kRows, rows - r);
    if (fp4)
      keep(x + r * cols, n, cols, storage.format, amax);
    else
      keep(x + r * cols, n, cols, rounding);
    restore(x + r * cols);
  }
}

}  // namespace mxtrain
