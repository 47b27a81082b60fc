// core/env_override.h — a run-time choice that a setter makes (tests, benchmarks, a CLI
// option), or else an environment variable, read and parsed once, on first use. The kernel
// path (MXTRAIN_ISA), the AMX tiles (MXTRAIN_AMX), oneDNN's shapes (MXTRAIN_GEMM_SHAPES) and
// the streaming limit (MXTRAIN_STREAM_ROWS) are each one.
//
//   constinit EnvOverride<Isa> isa_choice{"MXTRAIN_ISA", parse};  // parse: text -> Isa
//   isa_choice.set(Isa::scalar);  ...  isa_choice.get();  // the set value: Isa::scalar
//   isa_choice.clear();           ...  isa_choice.get();  // MXTRAIN_ISA's, or nullopt
//
// T is stored as a non-negative int64_t (an enum, a bool, a count), -1 meaning "not set".
// parse is called with the variable's text when it is set and non-empty; it throws, naming the
// variable, on text it does not take. The set value is an atomic, so a setter on one thread
// and readers on others need no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>

namespace mxtrain {

template <class T>
class EnvOverride {
 public:
  using Parse = T (*)(const char* text);
  constexpr EnvOverride(const char* var, Parse parse) : var_(var), parse_(parse) {}
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

  void set(T v) { slot_.store(int64_t(v)); }
  void clear() { slot_.store(-1); }  // back to the variable's choice

  // The set value, else the variable's; nullopt when neither chooses.
  std::optional<T> get() const {
    const int64_t v = slot_.load(std::memory_order_relaxed);
    if (v >= 0) return T(v);
    return from_env();
  }
  // The variable's choice alone (parsed on the first call; a bad value throws on every call).
  std::optional<T> from_env() const {
    std::call_once(once_, [this] {
      const char* e = std::getenv(var_);
      if (e && *e) env_ = parse_(e);
    });
    return env_;
  }

 private:
  const char* var_;
  Parse parse_;
  std::atomic<int64_t> slot_{-1};
  mutable std::once_flag once_;
  mutable std::optional<T> env_;
};

}  // namespace mxtrain
