// tests/core/quantize_words_test.cc — the 16-bit-lane encoder of the fast colwise / 32x32 /
// dual-axis kernels against the scalar reference, on the inputs where it has to hand over
// to the exact 32-bit path or where its word view could lose information.
//
// Every 32x32 tile has one anchor magnitude on its diagonal, so each of its row blocks,
// column blocks and the tile itself share one scale; the other elements come from one
// regime per tile: FP32 values whose E4M3/E5M2 rounding is decided by the low 16 bits only,
// FP8-subnormal results, FP32 subnormals, tiny scales, zero tiles with -0.0, NaN/Inf tiles
// holding zeros, and floor-rule saturation. 64 x 4256 spans several column chunks of both
// input types plus a ragged tail; one big case (>= 8 Mi elements) covers the non-temporal
// stores of large outputs with rows that do not start on a 64-byte line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/mx_test_data.h"
#include "core/quantize_compare.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using testdata::compare_paths;
using testdata::compare_paths_all_settings;
using testdata::PathGuard;

// A grid point of `e` at or near v's binade and its upper neighbour: their midpoint, moved
// by -1, 0 or +1 FP32 ulp (so only the bits below the BF16 half decide the rounding).
float near_tie(std::mt19937& rng, Elem e) {
  const int code = int(rng() % (e == Elem::e4m3 ? 0x7D : 0x7A));
  const float g = fp8_to_f32(uint8_t(code), e), h = fp8_to_f32(uint8_t(code + 1), e);
  float v = 0.5f * (g + h);
  const int d = int(rng() % 3);
  if (d == 1) v = std::nextafter(v, 0.f);
  if (d == 2) v = std::nextafter(v, 1e30f);
  return (rng() % 2) ? -v : v;
}

std::vector<float> word_edge_matrix(int64_t M, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float anchors[] = {448.f, 500.f, 1.f, 57344.f, std::ldexp(1.f, -100),
                           std::ldexp(1.f, -118), std::ldexp(1.75f, -110),
                           std::numeric_limits<float>::max()};
  std::vector<float> x(size_t(M * K));
  for (int64_t tr = 0; tr < M; tr += 32)
    for (int64_t tc = 0; tc < K; tc += 32) {
      const int regime = int(rng() % 9);
      const float anchor = anchors[rng() % 8];
      for (int64_t i = tr; i < std::min(M, tr + 32); ++i)
        for (int64_t j = tc; j < std::min(K, tc + 32); ++j) {
          float v = 0.f;
          const float sub = std::ldexp(float(rng() % 8388607 + 1), -149);  // FP32 subnormal
          switch (regime) {
            case 0: v = near_tie(rng, Elem::e4m3) * (anchor / 448.f); break;
            case 1: v = near_tie(rng, Elem::e5m2) * (anchor / 57344.f); break;
            case 2:  // FP8-subnormal results, both formats' ranges
              v = anchor * std::ldexp(1.f + float(rng() % 64) / 64.f, -int(rng() % 24) - 9);
              break;
            case 3: v = (rng() % 2) ? sub : normal(rng) * anchor / 4.f; break;
            case 4: v = (rng() % 2) ? sub : std::ldexp(normal(rng), -120); break;  // tiny
            case 5: v = (rng() % 3 == 0) ? -0.f : 0.f; break;                      // zeros
            case 6: v = (rng() % 4 == 0) ? -0.f : normal(rng) * anchor / 1e6f; break;
            case 7: v = (rng() % 5 == 0) ? 0.f : normal(rng) * anchor / 8.f; break;
            default: v = std::min(std::abs(normal(rng)) * anchor, anchor); break;
          }
          x[size_t(i * K + j)] = v;
        }
      if (regime == 5) continue;  // an all-zero tile stays all zero
      for (int64_t d = 0; d < 32 && tr + d < M && tc + d < K; ++d)
        x[size_t((tr + d) * K + tc + d)] = (d % 2) ? -anchor : anchor;
      if (regime == 7)  // NaN / Inf in a tile of zeros and values
        x[size_t(tr * K + std::min(K - 1, tc + 5))] =
            (rng() % 2) ? std::numeric_limits<float>::quiet_NaN()
                        : -std::numeric_limits<float>::infinity();
    }
  return x;
}

TEST(QuantizeWords, EdgeRegimesMatchScalarReference) {
  PathGuard guard;
  for (auto [M, K] : {std::pair<int64_t, int64_t>{64, 4256}, {33, 4097}}) {
    const std::vector<float> x = word_edge_matrix(M, K, uint32_t(M * 131 + K));
    compare_paths_all_settings(x, M, K);
  }
}

// The edge matrix really contains what it is meant to: values whose rounding differs between
// the FP32 input and its BF16 truncation, FP32 subnormals, -0.0, and NaN.
TEST(QuantizeWords, EdgeMatrixHasItsRegimes) {
  const std::vector<float> x = word_edge_matrix(64, 4256, 64 * 131 + 4256);
  int low_bits = 0, subnormal = 0, neg_zero = 0, nan = 0;
  for (float v : x) {
    const uint32_t b = f32_bits(v);
    low_bits += (b & 0xFFFF) != 0 && (b & 0x7FFFFFFF) >= 0x00800000u;
    subnormal += (b & 0x7FFFFFFF) != 0 && (b & 0x7FFFFFFF) < 0x00800000u;
    neg_zero += b == 0x80000000u;
    nan += v != v;
  }
  EXPECT_GT(low_bits, 10000);
  EXPECT_GT(subnormal, 1000);
  EXPECT_GT(neg_zero, 100);
  EXPECT_GT(nan, 3);
}

// Ordinary data: normal values at a few magnitudes per row, no zeros, NaNs or subnormals.
// Nearly every 128-column piece then takes the fast path end to end (its codes packed to
// bytes with the sign merged in), which the edge matrices above, built to send pieces to
// the exact path, hardly reach.
TEST(QuantizeWords, OrdinaryDataMatchesScalarReference) {
  PathGuard guard;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 128}, {31, 1023}, {33, 4161}, {64, 1024}, {257, 513}, {96, 8320}};
  for (auto [M, K] : shapes) {
    std::mt19937 rng(uint32_t(M * 131 + K));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> x(size_t(M * K));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < K; ++j) {
        float v = normal(rng) * std::ldexp(1.f, int(i % 17) - 8);
        if (v == 0.f) v = 1.f;  // keep every block non-zero
        x[size_t(i * K + j)] = v;
      }
    compare_paths_all_settings(x, M, K, "ordinary ");
  }
}

// >= 8 Mi elements: the large-output path (non-temporal stores, realigned rows).
TEST(QuantizeWords, LargeTensorMatchesScalarReference) {
  PathGuard guard;
  // 8.1 Mi elements; an odd row length puts the rows at every alignment, so the writer takes
  // both its realigning streamed path and its plain one.
  const int64_t M = 2048, K = 4161;
  const std::vector<float> x = testdata::awkward_matrix(M, K, 7u);
  compare_paths(x, M, K, {Elem::e4m3, ScaleRounding::rceil}, "2048x4161 e4m3 rceil");
}

}  // namespace
}  // namespace mxtrain
