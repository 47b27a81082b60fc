// mxtrain/nn/linear.h — the quantized Linear layer: y[T,out] = x[T,in] · W[out,in]^T + b.
//
// Forward, dgrad and wgrad each run in the layer's precision (a recipe: bf16, mxfp8,
// mxfp8-32x32; docs/numerics.md, "Quantized Linear"). forward() fills a LinearSaved with what
// backward needs; backward() returns dx and accumulates dW, db into the parameters' grads.
// Activations are FP32 at the layer's boundary; products accumulate in FP32. A Linear is the
// one-group case of the code GroupedLinear runs (src/nn/linear_core.cc): the recipe's sequence
// of quantizations and products (gemm.h) is written once.
//
// What forward keeps for backward (and nothing else — the caller may overwrite x after
// forward unless defer_backward_quant is on):
//   bf16                 x in BF16 (2 bytes per element);
//   mxfp8*, defer off    x quantized along T (colwise), the copy wgrad reads (1 byte + scales);
//   mxfp8*, defer on     nothing quantized: a reference to the caller's x, which the caller
//                        keeps alive and unchanged until backward, which quantizes it then.
// Both defer states give byte-identical results.
//
// Weight reuse: the weight copies live in a QuantizedWeight cache keyed by the parameter's
// version, so k micro-batches within one optimizer step quantize W once.
//
// A Linear is constructed with its parallel role (LinearParallel, nn/parallel.h: none, column
// or row over a tensor-parallel group, with or without sequence parallelism) and does that
// role's collectives itself: a column-parallel layer under sequence parallelism all-gathers
// its input as the copies its products read and reduce-scatters its input gradient (else
// all-reduces it); a row-parallel one reduce-scatters (all-reduces) its output and, under
// sequence parallelism, all-gathers its output gradient's copies — as TransformerEngine's
// `_Linear` and Megatron's ColumnParallelLinear / RowParallelLinear do. Its owner sees only
// the rows it holds. A hook (FSDP, train/param_sync_fsdp.cc) hears the end of each forward and
// the start and end of each backward. In the FP32 reference mode every product runs in plain
// FP32 from Parameter::value (gemm_f32), whatever the recipe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/gemm.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"
#include "mxtrain/scale_history.h"

namespace mxtrain {

struct LinearPrecision {
  Recipe recipe;  // bf16
  bool defer_backward_quant = false;
  // Throws for combinations that make no sense: defer_backward_quant with a recipe that keeps
  // inputs unscaled (bf16; defer_backward_quant_applies, recipe.h).
  void validate() const;
};

// Copies of one weight matrix [out, in] made for the products, tagged with the parameter
// version they came from. Which copies are present follows copies_needed (qtensor.h):
//   bf16        -> bf16
//   mxfp8       -> rowwise (forward), colwise (dgrad)
//   mxfp8-32x32 -> tile (forward and dgrad)
struct QuantizedWeight : QTensor {
  static constexpr uint64_t kNoVersion = ~uint64_t(0);
  uint64_t version = kNoVersion;
  void clear() {
    release();
    version = kNoVersion;
  }
};

// Where a model's stochastic rounding stands (docs/numerics.md, "Stochastic rounding"): the
// run's seed and the global micro-batch the trainer is on (step · grad_accum · ranks + the
// micro-batch's global index), shared by every layer of the model; each layer adds its own
// tensor ids. Outside training it stays {0, 0}.
struct RoundingClock {
  uint64_t seed = 0;
  uint32_t step = 0;
};

// A layer's quantization state. Delayed scaling (mxtrain/scale_history.h): for each role whose
// format takes its scale from an amax history, one ScaleHistory per row group (1 for a Linear,
// E for a GroupedLinear); no entries for other roles and recipes. The layer quantizes with
// these scales and records its tensors' amaxes; the trainer updates them after each step (and
// FSDP's weight gathers use and record the weight's). Stochastic rounding: the model's clock
// and the layer's id (from its name), which key each role and group's random bits.
struct LayerScaleHistories {
  std::array<std::vector<ScaleHistory>, kNumRoles> roles;  // by Role, [groups] or empty
  const RoundingClock* clock = nullptr;  // the model's (nullptr: seed 0, step 0)
  uint32_t layer_id = 0;                 // FNV-1a of the layer's name
  // The index of group 0 in the whole layer (an expert-parallel rank's first expert): the
  // stochastic-rounding keys name a group by its whole-layer index.
  int64_t group_offset = 0;
  // Per-tensor amaxes (NVFP4) agreed over the group whose ranks hold pieces of the layer's
  // tensors (a tensor- or expert-tensor-parallel group); empty: each rank's own.
  AmaxAgree agree;

  // Fresh histories for the roles of r that need them, `groups` each; other roles get none.
  void reset(const Recipe& r, int64_t groups);
  // Group g's history of `role`, or nullptr when the role's scale has no history.
  ScaleHistory* get(Role role, int64_t g) {
    std::vector<ScaleHistory>& v = roles[size_t(role)];
    return v.empty() ? nullptr : &v[size_t(g)];
  }
  bool empty() const;
  // The stochastic-rounding key of role's tensor of group g now: {clock's seed, clock's step,
  // a hash of (layer id, role, group_offset + g)}.
  SrKey sr_key(Role role, int64_t g) const;
};

// FNV-1a (32-bit) of a layer name: the layer_id of its stochastic-rounding keys.
uint32_t layer_hash(const std::string& name);

// When set, a layer asks the provider to fill its QuantizedWeight for `use` (forward or dgrad,
// qtensor.h) instead of quantizing Parameter::value itself (FSDP: all-gather of pre-quantized
// shards).
using WeightProvider = std::function<void(Use use, QuantizedWeight& cache)>;

// The boundaries of a layer's passes, as its hook hears them (set_hook): the end of a forward,
// the start and the end of a backward. Recomputed forwards (activation recompute) are silent.
enum class ModuleEvent : uint8_t { forward_done, backward_start, backward_done };
using LayerHook = std::function<void(ModuleEvent)>;

// Forwards run while a ForwardOnlyScope lives on this thread keep nothing for a backward
// (evaluation, generation): a Linear or GroupedLinear makes only the copies its product reads,
// not x's wgrad copies, and a feed-forward block keeps no SwiGLU input. The outputs are the
// same bytes. A backward of such a forward is refused.
class ForwardOnlyScope {
 public:
  ForwardOnlyScope();
  ~ForwardOnlyScope();
  ForwardOnlyScope(const ForwardOnlyScope&) = delete;
  ForwardOnlyScope& operator=(const ForwardOnlyScope&) = delete;

 private:
  bool prev_;
};
// Whether this thread is inside a ForwardOnlyScope.
bool forward_only();

// What forward keeps for backward, per row group (one group for a Linear).
struct LinearSaved {
  int64_t tokens = 0;           // rows of the product
  bool forward_only = false;    // made inside a ForwardOnlyScope: no backward
  GroupList groups;
  // Reference to the caller's x, kept alive and unchanged by the caller until backward: with
  // defer on [tokens, in]; in the FP32 reference mode; and for a column-parallel Linear under
  // sequence parallelism, this rank's rows [tokens / P, in] (gathered again at backward).
  const float* x = nullptr;
  std::vector<QTensor> xs;      // per group: x's wgrad copy (defer off): bf16 or colwise
  bool x_given = false;         // forward_given: backward takes x's wgrad copy as an argument
  size_t weight_bytes_for_backward = 0;  // weight copies made at forward only for backward
  // Sequence parallelism on the rowwise wire: the gathered forward copy of x [tokens, in],
  // kept for wgrad's copies (nn/parallel.h, SequenceWire).
  QTensor gathered;
  // Bytes this layer allocated and holds between forward and backward (x copies, the gathered
  // copy, weight copies made only for backward). References to caller memory are not counted.
  size_t held_bytes() const;
};

class Linear {
 public:
  Linear() = default;
  // in, out: this rank's weight [out, in] (a column-parallel layer's slice of the output
  // features, a row-parallel one's of the input features).
  Linear(std::string name, int64_t in, int64_t out, bool has_bias, LinearPrecision prec,
         LinearParallel parallel = {});

  const std::string& name() const { return name_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const LinearPrecision& precision() const { return prec_; }
  void set_precision(const LinearPrecision& p);
  const LinearParallel& parallel() const { return par_; }

  Parameter weight;  // [out, in]
  Parameter bias;    // [out], empty shape when the layer has no bias

  // x: [T, in] FP32, the rows this rank holds; y: [output_rows(T), out] FP32 (T rows but
  // under sequence parallelism: a column layer's gathered P·T, a row layer's own T/P). Throws
  // on T < 1 or nullptr. Reports forward_done to the hook after the product (before a row
  // layer's reduction).
  void forward(const float* x, int64_t T, float* y, LinearSaved& saved);
  // forward without the report: activation recompute re-runs a forward whose events were
  // heard already.
  void recompute(const float* x, int64_t T, float* y, LinearSaved& saved);
  // What forward keeps for backward, without the product: fills `saved` as forward(x, T, y,
  // saved) would, byte for byte, and writes no output (activation recompute re-creates the
  // saved state of a layer whose output is still kept). x: [T, in] FP32. Not for a layer
  // that gathers (sequence parallelism).
  void save_input(const float* x, int64_t T, LinearSaved& saved);
  // dy: [output_rows(T), out] FP32; dx: [T, in] FP32 (nullptr: not needed), this rank's rows,
  // summed over the group for a column layer. Accumulates weight.grad and bias.grad. Reports
  // backward_start before and backward_done after the products (before a column layer's
  // reduction).
  void backward(LinearSaved& saved, const float* dy, float* dx);
  int64_t output_rows(int64_t T) const;

  // Operands the caller made (as sequence parallelism's gathers make them, nn/tp_wire.h).
  // forward_given: x holds the copy copies_needed(recipe, input, forward) names, of T = x.rows
  // tokens; it keeps nothing of x, so the backward needs x_wgrad. backward_given: dy as FP32
  // [T, out], or dyq holding the copies dgrad (when dx is wanted) and wgrad read (dy is then
  // ignored; no bias); x_wgrad holds x's wgrad copy (for a forward_given; null otherwise). The
  // same products, byte for byte, as forward/backward on the matrices those copies were made
  // from. No collectives, no reports.
  void forward_given(const QTensor& x, float* y, LinearSaved& saved);
  void backward_given(LinearSaved& saved, const float* dy, const QTensor* dyq,
                      const QTensor* x_wgrad, float* dx);

  // True when forward keeps its own copy of x for backward: the caller may then reuse x's
  // memory right after forward. False with defer_backward_quant, in the FP32 reference mode,
  // and for a column layer under sequence parallelism (LinearSaved::x).
  bool keeps_input_copy() const;

  // Numerics reference: every product in plain FP32 from weight.value (gemm_f32), ignoring
  // the recipe and the weight provider; gathers carry FP32 rows.
  void set_fp32_reference(bool on) { fp32_ref_ = on; }
  bool fp32_reference() const { return fp32_ref_; }
  // Told of the layer's pass boundaries (ModuleEvent); empty: nobody.
  void set_hook(LayerHook h) { hook_ = std::move(h); }

  // Number of times this layer quantized (or converted) its weight — one per optimizer step
  // and use when weight reuse works.
  int64_t weight_quantizations() const { return weight_quantizations_; }
  QuantizedWeight& weight_cache() { return wcache_; }
  void set_weight_provider(WeightProvider p) { provider_ = std::move(p); }
  // Delayed scaling (fp8-delayed): the layer's histories; empty for other recipes.
  LayerScaleHistories& scale_histories() { return scales_; }
  // Stochastic rounding: the clock the layer's keys read (the model's).
  void set_rounding_clock(const RoundingClock* c) { scales_.clock = c; }

 private:
  void ensure_weight(Use use, bool dual);
  void product_forward(const float* x, int64_t T, float* y, LinearSaved& saved);
  void finish_forward(float* y, int64_t T);
  void backward_f32(const float* x, int64_t T, const float* dy, float* dx);
  void backward_products(LinearSaved& saved, const float* dy, float* dx);
  void report(ModuleEvent e) {
    if (hook_) hook_(e);
  }
  std::string name_;
  int64_t in_ = 0, out_ = 0;
  LinearPrecision prec_;
  LinearParallel par_;
  bool fp32_ref_ = false;
  LayerHook hook_;
  LayerScaleHistories scales_;
  QuantizedWeight wcache_;
  WeightProvider provider_;
  int64_t weight_quantizations_ = 0;
};

}  // namespace mxtrain
