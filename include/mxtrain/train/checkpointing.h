// mxtrain/train/checkpointing.h — saving and resuming a training run.
//
// A checkpoint holds the FP32 weights (model.safetensors, by parameter name), the AdamW
// moments (optimizer.safetensors) and the trainer state (step, optimizer steps, skipped
// steps, the config) — everything needed to continue bit-identically, since the data order
// depends only on (seed, step). Files are written atomically and checksummed (io/checkpoint.h);
// a truncated or corrupted checkpoint is an error, never a silent restart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/nn/parameter.h"
#include "mxtrain/train/config.h"

namespace mxtrain {

struct TrainerState {
  int64_t step = 0;       // completed steps
  int64_t opt_steps = 0;  // AdamW updates applied (bias correction)
  int64_t skipped = 0;    // steps skipped for non-finite values
};

void save_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                              const std::vector<Parameter*>& params,
                              const std::vector<std::vector<float>>& m,
                              const std::vector<std::vector<float>>& v, const TrainerState& st);

// Loads the latest checkpoint in `dir` into params/m/v (shapes must match the model) and
// returns the trainer state. The checkpoint's model section must equal cfg's.
TrainerState load_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                      const std::vector<Parameter*>& params,
                                      std::vector<std::vector<float>>& m,
                                      std::vector<std::vector<float>>& v);

}  // namespace mxtrain
