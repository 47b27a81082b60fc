// nn/linear_core.h — the recipe sequence of a (grouped) linear layer, written once (internal
// to src/nn). Linear runs it with one row group, GroupedLinear with one group per expert.
//
// The sequence is the same for every recipe (docs/numerics.md, "Quantized Linear"): each role's
// matrix gets the copies copies_needed(recipe, role, use) names (mxtrain/qtensor.h), in the
// role's format, and the products read them (gemm.h). For the registered recipes:
//   bf16        : x, dy converted to BF16 (RNE); W's BF16 copy; oneDNN BF16 products.
//   mxfp8       : forward x rowwise · W rowwise^T; dgrad dy rowwise · W colwise;
//                 wgrad dy colwise^T · x colwise (every 32-block along the reduction axis).
//   mxfp8-32x32 : as mxfp8, but W is one 32x32-tile copy serving forward and dgrad.
// defer_backward_quant off: forward makes x's forward and wgrad copies in one pass and keeps
// the wgrad one; on: forward makes only the forward copy and keeps a reference to x, and
// backward makes the wgrad copy then. Activation quantization is per group, so token-axis
// blocks restart at every group boundary and never straddle two experts.
//
// The weight cache policy (which copies a use needs, when they are rebuilt, how a
// WeightProvider takes over) lives here too, with per-thread workspaces that keep a step's
// repeated shapes from faulting in fresh pages.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/nn/linear.h"

namespace mxtrain::nn_detail {

// ---- weights ---------------------------------------------------------------------------------

// Makes `cache` hold, for parameter version `version`, the copies `use` reads
// (copies_needed(r, Role::weight, use); with `dual`, also those dgrad reads, built in the same
// pass). A cache made from another version is invalidated first; copies already present are
// reused. If `provider` is set it is called instead of reading `value` (dual is then ignored:
// each use asks the provider for itself). Returns true when it built or fetched anything —
// one "weight quantization". `history`: the weight's delayed-scaling state (fp8-delayed;
// null otherwise), used and recorded when the layer quantizes `value` itself (a provider
// handles its own). `agree`: where a per-tensor amax of a weight slice is agreed (the layer's
// group; qtensor.h).   value: [out, in] FP32 (may be null when a provider is set)
bool ensure_weight(QuantizedWeight& cache, uint64_t version, const Recipe& r, Use use,
                   bool dual, const float* value, int64_t out, int64_t in,
                   const std::function<void(Use, QuantizedWeight&)>& provider,
                   const std::string& layer, ScaleHistory* history,
                   const AmaxAgree* agree = nullptr);

// Bytes of weight copies present in `cache` that only dgrad reads (mxfp8's colwise copy;
// nothing for bf16 and mxfp8-32x32, whose copy serves forward too).
size_t backward_only_weight_bytes(const QuantizedWeight& cache, const Recipe& r);

// ---- the sequence ------------------------------------------------------------------------------

// Refuses, naming `layer`, a backward of a forward made inside a ForwardOnlyScope (linear.h).
void check_backward_allowed(const LinearSaved& saved, const std::string& layer);

// `scales` is the layer's delayed-scaling state (LayerScaleHistories: per role and group),
// empty unless the recipe takes scales from amax histories.
//
// x: [T, in] FP32 with rows grouped by `groups`; w[g]: group g's weight cache, already holding
// what forward needs; y: [T, out]. Fills `saved` (weight_bytes_for_backward is the caller's).
void core_forward(const LinearPrecision& p, int64_t in, int64_t out, const float* x,
                  const GroupList& groups, QuantizedWeight* const* w, float* y,
                  LinearSaved& saved, LayerScaleHistories& scales);
// core_forward with x's forward copy given (one group of xq.rows tokens); keeps nothing of x
// (saved.x_given): core_backward then needs xw_given.
void core_forward_given(const LinearPrecision& p, int64_t out, const QTensor& xq,
                        QuantizedWeight* const* w, float* y, LinearSaved& saved);
// What core_forward keeps in `saved`, without the product (the same bytes: colwise
// quantization alone equals quantize_dual's colwise half).
void core_save_input(const LinearPrecision& p, int64_t in, const float* x,
                     const GroupList& groups, LinearSaved& saved, LayerScaleHistories& scales);
// dy: [T, out]; dx: [T, in] or null (then w is not read); dw[g]: [out, in] FP32, added into
// (accumulate) or written (every group, zeros for a group with no rows). w[g] must hold what
// dgrad needs when dx is set. Empties `saved`. One group only: dyq_given holds dy's copies
// (dy is then not read), xw_given x's wgrad copy (after core_forward_given).
void core_backward(const LinearPrecision& p, int64_t in, int64_t out, LinearSaved& saved,
                   QuantizedWeight* const* w, const float* dy, float* dx, float* const* dw,
                   bool accumulate, const std::string& layer, LayerScaleHistories& scales,
                   const QTensor* dyq_given = nullptr, const QTensor* xw_given = nullptr);

// ---- helpers -----------------------------------------------------------------------------------

// y: [T, out] += b (broadcast over rows), FP32.
void add_bias(float* y, int64_t T, int64_t out, const float* b);
// db: [out] += Σ_t dy[t, :] (accumulate; else written), summed in FP64 in token order per
// column (thread-count independent).
void accumulate_bias_grad(const float* dy, int64_t T, int64_t out, float* db, bool accumulate);

}  // namespace mxtrain::nn_detail
