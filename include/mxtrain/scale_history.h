// mxtrain/scale_history.h — delayed scaling (TransformerEngine's DelayedScaling): the FP32
// scale of one tensor taken from the amaxes of earlier optimizer steps (docs/numerics.md,
// "Delayed scaling").
//
// One ScaleHistory per tensor a layer quantizes with a delayed scale (per role and row group:
// input, weight and grad of a Linear; of each expert of a GroupedLinear). It holds
//   * the scale quantization uses now (1 before the first update, as TransformerEngine's);
//   * the amax of the step in progress: every quantization with that scale records its
//     tensor's amax (NaN ignored), so the step's amax is the largest over its micro-batches;
//   * the history: the step amaxes of the last `length` updates that had one, oldest first.
// At the end of each optimizer step the trainer max-reduces every step amax over the ranks
// (so every rank keeps the same histories and scales) and calls update():
//   a step amax of 0 (the tensor was not quantized): nothing changes;
//   else the history drops its oldest entry and takes the step amax, then
//     amax  = max(history) (algo max) or the step amax (most_recent), at least amax_epsilon;
//     scale = fl32(fl32(fp8_max / amax) / 2^margin), with Inf -> FLT_MAX; a non-finite amax
//             keeps the previous scale.
// This is TransformerEngine's update (a ring of `length` amaxes, `max` by default) restated
// per optimizer step: mxtrain updates once per step, after all micro-batches, so W ranks with
// grad_accum A see the scales of one process with grad_accum W·A.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mxtrain/recipe.h"

namespace mxtrain {

class ScaleHistory {
 public:
  ScaleHistory() = default;
  // A fresh history for a tensor of format f (f.source must be amax_history): `length` zero
  // entries, scale 1, no step amax.
  explicit ScaleHistory(const TensorFormat& f);

  // The scale to quantize with now (value = code / scale; scale_inv = 1 / scale is stored).
  float scale() const { return scale_; }
  // Adds a quantized tensor's amax to the step's (max; NaN ignored).
  void record(float amax);
  float step_amax() const { return step_amax_; }
  // The step amax after the reduction over ranks.
  void set_step_amax(float amax) { step_amax_ = amax; }
  // Forgets the step amax (a skipped step, or amaxes recorded outside a training step).
  void drop_step_amax() { step_amax_ = 0.f; }
  // End of an optimizer step: the rule above; the step amax is consumed.
  void update();

  // Checkpoints: the history oldest first ([length]) and the scale.
  std::vector<float> history() const;
  int64_t length() const { return int64_t(ring_.size()); }
  // Puts a saved state back. Throws when `history` is not `length` entries long, or the scale
  // is not finite and > 0.
  void restore(std::span<const float> history, float scale);

 private:
  std::vector<float> ring_;  // ring_[next_] is the oldest entry
  int64_t next_ = 0;
  float scale_ = 1.f;
  float step_amax_ = 0.f;
  float fp8_max_ = 0.f;
  float amax_epsilon_ = 0.f;
  int32_t margin_ = 0;
  AmaxAlgo algo_ = AmaxAlgo::max;
};

}  // namespace mxtrain
