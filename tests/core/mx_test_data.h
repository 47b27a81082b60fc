// tests/core/mx_test_data.h — awkward input matrices for the quantization tests.
//
// Values are chosen per 8x16 patch from a regime, so that 1x32, 32x1 and 32x32 blocks see
// pure and mixed cases: ordinary values, all zeros, huge (up to FLT_MAX), tiny (FP32
// subnormals), a very wide dynamic range, values on and halfway between E4M3 grid points,
// exact powers of two, values at the scale-rule boundaries 1.75 * 2^k, and sparse NaN / +-Inf entries that poison their blocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxtrain/formats.h"

namespace mxtrain::testdata {

inline std::vector<float> awkward_matrix(int64_t M, int64_t K, uint32_t seed,
                                         bool with_nonfinite = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exp_dist(-149, 127);
  std::uniform_int_distribution<int> regime_dist(0, 10);
  std::uniform_int_distribution<int> grid_dist(0, 0x7D);
  const int64_t pr = (M + 7) / 8, pc = (K + 15) / 16;
  std::vector<int> regime(size_t(pr * pc));
  for (auto& r : regime) r = regime_dist(rng);
  std::vector<float> x(size_t(M * K));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < K; ++j) {
      float v = 0.f;
      switch (regime[size_t((i / 8) * pc + j / 16)]) {
        case 0: case 1: v = normal(rng); break;
        case 2: v = 0.f; break;                                            // zero patches
        case 3: v = normal(rng) * 1e37f; break;                            // huge
        case 4: v = (rng() % 8 == 0) ? std::numeric_limits<float>::max()  // FLT_MAX
                                     : normal(rng) * (3e38f / 8.f); break;
        case 5: v = normal(rng) * 1e-40f; break;                           // subnormals
        case 6: v = std::ldexp(1.f + float(rng() % 1024) / 1024.f,         // wide range
                              exp_dist(rng)) * ((rng() % 2) ? 1.f : -1.f); break;
        case 7: {                                                          // grid / halfway
          const int code = grid_dist(rng);  // a finite code and its upper neighbour
          const float g = e4m3_to_f32(uint8_t(code)), h = e4m3_to_f32(uint8_t(code + 1));
          v = (rng() % 2) ? g : 0.5f * (g + h);
          if (rng() % 2) v = -v;
          break;
        }
        case 8: v = std::ldexp(1.f, int(rng() % 40) - 20) * ((rng() % 2) ? 1 : -1); break;
        case 9: {  // on and next to the rceil/floor boundaries 1.75 * 2^k and 2^k
          const float b = std::ldexp((rng() % 2) ? 1.75f : 1.0f, int(rng() % 60) - 30);
          const int d = int(rng() % 3);
          v = d == 0 ? b : std::nextafter(b, d == 1 ? 0.f : 1e30f);
          break;
        }
        default: v = (rng() % 3 == 0) ? -0.f : normal(rng) * 448.f; break;
      }
      if (with_nonfinite) {
        const uint32_t r = rng() % 4000;
        if (r == 0) v = std::numeric_limits<float>::quiet_NaN();
        else if (r == 1) v = std::numeric_limits<float>::infinity();
        else if (r == 2) v = -std::numeric_limits<float>::infinity();
      }
      x[size_t(i * K + j)] = v;
    }
  }
  return x;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = f32_to_bf16(x[i]);
  return out;
}

}  // namespace mxtrain::testdata
