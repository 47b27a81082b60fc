// dist/fsdp_bench.cc — bench_weight_gathers() of dist/fsdp.h: the weight traffic of FSDP
// training steps without the GEMMs, for comparing recipes' all-gather bytes and time
// (`mxtrain bench fsdp`, docs/results/fsdp.md).
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

#include "dist/fsdp_internal.h"
#include "mxtrain/common.h"

namespace mxtrain::dist {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

FsdpBenchRow bench_weight_gathers(Comm& comm, const std::vector<std::vector<int64_t>>& shapes,
                                  const std::string& recipe, const std::string& mode,
                                  int steps) {
  MXT_CHECK(steps >= 1, "bench_weight_gathers: steps must be >= 1, got ", steps);
  LinearPrecision prec;
  prec.recipe = get_recipe(recipe);
  FsdpOptions opt;
  if (!prec.recipe.quantized()) {
    MXT_CHECK(mode == "reshard" || mode == "keep", "bf16 gather mode must be reshard or keep, got '",
              mode, "'");
    opt.bf16_reshard_after_forward = mode == "reshard";
  } else if (!prec.recipe.weight_tiled()) {
    opt.mxfp8_gather = parse_mxfp8_gather(mode);
  }
  std::vector<std::unique_ptr<Linear>> layers;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (size_t i = 0; i < shapes.size(); ++i) {
    MXT_CHECK(shapes[i].size() == 2, "bench_weight_gathers: shapes are [out, in]");
    layers.push_back(std::make_unique<Linear>("w" + std::to_string(i), shapes[i][1],
                                              shapes[i][0], false, prec));
    for (float& x : layers.back()->weight.value) x = nd(rng);
  }
  Fsdp fsdp(comm, opt);
  for (auto& l : layers) fsdp.add(*l);

  FsdpBenchRow row;
  row.recipe = recipe;
  row.mode = prec.recipe.weight_tiled() ? "" : mode;
  row.world = comm.size();
  std::vector<double> gather_ms, step_ms;
  const int n = fsdp.num_modules();
  for (int step = -1; step < steps; ++step) {  // step -1: warm-up
    fsdp.reset_stats();
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      fsdp.fetch(i, WeightUse::forward);
      fsdp.post_forward(i);
    }
    for (int i = n - 1; i >= 0; --i) {
      fsdp.fetch(i, WeightUse::backward);
      fsdp.post_backward(i);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fsdp.bump_versions();  // an optimizer step: next step quantizes the shards again
    if (step < 0) continue;
    gather_ms.push_back(fsdp.stats().allgather_ms);
    step_ms.push_back(ms);
    row.payload_bytes_per_step = fsdp.stats().allgather_payload_bytes;
    row.sent_bytes_per_step = fsdp.stats().allgather_bytes;
  }
  row.allgather_ms_per_step = median(gather_ms);
  row.step_ms = median(step_ms);
  return row;
}

}  // namespace mxtrain::dist
