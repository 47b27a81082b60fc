// nn/linear.cc — the quantized Linear layer (docs/numerics.md, "Quantized Linear";
// mxtrain/nn/linear.h).
//
// y[T,out] = x[T,in] · W[out,in]^T + b. Per recipe:
//   bf16        : x, dy and W converted to BF16 (RNE); oneDNN BF16 GEMMs, FP32 accumulation.
//   mxfp8       : forward x rowwise · W rowwise^T; dgrad dy rowwise · W colwise;
//                 wgrad dy colwise^T · x colwise (all 32-blocks along the reduction axis).
//   mxfp8-32x32 : as mxfp8, but W is one 32x32-tile copy serving forward and dgrad.
// Element formats and scale rounding come from the recipe's input_cfg (x), weight_cfg (W) and
// grad_cfg (dy). Outputs and dW/db are FP32; the bias is added in FP32.
//
// Weight reuse: copies live in the QuantizedWeight cache tagged with Parameter::version and
// are rebuilt only when the version changes. weight_quantizations() counts the passes that
// (re)build copies (or fetch them through the provider): one quantize_dual or conversion
// counts one, a single-layout quantization counts one. Per optimizer step with k micro-batches
// that is 1 for bf16 and mxfp8-32x32 (either defer state) and for mxfp8 with defer off
// (quantize_dual), and 2 for mxfp8 with defer on (rowwise in the first forward, colwise in
// the first backward) — independent of k.
//
// defer_backward_quant: off -> forward runs quantize_dual on x (keeps x colwise) and makes
// both weight copies; on -> forward quantizes only x rowwise and W's forward copy, keeps a
// pointer to the caller's x, and backward quantizes x colwise and fetches W colwise through
// the cache. Quantization is deterministic and both states run the same GEMM calls, so
// results are byte-identical. held_bytes() counts x copies and backward-only weight copies
// present at the end of forward (the colwise weight stays cached for later micro-batches of
// the same step, so from the second micro-batch on it is counted in both states).
//
// With a WeightProvider (FSDP) the layer never reads Parameter::value: each use whose copy is
// missing, or whose cache holds another Parameter::version, calls the provider, which must
// fill the members weight_needs() lists (bf16 / rowwise / colwise / tile); the optimizer must
// still bump Parameter::version. NaN/Inf are not errors here: a non-finite block quantizes to
// NaN and propagates to the outputs, where the trainer detects it.
#include "mxtrain/nn/linear.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "nn/linear_common.h"

namespace mxtrain {

using namespace nn_detail;

void LinearPrecision::validate() const {
  if (recipe.quantized()) recipe.granularity.validate();
  MXT_CHECK(!(defer_backward_quant && !recipe.quantized()),
            "defer_backward_quant needs a quantized recipe (mxfp8 or mxfp8-32x32); recipe '",
            recipe.name, "' keeps BF16 copies and has no backward quantization to defer — turn "
            "defer_backward_quant off or choose an MX recipe");
}

void QuantizedWeight::clear() {
  version = kNoVersion;
  bf16.clear();
  bf16.shrink_to_fit();
  rowwise = MXTensor{};
  colwise = MXTensor{};
  tile = MXTensor{};
  has_rowwise = has_colwise = has_tile = false;
  rowwise_bf16 = {};
  colwise_bf16 = {};
  tile_bf16 = {};
}

size_t QuantizedWeight::bytes() const {
  size_t n = bf16.size() * sizeof(uint16_t);
  if (has_rowwise) n += rowwise.bytes();
  if (has_colwise) n += colwise.bytes();
  if (has_tile) n += tile.bytes();
  n += (rowwise_bf16.size() + colwise_bf16.size() + tile_bf16.size()) * sizeof(uint16_t);
  return n;
}

size_t LinearSaved::held_bytes() const {
  size_t n = x_bf16.size() * sizeof(uint16_t) + weight_bytes_for_backward;
  if (has_x_colwise) n += x_colwise.bytes();
  return n;
}

Linear::Linear(std::string name, int64_t in, int64_t out, bool has_bias, LinearPrecision prec)
    : name_(std::move(name)), in_(in), out_(out), prec_(std::move(prec)) {
  MXT_CHECK(in >= 1 && out >= 1, "Linear '", name_, "': in and out must be >= 1, got in=", in,
            " out=", out);
  prec_.validate();
  weight.init(name_ + ".weight", {out, in});
  if (has_bias) bias.init(name_ + ".bias", {out});
}

void Linear::set_precision(const LinearPrecision& p) {
  p.validate();
  prec_ = p;
  wcache_.clear();  // copies of another recipe are of no use
}

void Linear::ensure_weight(WeightUse use, bool dual) {
  const float* value = weight.value.size() == size_t(out_ * in_) ? weight.value.data() : nullptr;
  if (nn_detail::ensure_weight(wcache_, weight.version, prec_.recipe, use, dual,
                               prec_.cache_weight_expansion, value, out_, in_, provider_, name_))
    ++weight_quantizations_;
}

// x: [T, in] FP32; y: [T, out] FP32.
void Linear::forward(const float* x, int64_t T, float* y, LinearSaved& saved) {
  MXT_CHECK(T >= 1, "Linear '", name_, "': forward needs at least one token row, got T=", T);
  MXT_CHECK(x != nullptr && y != nullptr, "Linear '", name_, "': forward got a null x or y");
  const Recipe& r = prec_.recipe;
  const bool defer = prec_.defer_backward_quant;
  saved = LinearSaved{};
  saved.tokens = T;
  ensure_weight(WeightUse::forward, /*dual=*/r.quantized() && !defer);
  const uint16_t* xb = nullptr;
  if (!r.quantized()) {
    to_bf16(x, T * in_, saved.x_bf16);
    xb = saved.x_bf16.data();
  } else {
    MXTensor& xr = scratch_mx(0);
    if (defer) {
      quantize_reuse(x, T, in_, MXLayout::rowwise, r.input_cfg(), xr);
      saved.x = x;
    } else {
      quantize_dual(x, T, in_, r.input_cfg(), xr, saved.x_colwise);
      saved.has_x_colwise = true;
    }
    std::vector<uint16_t>& buf = scratch_u16(0);
    expand_bf16(xr, buf);
    xb = buf.data();
  }
  gemm_bf16(false, true, T, out_, in_, xb, in_, weight_operand(wcache_, r, WeightUse::forward),
            in_, y, out_, false);
  if (!bias.shape.empty()) {
    MXT_CHECK(bias.value.size() == size_t(out_), "Linear '", name_, "': bias has ",
              bias.value.size(), " values, expected ", out_);
    add_bias(y, T, out_, bias.value.data());
  }
  saved.weight_bytes_for_backward = backward_only_weight_bytes(wcache_, r);
}

// dy: [T, out] FP32; dx: [T, in] FP32 or null.
void Linear::backward(LinearSaved& saved, const float* dy, float* dx) {
  const int64_t T = saved.tokens;
  MXT_CHECK(T >= 1, "Linear '", name_, "': backward called without a matching forward (or "
            "twice for one forward)");
  MXT_CHECK(dy != nullptr, "Linear '", name_, "': backward got a null dy");
  const Recipe& r = prec_.recipe;
  if (weight.grad.empty()) weight.grad.assign(size_t(out_ * in_), 0.f);
  MXT_CHECK(weight.grad.size() == size_t(out_ * in_), "Linear '", name_, "': weight.grad has ",
            weight.grad.size(), " values, expected ", out_ * in_);
  float* dW = weight.grad.data();
  if (!r.quantized()) {
    MXT_CHECK(saved.x_bf16.size() == size_t(T * in_), "Linear '", name_,
              "': the saved forward state does not match the bf16 recipe (was the precision "
              "changed between forward and backward?)");
    std::vector<uint16_t>& dyb = scratch_u16(1);
    to_bf16(dy, T * out_, dyb);
    if (dx) {
      ensure_weight(WeightUse::backward, false);
      gemm_bf16(false, false, T, in_, out_, dyb.data(), out_,
                weight_operand(wcache_, r, WeightUse::backward), in_, dx, in_, false);
    }
    gemm_bf16(true, false, out_, in_, T, dyb.data(), out_, saved.x_bf16.data(), in_, dW, in_,
              true);
  } else {
    MXT_CHECK(saved.has_x_colwise || saved.x != nullptr, "Linear '", name_,
              "': the saved forward state holds no x for wgrad (was the precision changed "
              "between forward and backward?)");
    MXTensor& dyr = scratch_mx(0);
    MXTensor& dyc = scratch_mx(1);
    if (dx)
      quantize_dual(dy, T, out_, r.grad_cfg(), dyr, dyc);
    else
      quantize_reuse(dy, T, out_, MXLayout::colwise, r.grad_cfg(), dyc);
    std::vector<uint16_t>& a = scratch_u16(0);
    std::vector<uint16_t>& b = scratch_u16(1);
    if (dx) {
      ensure_weight(WeightUse::backward, false);
      expand_bf16(dyr, a);
      gemm_bf16(false, false, T, in_, out_, a.data(), out_,
                weight_operand(wcache_, r, WeightUse::backward), in_, dx, in_, false);
    }
    const MXTensor* xc = &saved.x_colwise;
    if (!saved.has_x_colwise) {  // deferred: quantize x along T now
      quantize_reuse(saved.x, T, in_, MXLayout::colwise, r.input_cfg(), scratch_mx(2));
      xc = &scratch_mx(2);
    }
    expand_bf16(dyc, a);
    expand_bf16(*xc, b);
    gemm_bf16(true, false, out_, in_, T, a.data(), out_, b.data(), in_, dW, in_, true);
  }
  if (!bias.shape.empty()) {
    if (bias.grad.empty()) bias.grad.assign(size_t(out_), 0.f);
    accumulate_bias_grad(dy, T, out_, bias.grad.data());
  }
  saved = LinearSaved{};  // release what forward kept
}

}  // namespace mxtrain
