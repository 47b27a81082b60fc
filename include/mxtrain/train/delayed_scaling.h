// mxtrain/train/delayed_scaling.h — a model's delayed-scaling state (fp8-delayed) as the
// trainer drives it: every layer's ScaleHistory (mxtrain/scale_history.h), by name.
//
// Per optimizer step:
//   begin_step()  drops the input and grad amaxes recorded since the last update outside a
//                 training step (validation forwards quantize too). A weight's amax stays: it
//                 is recorded once per parameter version, when the weight is quantized, and
//                 whichever forward quantized the new version (a validation one included)
//                 used the scale the step uses.
//   end_step(reduce)  after a step that updated the weights: every step amax is reduced with
//                 `reduce` (max over ranks, in place; one call for the whole model), then each
//                 history is updated. A skipped step calls nothing: its input and grad amaxes
//                 are dropped by the next begin_step, its weight amaxes stay with the unchanged
//                 weights.
// Checkpoints hold, per layer role, "<module>.<role>.amax_history" [groups, length] (oldest
// first) and "<module>.<role>.delayed_scale" [groups], so a resumed run continues with the
// scales an uninterrupted one has.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mxtrain/io/checkpoint.h"
#include "mxtrain/nn/transformer.h"

namespace mxtrain {

class ModelScales {
 public:
  ModelScales() = default;
  // Every history of the model's layers (none unless a layer runs a delayed-scaling recipe).
  explicit ModelScales(GPT& model);

  bool empty() const { return entries_.empty(); }
  void begin_step();
  void end_step(const std::function<void(float* amax, size_t n)>& reduce_max);

  // The tensors a checkpoint stores (shapes as above; owning copies).
  std::vector<io::NamedTensor> state() const;
  // Puts saved tensors back: `find(name)` returns the saved tensor or nullptr. Throws on a
  // shape that is not this model's. Returns how many layer roles had no saved state (they
  // start fresh: a checkpoint of another recipe).
  int restore(const std::function<const io::NamedTensor*(const std::string&)>& find);

 private:
  struct Entry {
    std::string name;  // "<module>.<role>"
    Role role;
    std::vector<ScaleHistory>* histories;  // the layer's, one per group
  };
  std::vector<Entry> entries_;
  std::vector<float> amax_;  // the reduction buffer, one per history
};

}  // namespace mxtrain
