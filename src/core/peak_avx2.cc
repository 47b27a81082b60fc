// core/peak_avx2.cc — the FP32 FMA peak loop on ymm registers (core/peak_kernels.h), for CPUs
// with AVX2 and FMA but without AVX-512. Compiled with the AVX2 flags.
//
// 12 accumulators and the two inputs fill 14 of the 16 ymm registers; 12 cover an FMA latency
// of 4-5 cycles at two FMAs per cycle (Haswell to Zen 3). The empty asm statements keep the
// compiler from merging accumulators that would hold the same value all along.
#include <immintrin.h>

#include "core/peak_kernels.h"

namespace mxtrain::kern {
namespace {

constexpr int kAcc = 12;

double fma_run(int64_t iters, float a0, float a1, float b) {
  const __m256 va = _mm256_setr_ps(a0, a1, a0, a1, a0, a1, a0, a1);
  const __m256 vb = _mm256_set1_ps(b);
  __m256 acc[kAcc];
#pragma GCC unroll 12
  for (int j = 0; j < kAcc; ++j) {
    acc[j] = _mm256_setzero_ps();
    asm("" : "+x"(acc[j]));
  }
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_fmadd_ps(va, vb, acc[j]);
  }
  __m256 s = acc[0];
#pragma GCC unroll 12
  for (int j = 1; j < kAcc; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  double r = 0;
  for (float v : out) r += v;
  return r;
}

}  // namespace

const PeakLoop& peak_loop_fma_avx2() {
  static const PeakLoop l{PeakKind::fp32_fma, "vfmadd231ps ymm", kAcc, 8.0, fma_run};
  return l;
}

}  // namespace mxtrain::kern
