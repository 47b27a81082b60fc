// nn/linear_common.cc — weight cache policy, BF16 expansion, workspace and bias helpers shared
// by Linear and GroupedLinear (see linear_common.h).
#include "nn/linear_common.h"

#include <algorithm>
#include <string>

#include "mxtrain/common.h"

namespace mxtrain::nn_detail {

WeightSet weight_needs(const Recipe& r, WeightUse use) {
  WeightSet s;
  if (!r.quantized())
    s.bf16 = true;
  else if (r.weight_tiled())
    s.tile = true;
  else if (use == WeightUse::forward)
    s.rowwise = true;
  else
    s.colwise = true;
  return s;
}

namespace {

// Marks every member stale but keeps the storage: the rebuild that follows for the new
// version reuses it instead of faulting in fresh pages.
void invalidate(QuantizedWeight& c) {
  c.version = QuantizedWeight::kNoVersion;
  c.bf16.clear();
  c.has_rowwise = c.has_colwise = c.has_tile = false;
  c.rowwise_bf16.clear();
  c.colwise_bf16.clear();
  c.tile_bf16.clear();
}

bool has_all(const QuantizedWeight& c, const WeightSet& need) {
  return (!need.bf16 || !c.bf16.empty()) && (!need.rowwise || c.has_rowwise) &&
         (!need.colwise || c.has_colwise) && (!need.tile || c.has_tile);
}

// Expansions of the needed MX members that are missing.
void ensure_expansions(QuantizedWeight& c, const WeightSet& need) {
  if (need.rowwise && c.rowwise_bf16.empty()) expand_bf16(c.rowwise, c.rowwise_bf16);
  if (need.colwise && c.colwise_bf16.empty()) expand_bf16(c.colwise, c.colwise_bf16);
  if (need.tile && c.tile_bf16.empty()) expand_bf16(c.tile, c.tile_bf16);
}

void check_member(bool ok, const MXTensor& t, int64_t out, int64_t in, const char* what,
                  const std::string& layer) {
  MXT_CHECK(ok, "layer '", layer, "': the weight provider did not fill the ", what,
            " copy this recipe needs");
  MXT_CHECK(t.rows == out && t.cols == in, "layer '", layer, "': the weight provider's ", what,
            " copy is ", t.rows, "x", t.cols, ", expected ", out, "x", in);
}

}  // namespace

bool ensure_weight(QuantizedWeight& c, uint64_t version, const Recipe& r, WeightUse use,
                   bool dual, bool keep_expansions, const float* value, int64_t out, int64_t in,
                   const std::function<void(WeightUse, QuantizedWeight&)>& provider,
                   const std::string& layer) {
  if (c.version != version) invalidate(c);
  WeightSet need = weight_needs(r, use);
  if (dual && !provider) {
    WeightSet b = weight_needs(r, WeightUse::backward);
    need.bf16 |= b.bf16;
    need.rowwise |= b.rowwise;
    need.colwise |= b.colwise;
    need.tile |= b.tile;
  }
  if (has_all(c, need)) {
    if (keep_expansions) ensure_expansions(c, need);
    return false;
  }
  if (provider) {
    // The provider may replace any member; derived expansions are rebuilt from what it gives.
    c.rowwise_bf16.clear();
    c.colwise_bf16.clear();
    c.tile_bf16.clear();
    provider(use, c);
    if (need.bf16)
      MXT_CHECK(c.bf16.size() == size_t(out * in), "layer '", layer,
                "': the weight provider filled ", c.bf16.size(), " BF16 values, expected ",
                out * in);
    if (need.rowwise) check_member(c.has_rowwise, c.rowwise, out, in, "rowwise", layer);
    if (need.colwise) check_member(c.has_colwise, c.colwise, out, in, "colwise", layer);
    if (need.tile) check_member(c.has_tile, c.tile, out, in, "tile32", layer);
  } else {
    MXT_CHECK(value != nullptr, "layer '", layer, "': the weight has no value on this rank ",
              "and no weight provider is set");
    const QuantConfig cfg = r.weight_cfg();
    if (need.bf16 && c.bf16.empty()) to_bf16(value, out * in, c.bf16);
    const bool row = need.rowwise && !c.has_rowwise, col = need.colwise && !c.has_colwise;
    if (row && col) {
      quantize_dual(value, out, in, cfg, c.rowwise, c.colwise);
    } else if (row) {
      quantize_reuse(value, out, in, MXLayout::rowwise, cfg, c.rowwise);
    } else if (col) {
      quantize_reuse(value, out, in, MXLayout::colwise, cfg, c.colwise);
    }
    if (row) c.has_rowwise = true, c.rowwise_bf16.clear();
    if (col) c.has_colwise = true, c.colwise_bf16.clear();
    if (need.tile && !c.has_tile) {
      quantize_reuse(value, out, in, MXLayout::tile32, cfg, c.tile);
      c.has_tile = true;
      c.tile_bf16.clear();
    }
  }
  c.version = version;
  if (keep_expansions) ensure_expansions(c, need);
  return true;
}

const uint16_t* weight_operand(const QuantizedWeight& c, const Recipe& r, WeightUse use) {
  if (!r.quantized()) return c.bf16.data();
  const MXTensor& q = r.weight_tiled() ? c.tile : use == WeightUse::forward ? c.rowwise : c.colwise;
  const std::vector<uint16_t>& cached = r.weight_tiled()              ? c.tile_bf16
                                        : use == WeightUse::forward ? c.rowwise_bf16
                                                                    : c.colwise_bf16;
  if (!cached.empty()) return cached.data();
  std::vector<uint16_t>& buf = scratch_u16(3);
  expand_bf16(q, buf);
  return buf.data();
}

size_t backward_only_weight_bytes(const QuantizedWeight& c, const Recipe& r) {
  if (!r.quantized() || r.weight_tiled() || !c.has_colwise) return 0;
  return c.colwise.bytes() + c.colwise_bf16.size() * sizeof(uint16_t);
}

std::vector<uint16_t>& scratch_u16(int slot) {
  thread_local std::vector<uint16_t> buf[4];
  MXT_DCHECK(slot >= 0 && slot < 4);
  return buf[slot];
}

MXTensor& scratch_mx(int slot) {
  thread_local MXTensor buf[4];
  MXT_DCHECK(slot >= 0 && slot < 4);
  return buf[slot];
}

void quantize_reuse(const float* x, int64_t M, int64_t K, MXLayout layout,
                    const QuantConfig& cfg, MXTensor& out) {
  out.rows = M;
  out.cols = K;
  out.layout = layout;
  out.elem = cfg.elem;
  out.data.resize(size_t(M * K));
  out.scales.resize(size_t(out.scale_rows() * out.scale_cols()));
  quantize_into(x, M, K, cfg, out);
}

void expand_bf16(const MXTensor& q, std::vector<uint16_t>& out) {
  out.resize(q.data.size());
  dequantize_bf16(q, out.data());
}

void to_bf16(const float* x, int64_t n, std::vector<uint16_t>& out) {
  out.resize(size_t(n));
  f32_to_bf16_array(x, out.data(), n);
}

void add_bias(float* y, int64_t T, int64_t out, const float* b) {
#pragma omp parallel for schedule(static) if (T * out >= (1 << 16))
  for (int64_t t = 0; t < T; ++t) {
    float* row = y + t * out;
    for (int64_t j = 0; j < out; ++j) row[j] += b[j];
  }
}

void accumulate_bias_grad(const float* dy, int64_t T, int64_t out, float* db) {
  constexpr int64_t kCols = 256;  // columns per work unit
  const int64_t units = ceil_div(out, kCols);
#pragma omp parallel for schedule(static) if (T * out >= (1 << 16))
  for (int64_t u = 0; u < units; ++u) {
    const int64_t j0 = u * kCols, j1 = std::min(out, j0 + kCols);
    double acc[kCols] = {};
    for (int64_t t = 0; t < T; ++t) {
      const float* row = dy + t * out;
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += row[j];
    }
    for (int64_t j = j0; j < j1; ++j) db[j] += float(acc[j - j0]);
  }
}

}  // namespace mxtrain::nn_detail
