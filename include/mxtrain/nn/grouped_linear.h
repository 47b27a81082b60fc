// mxtrain/nn/grouped_linear.h — MoE expert projections: one Linear per expert over
// contiguous, already-permuted token rows.
//
// y[rows g] = x[rows g] · W[g]^T for each expert g, where the rows of expert g are given by
// a GroupList (counts or cumulative offsets). Forward, dgrad and wgrad follow nn/linear.h per
// expert in the layer's recipe; the token-axis (colwise) blocks used by wgrad restart at every
// group boundary (a partial block at each group's end), so no block straddles two experts.
// Experts with 0 rows are skipped (their dW gets nothing). Weight reuse, defer_backward_quant
// and the FP32 reference mode behave exactly as in Linear. An MoE layer runs its experts once
// per source rank of the expert group (nn/moe.h), so one pass of the layer is several calls:
// the layer's owner says when a pass ends (report), and its hook hears it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/gemm.h"
#include "mxtrain/nn/linear.h"

namespace mxtrain {

// The grouped layer keeps exactly what a Linear keeps, per expert group.
using GroupedLinearSaved = LinearSaved;

class GroupedLinear {
 public:
  GroupedLinear() = default;
  GroupedLinear(std::string name, int64_t num_experts, int64_t in, int64_t out,
                LinearPrecision prec);

  const std::string& name() const { return name_; }
  int64_t num_experts() const { return experts_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const LinearPrecision& precision() const { return prec_; }
  void set_precision(const LinearPrecision& p);

  Parameter weight;  // [E, out, in]

  // x: [T, in] rows grouped by expert; y: [T, out].
  void forward(const float* x, int64_t T, const GroupList& groups, float* y,
               GroupedLinearSaved& saved);
  // dy: [T, out]; dx: [T, in] (nullptr: not needed). Accumulates weight.grad.
  void backward(GroupedLinearSaved& saved, const float* dy, float* dx);

  // True when forward keeps its own copy of x (not with defer_backward_quant nor in the FP32
  // reference mode, which keep a reference to the caller's x).
  bool keeps_input_copy() const { return !prec_.defer_backward_quant && !fp32_ref_; }
  // Numerics reference: per expert y = x · W[g]^T in plain FP32 from weight.value.
  void set_fp32_reference(bool on) { fp32_ref_ = on; }
  bool fp32_reference() const { return fp32_ref_; }
  // The hook hears the pass boundaries its owner reports (nn/linear.h, ModuleEvent).
  void set_hook(LayerHook h) { hook_ = std::move(h); }
  void report(ModuleEvent e) const {
    if (hook_) hook_(e);
  }
  int64_t weight_quantizations() const { return weight_quantizations_; }
  // Per-expert caches (E entries) — FSDP may fill them through the provider.
  std::vector<QuantizedWeight>& weight_caches() { return wcache_; }
  // Called with the expert index; same contract as Linear's provider.
  using GroupedWeightProvider =
      std::function<void(Use use, int64_t expert, QuantizedWeight& cache)>;
  void set_weight_provider(GroupedWeightProvider p) { provider_ = std::move(p); }
  // Delayed scaling (fp8-delayed): per expert, as Linear's; empty for other recipes.
  LayerScaleHistories& scale_histories() { return scales_; }
  // Stochastic rounding: the clock the layer's keys read (the model's).
  void set_rounding_clock(const RoundingClock* c) { scales_.clock = c; }
  // The whole layer's index of this layer's expert 0 (expert parallelism: rank p of ep holds
  // experts p·E/ep ...): the stochastic-rounding keys name experts by it, as one process does.
  void set_first_expert(int64_t e) { scales_.group_offset = e; }
  // Per-tensor amaxes (NVFP4) agreed over the ranks holding the other pieces of each expert's
  // tensors (expert-tensor parallelism, nn/moe.h); empty: this rank's own.
  void set_amax_agree(AmaxAgree a) { scales_.agree = std::move(a); }

 private:
  std::string name_;
  int64_t experts_ = 0, in_ = 0, out_ = 0;
  LinearPrecision prec_;
  bool fp32_ref_ = false;
  LayerHook hook_;
  LayerScaleHistories scales_;
  std::vector<QuantizedWeight> wcache_;
  GroupedWeightProvider provider_;
  // Kept so that a step allocates nothing: per-expert names (for messages, made once) and
  // the pointer arrays handed to the products (refilled each call, storage reused).
  std::vector<std::string> expert_names_;
  std::vector<QuantizedWeight*> cache_ptrs_;
  std::vector<float*> grad_ptrs_;
  int64_t weight_quantizations_ = 0;
};

}  // namespace mxtrain
