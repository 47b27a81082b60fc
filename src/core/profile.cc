// core/profile.cc — the step profiler's bookkeeping and region names (mxtrain/profile.h).
//
// Each (region, pass) is a cell; a stack of cells holds the regions entered. Every clock read
// charges the time since the previous one to the cell on top, so every interval of the step
// lands in exactly one cell.
#include "mxtrain/profile.h"

#include "mxtrain/common.h"

namespace mxtrain::prof {

namespace {
constexpr uint16_t kOther = uint16_t(cell_index(Region::other, Pass::none));

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0 &&
         (s.size() == t.size() || s[s.size() - t.size() - 1] == '.');
}
}  // namespace

void Profiler::begin_step(TimePoint t0) {
  MXT_CHECK(depth_ == 0, "profiler: a step began inside another");
  cur_ = StepProfile{};
  mark_ = t0;
  stack_[0] = kOther;
  depth_ = 1;
}

void Profiler::end_step(TimePoint t1) {
  MXT_CHECK(depth_ == 1, "profiler: the step ended with ", depth_ - 1, " region(s) still open");
  charge(t1);
  cur_.step_ms = 0;
  for (double v : cur_.ms) cur_.step_ms += v;
  steps_.push_back(cur_);
  depth_ = 0;
}

void Profiler::charge(TimePoint now) {
  cur_.ms[stack_[size_t(depth_ - 1)]] += std::chrono::duration<double, std::milli>(now - mark_).count();
  mark_ = now;
}

void Profiler::enter(Region r, Pass p) {
  if (depth_ == 0) return;  // outside a step (evaluation, checkpoints): not recorded
  MXT_CHECK(depth_ < int(stack_.size()), "profiler: regions nested deeper than ", stack_.size());
  charge(std::chrono::steady_clock::now());
  const int c = cell_index(r, p);
  stack_[size_t(depth_++)] = uint16_t(c);
  ++cur_.calls[size_t(c)];
}

void Profiler::leave() {
  if (depth_ <= 1) return;  // a scope opened before the step began
  charge(std::chrono::steady_clock::now());
  --depth_;
}

const char* region_name(Region r) {
  switch (r) {
    case Region::qkv: return "qkv";
    case Region::proj: return "proj";
    case Region::fc1: return "fc1";
    case Region::fc2: return "fc2";
    case Region::experts_fc1: return "experts.fc1";
    case Region::experts_fc2: return "experts.fc2";
    case Region::router: return "router";
    case Region::lm_head: return "lm_head";
    case Region::other_products: return "other_products";
    case Region::attention: return "attention";
    case Region::embedding: return "embedding";
    case Region::norm: return "norm";
    case Region::rope: return "rope";
    case Region::swiglu: return "swiglu";
    case Region::swiglu_fp8: return "swiglu_fp8";
    case Region::residual: return "residual";
    case Region::moe_routing: return "moe_routing";
    case Region::cross_entropy: return "cross_entropy";
    case Region::data: return "data";
    case Region::optimizer: return "optimizer";
    case Region::communication: return "communication";
    case Region::wait: return "wait";
    case Region::other: return "other";
    case Region::count: break;
  }
  return "?";
}

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::none: return "";
    case Pass::fwd: return "fwd";
    case Pass::bwd: return "bwd";
    case Pass::count: break;
  }
  return "?";
}

const char* group_name(Group g) {
  switch (g) {
    case Group::products: return "products";
    case Group::attention: return "attention";
    case Group::elementwise: return "elementwise";
    case Group::optimizer: return "optimizer";
    case Group::communication: return "communication";
    case Group::wait: return "wait";
    case Group::data: return "data";
    case Group::other: return "other";
  }
  return "?";
}

Group region_group(Region r) {
  if (r <= Region::other_products) return Group::products;
  if (r == Region::attention) return Group::attention;
  if (r <= Region::cross_entropy) return Group::elementwise;
  switch (r) {
    case Region::data: return Group::data;
    case Region::optimizer: return Group::optimizer;
    case Region::communication: return Group::communication;
    case Region::wait: return Group::wait;
    default: return Group::other;
  }
}

Region product_region(const std::string& m) {
  if (ends_with(m, "experts.fc1")) return Region::experts_fc1;
  if (ends_with(m, "experts.fc2")) return Region::experts_fc2;
  if (ends_with(m, "qkv")) return Region::qkv;
  if (ends_with(m, "proj")) return Region::proj;
  if (ends_with(m, "fc1")) return Region::fc1;
  if (ends_with(m, "fc2")) return Region::fc2;
  if (ends_with(m, "router")) return Region::router;
  if (ends_with(m, "lm_head")) return Region::lm_head;
  return Region::other_products;
}

}  // namespace mxtrain::prof
