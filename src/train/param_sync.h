// train/param_sync.h — where the optimizer's parameters live: one process, FSDP shards, or the
// slices of a tensor- and expert-parallel mesh (dist/mesh.h).
//
// The training loop is the same in every case; only these operations differ:
//   * the rank and world size (which micro-batches of the global batch this rank computes),
//   * turning the locally accumulated gradients into the global-batch gradient
//     (nothing / reduce-scatter + all-reduce),
//   * the flat value/grad/m/v spans AdamW updates (whole parameters / this rank's shards),
//   * global reductions for the loss, the gradient norm and the finite check,
//   * checkpoints (FSDP gathers whole tensors to rank 0, so checkpoints are interchangeable
//     between one-process and FSDP runs of any world size).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/dist/mesh.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {

struct OptimView {
  float* value;
  float* grad;
  float* m;
  float* v;
  int64_t n;
  bool decay;
  uint64_t* version;
};

// *_ms: exposed (waiting) time; *_span_ms: time in flight (dist/fsdp.h, FsdpStats).
struct CommCounters {
  uint64_t allgather_bytes = 0, reduce_scatter_bytes = 0, allreduce_bytes = 0;
  double allgather_ms = 0, reduce_scatter_ms = 0, allreduce_ms = 0;
  double allgather_span_ms = 0, reduce_scatter_span_ms = 0;
};

class ParamSync {
 public:
  virtual ~ParamSync() = default;
  // The data-parallel rank and size: which micro-batches of the global batch this rank
  // computes (the ranks of one tensor-parallel group compute the same ones).
  virtual int rank() const { return 0; }
  virtual int world() const { return 1; }
  virtual void begin_step() {}
  // After all micro-batches: make grads the global-batch gradient.
  virtual void reduce_gradients() {}
  virtual bool grads_finite() = 0;
  virtual double grad_sum_squares() = 0;
  // grad_sum_squares(), non-finite when any gradient is (!grads_finite()): what the trainer
  // reads. Every sync here answers it in one read of the gradients: squares of finite floats
  // summed in double cannot overflow (each is below 2^256), so a sum of them is finite exactly
  // when every one is. The distributed ones also sum the copies their norm does not count
  // (replicas on other ranks), for the check alone, in the same all-reduce. This default
  // reads the gradients twice.
  virtual double grad_sum_squares_checked() {
    return grads_finite() ? grad_sum_squares() : std::nan("");
  }
  virtual std::vector<OptimView> views() = 0;
  // Collective: the sum over the data-parallel ranks (every rank of a tensor-parallel group
  // holds the same value).
  virtual double sum_over_ranks(double x) { return x; }
  // Collective: the sum over every process (each one's share of the machine: the job's peak).
  virtual double sum_over_processes(double x) { return sum_over_ranks(x); }
  // Collective: the largest of the ranks' x (the stop request, agreed at each step's end).
  virtual int64_t max_over_ranks(int64_t x) { return x; }
  // Collective: x[i] = the largest of the ranks' x[i] (delayed scaling's step amaxes).
  virtual void max_over_ranks(float* x, size_t n) {}
  // Collective: throws on every rank when any rank's `value` differs from rank 0's.
  virtual void check_same(const std::string& what, const std::string& value) {}
  double mean_over_ranks(double x) { return sum_over_ranks(x) / world(); }
  virtual CommCounters counters() const { return {}; }
  // Collective under FSDP. Returns the step directory written (empty on ranks that write none).
  // `extra`: state every rank holds alike (delayed-scaling histories), saved beside the
  // optimizer's; load returns it on every rank (save_training_checkpoint's extra_state).
  virtual std::string save(const std::string& dir, const TrainConfig& cfg,
                           const TrainerState& st,
                           const std::vector<io::NamedTensor>& extra) = 0;
  virtual TrainerState load(const std::string& dir, const TrainConfig& cfg,
                            std::vector<io::NamedTensor>& extra) = 0;
};

std::unique_ptr<ParamSync> make_local_sync(GPT& model);
// Collective over MPI_COMM_WORLD: checks every rank has the same config, shards the model —
// under a layout (mesh set: a model built with mesh->model_parallel()) its slices, over the
// data-parallel (experts: expert-data-parallel) ranks.
std::unique_ptr<ParamSync> make_fsdp_sync(GPT& model, const TrainConfig& cfg,
                                          dist::Mesh* mesh = nullptr);
// Collective over the mesh's world: a model built with mesh.model_parallel() (its slices),
// gradients reduced over the data-parallel ranks that hold the same slice (train/
// param_sync_mesh.cc).
std::unique_ptr<ParamSync> make_mesh_sync(GPT& model, dist::Mesh& mesh);

// How run_training gets its ParamSync. The public run_training (train/trainer.h) makes
// FSDP's when cfg.fsdp.enabled, the mesh's when a parallel layout is given (`mesh` is then
// set) and the one-process one otherwise; tests pass their own (a wrapper that puts a NaN
// into chosen steps' gradients exercises the skip path).
using SyncFactory = std::function<std::unique_ptr<ParamSync>(GPT& model, const TrainConfig& cfg,
                                                             dist::Mesh* mesh)>;
TrainSummary run_training(const TrainConfig& cfg, const TrainOptions& opt,
                          const SyncFactory& make_sync);

}  // namespace mxtrain
