// mxtrain/nn/parameter.h — a trainable tensor: FP32 value, FP32 gradient, version.
//
// `version` is bumped by every optimizer step; quantized copies derived from the value
// (nn/linear.h) remember the version they were made from and are rebuilt when it changes.
//
// Gradients accumulate over micro-batches. clear_grad() starts a new accumulation without
// touching memory: it marks `grad` stale, and the next backward contribution (a Linear's
// wgrad, an RMSNorm's dgain, ...) WRITES it instead of adding, then marks it live. So a
// training step never zero-fills its gradients. zero_grad() is the eager form (fills zeros).
// Under FSDP `value` may be empty on a rank: the layer then receives its (quantized) weight
// from a weight provider instead (dist/fsdp.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"

namespace mxtrain {

struct Parameter {
  std::string name;              // stable dotted path, e.g. "layers.3.attention.qkv.weight"
  std::vector<int64_t> shape;
  FloatBuffer value;             // FP32 master, row-major
  FloatBuffer grad;              // FP32, accumulated over micro-batches
  bool grad_live = true;         // false after clear_grad(): grad's contents are stale
  uint64_t version = 0;          // bumped by the optimizer step

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void init(std::string n, std::vector<int64_t> s) {
    name = std::move(n);
    shape = std::move(s);
    value.assign(numel(), 0.f);
    grad.assign(numel(), 0.f);
  }
  void zero_grad() {
    std::fill(grad.begin(), grad.end(), 0.f);
    grad_live = true;
  }
  void clear_grad() { grad_live = false; }
  // For a backward contribution: true = add into grad, false = write it. Marks grad live.
  bool take_grad_accumulate() {
    const bool acc = grad_live;
    grad_live = true;
    return acc;
  }
};

}  // namespace mxtrain
