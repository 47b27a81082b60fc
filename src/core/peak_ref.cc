// core/peak_ref.cc — the scalar path of mxtrain/peak.h: a portable FP32 multiply-add loop and
// the memory streams through a word sum, memset and memcpy (core/peak_kernels.h).
//
// The multiply-add loop is plain C++ built with the baseline x86-64 flags, so it measures what
// code without any vector extension reaches. Empty asm statements make each accumulator's
// multiplier and the shared factor opaque to the compiler: without them it would compute the
// loop-invariant products once (leaving only additions) or notice that accumulators with the
// same start and the same updates hold the same value and keep one.
#include <cstring>

#include "core/peak_kernels.h"

namespace mxtrain::kern {
namespace {

constexpr int kRefAccumulators = 16;

double fp32_ref_run(int64_t iters, float a0, float a1, float b) {
  float acc[kRefAccumulators], a[kRefAccumulators];
  for (int j = 0; j < kRefAccumulators; ++j) {
    acc[j] = 0.f;
    a[j] = j % 2 ? a1 : a0;
    asm("" : "+x"(acc[j]), "+x"(a[j]));
  }
  for (int64_t i = 0; i < iters; ++i) {
    asm("" : "+x"(b));  // b "changes" every iteration: the products are computed each time
#pragma GCC unroll 16
    for (int j = 0; j < kRefAccumulators; ++j) acc[j] += a[j] * b;
  }
  double s = 0;
  for (int j = 0; j < kRefAccumulators; ++j) s += acc[j];
  return s;
}

uint64_t read_ref(const uint8_t* p, size_t n) {
  uint64_t s = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    s += w;
  }
  for (; i < n; ++i) s += p[i];
  return s;
}

void write_ref(uint8_t* p, size_t n, uint8_t v) { std::memset(p, v, n); }

void copy_ref(uint8_t* dst, const uint8_t* src, size_t n) { std::memcpy(dst, src, n); }

}  // namespace

const PeakLoop& peak_loop_fp32_ref() {
  static const PeakLoop l{PeakKind::fp32_ref, "fp32 mul+add (portable C++)", kRefAccumulators,
                          1.0, fp32_ref_run};
  return l;
}

const StreamKernels& stream_kernels_ref() {
  static const StreamKernels k{"64-bit word sum (portable C++)", "memset", "memcpy", read_ref,
                               write_ref, copy_ref};
  return k;
}

}  // namespace mxtrain::kern
