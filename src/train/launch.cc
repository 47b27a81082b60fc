// train/launch.cc — launch agreement across the ranks of an mpirun job (train/launch.h).
#include "train/launch.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"

namespace mxtrain {

namespace {
std::string peak_text(double gflops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", gflops);
  return buf;
}
}  // namespace

void agree_on_launch(const TrainConfig& cfg, const TrainOptions& opt) {
  if (!dist::launched_by_mpi() && !cfg.fsdp.enabled && !cfg.parallel.used())
    return;  // one process, MPI untouched
  dist::Comm& world = dist::Comm::world();
  if (world.size() == 1) return;
  const auto on_off = [](bool b) { return std::string(b ? "on" : "off"); };
  const auto given = [](const std::string& s) { return s.empty() ? std::string("(none)") : s; };
  world.check_same_settings({
      {"--fsdp (fsdp.enabled)", on_off(cfg.fsdp.enabled)},
      {"--tp (parallel.tp)", std::to_string(cfg.parallel.tp)},
      {"--ep (parallel.ep)", std::to_string(cfg.parallel.ep)},
      {"--etp (parallel.etp)", std::to_string(cfg.parallel.etp)},
      {"--sequence-parallel", on_off(cfg.parallel.sequence_parallel)},
      {"--sp-wire (parallel.sp_wire)", sequence_wire_name(cfg.parallel.sp_wire)},
      {"--dry-run", on_off(opt.dry_run)},
      {"--resume", on_off(opt.resume)},
      {"--stop-after", opt.stop_after > 0 ? std::to_string(opt.stop_after) : "(none)"},
      {"--checkpoint-dir", given(opt.checkpoint_dir)},
      {"--overwrite-checkpoints", on_off(opt.overwrite_checkpoints)},
      {"--steps (training.steps)", std::to_string(cfg.training.steps)},
      {"--init-from", given(opt.init_from)},
      // What rank 0 alone writes or reports for the whole job: a value on another rank
      // would be silently ignored, so all must give the same.
      {"--metrics-out", given(opt.metrics_out)},
      {"--decisions-out", given(opt.decisions_out)},
      {"--profile-steps", std::to_string(opt.profile_steps)},
      {"--profile-out", given(opt.profile_out)},
      {"--peak-gflops", opt.peak_gflops > 0 ? peak_text(opt.peak_gflops) : "(measured)"},
  });
  world.check_consistent("training config", cfg.source_text);
  if (!cfg.fsdp.enabled && !cfg.parallel.used())
    throw dist::CollectiveError(
        "mpirun started " + std::to_string(world.size()) + " ranks but the run has no parallel "
        "mode: pass --fsdp (or set fsdp.enabled: true), or a layout (--tp, --ep), to train one "
        "model over them; without one every rank would train the same model into the same "
        "files");
}

}  // namespace mxtrain
