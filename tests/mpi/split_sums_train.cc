// tests/mpi/split_sums_train.cc — `mxtrain train` in one process whose row-parallel products
// sum as a tensor- or expert-tensor-parallel layout sums them (GPT::set_split_sums), for the
// 20-step parity tests (tests/mpi/train_parity_mpi.sh, docs/distributed.md "Parity").
//
// Usage: mpi_split_sums_train CONFIG METRICS_OUT TP ETP [KEY=VALUE ...]
// runs the trainer's own loop (run_training with the one-process parameter sync) on CONFIG
// with the given config overrides (dotted keys, as the command line's flags set them) and
// writes the metrics rows to METRICS_OUT. TP and ETP 1 and 1 is an ordinary one-process run.
// Not under mpirun.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/train/config.h"
#include "train/param_sync.h"

int main(int argc, char** argv) {
  using namespace mxtrain;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s CONFIG METRICS_OUT TP ETP [KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<ConfigOverride> overrides;
    for (int i = 5; i < argc; ++i) {
      const std::string kv = argv[i];
      const size_t eq = kv.find('=');
      MXT_CHECK(eq != std::string::npos, "override `", kv, "` is not KEY=VALUE");
      overrides.push_back({kv.substr(0, eq), kv.substr(eq + 1), kv.substr(0, eq)});
    }
    const TrainConfig cfg = load_config(argv[1], overrides);
    TrainOptions opt;
    opt.metrics_out = argv[2];
    opt.progress = false;
    opt.print_decisions = false;
    opt.peak_gflops = 1;  // no peak measurement: MFU is not what this run is for
    const int tp = std::atoi(argv[3]), etp = std::atoi(argv[4]);
    run_training(cfg, opt, [&](GPT& model, const TrainConfig&, dist::Mesh*) {
      model.set_split_sums(tp, etp);
      return make_local_sync(model);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
