// mxtrain/train/trainer.h — the training loop: data -> model -> AdamW, with metrics,
// validation, progress, checkpoints and NaN/Inf handling.
//
// Batches (as in Megatron): micro_batch_size is sequences per rank. One optimizer step is
// grad_accum micro-batches on each of the W ranks, a global batch of
// micro_batch_size x W x grad_accum sequences, and the gradient is the mean over all of them.
// Rank r's micro-batch a is global micro-batch a*W + r (sequences (a*W + r)*B .. +B-1 of the
// step), so W ranks with grad_accum A see exactly the sequences of one process with grad_accum
// W*A and the same micro_batch_size. A step whose loss or gradients are not finite is
// reported and skipped (weights and optimizer state untouched); after max_nonfinite_steps
// skipped steps training stops with an error.
//
// Resuming at another world size keeps the checkpoint's global batch by changing grad_accum
// (said on stderr) when micro_batch_size x W divides it; otherwise it is an error naming the
// numbers (train/checkpointing.h, resume_grad_accum).
//
// Nothing is lost (docs/reliability.md): every input and output is checked before step 1;
// under mpirun the ranks first agree on the launch (train/launch.h); the checkpoint directory
// and the metrics file are locked for the run (train/run_outputs.h); a resume drops the
// metrics rows after the checkpoint's step; a stop request (a signal) ends the run at a step
// boundary with a checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/train/config.h"

namespace mxtrain {

struct TrainOptions {
  std::string metrics_out;     // JSON Lines file (rank 0), empty: none
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;         // continue from the latest checkpoint in checkpoint_dir
  // A fresh run (no resume) over a checkpoint directory that holds another run's checkpoints
  // is refused, naming its latest step; with this set, that run's step directories and
  // `latest` are removed at start instead (said on stderr).
  bool overwrite_checkpoints = false;
  bool dry_run = false;        // build the model, print decisions, exit
  std::string decisions_out;   // JSON array of per-module decisions
  bool progress = true;        // progress line on stderr
  bool print_decisions = true;
  // Skip the start-up check that the model fits in memory (train/memory_check.h).
  bool ignore_memory_check = false;
  // Initial weights from a Hugging Face directory (train/hf_llama.h) instead of the seed's;
  // the config's model section must be that directory's (hf::apply_model). Not with resume.
  std::string init_from;
  int64_t stop_after = 0;      // stop after this many steps in this run (0: run to the end);
                               // the schedule still spans training.steps (preemption)
  // The peak MFU is measured against, in GFLOP/s for the whole job (all ranks); 0: measured at
  // start with a short run of `bench peak`'s reference loop on every rank, summed
  // (mxtrain/peak.h) — always when the run spans several processes (every rank takes part,
  // whatever its output options), else when anything reports MFU (progress, metrics or a
  // profile).
  double peak_gflops = 0;
  // Profile this many steps after the run's first (warm-up) step: where the time went, as a
  // table on stderr and as JSON in profile_out when set (train/profile_report.h).
  int profile_steps = 0;
  std::string profile_out;
  // Asked at the end of every step (under FSDP the ranks take the largest answer, so all stop
  // at the same step): non-zero — the number of the signal that asked for it — stops the run
  // there, with a checkpoint when checkpoint_dir is set and the summary row. Empty: never.
  std::function<int()> stop_requested;
};

struct TrainSummary {
  int64_t first_step = 0, steps_done = 0;   // steps run in this invocation
  std::vector<double> losses;               // per step run here (NaN for skipped steps)
  std::vector<std::pair<int64_t, double>> val_losses;
  // The last validation's loss, nats per token and per byte of text (equal for bytes); 0 when
  // no validation ran (val_losses empty; the summary row then says null).
  double final_val_loss = 0;
  double final_val_nats_per_byte = 0;
  double tokens_per_s = 0;                  // global-batch tokens over time of updating steps
  double mean_step_ms = 0;                  // over steps that updated the weights
  double median_step_ms = 0;                // same, without the first step (warm-up)
  int64_t skipped_steps = 0;
  int64_t global_batch = 0;                 // sequences per optimizer step, all ranks
  int micro_batch_size = 0, world_size = 1, grad_accum = 0;  // as run (grad_accum after resume)
  size_t held_bytes = 0;                    // bytes held between forward and backward (last step)
  int64_t peak_rss_bytes = 0;
  // Model FLOPs utilization (nn/flops.h): PaLM's FLOPs per token, the peak it is against
  // (0 when none was measured or given), and MFU at tokens_per_s and at the median step.
  double flops_per_token = 0, peak_gflops = 0, mfu = 0, median_step_mfu = 0;
  int stopped_by = 0;                       // the signal that stopped the run early, or 0
  std::string checkpoint;                   // the last checkpoint written by this run, or empty
  bool lead = true;  // this process prints and writes the run's files (rank 0 under MPI)
};

TrainSummary run_training(const TrainConfig& cfg, const TrainOptions& opt);

}  // namespace mxtrain
