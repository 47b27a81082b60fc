// train/optim.cc — AdamW, LR schedule and gradient reductions (train/optim.h).
//
// adamw_update derives the step's constants and hands the element update to the elementwise
// ops (nn/ops.h adamw_elements: their dispatch table's AVX-512 or scalar kernel, the same
// bits, split into one contiguous range per thread above a size measured in
// docs/results/trainer.md, "Elementwise kernels").
#include "mxtrain/train/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/nn/ops.h"
#include "nn/ops_kernels.h"
#include "train/optim_kernels.h"

namespace mxtrain {

namespace {

// The step's constants (nn/ops.h AdamWStep).
AdamWStep step_constants(const AdamWHyper& h, int64_t t, bool decay) {
  const float bc1 = 1.0f - std::pow(h.beta1, float(t));
  const float bc2 = 1.0f - std::pow(h.beta2, float(t));
  return AdamWStep{h.beta1,    h.beta2, 1.0f - h.beta1,         1.0f - h.beta2,
                   h.lr / bc1, 1.0f / std::sqrt(bc2), h.eps,
                   decay ? h.lr * h.weight_decay : 0.0f};
}

}  // namespace

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay) {
  adamw_elements(w, g, m, v, n, step_constants(h, t, decay));
}

void ref::adamw_update(float* w, const float* g, float* m, float* v, int64_t n,
                       const AdamWHyper& h, int64_t t, bool decay) {
  ref::adamw_elements(w, g, m, v, n, step_constants(h, t, decay));
}

float lr_at(int64_t step, int64_t warmup_steps, int64_t total_steps, float lr, float min_lr) {
  if (warmup_steps > 0 && step < warmup_steps) return lr * float(step + 1) / float(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0) return lr;
  const double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return min_lr + 0.5f * (lr - min_lr) * float(1.0 + std::cos(M_PI * progress));
}

double sum_squares(const float* g, int64_t n) {
  // Fixed blocking so the result does not depend on the thread count.
  constexpr int64_t kBlock = 4096;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nb, 0.0);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < nb; ++b) {
    double s = 0;
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) s += double(g[i]) * double(g[i]);
    part[b] = s;
  }
  double s = 0;
  for (double p : part) s += p;
  return s;
}

bool all_finite(const float* g, int64_t n) {
  bool ok = true;
#pragma omp parallel for reduction(&& : ok) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(g[i]);
  return ok;
}

}  // namespace mxtrain
