// tests/nn/finite_diff.h — central finite differences for the nn gradient tests.
//
// The ops compute in FP32. A test builds a scalar objective f (a fixed random weighting of the
// op's outputs, summed in double), gets the analytic gradient from the op's backward, and
// compares it with (f(x + h) - f(x - h)) / (x+h - x-h) per input element, where the actual
// perturbation is measured after rounding x ± h to FP32.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace mxtrain::testing_nn {

// Step and tolerance of the op-level gradient checks. The ops run in FP32 and the objective
// is a weighted sum of O(100) FP32 outputs accumulated in double, so each f() carries about
// 1e-6 relative rounding noise; with h = 1e-3 that is ~1e-3 absolute noise in a difference
// quotient, on gradients of size O(0.1..1). The truncation error of central differences is
// O(h^2 f''') ~ 1e-6. Hence rtol 1e-2 plus atol 2e-3.
constexpr float kH = 1e-3f;
constexpr double kRtol = 1e-2, kAtol = 2e-3;

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Weighted sum in double: the scalar objective whose gradient w.r.t. y is w.
inline double dot_f64(const std::vector<float>& y, const std::vector<float>& w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * double(w[i]);
  return s;
}

// Compares analytic[i] with the central difference of f at x[i] for every i in `indices`
// (all elements when empty). Passes when |fd - an| <= atol + rtol * max(|fd|, |an|).
inline void expect_fd_close(std::vector<float>& x, const std::vector<float>& analytic,
                            const std::function<double()>& f, float h, double rtol, double atol,
                            const std::string& what, std::vector<size_t> indices = {}) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  if (indices.empty())
    for (size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  for (size_t i : indices) {
    const float x0 = x[i];
    const float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    const double fp = f();
    x[i] = xm;
    const double fm = f();
    x[i] = x0;
    const double fd = (fp - fm) / (double(xp) - double(xm));
    const double an = analytic[i];
    EXPECT_LE(std::fabs(fd - an), atol + rtol * std::max(std::fabs(fd), std::fabs(an)))
        << what << "[" << i << "]: finite difference " << fd << " vs backward " << an;
  }
}

}  // namespace mxtrain::testing_nn
