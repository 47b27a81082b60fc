// core/vexp_avx512.cc — array forms of vexp / vsigmoid (core/vexp.h), for tests and benchmarks.
// Built with the AVX-512 flags; the kernels that need exp inline core/vexp_avx512.h instead.
// GCC 12 reports _mm512_undefined_*() inside its own intrinsic headers as (maybe)
// uninitialized at -O2 (a false positive of the compiler, not of this code).
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "core/vexp_avx512.h"

namespace mxtrain::kern {

// y[i] = f(x[i]) for i < n, 16 lanes at a time with a masked tail.
template <class F>
static void map16(float* y, const float* x, int64_t n, F f) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = avx512::tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void exp_f32_avx512(float* y, const float* x, int64_t n) {
  map16(y, x, n, [](__m512 v) { return avx512::vexp(v); });
}

void sigmoid_f32_avx512(float* y, const float* x, int64_t n) {
  map16(y, x, n, [](__m512 v) { return avx512::vsigmoid(v); });
}

}  // namespace mxtrain::kern
