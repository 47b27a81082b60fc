// core/dispatch.h — the one form of kernel dispatch: a table of kernels keyed by Path
// (mxtrain/isa.h), internal to src/.
//
// Every op family (quantize, dequantize, the MX product, the elementwise ops, attention,
// AdamW) has one PathTable: an entry per path it has a kernel for, the scalar reference
// first and the others in increasing order of preference. The kernel that runs is the one of
// the last entry whose path is enabled now (path_enabled: the CPU has it and the --isa level
// allows it) — nothing else in the engine reads the CPU features or the level to choose a
// kernel, and kernels never choose again inside. An entry's kernel is whatever the family's
// API calls: one function pointer, or a struct of them (one per data type, layout or
// precision). Each family also says what its table chooses (a PathChoice), and
// engine_info() (mxtrain/info.h) lists them all, so `mxtrain info` reports the tables' own
// choices.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/isa.h"

namespace mxtrain {

// One family's choice now: its op, the entry's path and kernel name (`mxtrain info`).
struct PathChoice {
  std::string op;
  Path path;
  std::string kernel;
};

template <class K>
class PathTable {
 public:
  struct Entry {
    Path path;
    const char* kernel;  // name(s) reported by `mxtrain info`
    K k;
  };
  PathTable(const char* op, std::initializer_list<Entry> entries) : op_(op), entries_(entries) {
    MXT_CHECK(!entries_.empty() && entries_.front().path == Path::scalar,
              "internal: dispatch table '", op, "' must start with the scalar reference");
  }
  // The kernel of the last enabled entry.
  const K& get() const { return entries_[index()].k; }
  Path path() const { return entries_[index()].path; }
  PathChoice choice() const {
    const Entry& e = entries_[index()];
    return {op_, e.path, e.kernel};
  }

 private:
  size_t index() const {
    for (size_t i = entries_.size() - 1; i > 0; --i)
      if (path_enabled(entries_[i].path)) return i;
    return 0;
  }
  const char* op_;
  std::vector<Entry> entries_;
};

}  // namespace mxtrain
