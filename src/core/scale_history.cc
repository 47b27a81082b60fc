// core/scale_history.cc — the delayed-scaling update of mxtrain/scale_history.h.
#include "mxtrain/scale_history.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/formats.h"

namespace mxtrain {

ScaleHistory::ScaleHistory(const TensorFormat& f) {
  MXT_CHECK(f.quantized() && f.source == ScaleSource::amax_history && f.history.length >= 1 &&
                f.history.margin >= 0,
            "internal: a scale history for a format without one (", f.describe(), ")");
  ring_.assign(size_t(f.history.length), 0.f);
  fp8_max_ = elem_info(f.elem).max_value;
  amax_epsilon_ = f.amax_epsilon;
  margin_ = f.history.margin;
  algo_ = f.history.algo;
}

void ScaleHistory::record(float amax) {
  if (amax > step_amax_) step_amax_ = amax;  // false for NaN
}

void ScaleHistory::update() {
  const float latest = step_amax_;
  step_amax_ = 0.f;
  if (latest == 0.f || std::isnan(latest) || ring_.empty()) return;  // not quantized this step
  ring_[size_t(next_)] = latest;                  // replaces the oldest
  next_ = (next_ + 1) % int64_t(ring_.size());
  float amax = latest;
  if (algo_ == AmaxAlgo::max)
    for (float a : ring_) amax = std::max(amax, a);
  if (!std::isfinite(amax)) return;  // the scale stays
  amax = std::max(amax, amax_epsilon_);
  float s = fp8_max_ / amax;
  s = s / std::ldexp(1.f, margin_);
  scale_ = std::isinf(s) ? FLT_MAX : s;
}

std::vector<float> ScaleHistory::history() const {
  std::vector<float> out(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out[i] = ring_[(size_t(next_) + i) % ring_.size()];
  return out;
}

void ScaleHistory::restore(std::span<const float> history, float scale) {
  MXT_CHECK(history.size() == ring_.size(), "the saved amax history holds ", history.size(),
            " steps but precision.amax_history_len is ", ring_.size(),
            "; resume with the length it was saved with");
  MXT_CHECK(std::isfinite(scale) && scale > 0.f, "the saved delayed scale ", scale,
            " is not a finite number > 0");
  std::copy(history.begin(), history.end(), ring_.begin());
  next_ = 0;
  scale_ = scale;
  step_amax_ = 0.f;
}

}  // namespace mxtrain
