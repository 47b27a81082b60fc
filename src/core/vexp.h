// core/vexp.h — private: the FP32 exp used by the vectorised kernels, as scalar code.
//
// exp_approx() is the scalar twin of avx512::vexp() (vexp_avx512.h): the same operations in
// the same order, so the two agree bit for bit (tests/core/vexp_test.cc checks it over a dense
// sweep). It exists to document and test the algorithm; the scalar kernels keep std::exp.
//
// Algorithm (Cephes expf, with FMA):
//   x is clamped to [kExpLo, kExpHi] (NaN passes through the clamp unchanged);
//   n = round_to_nearest_even(x * log2(e));
//   r = x - n*C1 - n*C2, C1 + C2 = ln 2 (two-constant Cody-Waite: n*C1 is exact because C1
//       has 9 significant bits and |n| <= 162), so |r| <= ln(2)/2 + tiny;
//   e^r ~= 1 + r + r^2 * P(r), P of degree 5 (Cephes minimax coefficients; degree 7 in all);
//   result = e^r * 2^n in one rounding (AVX-512 VSCALEFPS; std::scalbn here).
// Range: x > 88.7228 (ln FLT_MAX) gives +inf, +inf gives +inf. For -103.97 < x < -87.3365
// (ln FLT_MIN) the result is subnormal (gradual underflow, one rounding, so within one
// subnormal step of the true value); below that it is 0, and -inf gives 0. NaN gives NaN.
// Measured over every float in [-87.33, 88.72] (normal results) against std::exp in double:
// at most 1.01 ulp of the exact result (relative error 8.5e-8; a correctly rounded exp has
// 0.5 ulp); in the subnormal range at most 0.75 of the smallest subnormal away from it.
#pragma once

#include <cmath>
#include <cstdint>

namespace mxtrain::kern {

inline constexpr float kExpLo = -112.f;  // exp(x) rounds to 0 for every x below -103.98
inline constexpr float kExpHi = 89.f;    // exp(x) overflows to +inf for every x above 88.73
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kExpC1 = 0.693359375f;      // 355/512
inline constexpr float kExpC2 = -2.12194440e-4f;   // ln 2 - C1
inline constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// Error bound asserted by tests/core/vexp_test.cc over a dense sweep (measured 1.01 ulp):
// in units of the FP32 ulp of the exact result, over the normal range.
inline constexpr double kExpMaxUlp = 1.5;

// Scalar twin of avx512::vexp.
inline float exp_approx(float x) {
  if (std::isnan(x)) return x;  // std::fmin/fmax would drop a NaN; the vector clamp keeps it
  x = std::fmax(kExpLo, std::fmin(kExpHi, x));
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kExpC1, x);
  r = std::fma(-n, kExpC2, r);
  float p = kExpP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpP[i]);
  const float r2 = r * r;
  const float y = std::fma(p, r2, r) + 1.f;
  return std::scalbn(y, int(n));
}

// Scalar twin of avx512::vsigmoid: 1 / (1 + exp(-x)).
inline float sigmoid_approx(float x) { return 1.f / (1.f + exp_approx(-x)); }

// Array forms of the AVX-512 versions (vexp_avx512.cc), for tests and benchmarks: y[i] =
// exp(x[i]) / sigmoid(x[i]), i < n. Call only where path avx512 is enabled (mxtrain/isa.h).
void exp_f32_avx512(float* y, const float* x, int64_t n);
void sigmoid_f32_avx512(float* y, const float* x, int64_t n);

}  // namespace mxtrain::kern
