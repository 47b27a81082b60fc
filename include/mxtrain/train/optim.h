// mxtrain/train/optim.h — AdamW on FP32 master weights, LR schedule, gradient-norm helpers.
//
// The optimizer works on flat spans so the same code updates whole parameters (one process)
// and FSDP shards. Decoupled weight decay (Loshchilov & Hutter) applies to matrices only
// (parameters with 2 or more dimensions); gains, biases and nothing else are not decayed.
#pragma once

#include <cstdint>
#include <vector>

namespace mxtrain {

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

// One AdamW update of n elements at optimizer step `t` (1-based, for bias correction).
// w, m, v updated in place; the gradient is grad_scale · g (the clip factor and 1 / grad_accum;
// g itself is not written), rounded to FP32 before anything else, so scaling g beforehand
// gives the same bits. Runs an AVX-512 kernel on kernel path avx512 (mxtrain/isa.h); it gives
// the scalar loop's bits exactly.
//   w: [n], g: [n], m: [n], v: [n]
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay, float grad_scale = 1.f);

// Linear warmup from 0 to lr over warmup steps, then cosine decay to min_lr at total_steps.
// `step` is 0-based: the LR used for the step-th update.
float lr_at(int64_t step, int64_t warmup_steps, int64_t total_steps, float lr, float min_lr);

// Sum of squares in double, in a fixed order (nn/ops.h sum_squares_elements: the same bits on
// every kernel path and thread count), and whether every element is finite.
double sum_squares(const float* g, int64_t n);
bool all_finite(const float* g, int64_t n);

}  // namespace mxtrain
