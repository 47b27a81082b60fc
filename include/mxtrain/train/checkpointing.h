// mxtrain/train/checkpointing.h — saving and resuming a training run.
//
// A checkpoint holds the FP32 weights (model.safetensors, by parameter name), the AdamW
// moments (optimizer.safetensors), the tokenizer (tokenizer.model, when the model is not
// byte-level) and the trainer state (step, optimizer steps, skipped steps, a validation still
// due, the tokenizer's hash, the config) — everything needed to continue bit-identically,
// since the data order depends only on (seed, step). Resuming with another tokenizer is an
// error. Files are written atomically and checksummed (io/checkpoint.h); a truncated or
// corrupted checkpoint is an error, never a silent restart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/corpus/tokenizer.h"
#include "mxtrain/io/checkpoint.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/nn/parameter.h"
#include "mxtrain/train/config.h"

namespace mxtrain {

struct TrainerState {
  int64_t step = 0;       // completed steps
  int64_t opt_steps = 0;  // AdamW updates applied (bias correction)
  int64_t skipped = 0;    // steps skipped for non-finite values
  // The run that wrote the checkpoint: its ranks and its global batch in sequences
  // (micro_batch_size x world_size x grad_accum). Checkpoints written before these were
  // recorded load as world_size 1 and micro_batch_size x grad_accum of their config (then the
  // global micro-batch).
  int64_t world_size = 1;
  int64_t global_batch = 0;
  // The run stopped on a signal after this step, whose validation was due and was skipped to
  // save at once: a resume runs that validation before its first step (absent in older
  // checkpoints: false).
  bool validation_due = false;
};

// Returns the step directory written (`dir/step_N`). `extra_state`: further training state
// stored beside the AdamW moments in optimizer.safetensors (the delayed-scaling histories,
// train/delayed_scaling.h); its names must not end like a moment's.
std::string save_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                              const std::vector<Parameter*>& params,
                              const std::vector<FloatBuffer>& m,
                              const std::vector<FloatBuffer>& v, const TrainerState& st,
                              const std::vector<io::NamedTensor>& extra_state = {});

// The grad_accum to resume with at `world` ranks of `micro_batch` sequences, given the
// checkpoint's state `saved` and the configured `grad_accum`. At the checkpoint's world size,
// or when the configured batch already equals the checkpoint's global batch, it is
// `grad_accum` (a deliberate change is allowed). At another world size it is the value that
// keeps the checkpoint's global batch, with a sentence saying so in *note; when
// micro_batch x world does not divide that batch it throws, naming the numbers.
int resume_grad_accum(const TrainerState& saved, int micro_batch, int world, int grad_accum,
                      std::string* note);

// Loads the latest checkpoint in `dir` into params/m/v (shapes must match the model) and
// returns the trainer state. The checkpoint's model section must equal cfg's. `extra_state`
// (when given) receives the optimizer file's tensors that are not a parameter's moments.
TrainerState load_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                      const std::vector<Parameter*>& params,
                                      std::vector<FloatBuffer>& m,
                                      std::vector<FloatBuffer>& v,
                                      std::vector<io::NamedTensor>* extra_state = nullptr);

// A trained model for inference (nn/generate.h): the FP32 master weights of the latest
// checkpoint in `dir` (or of a step directory), whatever recipe or world size wrote it, with
// the model config stored in the checkpoint. Sizes and checksums of state.json and
// model.safetensors are verified; the optimizer state is not read.
struct CheckpointModel {
  std::string dir;  // the step directory read
  int64_t step = 0;
  TrainConfig config;
  std::unique_ptr<InferenceModel> model;
  corpus::Tokenizer tokenizer;  // the checkpoint's tokenizer.model, or byte-level
};
CheckpointModel load_checkpoint_model(const std::string& dir);

// The tokenizer of a run: cfg.tokenizer_model (read when training starts), or byte-level.
corpus::Tokenizer tokenizer_of(const TrainConfig& cfg);

}  // namespace mxtrain
