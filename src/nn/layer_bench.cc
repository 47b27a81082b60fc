// nn/layer_bench.cc — forward+backward timing of Linear / GroupedLinear (nn/layer_bench.h).
//
// Data are generated once per call (outside the timed region) from a fixed seed; the timed
// region is exactly forward() + backward() of the layer, steady_clock wall time.
#include "mxtrain/nn/layer_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/grouped_linear.h"

namespace mxtrain {

void LayerBenchConfig::validate() const {
  precision.validate();
  MXT_CHECK(tokens >= 1, "bench: tokens must be >= 1, got ", tokens);
  MXT_CHECK(in >= 1 && out >= 1, "bench: in and out must be >= 1, got in=", in, " out=", out);
  MXT_CHECK(experts >= 0, "bench: experts must be >= 0 (0 = dense Linear), got ", experts);
  MXT_CHECK(topk >= 1 && (experts > 0 || topk == 1), "bench: topk must be >= 1 and is only "
            "meaningful with experts > 0, got topk=", topk, " experts=", experts);
  MXT_CHECK(experts == 0 || topk <= experts, "bench: topk=", topk, " exceeds experts=", experts);
  MXT_CHECK(warmup >= 0 && iters >= 1, "bench: need warmup >= 0 and iters >= 1, got warmup=",
            warmup, " iters=", iters);
  MXT_CHECK(micro_batches >= 1, "bench: micro_batches must be >= 1, got ", micro_batches);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// Normal(0, sigma) values, generated in fixed chunks with per-chunk seeds so the data do not
// depend on the thread count (and large shapes do not spend seconds in setup).
std::vector<float> random_normal(int64_t n, uint32_t seed, float sigma) {
  constexpr int64_t kChunk = int64_t(1) << 16;
  std::vector<float> v(static_cast<size_t>(n));
  const int64_t chunks = ceil_div(n, kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    std::mt19937 rng(seed * 1000003u + uint32_t(c));
    std::normal_distribution<float> nd(0.f, sigma);
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) v[size_t(i)] = nd(rng);
  }
  return v;
}

using Clock = std::chrono::steady_clock;

// Runs warmup + iters iterations of `step` (which performs one forward+backward and returns
// the held bytes), bumping the weight version through `bump` every micro_batches iterations.
template <class Step, class Bump>
LayerBenchResult time_loop(const LayerBenchConfig& cfg, Step&& step, Bump&& bump) {
  LayerBenchResult r;
  const int total = cfg.warmup + cfg.iters;
  for (int i = 0; i < total; ++i) {
    if (i % cfg.micro_batches == 0) bump();
    auto t0 = Clock::now();
    size_t held = step();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= cfg.warmup) {
      r.samples_ms.push_back(ms);
      r.held_bytes = held;
    }
  }
  r.median_ms = median_of(r.samples_ms);
  r.min_ms = *std::min_element(r.samples_ms.begin(), r.samples_ms.end());
  r.max_ms = *std::max_element(r.samples_ms.begin(), r.samples_ms.end());
  return r;
}

}  // namespace

LayerBenchResult bench_layer(const LayerBenchConfig& cfg) {
  cfg.validate();
  const int64_t rows = cfg.tokens * cfg.topk;
  const float w_sigma = 1.f / std::sqrt(float(cfg.in));
  auto x = random_normal(rows * cfg.in, cfg.seed, 1.f);
  auto dy = random_normal(rows * cfg.out, cfg.seed + 1, 1e-2f);
  std::vector<float> y(size_t(rows * cfg.out)), dx(cfg.need_dx ? size_t(rows * cfg.in) : 0);
  float* dxp = cfg.need_dx ? dx.data() : nullptr;
  LayerBenchResult r;
  if (cfg.experts == 0) {
    Linear layer("bench", cfg.in, cfg.out, cfg.bias, cfg.precision);
    layer.weight.value = random_normal(cfg.in * cfg.out, cfg.seed + 2, w_sigma);
    LinearSaved saved;
    r = time_loop(
        cfg,
        [&] {
          layer.forward(x.data(), rows, y.data(), saved);
          size_t held = saved.held_bytes();
          layer.backward(saved, dy.data(), dxp);
          return held;
        },
        [&] { ++layer.weight.version; });
    r.weight_cache_bytes = layer.weight_cache().bytes();
  } else {
    GroupedLinear layer("bench", cfg.experts, cfg.in, cfg.out, cfg.precision);
    layer.weight.value = random_normal(cfg.experts * cfg.in * cfg.out, cfg.seed + 2, w_sigma);
    std::vector<int64_t> counts(size_t(cfg.experts), rows / cfg.experts);
    for (int64_t g = 0; g < rows % cfg.experts; ++g) ++counts[size_t(g)];
    const GroupList groups = GroupList::from_counts(counts, rows);
    GroupedLinearSaved saved;
    r = time_loop(
        cfg,
        [&] {
          layer.forward(x.data(), rows, groups, y.data(), saved);
          size_t held = saved.held_bytes();
          layer.backward(saved, dy.data(), dxp);
          return held;
        },
        [&] { ++layer.weight.version; });
    for (QuantizedWeight& c : layer.weight_caches()) r.weight_cache_bytes += c.bytes();
  }
  r.rows = rows;
  return r;
}

}  // namespace mxtrain
