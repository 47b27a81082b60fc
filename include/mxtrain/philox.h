// mxtrain/philox.h — Philox4x32-10, the counter-based generator behind stochastic rounding
// (docs/numerics.md, "Stochastic rounding").
//
// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), the generator of
// Random123, cuRAND's and TransformerEngine's Philox: 10 rounds of two 32x32 -> 64-bit
// multiplies on a 128-bit counter under a 64-bit key bumped by the Weyl constants. A draw is a
// pure function of (counter, key): any element's random bits can be computed without the ones
// before it, by any thread or kernel path, and again after a resume. The AVX-512 quantize
// kernels compute the same function 16 lanes at a time; this scalar one is their reference.
#pragma once

#include <array>
#include <cstdint>

namespace mxtrain {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = uint64_t(kPhiloxM0) * c[0], p1 = uint64_t(kPhiloxM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
  }
  return c;
}

}  // namespace mxtrain
