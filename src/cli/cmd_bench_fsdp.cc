// cli/cmd_bench_fsdp.cc — `mxtrain bench fsdp`: FSDP weight all-gather bytes and time per
// training step for each recipe and gather mode (docs/design.md, "FSDP"), run under mpirun.
//
// The weights are a synthetic transformer's: per layer qkv [3d, d], proj [d, d], fc1 [f, d],
// fc2 [d, f] (f = 4d unless --ffn). Each step gathers them as training would (forward in
// order, backward in reverse, resharding per mode) through dist::bench_weight_gathers, with no
// GEMMs in between; the configurations take turns step by step and every gather starts after
// a barrier (see bench_weight_gathers). With --compute-ms each module use is followed by that
// much simulated compute, and --prefetch N gathers N modules ahead to overlap with it. Bytes
// are exact (what the table in docs/design.md, "Bytes per step" counts); times (exposed, and
// total in flight) are medians over steps, averaged over ranks. Ratios are against bf16 without
// resharding (2N bytes per step), the cheaper BF16 configuration. Rank 0 prints.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/dist/fsdp.h"

namespace mxtrain::cli {
namespace {

struct BenchFsdpOptions {
  bool json = false;
  int64_t d_model = 1024, layers = 2, ffn = 0;
  int steps = 5;
  int prefetch = 0;
  double compute_ms = 0;
  bool progress_thread = false;
};

int run_bench_fsdp(const BenchFsdpOptions& o) {
  MXT_CHECK(o.d_model >= 1 && o.layers >= 1 && o.steps >= 1 && o.ffn >= 0,
            "bench fsdp: --d-model, --layers and --steps must be positive");
  dist::Comm& comm = dist::Comm::world();
  const int64_t d = o.d_model, f = o.ffn > 0 ? o.ffn : 4 * o.d_model;
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t l = 0; l < o.layers; ++l) {
    shapes.push_back({3 * d, d});
    shapes.push_back({d, d});
    shapes.push_back({f, d});
    shapes.push_back({d, f});
  }
  MXT_CHECK(o.prefetch == 0 || o.compute_ms > 0,
            "bench fsdp: --prefetch needs --compute-ms (compute to overlap with)");
  std::vector<dist::FsdpBenchConfig> configs = {
      {"bf16", "keep"}, {"bf16", "reshard"}, {"mxfp8", "on-demand"}, {"mxfp8", "all"},
      {"mxfp8-32x32", ""}};
  for (auto& c : configs) {
    c.prefetch = o.prefetch;
    c.compute_ms = o.compute_ms;
    c.progress_thread = o.progress_thread;
  }
  std::vector<dist::FsdpBenchRow> rows =
      dist::bench_weight_gathers(comm, shapes, configs, o.steps);
  for (auto& r : rows) {
    double t[4] = {r.allgather_ms_per_step, r.allgather_ms_min, r.step_ms,
                   r.allgather_total_ms_per_step};
    comm.allreduce_sum(t, 4);
    r.allgather_ms_per_step = t[0] / comm.size();
    r.allgather_ms_min = t[1] / comm.size();
    r.step_ms = t[2] / comm.size();
    r.allgather_total_ms_per_step = t[3] / comm.size();
  }
  if (comm.rank() != 0) return 0;
  const dist::FsdpBenchRow& base = rows.front();
  const auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  nlohmann::json out = nlohmann::json::array();
  if (!o.json)
    std::printf("world %d, %lld layers, d_model %lld, ffn %lld, %d steps, prefetch %d, compute "
                "%.1f ms/module (median, mean over ranks)\n%-12s %-10s %14s %9s %13s %9s %9s "
                "%9s %9s %10s\n",
                comm.size(), (long long)o.layers, (long long)d, (long long)f, o.steps,
                o.prefetch, o.compute_ms, "recipe", "mode", "bytes/step", "vs_bf16",
                "allgather_ms", "vs_bf16", "min_ms", "vs_bf16", "total_ms", "step_ms");
  for (const auto& r : rows) {
    const double bytes_ratio = ratio(double(r.payload_bytes_per_step), double(base.payload_bytes_per_step));
    const double ms_ratio = ratio(r.allgather_ms_per_step, base.allgather_ms_per_step);
    const double min_ratio = ratio(r.allgather_ms_min, base.allgather_ms_min);
    if (o.json) {
      out.push_back({{"recipe", r.config.recipe}, {"mode", r.config.mode}, {"world", r.world},
                     {"d_model", d}, {"ffn", f}, {"layers", o.layers}, {"steps", o.steps},
                     {"payload_bytes_per_step", r.payload_bytes_per_step},
                     {"sent_bytes_per_step", r.sent_bytes_per_step},
                     {"gathers_per_step", r.gathers_per_step},
                     {"allgather_ms_per_step", r.allgather_ms_per_step},
                     {"allgather_ms_min", r.allgather_ms_min},
                     {"allgather_ms_min_vs_bf16", min_ratio},
                     {"allgather_total_ms_per_step", r.allgather_total_ms_per_step},
                     {"prefetch", o.prefetch}, {"compute_ms", o.compute_ms},
                     {"progress_thread", dist::progress_thread_running()},
                     {"step_ms", r.step_ms}, {"bytes_vs_bf16", bytes_ratio},
                     {"allgather_ms_vs_bf16", ms_ratio}});
    } else {
      std::printf("%-12s %-10s %14llu %9.4f %13.3f %9.3f %9.3f %9.3f %9.3f %10.3f\n",
                  r.config.recipe.c_str(),
                  r.config.mode.empty() ? "-" : r.config.mode.c_str(),
                  (unsigned long long)r.payload_bytes_per_step, bytes_ratio,
                  r.allgather_ms_per_step, ms_ratio, r.allgather_ms_min, min_ratio,
                  r.allgather_total_ms_per_step, r.step_ms);
    }
  }
  if (o.json) std::cout << out.dump(1) << std::endl;
  return 0;
}


}  // namespace

MXT_REGISTER_COMMAND("bench fsdp", [](CLI::App& app) {
  auto opts = std::make_shared<BenchFsdpOptions>();
  CLI::App* sub = mxtrain::cli::group(app, "bench", "Benchmarks")->add_subcommand(
      "fsdp",
      "FSDP weight all-gather bytes and time per step for each recipe and gather mode (run "
      "under mpirun). JSON rows: recipe, mode, world, d_model, ffn, layers, steps, "
      "payload_bytes_per_step, sent_bytes_per_step, gathers_per_step, allgather_ms_per_step "
      "(exposed), allgather_ms_min, allgather_ms_min_vs_bf16, allgather_total_ms_per_step (in "
      "flight), prefetch, compute_ms, step_ms, "
      "bytes_vs_bf16, allgather_ms_vs_bf16 (against bf16 without resharding)");
  sub->add_flag("--json", opts->json, "Print one JSON array instead of a table");
  sub->add_option("--d-model", opts->d_model, "Model width (default 1024)")
      ->check(whole_number(1));
  sub->add_option("--layers", opts->layers, "Transformer layers (default 2)")
      ->check(whole_number(1));
  sub->add_option("--ffn", opts->ffn, "MLP hidden width (default 4 x d_model)")
      ->check(whole_number(0));
  sub->add_option("--steps", opts->steps, "Timed steps after one warm-up (default 5)")
      ->check(whole_number(1));
  sub->add_option("--compute-ms", opts->compute_ms,
                  "Simulated compute after each module use, ms (default 0: gathers only)")
      ->check(number_at_least(0));
  sub->add_option("--prefetch", opts->prefetch,
                  "Modules gathered ahead (default 0; needs --compute-ms)")
      ->check(whole_number(0, 8));
  sub->add_flag("--progress-thread", opts->progress_thread,
                "Also drive transfers from a thread during compute (fsdp.progress_thread)");
  sub->callback([opts] { exit_code() = run_bench_fsdp(*opts); });
});
}  // namespace mxtrain::cli
