// nn/linear.cc — the quantized Linear layer (docs/numerics.md, "Quantized Linear";
// mxtrain/nn/linear.h): the one-group case of the
// recipe sequence in nn/linear_core.cc, plus the bias.
//
// Weight reuse: copies live in the QuantizedWeight cache tagged with Parameter::version and
// are rebuilt only when the version changes. weight_quantizations() counts the passes that
// (re)build copies (or fetch them through the provider): one quantize_dual or conversion
// counts one, a single-layout quantization counts one. Per optimizer step with k micro-batches
// that is 1 for bf16 and mxfp8-32x32 (either defer state) and for mxfp8 with defer off
// (quantize_dual), and 2 for mxfp8 with defer on (rowwise in the first forward, colwise in
// the first backward) — independent of k. held_bytes() counts x copies and backward-only
// weight copies present at the end of forward (the colwise weight stays cached for later
// micro-batches of the same step, so from the second micro-batch on it is counted in both
// defer states).
//
// With a WeightProvider (FSDP) the layer never reads Parameter::value: each use whose copy is
// missing, or whose cache holds another Parameter::version, calls the provider, which must
// fill the copies copies_needed() names (bf16 / rowwise / colwise / tile); the optimizer must
// still bump Parameter::version. NaN/Inf are not errors here: a non-finite block quantizes to
// NaN and propagates to the outputs, where the trainer detects it.
//
// A parallel role's collectives (nn/parallel.h, LinearParallel) wrap the products: forward
// [gather x: column, SP] -> product -> forward_done -> [sum y: row]; backward backward_start ->
// [gather dy: row, SP] -> products -> backward_done -> [sum dx: column]. Under sequence
// parallelism a column layer's products read the copies gathered from every rank's rows
// (forward_given / backward_given), a row layer's backward the gathered copies of dy; partial
// sums go through a per-thread scratch (nn/tp_wire.h) to the caller's rows.
#include "mxtrain/nn/linear.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/profile.h"
#include "nn/linear_core.h"
#include "nn/tp_wire.h"

namespace mxtrain {

using namespace nn_detail;

namespace {
thread_local bool forward_only_now = false;  // inside a ForwardOnlyScope
}  // namespace

ForwardOnlyScope::ForwardOnlyScope() : prev_(forward_only_now) { forward_only_now = true; }
ForwardOnlyScope::~ForwardOnlyScope() { forward_only_now = prev_; }
bool forward_only() { return forward_only_now; }

void LinearPrecision::validate() const {
  MXT_CHECK(!defer_backward_quant || defer_backward_quant_applies(recipe),
            "defer_backward_quant needs a quantized recipe: recipe '", recipe.name,
            "' keeps its inputs in BF16 and has no backward quantization to defer — turn "
            "defer_backward_quant off or choose an FP8 recipe");
  check_products_built(recipe);
}

void LayerScaleHistories::reset(const Recipe& r, int64_t groups) {
  for (int i = 0; i < kNumRoles; ++i) {
    const TensorFormat& f = r.roles[size_t(i)];
    std::vector<ScaleHistory>& v = roles[size_t(i)];
    v.clear();
    if (f.quantized() && f.source == ScaleSource::amax_history)
      v.assign(size_t(groups), ScaleHistory(f));
  }
}

uint32_t layer_hash(const std::string& name) {
  uint32_t h = 0x811C9DC5u;
  for (unsigned char c : name) h = (h ^ c) * 0x01000193u;
  return h;
}

SrKey LayerScaleHistories::sr_key(Role role, int64_t g) const {
  const RoundingClock c = clock ? *clock : RoundingClock{};
  // (layer, role, group) mixed into one 32-bit tensor id (a splitmix-style finalizer).
  uint64_t t = (uint64_t(layer_id) << 32) ^ (uint64_t(role) << 24) ^ uint64_t(group_offset + g);
  t ^= t >> 33;
  t *= 0xFF51AFD7ED558CCDull;
  t ^= t >> 33;
  return {c.seed, c.step, uint32_t(t)};
}

bool LayerScaleHistories::empty() const {
  for (const auto& v : roles)
    if (!v.empty()) return false;
  return true;
}

size_t LinearSaved::held_bytes() const {
  size_t n = weight_bytes_for_backward + gathered.bytes();
  for (const QTensor& t : xs) n += t.bytes();
  return n;
}

Linear::Linear(std::string name, int64_t in, int64_t out, bool has_bias, LinearPrecision prec,
               LinearParallel parallel)
    : name_(std::move(name)), in_(in), out_(out), prec_(std::move(prec)), par_(parallel) {
  MXT_CHECK(in >= 1 && out >= 1, "Linear '", name_, "': in and out must be >= 1, got in=", in,
            " out=", out);
  MXT_CHECK(!has_bias || !par_.active(), "Linear '", name_, "': a tensor-parallel Linear has "
            "no bias");
  prec_.validate();
  scales_.reset(prec_.recipe, 1);
  scales_.layer_id = layer_hash(name_);
  // Every per-tensor amax of a parallel layer is agreed over its group: a weight slice, a
  // sliced input or gradient is a piece of the one-process tensor, and a replicated one the
  // same on every rank (docs/distributed.md, "NVFP4 at a layout").
  scales_.agree = tp_amax_agree(par_);
  weight.init(name_ + ".weight", {out, in});
  if (has_bias) bias.init(name_ + ".bias", {out});
}

void Linear::set_precision(const LinearPrecision& p) {
  p.validate();
  if (!(p.recipe == prec_.recipe)) scales_.reset(p.recipe, 1);  // another recipe's are no use
  prec_ = p;
  wcache_.clear();  // copies of another recipe are of no use
}

void Linear::ensure_weight(Use use, bool dual) {
  const float* value = weight.value.size() == size_t(out_ * in_) ? weight.value.data() : nullptr;
  if (nn_detail::ensure_weight(wcache_, weight.version, prec_.recipe, use, dual, value, out_,
                               in_, provider_, name_, scales_.get(Role::weight, 0),
                               &scales_.agree))
    ++weight_quantizations_;
}

bool Linear::keeps_input_copy() const {
  return !prec_.defer_backward_quant && !fp32_ref_ &&
         !(par_.gathers() && par_.mode == ParallelMode::column);
}

int64_t Linear::output_rows(int64_t T) const {
  if (!par_.gathers()) return T;
  return par_.mode == ParallelMode::column ? T * par_.size() : T / par_.size();
}

void Linear::forward(const float* x, int64_t T, float* y, LinearSaved& saved) {
  product_forward(x, T, y, saved);
  report(ModuleEvent::forward_done);
  finish_forward(y, T);
}

void Linear::recompute(const float* x, int64_t T, float* y, LinearSaved& saved) {
  product_forward(x, T, y, saved);
  finish_forward(y, T);
}

// x: [T, in] FP32 (a gathering column layer: this rank's rows); y: [T, out] (gathering column:
// [P·T, out]; gathering row: the partial sums [T, out] in the wire's scratch, for
// finish_forward).
void Linear::product_forward(const float* x, int64_t T, float* y, LinearSaved& saved) {
  MXT_CHECK(T >= 1, "Linear '", name_, "': forward needs at least one token row, got T=", T);
  MXT_CHECK(x != nullptr && y != nullptr, "Linear '", name_, "': forward got a null x or y");
  const bool gather = par_.gathers() && par_.mode == ParallelMode::column;
  WireScratch& ws = wire_scratch();
  if (par_.gathers() && par_.mode == ParallelMode::row) {  // the partial sums, reduce-scattered
    if (ws.partial.size() < size_t(T * out_)) ws.partial.resize(size_t(T * out_));
    y = ws.partial.data();
  }
  if (fp32_ref_) {  // y = x · W^T in FP32 (a gathering layer: from every rank's rows)
    MXT_CHECK(int64_t(weight.value.size()) == out_ * in_, "'", name_,
              "': the FP32 reference needs the full weight in weight.value");
    saved = LinearSaved{};
    saved.x = x;
    saved.forward_only = forward_only();
    const float* xs = x;
    int64_t N = T;
    if (gather) {
      N = T * par_.size();
      if (ws.rows.size() < size_t(N * in_)) ws.rows.resize(size_t(N * in_));
      gather_rows(par_, x, T, in_, ws.rows.data());
      xs = ws.rows.data();
    }
    saved.tokens = N;
    gemm_f32(false, true, N, out_, in_, xs, in_, weight.value.data(), in_, y, out_, false);
    return;
  }
  if (gather) {  // the input's forward copy from every rank's rows; kept on the rowwise wire
    const Recipe& r = prec_.recipe;
    QTensor& q = par_.wire == SequenceWire::rowwise ? saved.gathered : ws.x;
    const SrKey key = scales_.sr_key(Role::input, 0);
    gather_copies(par_, x, T, in_, r.role(Role::input),
                  copies_needed(r, Role::input, Use::forward), q, &key);
    forward_given(q, y, saved);
    saved.x = x;
    return;
  }
  MXT_PROFILE_PRODUCT(name_, fwd);
  const Recipe& r = prec_.recipe;
  ensure_weight(Use::forward, /*dual=*/!prec_.defer_backward_quant);
  QuantizedWeight* w = &wcache_;
  thread_local GroupList one_group;  // {0, T}, storage kept across calls
  one_group.offsets.assign({0, T});
  core_forward(prec_, in_, out_, x, one_group, &w, y, saved, scales_);
  if (!bias.shape.empty()) {
    MXT_CHECK(bias.value.size() == size_t(out_), "Linear '", name_, "': bias has ",
              bias.value.size(), " values, expected ", out_);
    add_bias(y, T, out_, bias.value.data());
  }
  saved.weight_bytes_for_backward = backward_only_weight_bytes(wcache_, r);
}

// A row layer's sum over the group: y [T, out] in place, or under sequence parallelism from
// the scratch's partial sums into this rank's rows y [T/P, out].
void Linear::finish_forward(float* y, int64_t T) {
  if (!par_.active() || par_.mode != ParallelMode::row) return;
  if (par_.sequence_parallel)
    reduce_scatter(par_, wire_scratch().partial.data(), y, T / par_.size() * out_);
  else
    all_reduce(par_, y, T * out_);
}

// x: [T, in] FP32.
void Linear::save_input(const float* x, int64_t T, LinearSaved& saved) {
  MXT_CHECK(T >= 1, "Linear '", name_, "': save_input needs at least one token row, got T=", T);
  MXT_CHECK(x != nullptr, "Linear '", name_, "': save_input got a null x");
  MXT_CHECK(!par_.gathers(), "Linear '", name_, "': save_input under sequence parallelism");
  if (fp32_ref_) {  // the backward reads x itself
    saved = LinearSaved{};
    saved.x = x;
    saved.tokens = T;
    return;
  }
  thread_local GroupList one_group;  // {0, T}, storage kept across calls
  one_group.offsets.assign({0, T});
  core_save_input(prec_, in_, x, one_group, saved, scales_);
  saved.weight_bytes_for_backward = backward_only_weight_bytes(wcache_, prec_.recipe);
}

// x: [T, in] copies; y: [T, out] FP32.
void Linear::forward_given(const QTensor& x, float* y, LinearSaved& saved) {
  MXT_PROFILE_PRODUCT(name_, fwd);
  const int64_t T = x.rows;
  MXT_CHECK(T >= 1 && x.cols == in_, "Linear '", name_, "': forward_given got a ", T, "x",
            x.cols, " input, expected [T >= 1, ", in_, "]");
  MXT_CHECK(y != nullptr, "Linear '", name_, "': forward_given got a null y");
  ensure_weight(Use::forward, /*dual=*/true);
  QuantizedWeight* w = &wcache_;
  core_forward_given(prec_, out_, x, &w, y, saved);
  if (!bias.shape.empty()) add_bias(y, T, out_, bias.value.data());
  saved.weight_bytes_for_backward = backward_only_weight_bytes(wcache_, prec_.recipe);
}

void Linear::backward_given(LinearSaved& saved, const float* dy, const QTensor* dyq,
                            const QTensor* x_wgrad, float* dx) {
  MXT_PROFILE_PRODUCT(name_, bwd);
  const int64_t T = saved.tokens;
  MXT_CHECK(T >= 1, "Linear '", name_, "': backward called without a matching forward (or "
            "twice for one forward)");
  MXT_CHECK(dy != nullptr || dyq != nullptr, "Linear '", name_, "': backward got no dy");
  MXT_CHECK(!dyq || (dyq->rows == T && dyq->cols == out_), "Linear '", name_, "': the given dy "
            "is ", dyq ? dyq->rows : 0, "x", dyq ? dyq->cols : 0, ", expected ", T, "x", out_);
  MXT_CHECK(!x_wgrad || (x_wgrad->rows == T && x_wgrad->cols == in_), "Linear '", name_,
            "': the given x is ", x_wgrad ? x_wgrad->rows : 0, "x", x_wgrad ? x_wgrad->cols : 0,
            ", expected ", T, "x", in_);
  MXT_CHECK(!dyq || bias.shape.empty(), "Linear '", name_, "': a given dy has no FP32 values "
            "for the bias gradient");
  if (weight.grad.empty()) weight.grad.assign(size_t(out_ * in_), 0.f);
  if (dx) ensure_weight(Use::dgrad, false);
  QuantizedWeight* w = &wcache_;
  float* dW = weight.grad.data();
  core_backward(prec_, in_, out_, saved, &w, dy, dx, &dW, weight.take_grad_accumulate(), name_,
                scales_, dyq, x_wgrad);
  if (!bias.shape.empty()) {
    if (bias.grad.empty()) bias.grad.assign(size_t(out_), 0.f);
    accumulate_bias_grad(dy, T, out_, bias.grad.data(), bias.take_grad_accumulate());
  }
}

// dy: [T, out] FP32; dx: [T, in] FP32 or null (rows as forward's; see the header).
void Linear::backward(LinearSaved& saved, const float* dy, float* dx) {
  report(ModuleEvent::backward_start);
  const int64_t T = saved.tokens;
  MXT_CHECK(T >= 1, "Linear '", name_, "': backward called without a matching forward (or "
            "twice for one forward)");
  MXT_CHECK(dy != nullptr, "Linear '", name_, "': backward got a null dy");
  const bool column = par_.active() && par_.mode == ParallelMode::column;
  const bool gather = par_.gathers();
  const int64_t P = par_.size(), Ns = T / P;  // this rank's rows under sequence parallelism
  WireScratch& ws = wire_scratch();
  float* dxp = dx;  // a gathering column layer's partial input gradient [T, in]
  if (dx && column && gather) {
    if (ws.partial.size() < size_t(T * in_)) ws.partial.resize(size_t(T * in_));
    dxp = ws.partial.data();
  }
  if (fp32_ref_) {
    check_backward_allowed(saved, name_);
    const float* x = saved.x;
    if (gather && column) {  // x from every rank's rows again
      if (ws.rows.size() < size_t(T * in_)) ws.rows.resize(size_t(T * in_));
      gather_rows(par_, saved.x, Ns, in_, ws.rows.data());
      x = ws.rows.data();
    } else if (gather) {  // dy from every rank's rows
      if (ws.rows.size() < size_t(T * out_)) ws.rows.resize(size_t(T * out_));
      gather_rows(par_, dy, Ns, out_, ws.rows.data());
      dy = ws.rows.data();
    }
    backward_f32(x, T, dy, dxp);
    saved = LinearSaved{};
  } else if (gather && column) {  // x's wgrad copies: gathered again, or made from the kept one
    const Recipe& r = prec_.recipe;
    const SrKey key = scales_.sr_key(Role::input, 0);
    QTensor& xw = input_wgrad_copies(par_, saved.x, Ns, in_, r.role(Role::input),
                                     copies_needed(r, Role::input, Use::wgrad), saved.gathered,
                                     ws.x, ws.rows, &key);
    backward_given(saved, dy, nullptr, &xw, dxp);
    saved.gathered.invalidate();
  } else if (gather) {  // dy's dgrad and wgrad copies from every rank's rows
    const Recipe& r = prec_.recipe;
    const SrKey key = scales_.sr_key(Role::grad, 0);
    gather_grad_copies(par_, dy, Ns, out_, r.role(Role::grad),
                       copies_needed(r, Role::grad, Use::dgrad),
                       copies_needed(r, Role::grad, Use::wgrad), ws.dy, ws.rows, &key);
    backward_given(saved, nullptr, &ws.dy, nullptr, dx);
  } else {
    backward_products(saved, dy, dx);
  }
  report(ModuleEvent::backward_done);
  if (!dx || !column) return;
  if (gather)
    reduce_scatter(par_, dxp, dx, Ns * in_);
  else
    all_reduce(par_, dx, T * in_);
}

// dx = dy · W (written), dW (+)= dy^T · x in FP32 from weight.value. x: [T, in], dy: [T, out].
void Linear::backward_f32(const float* x, int64_t T, const float* dy, float* dx) {
  if (weight.grad.size() != size_t(weight.numel())) weight.grad.assign(size_t(weight.numel()), 0.f);
  if (dx) gemm_f32(false, false, T, in_, out_, dy, out_, weight.value.data(), in_, dx, in_, false);
  gemm_f32(true, false, out_, in_, T, dy, out_, x, in_, weight.grad.data(), in_,
           weight.take_grad_accumulate());
}

// The recipe's products on the layer's own saved copies. dy: [T, out]; dx: [T, in] or null.
void Linear::backward_products(LinearSaved& saved, const float* dy, float* dx) {
  MXT_PROFILE_PRODUCT(name_, bwd);
  const int64_t T = saved.tokens;
  if (weight.grad.empty()) weight.grad.assign(size_t(out_ * in_), 0.f);
  MXT_CHECK(weight.grad.size() == size_t(out_ * in_), "Linear '", name_, "': weight.grad has ",
            weight.grad.size(), " values, expected ", out_ * in_);
  if (dx) ensure_weight(Use::dgrad, false);
  QuantizedWeight* w = &wcache_;
  float* dW = weight.grad.data();
  core_backward(prec_, in_, out_, saved, &w, dy, dx, &dW, weight.take_grad_accumulate(), name_,
                scales_);
  if (!bias.shape.empty()) {
    if (bias.grad.empty()) bias.grad.assign(size_t(out_), 0.f);
    accumulate_bias_grad(dy, T, out_, bias.grad.data(), bias.take_grad_accumulate());
  }
}

}  // namespace mxtrain
