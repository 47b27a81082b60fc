// tests/core/vexp_test.cc — the vectorised exp and sigmoid (core/vexp.h, core/vexp_avx512.h):
// error against std::exp in double over a dense sweep, the AVX-512 version against its scalar
// twin bit for bit, and the ends of the range (overflow, underflow, infinities, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/vexp.h"
#include "mxtrain/isa.h"

namespace mxtrain::kern {
namespace {

// Calls fn(xs) on chunks of the floats in [lo, hi] whose bit patterns (of the magnitude)
// are `stride` apart, in increasing order of x.
template <class Fn>
void sweep(float lo, float hi, uint32_t stride, Fn fn) {
  std::vector<float> xs;
  xs.reserve(1 << 16);
  for (float x = lo; x <= hi;) {
    xs.push_back(x);
    if (xs.size() == (1 << 16)) fn(xs), xs.clear();
    uint32_t b;
    std::memcpy(&b, &x, 4);
    if (x < 0) {  // toward 0: a smaller magnitude
      b = b >= 0x80000000u + stride ? b - stride : 0u;
    } else {
      b += stride;
    }
    std::memcpy(&x, &b, 4);
  }
  if (!xs.empty()) fn(xs);
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// |y - exp(x)| in units of the FP32 ulp of the exact result (a normal float).
double ulp_error(float x, float y) {
  const double t = std::exp(double(x));
  int e;
  std::frexp(t, &e);
  return std::fabs(double(y) - t) / std::ldexp(1.0, e - 24);
}

class Vexp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  }
  static std::vector<float> vexp(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    exp_f32_avx512(y.data(), x.data(), int64_t(x.size()));
    return y;
  }
};

TEST_F(Vexp, ErrorWithinBoundOverTheNormalRangeAndMatchesScalarTwin) {
  // ln(FLT_MIN) = -87.3365, ln(FLT_MAX) = 88.7228: results are normal floats in between.
  // Stride 61 over the 2.2e9 floats there: 3.7e7 points.
  double worst = 0, worst_rel = 0;
  float at = 0;
  size_t count = 0, twin_mismatch = 0;
  sweep(-87.33f, 88.72f, 61, [&](const std::vector<float>& xs) {
    const std::vector<float> ys = vexp(xs);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double u = ulp_error(xs[i], ys[i]);
      if (u > worst) worst = u, at = xs[i];
      worst_rel = std::max(worst_rel, std::fabs(ys[i] / std::exp(double(xs[i])) - 1.0));
      if (i % 64 == 0) {  // the scalar twin calls the library's fma: a subset
        const float s = exp_approx(xs[i]);
        twin_mismatch += std::memcmp(&s, &ys[i], 4) != 0;
      }
    }
    count += xs.size();
  });
  ASSERT_GT(count, 30000000u);
  RecordProperty("max_ulp", fmt(worst));
  RecordProperty("max_rel", fmt(worst_rel));
  EXPECT_LE(worst, kExpMaxUlp) << "at x = " << at;
  EXPECT_LE(worst_rel, kExpMaxUlp * 0x1p-23);
  EXPECT_EQ(twin_mismatch, 0u);
}

TEST_F(Vexp, SubnormalResultsWithinOneStepAndZeroBelow) {
  const double denorm_min = std::ldexp(1.0, -149);
  sweep(-104.f, -87.34f, 3, [&](const std::vector<float>& xs) {
    const std::vector<float> ys = vexp(xs);
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_LE(std::fabs(double(ys[i]) - std::exp(double(xs[i]))), denorm_min) << xs[i];
      if (i % 16 == 0) {
        const float s = exp_approx(xs[i]);
        ASSERT_EQ(std::memcmp(&s, &ys[i], 4), 0) << xs[i];
      }
    }
  });
}

TEST_F(Vexp, EndsOfTheRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {0.f,    -0.f,  1.f,    88.72f, 88.7229f, 89.f,  1000.f, inf,
                                 -103.98f, -104.f, -200.f, -inf,   nan,      -nan,  -87.33f};
  const std::vector<float> ys = vexp(xs);
  EXPECT_EQ(ys[0], 1.f);
  EXPECT_EQ(ys[1], 1.f);
  EXPECT_NEAR(ys[2], std::exp(1.0), 2e-7);
  EXPECT_TRUE(std::isfinite(ys[3]) && ys[3] > 3.3e38f);
  EXPECT_EQ(ys[4], inf);  // exp(88.7229) > FLT_MAX
  EXPECT_EQ(ys[5], inf);
  EXPECT_EQ(ys[6], inf);
  EXPECT_EQ(ys[7], inf);
  EXPECT_LE(ys[8], 1.5e-45f);  // 0 or the smallest subnormal, as std::exp rounds
  EXPECT_EQ(ys[9], 0.f);
  EXPECT_EQ(ys[10], 0.f);
  EXPECT_EQ(ys[11], 0.f);
  EXPECT_TRUE(std::isnan(ys[12]));
  EXPECT_TRUE(std::isnan(ys[13]));
  EXPECT_TRUE(std::isnormal(ys[14]));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float s = exp_approx(xs[i]);
    if (std::isnan(ys[i])) {
      EXPECT_TRUE(std::isnan(s)) << xs[i];
    } else {
      EXPECT_EQ(s, ys[i]) << xs[i];
    }
  }
}

// sigmoid = 1 / (1 + exp(-x)): the exp error (<= kExpMaxUlp, scaled down by e/(1+e)) plus
// half an ulp each for the add and the division; an ulp count can be up to twice the same
// relative error near the bottom of a binade, hence the extra margin (measured: 2.39 ulp).
TEST_F(Vexp, SigmoidWithinBound) {
  constexpr double kSigmoidMaxUlp = 3.0;
  double worst = 0;
  auto check = [&](const std::vector<float>& xs) {
    std::vector<float> ys(xs.size());
    sigmoid_f32_avx512(ys.data(), xs.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      const double t = 1.0 / (1.0 + std::exp(-double(xs[i])));
      if (xs[i] < -88.7229f) {  // exp(-x) overflows: 0, as 1 / (1 + std::exp(-x)) in FP32
        ASSERT_EQ(ys[i], 0.f) << xs[i];
      } else if (t < 0x1p-126) {  // subnormal result: within one subnormal step
        ASSERT_LE(std::fabs(ys[i] - t), 0x1p-149) << xs[i];
      } else {
        int e;
        std::frexp(t, &e);
        worst = std::max(worst, std::fabs(double(ys[i]) - t) / std::ldexp(1.0, e - 24));
      }
      if (i % 16 == 0) {
        ASSERT_EQ(ys[i], sigmoid_approx(xs[i])) << xs[i];
      }
    }
  };
  sweep(-110.f, 110.f, 97, check);
  check({0.f, -0.f, 87.4f, -88.8f, 1e30f, -1e30f});
  RecordProperty("max_ulp", fmt(worst));
  EXPECT_LE(worst, kSigmoidMaxUlp);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ends = {inf, -inf, std::nanf("")};
  std::vector<float> s(3);
  sigmoid_f32_avx512(s.data(), ends.data(), 3);
  EXPECT_EQ(s[0], 1.f);
  EXPECT_EQ(s[1], 0.f);
  EXPECT_TRUE(std::isnan(s[2]));
}

}  // namespace
}  // namespace mxtrain::kern
