// dist/fsdp_bench.cc — bench_weight_gathers() of dist/fsdp.h: the weight traffic of FSDP
// training steps without the GEMMs, for comparing recipes' all-gather bytes and time
// (`mxtrain bench fsdp`, docs/results/fsdp.md).
#include <algorithm>
#include <memory>
#include <random>

#include "core/clock.h"
#include "dist/fsdp_internal.h"
#include "mxtrain/common.h"
#include "mxtrain/stats.h"

namespace mxtrain::dist {

namespace {

// One config's model: its layers and their Fsdp.
struct BenchModel {
  std::vector<std::unique_ptr<Linear>> layers;
  std::unique_ptr<Fsdp> fsdp;
  std::vector<double> gather_ms, total_ms, step_ms;
};

// Whether dgrad reads another weight copy than forward (then the gather mode matters).
bool has_backward_copy(const Recipe& r) {
  return r.quantized() &&
         copies_needed(r, Role::weight, Use::dgrad) != copies_needed(r, Role::weight, Use::forward);
}

std::unique_ptr<BenchModel> build(Comm& comm, const std::vector<std::vector<int64_t>>& shapes,
                                  const FsdpBenchConfig& c) {
  LinearPrecision prec;
  prec.recipe = get_recipe(c.recipe);
  FsdpOptions opt;
  MXT_CHECK(c.prefetch >= 0 && c.compute_ms >= 0, "bench_weight_gathers: prefetch and compute "
            "must be >= 0");
  MXT_CHECK(c.prefetch == 0 || c.compute_ms > 0, "bench_weight_gathers: prefetch needs "
            "compute to overlap with");
  opt.auto_prefetch = c.prefetch > 0;
  opt.prefetch_depth = std::max(1, c.prefetch);
  opt.progress_thread = c.progress_thread;
  if (!prec.recipe.quantized()) {
    MXT_CHECK(c.mode == "reshard" || c.mode == "keep",
              "bf16 gather mode must be reshard or keep, got '", c.mode, "'");
    opt.bf16_reshard_after_forward = c.mode == "reshard";
  } else if (has_backward_copy(prec.recipe)) {
    opt.mxfp8_gather = parse_mxfp8_gather(c.mode);
  }
  auto m = std::make_unique<BenchModel>();
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (size_t i = 0; i < shapes.size(); ++i) {
    MXT_CHECK(shapes[i].size() == 2, "bench_weight_gathers: shapes are [out, in]");
    m->layers.push_back(std::make_unique<Linear>("w" + std::to_string(i), shapes[i][1],
                                                 shapes[i][0], false, prec));
    for (float& x : m->layers.back()->weight.value) x = nd(rng);
  }
  m->fsdp = std::make_unique<Fsdp>(comm, opt);
  for (auto& l : m->layers) m->fsdp->add(*l);
  return m;
}

// Busy work standing in for a module's GEMMs: no MPI call inside.
void compute_for(double ms) {
  const auto t0 = Clock::now();
  volatile double x = 1.0;
  while (ms_since(t0) < ms) x = x * 1.0000001 + 1e-9;
}

// One step of weight traffic; returns its wall time (without compute: the gathers' only).
double run_step(Comm& comm, Fsdp& f, double compute_ms) {
  double ms = 0;
  const int n = f.num_modules();
  if (compute_ms > 0) comm.barrier();
  const auto t_step = Clock::now();
  const auto use_module = [&](int i, Use use) {
    if (compute_ms == 0) comm.barrier();
    const auto t0 = Clock::now();
    f.fetch(i, use);
    use == Use::forward ? f.post_forward(i) : f.post_backward(i);
    if (compute_ms == 0) {
      ms += ms_since(t0);
      return;
    }
    compute_for(compute_ms);
    f.poll();
  };
  for (int i = 0; i < n; ++i) use_module(i, Use::forward);
  for (int i = n - 1; i >= 0; --i) use_module(i, Use::dgrad);
  return compute_ms > 0 ? ms_since(t_step) : ms;
}

}  // namespace

std::vector<FsdpBenchRow> bench_weight_gathers(Comm& comm,
                                               const std::vector<std::vector<int64_t>>& shapes,
                                               const std::vector<FsdpBenchConfig>& configs,
                                               int steps) {
  MXT_CHECK(steps >= 1, "bench_weight_gathers: steps must be >= 1, got ", steps);
  std::vector<std::unique_ptr<BenchModel>> models;
  for (const auto& c : configs) models.push_back(build(comm, shapes, c));
  std::vector<FsdpBenchRow> rows(configs.size());
  for (int step = -1; step < steps; ++step) {  // step -1: warm-up
    for (size_t k = 0; k < models.size(); ++k) {
      Fsdp& f = *models[k]->fsdp;
      f.reset_stats();
      const double ms = run_step(comm, f, configs[k].compute_ms);
      f.bump_versions();
      if (step < 0) continue;
      models[k]->gather_ms.push_back(f.stats().allgather_ms);
      models[k]->total_ms.push_back(f.stats().allgather_span_ms);
      models[k]->step_ms.push_back(ms);
      rows[k].payload_bytes_per_step = f.stats().allgather_payload_bytes;
      rows[k].sent_bytes_per_step = f.stats().allgather_bytes;
      rows[k].gathers_per_step = f.stats().allgather_calls;
    }
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    rows[k].config = configs[k];
    if (models[k]->layers.empty() ||
        !has_backward_copy(models[k]->layers.front()->precision().recipe))
      rows[k].config.mode.clear();
    rows[k].world = comm.size();
    rows[k].allgather_ms_per_step = median_of(models[k]->gather_ms);
    rows[k].allgather_total_ms_per_step = median_of(models[k]->total_ms);
    rows[k].allgather_ms_min =
        *std::min_element(models[k]->gather_ms.begin(), models[k]->gather_ms.end());
    rows[k].step_ms = median_of(models[k]->step_ms);
  }
  return rows;
}

}  // namespace mxtrain::dist
