// train/launch.h — the first collective of a training run: every rank of an mpirun job agrees
// on how it was started, before anything else could wait on another rank.
//
// Under an MPI launcher (dist::launched_by_mpi) every rank compares, in one all-gather, the
// run-mode flags that decide which collectives it will make — --fsdp, the parallel layout
// (--tp, --ep, --sequence-parallel), --dry-run, --resume, --stop-after, --checkpoint-dir and
// --overwrite-checkpoints (checkpoints are saved and loaded collectively), the training steps,
// --init-from (every rank reads the initial weights) — the options whose output rank 0 alone
// writes for the whole job (--metrics-out, --decisions-out, --profile-steps, --profile-out,
// --peak-gflops: another rank's value would be silently ignored), and then the whole config
// text. A mismatch ends every rank at once with a message naming the setting and both values,
// instead of ranks waiting forever in collectives the others never make. What may differ
// per rank: --quiet (only rank 0 prints anyway) and --ignore-memory-check (each rank checks
// its own machine); no collective depends on either (the MFU peak is measured on every rank
// of a distributed run, whatever its output options). Several ranks with no parallel mode (--fsdp or a layout)
// are refused on every rank: each would train the same model into the same files.
#pragma once

#include "mxtrain/train/config.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {

// Returns when the launch is sound: one process (no launcher, or a job of one rank), or
// ranks that agree and shard one run. Throws mxtrain::Error, on every rank alike, otherwise.
void agree_on_launch(const TrainConfig& cfg, const TrainOptions& opt);

}  // namespace mxtrain
