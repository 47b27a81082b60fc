// train/optim_kernels.h — private: the AdamW kernels behind train/optim.h, and its reference.
//
// optim.cc derives the per-step constants once (AdamWStep), picks the kernel for
// active_isa() and splits the elements over threads; a kernel updates elements [i0, i1) of
// w, m, v from g (all [n]). adamw_range_ref (optim.cc) is the scalar loop;
// adamw_range_avx512 (optim_avx512.cc) performs the same FP32 operations in the same order
// without fusing any of them (IEEE sqrt and division), so the two agree bit for bit.
// ref::adamw_update is train/optim.h's adamw_update with the scalar kernel, for tests.
#pragma once

#include <cstdint>

#include "mxtrain/train/optim.h"

namespace mxtrain {

namespace optk {

struct AdamWStep {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float wd;            // lr * weight_decay, or 0 when the parameter is not decayed
};

void adamw_range_ref(float* w, const float* g, float* m, float* v, const AdamWStep& s,
                     int64_t i0, int64_t i1);
void adamw_range_avx512(float* w, const float* g, float* m, float* v, const AdamWStep& s,
                         int64_t i0, int64_t i1);

}  // namespace optk

namespace ref {
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay);
}  // namespace ref

}  // namespace mxtrain
