// train/optim_kernels.h — private: train/optim.h's adamw_update with the scalar kernels, for
// tests. The AdamW element kernels (scalar and AVX-512, the same bits) are elementwise ops of
// nn/ops.h (adamw_elements; nn/ops_kernels.h).
#pragma once

#include <cstdint>

#include "mxtrain/train/optim.h"

namespace mxtrain::ref {

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  int64_t t, bool decay, float grad_scale = 1.f);

}  // namespace mxtrain::ref
