// nn/grouped_linear.cc — MoE expert projections (docs/numerics.md, "Grouped Linear";
// mxtrain/nn/grouped_linear.h).
//
// Expert g owns rows offsets[g]..offsets[g+1] of the permuted tokens and computes
// y[rows g] = x[rows g] · W[g]^T with exactly the quantization and GEMM calls a Linear of the
// same precision would make on those rows (shared helpers in linear_common.h), so every expert
// is byte-identical to running it as its own Linear. In particular every activation/gradient
// quantization is done per group: the colwise (token-axis) blocks wgrad uses restart at each
// group start and end in a partial block, never straddling two experts. Experts with 0 rows
// run no GEMM and their dW receives nothing.
//
// Weights: one QuantizedWeight per expert, all tagged with weight.version. A forward (or
// backward) that finds the copies of the current version missing builds them for every
// expert, rows or not, so weight_quantizations() counts layer-level passes exactly like
// Linear: 1 per optimizer step for bf16, mxfp8 with defer off and mxfp8-32x32; 2 for mxfp8
// with defer on (rowwise at the first forward, colwise at the first backward).
//
// defer_backward_quant: off -> forward keeps each group's x colwise copy and both weight
// copies; on -> forward keeps a pointer to the caller's x and backward quantizes each group's
// x colwise and fetches every expert's W colwise through the cache. Backward reads weight
// copies only through ensure_weight(), never through state one forward path alone sets.
#include "mxtrain/nn/grouped_linear.h"

#include "mxtrain/common.h"
#include "nn/linear_common.h"

namespace mxtrain {

using namespace nn_detail;

size_t GroupedLinearSaved::held_bytes() const {
  size_t n = x_bf16.size() * sizeof(uint16_t) + weight_bytes_for_backward;
  for (const MXTensor& t : x_colwise) n += t.bytes();
  return n;
}

GroupedLinear::GroupedLinear(std::string name, int64_t num_experts, int64_t in, int64_t out,
                             LinearPrecision prec)
    : name_(std::move(name)), experts_(num_experts), in_(in), out_(out), prec_(std::move(prec)) {
  MXT_CHECK(num_experts >= 1 && in >= 1 && out >= 1, "GroupedLinear '", name_,
            "': experts, in and out must be >= 1, got experts=", num_experts, " in=", in,
            " out=", out);
  prec_.validate();
  weight.init(name_ + ".weight", {num_experts, out, in});
  wcache_.resize(size_t(num_experts));
}

void GroupedLinear::set_precision(const LinearPrecision& p) {
  p.validate();
  prec_ = p;
  for (QuantizedWeight& c : wcache_) c.clear();
}

namespace {

// Makes every expert's cache hold what `use` needs; true if any expert built copies.
bool ensure_all(std::vector<QuantizedWeight>& caches, const Parameter& w,
                const LinearPrecision& prec, WeightUse use, bool dual, int64_t E, int64_t out,
                int64_t in,
                const GroupedLinear::GroupedWeightProvider& provider, const std::string& name) {
  const bool has_value = w.value.size() == size_t(E * out * in);
  bool built = false;
  for (int64_t g = 0; g < E; ++g) {
    std::function<void(WeightUse, QuantizedWeight&)> p;
    if (provider) p = [&provider, g](WeightUse u, QuantizedWeight& c) { provider(u, g, c); };
    const float* value = has_value ? w.value.data() + g * out * in : nullptr;
    built |= ensure_weight(caches[size_t(g)], w.version, prec.recipe, use, dual,
                           prec.cache_weight_expansion, value, out, in, p,
                           name + "[expert " + std::to_string(g) + "]");
  }
  return built;
}

void check_groups(const GroupList& groups, int64_t E, int64_t T, const std::string& name) {
  MXT_CHECK(groups.num_groups() == E, "GroupedLinear '", name, "': the group list has ",
            groups.num_groups(), " groups but the layer has ", E, " experts");
  MXT_CHECK(groups.offsets.front() == 0 && groups.offsets.back() == T, "GroupedLinear '", name,
            "': the group list covers rows ", groups.offsets.front(), "..",
            groups.offsets.back(), " but x has ", T, " rows; build it with GroupList::from_counts"
            " or from_cumulative");
  for (int64_t g = 0; g < E; ++g)
    MXT_CHECK(groups.count(g) >= 0, "GroupedLinear '", name, "': group ", g,
              " has a negative row count ", groups.count(g));
}

}  // namespace

// x: [T, in]; y: [T, out]; rows grouped by expert.
void GroupedLinear::forward(const float* x, int64_t T, const GroupList& groups, float* y,
                            GroupedLinearSaved& saved) {
  MXT_CHECK(T >= 0, "GroupedLinear '", name_, "': negative token count ", T);
  MXT_CHECK((x != nullptr && y != nullptr) || T == 0, "GroupedLinear '", name_,
            "': forward got a null x or y");
  check_groups(groups, experts_, T, name_);
  const Recipe& r = prec_.recipe;
  const bool defer = prec_.defer_backward_quant;
  saved = GroupedLinearSaved{};
  saved.tokens = T;
  saved.groups = groups;
  if (ensure_all(wcache_, weight, prec_, WeightUse::forward, r.quantized() && !defer, experts_,
                 out_, in_, provider_, name_))
    ++weight_quantizations_;
  if (!r.quantized()) {
    to_bf16(x, T * in_, saved.x_bf16);
  } else if (defer) {
    saved.x = x;
  } else {
    saved.x_colwise.resize(size_t(experts_));
  }
  std::vector<uint16_t>& buf = scratch_u16(0);
  for (int64_t g = 0; g < experts_; ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    const float* xg = x + r0 * in_;
    const uint16_t* xb;
    if (!r.quantized()) {
      xb = saved.x_bf16.data() + r0 * in_;
    } else {
      MXTensor& xr = scratch_mx(0);
      if (defer)
        quantize_reuse(xg, n, in_, MXLayout::rowwise, r.input_cfg(), xr);
      else
        quantize_dual(xg, n, in_, r.input_cfg(), xr, saved.x_colwise[size_t(g)]);
      expand_bf16(xr, buf);
      xb = buf.data();
    }
    gemm_bf16(false, true, n, out_, in_, xb, in_,
              weight_operand(wcache_[size_t(g)], r, WeightUse::forward), in_, y + r0 * out_,
              out_, false);
  }
  for (const QuantizedWeight& c : wcache_)
    saved.weight_bytes_for_backward += backward_only_weight_bytes(c, r);
}

// dy: [T, out]; dx: [T, in] or null.
void GroupedLinear::backward(GroupedLinearSaved& saved, const float* dy, float* dx) {
  const int64_t T = saved.tokens;
  const GroupList& groups = saved.groups;
  MXT_CHECK(groups.num_groups() == experts_, "GroupedLinear '", name_,
            "': backward called without a matching forward (or twice for one forward)");
  MXT_CHECK(dy != nullptr || T == 0, "GroupedLinear '", name_, "': backward got a null dy");
  const Recipe& r = prec_.recipe;
  const bool defer_state = r.quantized() && saved.x_colwise.empty();
  MXT_CHECK(r.quantized() ? (defer_state ? saved.x != nullptr || T == 0
                                         : saved.x_colwise.size() == size_t(experts_))
                          : saved.x_bf16.size() == size_t(T * in_),
            "GroupedLinear '", name_, "': the saved forward state does not match the layer's "
            "precision (was it changed between forward and backward?)");
  const size_t wn = size_t(experts_ * out_ * in_);
  if (weight.grad.empty()) weight.grad.assign(wn, 0.f);
  MXT_CHECK(weight.grad.size() == wn, "GroupedLinear '", name_, "': weight.grad has ",
            weight.grad.size(), " values, expected ", wn);
  if (dx && ensure_all(wcache_, weight, prec_, WeightUse::backward, false, experts_, out_, in_,
                       provider_, name_))
    ++weight_quantizations_;
  std::vector<uint16_t>& a = scratch_u16(0);
  std::vector<uint16_t>& b = scratch_u16(1);
  std::vector<uint16_t>& dyb = scratch_u16(2);
  if (!r.quantized()) to_bf16(dy, T * out_, dyb);
  for (int64_t g = 0; g < experts_; ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    const float* dyg = dy + r0 * out_;
    float* dW = weight.grad.data() + g * out_ * in_;
    const uint16_t* w_bwd = dx ? weight_operand(wcache_[size_t(g)], r, WeightUse::backward)
                               : nullptr;
    if (!r.quantized()) {
      const uint16_t* dyg16 = dyb.data() + r0 * out_;
      if (dx)
        gemm_bf16(false, false, n, in_, out_, dyg16, out_, w_bwd, in_, dx + r0 * in_, in_,
                  false);
      gemm_bf16(true, false, out_, in_, n, dyg16, out_, saved.x_bf16.data() + r0 * in_, in_,
                dW, in_, true);
      continue;
    }
    MXTensor& dyr = scratch_mx(0);
    MXTensor& dyc = scratch_mx(1);
    if (dx)
      quantize_dual(dyg, n, out_, r.grad_cfg(), dyr, dyc);
    else
      quantize_reuse(dyg, n, out_, MXLayout::colwise, r.grad_cfg(), dyc);
    if (dx) {
      expand_bf16(dyr, a);
      gemm_bf16(false, false, n, in_, out_, a.data(), out_, w_bwd, in_, dx + r0 * in_, in_,
                false);
    }
    const MXTensor* xc = &scratch_mx(2);
    if (defer_state)  // deferred: quantize this group's x along T now
      quantize_reuse(saved.x + r0 * in_, n, in_, MXLayout::colwise, r.input_cfg(), scratch_mx(2));
    else
      xc = &saved.x_colwise[size_t(g)];
    expand_bf16(dyc, a);
    expand_bf16(*xc, b);
    gemm_bf16(true, false, out_, in_, n, a.data(), out_, b.data(), in_, dW, in_, true);
  }
  saved = GroupedLinearSaved{};  // release what forward kept
}

}  // namespace mxtrain
