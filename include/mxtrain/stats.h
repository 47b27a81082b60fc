// mxtrain/stats.h — the one median every measured figure uses: benchmarks (layers, GEMMs,
// FSDP gathers, quantize), the trainer's step time and the adaptive-FP8 reports.
//
// A true median: the middle value of an odd count, the mean of the two middle values of an
// even one (the upper middle alone sits above the median whenever the two differ).
#pragma once

#include <algorithm>
#include <vector>

namespace mxtrain {

// Median of the values; 0 for none.
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace mxtrain
