// mxtrain/profile.h — where a training step's time goes: scoped timers around the step's
// regions (each module's products, attention, the elementwise ops, the optimizer,
// communication, waiting), recorded only while a Profiler is active.
//
// A region is entered with MXT_PROFILE(region, pass) at the top of the function that does the
// work (the Linear's forward, an op's public entry, a wait on a collective). When no profiler
// is active on the calling thread — always, unless `mxtrain train --profile-steps` is running
// a profiled step — the scope is one load of a thread-local pointer and a branch: no clock is
// read. OpenMP worker threads never have one, so only the thread running the step records.
//
// Time is exclusive: entering a region stops the clock of the region it is nested in (a
// wait inside an FSDP hook counts as waiting, not as communication), and time inside a step
// but outside every region is charged to `other` — so the regions of a step add up to the
// step's wall time exactly (begin_step .. end_step). Scopes must not outlive a step.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mxtrain::prof {

enum class Region : uint8_t {
  // products (each module's quantization / conversion of its operands included)
  qkv, proj, fc1, fc2, experts_fc1, experts_fc2, router, lm_head, other_products,
  attention,
  // elementwise and data-movement ops
  embedding, norm, rope, swiglu, swiglu_fp8, residual, moe_routing, cross_entropy,
  data,           // building the micro-batches' token ids
  optimizer,      // gradient checks and norm, clipping, AdamW
  communication,  // collectives and FSDP's gather/scatter work at module boundaries
  wait,           // blocked until a non-blocking collective completes
  other,          // inside the step, outside every region above
  count
};
enum class Pass : uint8_t { none, fwd, bwd, count };

// Regions grouped for the table: products, attention, elementwise, optimizer, communication,
// wait, data, other.
enum class Group : uint8_t { products, attention, elementwise, optimizer, communication, wait,
                             data, other };

const char* region_name(Region r);  // "qkv", "experts.fc1", "cross_entropy", ...
const char* pass_name(Pass p);      // "", "fwd", "bwd"
const char* group_name(Group g);    // "products", ...
Group region_group(Region r);

// The product region of a module by its dotted name (nn/transformer.h): "*.experts.fc1" ->
// experts_fc1, "*.qkv" -> qkv, ..., "lm_head" -> lm_head, anything else -> other_products.
Region product_region(const std::string& module);

inline constexpr int kCells = int(Region::count) * int(Pass::count);
inline constexpr int cell_index(Region r, Pass p) { return int(r) * int(Pass::count) + int(p); }

// One step's exclusive time (ms) and entries per (region, pass).
struct StepProfile {
  double step_ms = 0;
  std::array<double, kCells> ms{};
  std::array<int64_t, kCells> calls{};
};

class Profiler {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The step runs from t0 to t1 (the same clock reads the trainer times the step with).
  void begin_step(TimePoint t0);
  void end_step(TimePoint t1);
  bool in_step() const { return depth_ > 0; }
  void enter(Region r, Pass p);
  void leave();
  const std::vector<StepProfile>& steps() const { return steps_; }

 private:
  void charge(TimePoint now);
  StepProfile cur_;
  std::vector<StepProfile> steps_;
  TimePoint mark_{};
  std::array<uint16_t, 64> stack_{};  // cell indices; [0] is `other`
  int depth_ = 0;
};

// The calling thread's active profiler (nullptr: profiling off). The trainer sets it around a
// profiled step.
namespace detail {
constinit inline thread_local Profiler* g_active = nullptr;
}
inline Profiler* active() { return detail::g_active; }
inline void set_active(Profiler* p) { detail::g_active = p; }

// A region for the lifetime of the object (see above).
class Scope {
 public:
  Scope(Region r, Pass p) : p_(active()) {
    if (p_) p_->enter(r, p);
  }
  // A product: the region comes from the module's name, looked up only when profiling.
  Scope(const std::string& module, Pass p) : p_(active()) {
    if (p_) p_->enter(product_region(module), p);
  }
  ~Scope() {
    if (p_) p_->leave();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Profiler* p_;
};

}  // namespace mxtrain::prof

#define MXT_PROF_CAT2(a, b) a##b
#define MXT_PROF_CAT(a, b) MXT_PROF_CAT2(a, b)
// MXT_PROFILE(norm, fwd): the rest of the enclosing block is region `norm`, pass `fwd`.
#define MXT_PROFILE(region, pass)                                              \
  ::mxtrain::prof::Scope MXT_PROF_CAT(mxt_prof_scope_, __LINE__)(              \
      ::mxtrain::prof::Region::region, ::mxtrain::prof::Pass::pass)
// MXT_PROFILE_PRODUCT(name(), fwd): a module's product, its region from the module's name.
#define MXT_PROFILE_PRODUCT(module, pass)                                      \
  ::mxtrain::prof::Scope MXT_PROF_CAT(mxt_prof_scope_, __LINE__)(              \
      (module), ::mxtrain::prof::Pass::pass)
