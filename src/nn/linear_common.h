// nn/linear_common.h — pieces Linear and GroupedLinear share (internal to src/nn).
//
// The weight cache policy (which QuantizedWeight members a use needs under a recipe, when
// they are rebuilt, and how a WeightProvider takes over), the BF16 expansion of MX operands
// that the current GEMM path multiplies, per-thread workspace, and the FP32 bias helpers.
// Both layers call exactly these functions, so a grouped expert and a plain Linear with the
// same rows produce the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mxtrain/nn/linear.h"

namespace mxtrain::nn_detail {

// Which QuantizedWeight members exist / are needed.
struct WeightSet {
  bool bf16 = false, rowwise = false, colwise = false, tile = false;
};

// Members the GEMMs of `use` read under recipe r:
//   bf16: bf16 for both uses; mxfp8: rowwise (forward), colwise (dgrad);
//   mxfp8-32x32: tile for both.
WeightSet weight_needs(const Recipe& r, WeightUse use);

// Makes `cache` hold, for parameter version `version`, the members `use` needs (with `dual`,
// also those backward needs, built in the same pass: quantize_dual), plus their BF16
// expansions when `keep_expansions`. A cache made from another version is invalidated first. Members already present are
// reused. If `provider` is set it is called instead of reading `value` (dual is then ignored:
// each use asks the provider for itself). Returns true when it built or fetched anything —
// one "weight quantization".
//   value: [out, in] FP32 (may be null when a provider is set)
bool ensure_weight(QuantizedWeight& cache, uint64_t version, const Recipe& r, WeightUse use,
                   bool dual, bool keep_expansions, const float* value, int64_t out, int64_t in,
                   const std::function<void(WeightUse, QuantizedWeight&)>& provider,
                   const std::string& layer);

// BF16 operand for the GEMM of `use`: the bf16 copy, the cached expansion, or (no cached
// expansion) the MX copy expanded into per-thread scratch slot 3, valid until the next call.
const uint16_t* weight_operand(const QuantizedWeight& cache, const Recipe& r, WeightUse use);

// Bytes of weight copies present in `cache` that only backward reads (mxfp8's colwise copy and
// its expansion; nothing for bf16 and mxfp8-32x32, whose copy serves forward too).
size_t backward_only_weight_bytes(const QuantizedWeight& cache, const Recipe& r);

// Per-thread reusable workspace (slot 0..3); contents are scratch between calls. Reusing the
// storage avoids paying page faults for fresh multi-megabyte buffers on every call.
std::vector<uint16_t>& scratch_u16(int slot);
MXTensor& scratch_mx(int slot);

// out = quantize(x [M, K], layout, cfg), reusing out's storage.
void quantize_reuse(const float* x, int64_t M, int64_t K, MXLayout layout,
                    const QuantConfig& cfg, MXTensor& out);

// out: [q.rows, q.cols] BF16 expansion of q (resized).
void expand_bf16(const MXTensor& q, std::vector<uint16_t>& out);

// out: n BF16 values of x (resized), round to nearest even.
void to_bf16(const float* x, int64_t n, std::vector<uint16_t>& out);

// y: [T, out] += b (broadcast over rows), FP32.
void add_bias(float* y, int64_t T, int64_t out, const float* b);
// db: [out] += Σ_t dy[t, :], summed in FP64 in token order per column (thread-count
// independent).
void accumulate_bias_grad(const float* dy, int64_t T, int64_t out, float* db);

}  // namespace mxtrain::nn_detail
