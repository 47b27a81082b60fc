// core/quantize_split.h — how the quantizers (quantize.cc, quantize_fp4.cc) split a matrix
// over the OpenMP threads. Internal to src/core.
//
// for_each_unit runs fn(Region) over X[M,K]. With at least as many B-row strips as threads
// (B: the block edge, 32 for MX, 16 for NVFP4, 128 for FP32-scaled blocks), each thread gets
// one contiguous range of whole strips (one call, so the kernels can pipeline across it);
// otherwise every strip is split into one column range per thread. Boundaries are multiples
// of B, so no block is shared and the bytes written do not depend on the split.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/quantize_kernels.h"
#include "mxtrain/quantize.h"

namespace mxtrain::kern {

// Below this many elements the work runs on the calling thread only.
constexpr int64_t kParallelMin = int64_t(1) << 16;

template <class Fn>
void for_each_unit(int64_t M, int64_t K, int64_t B, Fn&& fn) {
  const int64_t nrb = ceil_div(M, B), ncb = ceil_div(K, B);
#pragma omp parallel if (M * K >= kParallelMin)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    if (nrb >= nt) {
      const int64_t s0 = nrb * t / nt, s1 = nrb * (t + 1) / nt;
      if (s0 < s1) fn(Region{s0 * B, std::min(M, s1 * B), 0, K});
    } else {
      const int64_t b0 = ncb * t / nt, b1 = ncb * (t + 1) / nt;
      for (int64_t rb = 0; rb < nrb && b0 < b1; ++rb)
        fn(Region{rb * B, std::min(M, (rb + 1) * B), b0 * B, std::min(K, b1 * B)});
    }
  }
}

}  // namespace mxtrain::kern
