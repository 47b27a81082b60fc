// train/optim.cc — AdamW, LR schedule and gradient reductions (train/optim.h).
//
// adamw_update derives the step's constants, picks the AdamW kernel for active_isa()
// (train/optim_kernels.h: AVX-512 from Isa::avx512 up, else the scalar loop below; both give
// the same bits) and splits the elements into one contiguous range per thread when n is
// above kParAdamW (measured: docs/results/trainer.md, "Elementwise kernels").
#include "mxtrain/train/optim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/isa.h"
#include "train/optim_kernels.h"

namespace mxtrain {

namespace optk {

// The reference update, one element at a time.
void adamw_range_ref(float* w, const float* g, float* m, float* v, const AdamWStep& s,
                     int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    m[i] = s.beta1 * m[i] + s.one_minus_beta1 * g[i];
    v[i] = s.beta2 * v[i] + s.one_minus_beta2 * g[i] * g[i];
    const float denom = std::sqrt(v[i]) * s.inv_sqrt_bc2 + s.eps;
    w[i] -= s.wd * w[i];
    w[i] -= s.step_size * m[i] / denom;
  }
}

}  // namespace optk

namespace {

constexpr int64_t kParAdamW = 32 * 1024;  // elements (~15 us of the AVX-512 kernel)

using AdamWKernel = void (*)(float*, const float*, float*, float*, const optk::AdamWStep&,
                             int64_t, int64_t);

void adamw_with(AdamWKernel kern, float* w, const float* g, float* m, float* v, int64_t n,
                const AdamWHyper& h, int64_t t, bool decay) {
  const float bc1 = 1.0f - std::pow(h.beta1, float(t));
  const float bc2 = 1.0f - std::pow(h.beta2, float(t));
  const optk::AdamWStep s{h.beta1,       h.beta2, 1.0f - h.beta1, 1.0f - h.beta2,
                          h.lr / bc1,    1.0f / std::sqrt(bc2),   h.eps,
                          decay ? h.lr * h.weight_decay : 0.0f};
  if (n > kParAdamW && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      // One contiguous range per thread, bounds on 16-element (64-byte) boundaries.
      const int64_t T = omp_get_num_threads(), j = omp_get_thread_num();
      const int64_t units = (n + 15) / 16;
      const int64_t i0 = std::min(n, units * j / T * 16);
      const int64_t i1 = std::min(n, units * (j + 1) / T * 16);
      if (i0 < i1) kern(w, g, m, v, s, i0, i1);
    }
  } else {
    kern(w, g, m, v, s, 0, n);
  }
}

}  // namespace

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay) {
  adamw_with(active_isa() >= Isa::avx512 ? optk::adamw_range_avx512 : optk::adamw_range_ref,
             w, g, m, v, n, h, t, decay);
}

void ref::adamw_update(float* w, const float* g, float* m, float* v, int64_t n,
                       const AdamWHyper& h, int64_t t, bool decay) {
  adamw_with(optk::adamw_range_ref, w, g, m, v, n, h, t, decay);
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
