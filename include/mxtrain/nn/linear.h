// mxtrain/nn/linear.h — the quantized Linear layer (docs/numerics.md, "Quantized Linear"):
// y[T,out] = x[T,in] · W[out,in]^T + b.
//
// Forward, dgrad and wgrad each run in the layer's precision (a recipe: bf16, mxfp8,
// mxfp8-32x32). forward() fills a LinearSaved with what backward needs; backward() returns dx
// and accumulates dW, db into the parameters' grads. Activations are FP32 at the layer's
// boundary; products accumulate in FP32.
//
// Weight reuse: the quantized weight copies live in a QuantizedWeight cache keyed by the
// parameter's version, so k micro-batches within one optimizer step quantize W once.
// defer_backward_quant: off -> forward quantizes x and W on both axes in one pass and keeps
// the colwise copies; on -> forward quantizes only what it uses, keeps a reference to the
// high-precision x (the caller keeps x alive until backward) and backward quantizes then.
// Both states give byte-identical results.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/nn/parameter.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain {

struct LinearPrecision {
  Recipe recipe = get_recipe("bf16");
  bool defer_backward_quant = false;
  // Keep the BF16 expansions of the MX weight copies in the weight cache for the whole
  // optimizer step (saves re-expanding W in every micro-batch's forward and dgrad, costs
  // 2 bytes per weight element per copy: 4 for mxfp8, 2 for mxfp8-32x32). Off: W is expanded
  // into per-thread scratch for each GEMM, and the cache holds only the FP8 copies.
  bool cache_weight_expansion = false;
  // Throws for combinations that make no sense (defer_backward_quant with bf16).
  void validate() const;
};

// Copies of one weight matrix [out, in] made for the GEMMs, tagged with the parameter
// version they came from. Which members are filled depends on the recipe:
//   bf16        -> bf16
//   mxfp8       -> rowwise (forward), colwise (dgrad)
//   mxfp8-32x32 -> tile (forward and dgrad)
struct QuantizedWeight {
  static constexpr uint64_t kNoVersion = ~uint64_t(0);
  uint64_t version = kNoVersion;
  std::vector<uint16_t> bf16;
  MXTensor rowwise, colwise, tile;
  bool has_rowwise = false, has_colwise = false, has_tile = false;
  // BF16 expansions of the MX copies with the block scale folded in: what the current GEMM
  // path (gemm.h) multiplies. Kept only with LinearPrecision::cache_weight_expansion; derived
  // data, rebuilt by the layer whenever the MX copies are (re)filled and emptied by clear();
  // a provider never fills them. Counted in bytes().
  std::vector<uint16_t> rowwise_bf16, colwise_bf16, tile_bf16;
  void clear();
  size_t bytes() const;
};

// What a weight is needed for; passed to a WeightProvider (FSDP gathers on demand).
enum class WeightUse : uint8_t { forward, backward };

// When set, a layer asks the provider to fill its QuantizedWeight for `use` instead of
// quantizing Parameter::value itself (FSDP: all-gather of pre-quantized shards).
using WeightProvider = std::function<void(WeightUse use, QuantizedWeight& cache)>;

// What forward keeps for backward.
struct LinearSaved {
  int64_t tokens = 0;
  const float* x = nullptr;         // reference to the caller's x (bf16 recipe, defer on)
  std::vector<uint16_t> x_bf16;     // bf16 recipe: x in BF16
  MXTensor x_colwise;               // mxfp8*, defer off: x quantized along T for wgrad
  bool has_x_colwise = false;
  size_t weight_bytes_for_backward = 0;  // weight copies made at forward only for backward
  // Bytes this layer allocated and holds between forward and backward (x copies + weight
  // copies made only for backward). References to caller memory are not counted.
  size_t held_bytes() const;
};

class Linear {
 public:
  Linear() = default;
  Linear(std::string name, int64_t in, int64_t out, bool has_bias, LinearPrecision prec);

  const std::string& name() const { return name_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const LinearPrecision& precision() const { return prec_; }
  void set_precision(const LinearPrecision& p);

  Parameter weight;  // [out, in]
  Parameter bias;    // [out], empty shape when the layer has no bias

  // x: [T, in] FP32; y: [T, out] FP32. Throws on T < 1 or nullptr.
  void forward(const float* x, int64_t T, float* y, LinearSaved& saved);
  // dy: [T, out] FP32; dx: [T, in] FP32 (nullptr: not needed). Accumulates weight.grad
  // and bias.grad.
  void backward(LinearSaved& saved, const float* dy, float* dx);

  // Number of times this layer quantized (or converted) its weight — one per optimizer step
  // and use when weight reuse works.
  int64_t weight_quantizations() const { return weight_quantizations_; }
  QuantizedWeight& weight_cache() { return wcache_; }
  void set_weight_provider(WeightProvider p) { provider_ = std::move(p); }

 private:
  void ensure_weight(WeightUse use, bool dual);
  std::string name_;
  int64_t in_ = 0, out_ = 0;
  LinearPrecision prec_;
  QuantizedWeight wcache_;
  WeightProvider provider_;
  int64_t weight_quantizations_ = 0;
};

}  // namespace mxtrain
