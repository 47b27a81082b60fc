// tests/nn/rope_test.cc — rotary position embedding (nn/ops.h): the angle table, the rotation
// of q and k (v untouched), the backward as the exact transpose, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {
namespace {

std::vector<float> random_qkv(int64_t rows, int64_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(size_t(rows * 3 * D));
  for (float& v : x) v = n(rng);
  return x;
}

TEST(Rope, TableMatchesTheFormula) {
  const RopeTable tab(33, 8, 10000.0);
  ASSERT_EQ(tab.half(), 4);
  for (int64_t t : {0, 1, 17, 32})
    for (int64_t i = 0; i < 4; ++i) {
      const double a = double(t) * std::pow(10000.0, -2.0 * double(i) / 8.0);
      EXPECT_EQ(tab.cos(t)[i], float(std::cos(a)));
      EXPECT_EQ(tab.sin(t)[i], float(std::sin(a)));
    }
}

TEST(Rope, RotatesQAndKByPositionAndLeavesV) {
  const int64_t B = 2, T = 5, D = 12, H = 3, hd = 4;
  const RopeTable tab(T, hd, 100.0);
  std::vector<float> x = random_qkv(B * T, D, 1), y = x;
  rope_forward(y.data(), tab, B, T, D, H);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* in = x.data() + (b * T + t) * 3 * D;
      const float* out = y.data() + (b * T + t) * 3 * D;
      for (int64_t c = 2 * D; c < 3 * D; ++c) EXPECT_EQ(out[c], in[c]) << "v changed";
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < hd / 2; ++i) {
            const int64_t u = part * D + h * hd + i, w = u + hd / 2;
            const double a = double(t) * std::pow(100.0, -2.0 * double(i) / double(hd));
            // FP32 products of FP32-rounded cos/sin: 2 roundings of |x| ~ 3 -> 1e-6 margin.
            EXPECT_NEAR(out[u], in[u] * std::cos(a) - in[w] * std::sin(a), 1e-5);
            EXPECT_NEAR(out[w], in[u] * std::sin(a) + in[w] * std::cos(a), 1e-5);
            if (t == 0) {
              EXPECT_EQ(out[u], in[u]);  // position 0: the identity, exactly (cos 1, sin 0)
              EXPECT_EQ(out[w], in[w]);
            }
          }
    }
}

// The backward is the transpose: <rope(x), g> == <x, rope_backward(g)> for any x, g.
TEST(Rope, BackwardIsTheTranspose) {
  for (int64_t T : {1, 7, 33}) {
    const int64_t B = 2, D = 16, H = 2;
    const RopeTable tab(64, D / H, 10000.0);
    std::vector<float> x = random_qkv(B * T, D, 2), g = random_qkv(B * T, D, 3);
    std::vector<float> rx = x, rg = g;
    rope_forward(rx.data(), tab, B, T, D, H);
    rope_backward(rg.data(), tab, B, T, D, H);
    double lhs = 0, rhs = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      lhs += double(rx[i]) * g[i];
      rhs += double(x[i]) * rg[i];
      norm += std::fabs(double(x[i]) * g[i]);
    }
    // Each side rounds every product once in FP32: relative 1e-6 of the absolute sum.
    EXPECT_NEAR(lhs, rhs, 1e-6 * norm) << "T=" << T;
    // And rotating back recovers x (a rotation's transpose is its inverse).
    rope_backward(rx.data(), tab, B, T, D, H);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(rx[i], x[i], 2e-6f * (1 + std::fabs(x[i])));
  }
}

TEST(Rope, BadArgumentsAreErrors) {
  EXPECT_THROW(RopeTable(8, 5, 10000.0), Error);   // odd head dimension
  EXPECT_THROW(RopeTable(8, 4, 0.5), Error);       // theta <= 1
  EXPECT_THROW(RopeTable(0, 4, 10000.0), Error);
  const RopeTable tab(4, 4, 10000.0);
  std::vector<float> x = random_qkv(8, 8, 4);
  EXPECT_THROW(rope_forward(x.data(), tab, 1, 8, 8, 2), Error);  // T beyond the table
  EXPECT_THROW(rope_forward(x.data(), tab, 1, 4, 8, 1), Error);  // head dim 8 != 4
  EXPECT_THROW(rope_forward(nullptr, tab, 1, 4, 8, 2), Error);
}

}  // namespace
}  // namespace mxtrain
