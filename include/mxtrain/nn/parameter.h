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
// from a weight provider instead (dist/fsdp.h). init() checks the element count for overflow
// (at most 2^48, as ScaledTensor) and the bytes against the machine's memory, and turns a failed
// allocation into mxtrain::Error naming the parameter and the bytes, never std::bad_alloc.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/common.h"

namespace mxtrain {

// Where a parameter's value sits in the whole (one-process) tensor when a model is split over
// ranks (nn/parallel.h): a list of cuts applied to the whole tensor in order. A cut slices one
// dimension: that dimension is `parts` equal blocks (qkv's q, k, v: 3; fc1's gate, up: 2; else
// 1), each cut into `count` equal slices, and the rank holds slice `index` of every block — its
// rank in the cut's group. A tensor-parallel weight has one cut over tp; an expert weight
// [E, out, in] one over ep on dim 0 (experts [index·E/count, (index+1)·E/count)) and, with
// expert-tensor parallelism, one over etp on its hidden dimension. `partial_grad`: the whole
// value on every rank of the tensor-parallel group, whose gradients are parts of the sum over
// it (norms, embedding and LM head under sequence parallelism).
struct ParamSplit {
  enum class Over : uint8_t { tp, ep, etp };
  struct Cut {
    Over over = Over::tp;
    int dim = 0, parts = 1, count = 1, index = 0;
  };
  std::vector<Cut> cuts;            // applied to the whole tensor in order
  std::vector<int64_t> full_shape;  // the whole tensor's shape (set when cut)
  bool partial_grad = false;
  bool sliced() const { return !cuts.empty(); }
  bool over(Over o) const {
    for (const Cut& c : cuts)
      if (c.over == o) return true;
    return false;
  }
  // An expert slice (over ep and/or etp).
  bool expert() const { return over(Over::ep) || over(Over::etp); }
  // The same split with each cut's index set to the given ranks (the slices of the other
  // ranks of the groups, to put a whole tensor together).
  ParamSplit at(int tp_rank, int ep_rank, int etp_rank) const {
    ParamSplit s = *this;
    for (Cut& c : s.cuts)
      c.index = c.over == Over::tp ? tp_rank : c.over == Over::ep ? ep_rank : etp_rank;
    return s;
  }
};

struct Parameter {
  std::string name;              // stable dotted path, e.g. "layers.3.attention.qkv.weight"
  std::vector<int64_t> shape;
  FloatBuffer value;             // FP32 master, row-major
  FloatBuffer grad;              // FP32, accumulated over micro-batches
  bool grad_live = true;         // false after clear_grad(): grad's contents are stale
  uint64_t version = 0;          // bumped by the optimizer step
  ParamSplit split;              // a slice of a tensor split over ranks (default: whole)

  // The whole tensor's shape (shape itself unless the parameter is a slice).
  const std::vector<int64_t>& full_shape() const { return split.sliced() ? split.full_shape : shape; }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void init(std::string n, std::vector<int64_t> s) {
    name = std::move(n);
    shape = std::move(s);
    int64_t count = 1;
    for (int64_t d : shape)
      MXT_CHECK(d >= 0 && !__builtin_mul_overflow(count, d, &count) &&
                    count <= (int64_t(1) << 48),
                "parameter `", name, "`: its shape has more than 2^48 elements (or a negative "
                "dimension); make the layer smaller");
    const double bytes = double(count) * 2 * sizeof(float);  // value and gradient
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    MXT_CHECK(ram <= 0 || bytes <= ram, "parameter `", name, "`: its value and gradient need ",
              bytes / (1 << 30), " GiB, more than the machine's ", ram / (1 << 30),
              " GiB of memory; make the layer smaller");
    try {
      value.assign(count, 0.f);
      grad.assign(count, 0.f);
    } catch (const std::bad_alloc&) {
      value = FloatBuffer();
      MXT_FAIL("parameter `", name, "`: cannot allocate ", bytes / (1 << 30),
               " GiB for its value and gradient (out of memory); make the layer smaller");
    }
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

// The slice `split` describes, cut from the whole tensor. full: [full_shape]; local: [shape of
// the slice]. The inverse puts a slice back into the whole tensor.
void slice_of(const ParamSplit& split, const float* full, float* local);
void place_slice(const ParamSplit& split, const float* local, float* full);
// The shape of the slice.
std::vector<int64_t> slice_shape(const ParamSplit& split);
// The slice as contiguous runs: `length` elements at offset `whole` of the whole tensor are
// at offset `local` of the slice (in increasing order of both).
struct SliceRun {
  int64_t whole = 0, local = 0, length = 0;
};
std::vector<SliceRun> slice_runs(const ParamSplit& split);

}  // namespace mxtrain
