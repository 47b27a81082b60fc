// nn/linear_core.cc — the recipe sequence of Linear and GroupedLinear, the weight cache policy,
// workspaces and bias helpers (see linear_core.h).
#include "nn/linear_core.h"

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

bool has_all(const QuantizedWeight& c, const WeightSet& need) {
  return (!need.bf16 || !c.bf16.empty()) && (!need.rowwise || c.has_rowwise) &&
         (!need.colwise || c.has_colwise) && (!need.tile || c.has_tile);
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
                   bool dual, const float* value, int64_t out, int64_t in,
                   const std::function<void(WeightUse, QuantizedWeight&)>& provider,
                   const std::string& layer) {
  if (c.version != version) c.invalidate();
  WeightSet need = weight_needs(r, use);
  if (dual && !provider) {
    WeightSet b = weight_needs(r, WeightUse::backward);
    need.bf16 |= b.bf16;
    need.rowwise |= b.rowwise;
    need.colwise |= b.colwise;
    need.tile |= b.tile;
  }
  if (has_all(c, need)) return false;
  if (provider) {
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
    if (row) c.has_rowwise = true;
    if (col) c.has_colwise = true;
    if (need.tile && !c.has_tile) {
      quantize_reuse(value, out, in, MXLayout::tile32, cfg, c.tile);
      c.has_tile = true;
    }
  }
  c.rows = out;
  c.cols = in;
  c.version = version;
  return true;
}

size_t backward_only_weight_bytes(const QuantizedWeight& c, const Recipe& r) {
  if (!r.quantized() || r.weight_tiled() || !c.has_colwise) return 0;
  return c.colwise.bytes();
}

namespace {

// Per-thread QTensors, one per row group, reused across calls (slot 0: forward's x,
// 1: backward's dy, 2: backward's deferred x colwise).
// The weights as the product API takes them (a per-thread pointer array, grown once).
const QTensor* const* as_qtensors(QuantizedWeight* const* w, int64_t E) {
  thread_local std::vector<const QTensor*> ptrs;
  ptrs.assign(w, w + E);
  return ptrs.data();
}

std::vector<QTensor>& scratch(int slot, int64_t groups) {
  thread_local std::vector<QTensor> buf[3];
  std::vector<QTensor>& v = buf[slot];
  if (v.size() < size_t(groups)) v.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) v[size_t(g)].invalidate();
  return v;
}

void set_shape(QTensor& t, int64_t rows, int64_t cols) {
  t.rows = rows;
  t.cols = cols;
}

// Starts a new saved state for `groups`, reusing the storage of the previous step's copies:
// no fresh pages every step.
void begin_saved(LinearSaved& saved, const GroupList& groups) {
  saved.tokens = groups.offsets.back();
  saved.groups = groups;
  saved.x = nullptr;
  saved.weight_bytes_for_backward = 0;
  saved.xs.resize(size_t(groups.num_groups()));
  for (QTensor& t : saved.xs) t.invalidate();
}

}  // namespace

void core_forward(const LinearPrecision& p, int64_t in, int64_t out, const float* x,
                  const GroupList& groups, QuantizedWeight* const* w, float* y,
                  LinearSaved& saved) {
  const Recipe& r = p.recipe;
  const int64_t E = groups.num_groups();
  begin_saved(saved, groups);
  std::vector<QTensor>& xq = r.quantized() ? scratch(0, E) : saved.xs;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const float* xg = x + groups.offsets[g] * in;
    QTensor& keep = saved.xs[size_t(g)];
    set_shape(xq[size_t(g)], n, in);
    set_shape(keep, n, in);
    if (!r.quantized()) {
      to_bf16(xg, n * in, keep.bf16);
    } else if (p.defer_backward_quant) {
      quantize_reuse(xg, n, in, MXLayout::rowwise, r.input_cfg(), xq[size_t(g)].rowwise);
      xq[size_t(g)].has_rowwise = true;
    } else {
      quantize_dual(xg, n, in, r.input_cfg(), xq[size_t(g)].rowwise, keep.colwise);
      xq[size_t(g)].has_rowwise = keep.has_colwise = true;
    }
  }
  if (r.quantized() && p.defer_backward_quant) saved.x = x;
  grouped_forward(groups, xq.data(), as_qtensors(w, E), y, out);
}

void core_save_input(const LinearPrecision& p, int64_t in, const float* x,
                     const GroupList& groups, LinearSaved& saved) {
  const Recipe& r = p.recipe;
  begin_saved(saved, groups);
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const float* xg = x + groups.offsets[g] * in;
    QTensor& keep = saved.xs[size_t(g)];
    set_shape(keep, n, in);
    if (!r.quantized()) {
      to_bf16(xg, n * in, keep.bf16);
    } else if (!p.defer_backward_quant) {
      quantize_reuse(xg, n, in, MXLayout::colwise, r.input_cfg(), keep.colwise);
      keep.has_colwise = true;
    }
  }
  if (r.quantized() && p.defer_backward_quant) saved.x = x;
}

void core_backward(const LinearPrecision& p, int64_t in, int64_t out, LinearSaved& saved,
                   QuantizedWeight* const* w, const float* dy, float* dx, float* const* dw,
                   bool accumulate, const std::string& layer) {
  const Recipe& r = p.recipe;
  const GroupList& groups = saved.groups;
  const int64_t E = groups.num_groups();
  const bool deferred = r.quantized() && p.defer_backward_quant;
  MXT_CHECK(saved.xs.size() == size_t(E) && (!deferred || saved.x != nullptr || saved.tokens == 0),
            "layer '", layer, "': backward called without a matching forward (or twice for one "
            "forward)");
  std::vector<QTensor>& dyq = scratch(1, E);
  std::vector<QTensor>& xd = deferred ? scratch(2, E) : saved.xs;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    const float* dyg = dy + r0 * out;
    QTensor& d = dyq[size_t(g)];
    set_shape(d, n, out);
    const QTensor& xs = saved.xs[size_t(g)];
    MXT_CHECK(r.quantized() ? (deferred || xs.has_colwise) : xs.has_bf16(), "layer '", layer,
              "': the saved forward state does not match the layer's precision (was it changed "
              "between forward and backward?)");
    if (!r.quantized()) {
      to_bf16(dyg, n * out, d.bf16);
      continue;
    }
    if (dx) {
      quantize_dual(dyg, n, out, r.grad_cfg(), d.rowwise, d.colwise);
      d.has_rowwise = true;
    } else {
      quantize_reuse(dyg, n, out, MXLayout::colwise, r.grad_cfg(), d.colwise);
    }
    d.has_colwise = true;
    if (deferred) {  // quantize this group's x along T now
      set_shape(xd[size_t(g)], n, in);
      quantize_reuse(saved.x + r0 * in, n, in, MXLayout::colwise, r.input_cfg(),
                     xd[size_t(g)].colwise);
      xd[size_t(g)].has_colwise = true;
    }
  }
  if (dx) grouped_dgrad(groups, dyq.data(), as_qtensors(w, E), dx, in);
  grouped_wgrad(groups, dyq.data(), xd.data(), dw, accumulate);
  if (!accumulate)  // a group with no rows has a zero gradient
    for (int64_t g = 0; g < E; ++g)
      if (groups.count(g) == 0) std::fill_n(dw[g], out * in, 0.f);
  // Consumed: a second backward is refused; the copies' storage stays for the next forward.
  saved.tokens = 0;
  saved.groups.offsets.clear();  // keeps its capacity
  saved.x = nullptr;
  saved.weight_bytes_for_backward = 0;
  for (QTensor& t : saved.xs) t.invalidate();
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

void to_bf16(const float* x, int64_t n, Bf16Buffer& out) {
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

void accumulate_bias_grad(const float* dy, int64_t T, int64_t out, float* db, bool accumulate) {
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
    for (int64_t j = j0; j < j1; ++j) db[j] = (accumulate ? db[j] : 0.f) + float(acc[j - j0]);
  }
}

}  // namespace mxtrain::nn_detail
