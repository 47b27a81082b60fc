// mxtrain/io/checkpoint.h — training checkpoints: save, find the latest, load, prune.
//
// Layout under a checkpoint root:
//   <root>/step_<N>/model.safetensors      FP32 master weights by parameter name
//   <root>/step_<N>/optimizer.safetensors  FP32 optimizer state; for AdamW
//                                          "<param>.exp_avg" and "<param>.exp_avg_sq"
//   <root>/step_<N>/<extra files>          e.g. tokenizer.model, the run's tokenizer
//   <root>/step_<N>/state.json             format version, step, the trainer's opaque
//                                          state (data position, RNG), config text and
//                                          hash, size + CRC-32 of each file above, and a
//                                          CRC-32 of state.json's own contents
//   <root>/latest                          "step_<N>\n": the newest complete checkpoint
// A step directory is built under a temporary name and renamed into place (AtomicDir),
// then `latest` is replaced atomically, then old steps beyond `keep_last` are removed. A
// crash at any point leaves `latest` naming a complete checkpoint. Loading verifies every
// size and checksum; a missing, truncated or corrupted file is an error naming the file —
// never a crash, and never a silent fresh start. Only one process (rank 0) saves.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mxtrain::io {

constexpr int kCheckpointFormatVersion = 1;

// A named FP32 tensor the caller owns (saved without copying).
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel(shape) floats, C order
};

// A named FP32 tensor with its own storage (what loading returns).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // numel(shape) floats, C order
  TensorRef ref() const { return {name, shape, data.data()}; }
};

// Optimizer-state naming convention for AdamW moments.
inline std::string exp_avg_name(const std::string& param) { return param + ".exp_avg"; }
inline std::string exp_avg_sq_name(const std::string& param) { return param + ".exp_avg_sq"; }

struct CheckpointOptions {
  int keep_last = 3;        // step directories kept after a save (<= 0: keep all)
  std::string config_text;  // the training config as given (stored and hashed)
  // Further files of the step directory, name -> contents (the tokenizer model), recorded
  // with size and CRC-32 like the tensor files. Names are plain file names.
  std::map<std::string, std::string> extra_files;
};

// Saves step `step` under `root` (created if missing) and returns the step directory.
// Re-saving an existing step replaces it as a whole. trainer_state is any JSON value.
std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<TensorRef>& model,
                            const std::vector<TensorRef>& optimizer,
                            const nlohmann::json& trainer_state, const CheckpointOptions& opt = {});
std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<NamedTensor>& model,
                            const std::vector<NamedTensor>& optimizer,
                            const nlohmann::json& trainer_state, const CheckpointOptions& opt = {});

struct LoadedCheckpoint {
  std::string dir;  // the step directory that was read
  int64_t step = 0;
  int format_version = 0;
  std::vector<NamedTensor> model;      // in file order
  std::vector<NamedTensor> optimizer;  // in file order
  nlohmann::json trainer_state;
  std::string config_text;
  std::string config_hash;  // "crc32:xxxxxxxx" of config_text
  std::map<std::string, std::string> extra_files;  // CheckpointOptions::extra_files, verified

  const NamedTensor* find_model(const std::string& name) const;      // nullptr if absent
  const NamedTensor* find_optimizer(const std::string& name) const;  // nullptr if absent
  // Like find_*, but a missing tensor is an error naming it and the checkpoint.
  const NamedTensor& model_tensor(const std::string& name) const;
  const NamedTensor& optimizer_tensor(const std::string& name) const;
};

// `path` is a checkpoint root (its `latest` is followed) or a step directory. With
// read_optimizer false, optimizer.safetensors is neither read nor verified and `optimizer`
// stays empty (inference needs the model only).
LoadedCheckpoint load_checkpoint(const std::string& path, bool read_optimizer = true);
// The step directory load_checkpoint(path) would read; throws the same errors for a bad
// or missing `latest`.
std::string resolve_checkpoint_dir(const std::string& path);
// True when `root/latest` exists (there is something to resume from).
bool has_checkpoint(const std::string& root);
// Steps of the step_<N> directories under root, ascending ({} if root does not exist).
std::vector<int64_t> list_checkpoint_steps(const std::string& root);
// When root holds a run's checkpoints (a `latest` file, even one whose step is gone): the
// newest step there, the larger of what `latest` names and the largest step directory (0 when
// neither says); else -1. Step directories without `latest` are what a first save cut short
// left: a new run replaces them.
int64_t latest_checkpoint_step(const std::string& root);
// Removes `latest` (first) and every step directory under root; returns the names removed.
// Other files are left alone.
std::vector<std::string> remove_checkpoints(const std::string& root);

// "crc32:xxxxxxxx" of a config text.
std::string config_hash(const std::string& config_text);

}  // namespace mxtrain::io
