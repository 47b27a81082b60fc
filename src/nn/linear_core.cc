// nn/linear_core.cc — the recipe sequence of Linear and GroupedLinear, the weight cache policy,
// workspaces and bias helpers (see linear_core.h).
#include "nn/linear_core.h"

#include <algorithm>
#include <string>

#include "mxtrain/common.h"

namespace mxtrain::nn_detail {

namespace {

void check_copy(const QuantizedWeight& c, Copy k, int64_t out, int64_t in,
                const std::string& layer) {
  MXT_CHECK(c.has(k), "layer '", layer, "': the weight provider did not fill the ",
            copy_name(k), " copy this recipe needs");
  const int64_t rows = k == Copy::bf16 ? c.rows : c.scaled(k).rows;
  const int64_t cols = k == Copy::bf16 ? c.cols : c.scaled(k).cols;
  const size_t n = k == Copy::bf16 ? c.bf16.size() : c.scaled(k).data.size();
  const size_t want = k == Copy::bf16 ? size_t(out * in)
                                      : size_t(elem_bytes(c.scaled(k).elem, out, in));
  MXT_CHECK(rows == out && cols == in && n == want, "layer '", layer,
            "': the weight provider's ", copy_name(k), " copy is ", rows, "x", cols, " (", n,
            " elements/bytes), expected ", out, "x", in, " (", want, ")");
}

}  // namespace

bool ensure_weight(QuantizedWeight& c, uint64_t version, const Recipe& r, Use use, bool dual,
                   const float* value, int64_t out, int64_t in,
                   const std::function<void(Use, QuantizedWeight&)>& provider,
                   const std::string& layer, ScaleHistory* history,
                   const AmaxAgree* agree) {
  if (c.version != version) c.invalidate();
  CopySet need = copies_needed(r, Role::weight, use);
  if (dual && !provider) need |= copies_needed(r, Role::weight, Use::dgrad);
  if (c.has_all(need)) return false;
  if (provider) {
    provider(use, c);
    c.rows = out;
    c.cols = in;
    for (int i = 0; i < kNumCopies; ++i)
      if (need.has(Copy(i))) check_copy(c, Copy(i), out, in, layer);
  } else {
    MXT_CHECK(value != nullptr, "layer '", layer, "': the weight has no value on this rank ",
              "and no weight provider is set");
    make_copies(value, out, in, r.role(Role::weight), c, need - c.present, history, nullptr,
                agree);
  }
  c.rows = out;
  c.cols = in;
  c.version = version;
  return true;
}

size_t backward_only_weight_bytes(const QuantizedWeight& c, const Recipe& r) {
  const CopySet only = copies_needed(r, Role::weight, Use::dgrad) -
                       copies_needed(r, Role::weight, Use::forward);
  size_t n = 0;
  for (Copy k : {Copy::rowwise, Copy::colwise, Copy::tile})
    if (only.has(k) && c.has(k)) n += c.scaled(k).bytes();
  if (only.has(Copy::bf16) && c.has(Copy::bf16)) n += c.bf16.size() * sizeof(uint16_t);
  return n;
}

namespace {

// The weights as the product API takes them (a per-thread pointer array, grown once).
const QTensor* const* as_qtensors(QuantizedWeight* const* w, int64_t E) {
  thread_local std::vector<const QTensor*> ptrs;
  ptrs.assign(w, w + E);
  return ptrs.data();
}

// Per-thread QTensors, one per row group, reused across calls (slot 0: forward's x,
// 1: backward's dy, 2: backward's deferred wgrad copies of x).
std::vector<QTensor>& scratch(int slot, int64_t groups) {
  thread_local std::vector<QTensor> buf[3];
  std::vector<QTensor>& v = buf[slot];
  if (v.size() < size_t(groups)) v.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) v[size_t(g)].invalidate();
  return v;
}

// Starts a new saved state for `groups`, reusing the storage of the previous step's copies:
// no fresh pages every step.
void begin_saved(LinearSaved& saved, const GroupList& groups) {
  saved.tokens = groups.offsets.back();
  saved.forward_only = forward_only();
  saved.groups = groups;
  saved.x = nullptr;
  saved.x_given = false;
  saved.weight_bytes_for_backward = 0;
  saved.xs.resize(size_t(groups.num_groups()));
  for (QTensor& t : saved.xs) t.invalidate();
}

}  // namespace

void check_backward_allowed(const LinearSaved& saved, const std::string& layer) {
  MXT_CHECK(!saved.forward_only, "layer '", layer, "': backward of a forward run without "
            "gradients (inside a ForwardOnlyScope: evaluation or generation); run the forward "
            "again for training");
}

void core_forward(const LinearPrecision& p, int64_t in, int64_t out, const float* x,
                  const GroupList& groups, QuantizedWeight* const* w, float* y,
                  LinearSaved& saved, LayerScaleHistories& scales) {
  const Recipe& r = p.recipe;
  const int64_t E = groups.num_groups();
  // x's copies: those forward reads, and (defer off, a backward to come) those wgrad reads,
  // kept in `saved`. A copy both read is made once, in the kept QTensor, and forward reads it
  // there.
  const bool backward = !forward_only();
  const CopySet keep = p.defer_backward_quant || !backward
                           ? CopySet{}
                           : copies_needed(r, Role::input, Use::wgrad);
  const CopySet fwd = copies_needed(r, Role::input, Use::forward) - keep;
  begin_saved(saved, groups);
  std::vector<QTensor>& xq = fwd.empty() ? saved.xs : scratch(0, E);
  for (int64_t g = 0; g < E; ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const SrKey key = scales.sr_key(Role::input, g);
    make_copies(x + groups.offsets[g] * in, n, in, r.role(Role::input), xq[size_t(g)], fwd,
                saved.xs[size_t(g)], keep, scales.get(Role::input, g), &key, &scales.agree);
  }
  if (p.defer_backward_quant && backward) saved.x = x;
  grouped_forward(r, groups, xq.data(), as_qtensors(w, E), y, out);
}

void core_forward_given(const LinearPrecision& p, int64_t out, const QTensor& xq,
                        QuantizedWeight* const* w, float* y, LinearSaved& saved) {
  thread_local GroupList one_group;  // {0, T}, storage kept across calls
  one_group.offsets.assign({0, xq.rows});
  MXT_CHECK(xq.has_all(copies_needed(p.recipe, Role::input, Use::forward)),
            "internal: a given input lacks its forward copy (",
            copies_needed(p.recipe, Role::input, Use::forward).name(), ")");
  begin_saved(saved, one_group);
  saved.x_given = true;
  grouped_forward(p.recipe, one_group, &xq, as_qtensors(w, 1), y, out);
}

void core_save_input(const LinearPrecision& p, int64_t in, const float* x,
                     const GroupList& groups, LinearSaved& saved, LayerScaleHistories& scales) {
  // The copies core_forward keeps for wgrad, made again without the product.
  const CopySet keep =
      p.defer_backward_quant ? CopySet{} : copies_needed(p.recipe, Role::input, Use::wgrad);
  begin_saved(saved, groups);
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const SrKey key = scales.sr_key(Role::input, g);
    make_copies(x + groups.offsets[g] * in, n, in, p.recipe.role(Role::input),
                saved.xs[size_t(g)], keep, scales.get(Role::input, g), &key, &scales.agree);
  }
  if (p.defer_backward_quant) saved.x = x;
}

void core_backward(const LinearPrecision& p, int64_t in, int64_t out, LinearSaved& saved,
                   QuantizedWeight* const* w, const float* dy, float* dx, float* const* dw,
                   bool accumulate, const std::string& layer, LayerScaleHistories& scales,
                   const QTensor* dyq_given, const QTensor* xw_given) {
  const Recipe& r = p.recipe;
  const GroupList& groups = saved.groups;
  const int64_t E = groups.num_groups();
  const bool deferred = p.defer_backward_quant && !saved.x_given;
  const CopySet xw = copies_needed(r, Role::input, Use::wgrad);
  check_backward_allowed(saved, layer);
  MXT_CHECK(saved.xs.size() == size_t(E) && (!deferred || saved.x != nullptr || saved.tokens == 0),
            "layer '", layer, "': backward called without a matching forward (or twice for one "
            "forward)");
  MXT_CHECK(saved.x_given == (xw_given != nullptr), "layer '", layer, "': ",
            saved.x_given ? "a forward_given needs x's wgrad copy at backward"
                          : "x's wgrad copy was given but the forward kept its own");
  MXT_CHECK((!dyq_given && !xw_given) || E == 1, "internal: given operands for ", E, " groups");
  // dy's copies: those dgrad reads (when dx is wanted) and those wgrad reads.
  const CopySet dyc = (dx ? copies_needed(r, Role::grad, Use::dgrad) : CopySet{}) |
                      copies_needed(r, Role::grad, Use::wgrad);
  MXT_CHECK(!dyq_given || dyq_given->has_all(dyc), "layer '", layer, "': the given dy lacks ",
            (dyc - dyq_given->present).name());
  MXT_CHECK(!xw_given || xw_given->has_all(xw), "layer '", layer, "': the given x lacks ",
            (xw - xw_given->present).name());
  std::vector<QTensor>& dyq = scratch(1, E);
  std::vector<QTensor>& xd = deferred ? scratch(2, E) : saved.xs;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    MXT_CHECK(deferred || xw_given || saved.xs[size_t(g)].has_all(xw), "layer '", layer,
              "': the saved forward state does not match the layer's precision (was it changed "
              "between forward and backward?)");
    // Stochastic rounding draws from the layer's keys (the model's clock: this micro-batch).
    const SrKey gkey = scales.sr_key(Role::grad, g), ikey = scales.sr_key(Role::input, g);
    if (!dyq_given)
      make_copies(dy + r0 * out, n, out, r.role(Role::grad), dyq[size_t(g)], dyc,
                  scales.get(Role::grad, g), &gkey, &scales.agree);
    if (deferred)  // make this group's wgrad copies of x now (the same scale as forward's)
      make_copies(saved.x + r0 * in, n, in, r.role(Role::input), xd[size_t(g)], xw,
                  scales.get(Role::input, g), &ikey, &scales.agree);
  }
  const QTensor* dys = dyq_given ? dyq_given : dyq.data();
  const QTensor* xs = xw_given ? xw_given : xd.data();
  if (dx) grouped_dgrad(r, groups, dys, as_qtensors(w, E), dx, in);
  grouped_wgrad(r, groups, dys, xs, dw, accumulate);
  if (!accumulate)  // a group with no rows has a zero gradient
    for (int64_t g = 0; g < E; ++g)
      if (groups.count(g) == 0) std::fill_n(dw[g], out * in, 0.f);
  // Consumed: a second backward is refused; the copies' storage stays for the next forward.
  saved.tokens = 0;
  saved.x_given = false;
  saved.groups.offsets.clear();  // keeps its capacity
  saved.x = nullptr;
  saved.weight_bytes_for_backward = 0;
  for (QTensor& t : saved.xs) t.invalidate();
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
