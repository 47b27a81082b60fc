// nn/grouped_linear.cc — MoE expert projections (mxtrain/nn/grouped_linear.h): the recipe
// sequence of nn/linear_core.cc with one row group per expert.
//
// Expert g owns rows offsets[g]..offsets[g+1] of the permuted tokens and computes
// y[rows g] = x[rows g] · W[g]^T with exactly the quantizations and products a Linear of the
// same precision runs on those rows, so every expert is byte-identical to running it as its
// own Linear with the same oneDNN shaping. The layer's products run in a VaryingRowsScope
// (mxtrain/gemm.h): a BF16 expert product takes its row count at run time, so a count not
// seen before builds no new oneDNN primitive. Experts with 0 rows run no product and their dW
// receives nothing.
//
// Weights: one QuantizedWeight per expert, all tagged with weight.version. A forward (or
// backward) that finds the copies of the current version missing builds them for every
// expert, rows or not, so weight_quantizations() counts layer-level passes exactly like
// Linear: 1 per optimizer step for bf16, mxfp8 with defer off and mxfp8-32x32; 2 for mxfp8
// with defer on (rowwise at the first forward, colwise at the first backward). Backward reads
// weight copies only through ensure_weight(), never through state one forward path alone sets.
// In the FP32 reference mode each expert's products are gemm_f32 on weight.value, and the
// forward keeps a reference to x.
#include "mxtrain/nn/grouped_linear.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/profile.h"
#include "nn/linear_core.h"

namespace mxtrain {

using namespace nn_detail;

GroupedLinear::GroupedLinear(std::string name, int64_t num_experts, int64_t in, int64_t out,
                             LinearPrecision prec)
    : name_(std::move(name)), experts_(num_experts), in_(in), out_(out), prec_(std::move(prec)) {
  MXT_CHECK(num_experts >= 1 && in >= 1 && out >= 1, "GroupedLinear '", name_,
            "': experts, in and out must be >= 1, got experts=", num_experts, " in=", in,
            " out=", out);
  prec_.validate();
  scales_.reset(prec_.recipe, num_experts);
  scales_.layer_id = layer_hash(name_);
  weight.init(name_ + ".weight", {num_experts, out, in});
  wcache_.resize(size_t(num_experts));
  for (int64_t g = 0; g < num_experts; ++g)
    expert_names_.push_back(name_ + "[expert " + std::to_string(g) + "]");
}

void GroupedLinear::set_precision(const LinearPrecision& p) {
  p.validate();
  if (!(p.recipe == prec_.recipe)) scales_.reset(p.recipe, experts_);
  prec_ = p;
  for (QuantizedWeight& c : wcache_) c.clear();
}

namespace {

// Makes every expert's cache hold what `use` needs; true if any expert built copies.
bool ensure_all(std::vector<QuantizedWeight>& caches, const Parameter& w,
                const LinearPrecision& prec, Use use, bool dual, int64_t E, int64_t out,
                int64_t in,
                const GroupedLinear::GroupedWeightProvider& provider,
                const std::vector<std::string>& names, LayerScaleHistories& scales) {
  const bool has_value = w.value.size() == size_t(E * out * in);
  bool built = false;
  for (int64_t g = 0; g < E; ++g) {
    // Two words of captures: std::function keeps them inline, no allocation.
    std::function<void(Use, QuantizedWeight&)> p;
    if (provider) p = [&provider, g](Use u, QuantizedWeight& c) { provider(u, g, c); };
    const float* value = has_value ? w.value.data() + g * out * in : nullptr;
    built |= ensure_weight(caches[size_t(g)], w.version, prec.recipe, use, dual, value, out, in, p,
                           names[size_t(g)], scales.get(Role::weight, g), &scales.agree);
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

// FP32 reference: y[rows g] = x[rows g] · W[g]^T per expert. x: [T, in]; y: [T, out].
void forward_f32(const GroupedLinear& l, const float* x, const GroupList& g, float* y) {
  const int64_t in = l.in_features(), out = l.out_features();
  MXT_CHECK(int64_t(l.weight.value.size()) == l.num_experts() * out * in, "'", l.name(),
            "': the FP32 reference needs the full weight in weight.value");
  const VaryingRowsScope varying;  // routing changes the row counts every step
  for (int64_t e = 0; e < g.num_groups(); ++e) {
    const int64_t r0 = g.offsets[e], n = g.count(e);
    if (n == 0) continue;
    gemm_f32(false, true, n, out, in, x + r0 * in, in, l.weight.value.data() + e * out * in, in,
             y + r0 * out, out, false);
  }
}

// dx = dy · W[g] (written), dW[g] += dy^T · x per expert (written after clear_grad()).
void backward_f32(GroupedLinear& l, const float* x, const GroupList& g, const float* dy,
                  float* dx) {
  const int64_t in = l.in_features(), out = l.out_features();
  if (l.weight.grad.size() != size_t(l.weight.numel()))
    l.weight.grad.assign(size_t(l.weight.numel()), 0.f);
  const bool acc = l.weight.take_grad_accumulate();
  const VaryingRowsScope varying;  // routing changes the row counts every step
  for (int64_t e = 0; e < g.num_groups(); ++e) {
    const int64_t r0 = g.offsets[e], n = g.count(e);
    if (n == 0) {
      if (!acc) std::fill_n(l.weight.grad.data() + e * out * in, out * in, 0.f);
      continue;
    }
    const float* w = l.weight.value.data() + e * out * in;
    if (dx) gemm_f32(false, false, n, in, out, dy + r0 * out, out, w, in, dx + r0 * in, in, false);
    gemm_f32(true, false, out, in, n, dy + r0 * out, out, x + r0 * in, in,
             l.weight.grad.data() + e * out * in, in, acc);
  }
}

}  // namespace

// x: [T, in]; y: [T, out]; rows grouped by expert.
void GroupedLinear::forward(const float* x, int64_t T, const GroupList& groups, float* y,
                            GroupedLinearSaved& saved) {
  MXT_CHECK(T >= 0, "GroupedLinear '", name_, "': negative token count ", T);
  MXT_CHECK((x != nullptr && y != nullptr) || T == 0, "GroupedLinear '", name_,
            "': forward got a null x or y");
  check_groups(groups, experts_, T, name_);
  if (fp32_ref_) {
    saved = GroupedLinearSaved{};
    saved.x = x;
    saved.groups = groups;
    saved.forward_only = forward_only();
    forward_f32(*this, x, groups, y);
    return;
  }
  MXT_PROFILE_PRODUCT(name_, fwd);
  const Recipe& r = prec_.recipe;
  if (ensure_all(wcache_, weight, prec_, Use::forward, !prec_.defer_backward_quant, experts_,
                 out_, in_, provider_, expert_names_, scales_))
    ++weight_quantizations_;
  cache_ptrs_.resize(size_t(experts_));
  for (int64_t g = 0; g < experts_; ++g) cache_ptrs_[size_t(g)] = &wcache_[size_t(g)];
  const VaryingRowsScope varying;  // routing changes each expert's row count every step
  core_forward(prec_, in_, out_, x, groups, cache_ptrs_.data(), y, saved, scales_);
  for (const QuantizedWeight& c : wcache_)
    saved.weight_bytes_for_backward += backward_only_weight_bytes(c, r);
}

// dy: [T, out]; dx: [T, in] or null.
void GroupedLinear::backward(GroupedLinearSaved& saved, const float* dy, float* dx) {
  if (fp32_ref_) {
    MXT_CHECK(saved.groups.num_groups() == experts_, "GroupedLinear '", name_,
              "': backward called without a matching forward (or twice for one forward)");
    check_backward_allowed(saved, name_);
    backward_f32(*this, saved.x, saved.groups, dy, dx);
    saved = GroupedLinearSaved{};
    return;
  }
  MXT_PROFILE_PRODUCT(name_, bwd);
  MXT_CHECK(saved.groups.num_groups() == experts_, "GroupedLinear '", name_,
            "': backward called without a matching forward (or twice for one forward)");
  MXT_CHECK(dy != nullptr || saved.tokens == 0, "GroupedLinear '", name_,
            "': backward got a null dy");
  const size_t wn = size_t(experts_ * out_ * in_);
  if (weight.grad.empty()) weight.grad.assign(wn, 0.f);
  MXT_CHECK(weight.grad.size() == wn, "GroupedLinear '", name_, "': weight.grad has ",
            weight.grad.size(), " values, expected ", wn);
  if (dx && ensure_all(wcache_, weight, prec_, Use::dgrad, false, experts_, out_, in_,
                       provider_, expert_names_, scales_))
    ++weight_quantizations_;
  grad_ptrs_.resize(size_t(experts_));
  for (int64_t g = 0; g < experts_; ++g) grad_ptrs_[size_t(g)] = weight.grad.data() + g * out_ * in_;
  cache_ptrs_.resize(size_t(experts_));
  for (int64_t g = 0; g < experts_; ++g) cache_ptrs_[size_t(g)] = &wcache_[size_t(g)];
  const VaryingRowsScope varying;
  core_backward(prec_, in_, out_, saved, cache_ptrs_.data(), dy, dx, grad_ptrs_.data(),
                weight.take_grad_accumulate(), name_, scales_);
}

}  // namespace mxtrain
