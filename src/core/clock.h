// core/clock.h — private: the wall clock the engine times itself with (steady_clock), and the
// elapsed time since a point in milliseconds or seconds.
#pragma once

#include <chrono>

namespace mxtrain {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace mxtrain
