// mxtrain/train/memory_check.h — what a training config needs in memory, estimated before
// anything is allocated, and what the machine allows.
//
// A model that cannot fit is refused at start-up with the estimate and the limit instead of
// growing until the kernel kills it. The estimate counts, in doubles (so absurd configs do
// not overflow): FP32 parameters and gradients, AdamW's two FP32 moments, the quantized
// weight copies of FP8 recipes, activations kept for backward at the configured micro-batch
// (per layer and token: norms, QKV, attention output and log-sum-exp, MLP or expert buffers;
// plus the logits and their gradient), and GEMM workspaces for the widest layer. It is a lower
// bound of the real footprint (allocator slack, oneDNN and MPI buffers are not counted), so a
// refusal is certain to be right. The limit is the smaller of physical memory
// (sysconf) and the cgroup v2 limit (/sys/fs/cgroup/memory.max).
#pragma once

#include <cstdint>
#include <string>

#include "mxtrain/train/config.h"

namespace mxtrain {

struct MemoryEstimate {
  double parameters = 0;        // count
  double param_grad_bytes = 0;  // FP32 values + gradients
  double optimizer_bytes = 0;   // AdamW m and v
  double quantized_bytes = 0;   // FP8 weight copies (FP8 recipes)
  double activation_bytes = 0;  // kept for backward, one micro-batch
  double workspace_bytes = 0;   // temporaries of the widest layer
  double total() const {
    return param_grad_bytes + optimizer_bytes + quantized_bytes + activation_bytes +
           workspace_bytes;
  }
  // "1.23e+12 parameters: weights+grads 9.8 TB, AdamW 9.8 TB, ..."
  std::string describe() const;
};

MemoryEstimate estimate_training_memory(const TrainConfig& cfg);

struct MemoryLimit {
  double bytes = 0;
  std::string source;  // "physical memory" or "cgroup limit /sys/fs/cgroup/memory.max"
};

// min(physical memory, cgroup memory.max). `cgroup_file` is read when it exists and holds
// a number ("max" means no limit).
MemoryLimit machine_memory_limit(const std::string& cgroup_file = "/sys/fs/cgroup/memory.max");

// Throws "model does not fit in memory: needs at least X (...) but the limit is Y (...);
// shrink the model or micro-batch, or pass --ignore-memory-check" when it does not fit.
void check_training_memory(const TrainConfig& cfg, const MemoryLimit& limit);

// "12.3 GiB" style.
std::string format_bytes(double bytes);

}  // namespace mxtrain
