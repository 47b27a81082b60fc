// nn/block_util.h — what the blocks (nn/blocks.h) share, internal to src/nn: the initial
// values — every parameter from its own stream, keyed by (seed, name), so a tensor's values
// do not depend on creation order or thread count and a rank's slice of a split tensor is the
// one-process tensor's slice — and where a Linear's FP32 input goes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain::nn_detail {

// N(0, std^2) values of p's whole tensor; with a split (ParamSplit::sliced) only this rank's
// slice is made, from the whole tensor's stream at its offsets, and p.split is set.
void init_normal(Parameter& p, float std, uint64_t seed, const ParamSplit& split = {});
// A gain of ones: p = [n] named `name`.
void init_ones(Parameter& p, std::string name, int64_t n);
// The split of a tensor-parallel weight: `dim` of its whole shape, in `parts` blocks (qkv's
// q, k and v: 3; fc1's gate and up: 2); none with one rank.
ParamSplit tp_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                    int parts);
// The split of an expert weight [E, out, in]: E / ep experts, and under expert-tensor
// parallelism the etp slice of its hidden dimension `dim` (in `parts` blocks).
ParamSplit expert_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                        int parts);

// Exactly n floats of b (resized when a pass's size changes).
inline float* grow(FloatBuffer& b, int64_t n) {
  if (b.size() != size_t(n)) b.resize(size_t(n));
  return b.data();
}

// Where a Linear's FP32 input [n floats] goes: `own` (kept until backward) when the Linear
// keeps no copy of it (nn/linear.h, keeps_input_copy), else `scratch` (and `own` is freed).
inline float* input_buffer(const Linear& l, FloatBuffer& own, int64_t n, float* scratch) {
  if (!l.keeps_input_copy()) return grow(own, n);
  own = FloatBuffer();
  return scratch;
}

}  // namespace mxtrain::nn_detail
