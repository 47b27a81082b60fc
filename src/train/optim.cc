// train/optim.cc — AdamW, LR schedule and gradient reductions (train/optim.h).
//
// adamw_update derives the step's constants and hands the element update to the elementwise
// ops (nn/ops.h adamw_elements: their dispatch table's AVX-512 or scalar kernel, the same
// bits, split into one contiguous range per thread above a size measured in
// docs/results/trainer.md, "Elementwise kernels"); the gradient reductions are elementwise
// ops too (sum_squares_elements, all_finite_elements).
#include "mxtrain/train/optim.h"

#include <cmath>

#include "mxtrain/nn/ops.h"
#include "nn/ops_kernels.h"
#include "train/optim_kernels.h"

namespace mxtrain {

namespace {

// The step's constants (nn/ops.h AdamWStep).
AdamWStep step_constants(const AdamWHyper& h, int64_t t, bool decay, float grad_scale) {
  const float bc1 = 1.0f - std::pow(h.beta1, float(t));
  const float bc2 = 1.0f - std::pow(h.beta2, float(t));
  return AdamWStep{h.beta1,    h.beta2, 1.0f - h.beta1,         1.0f - h.beta2,
                   h.lr / bc1, 1.0f / std::sqrt(bc2), h.eps,
                   decay ? h.lr * h.weight_decay : 0.0f, grad_scale};
}

}  // namespace

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay, float grad_scale) {
  adamw_elements(w, g, m, v, n, step_constants(h, t, decay, grad_scale));
}

void ref::adamw_update(float* w, const float* g, float* m, float* v, int64_t n,
                       const AdamWHyper& h, int64_t t, bool decay, float grad_scale) {
  ref::adamw_elements(w, g, m, v, n, step_constants(h, t, decay, grad_scale));
}

float lr_at(int64_t step, int64_t warmup_steps, int64_t total_steps, float lr, float min_lr) {
  if (warmup_steps > 0 && step < warmup_steps) return lr * float(step + 1) / float(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0) return lr;
  const double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return min_lr + 0.5f * (lr - min_lr) * float(1.0 + std::cos(M_PI * progress));
}

double sum_squares(const float* g, int64_t n) { return sum_squares_elements(g, n); }

bool all_finite(const float* g, int64_t n) { return all_finite_elements(g, n); }

}  // namespace mxtrain
