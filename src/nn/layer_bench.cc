// nn/layer_bench.cc — forward+backward timing of Linear / GroupedLinear (nn/layer_bench.h).
//
// Data are generated once per call (outside the timed region) from a fixed seed; the timed
// region is exactly forward() + backward() of the layer, steady_clock wall time.
#include "mxtrain/nn/layer_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
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

// One layer under test: forward+backward on the shared data, returning the held bytes.
struct Runner {
  std::function<size_t()> step;
  std::function<void()> bump;           // optimizer step: new weight version
  std::function<size_t()> cache_bytes;  // weight copies held after the run
};

Runner make_runner(const LayerBenchConfig& cfg, const LinearPrecision& p,
                   const std::vector<float>& w, const std::vector<float>& x,
                   const std::vector<float>& dy, std::vector<float>& y, float* dxp) {
  const int64_t rows = cfg.tokens * cfg.topk;
  Runner r;
  if (cfg.experts == 0) {
    auto layer = std::make_shared<Linear>("bench", cfg.in, cfg.out, cfg.bias, p);
    layer->weight.value.assign(w.begin(), w.end());
    if (cfg.bias) layer->bias.value.assign(size_t(cfg.out), 0.01f);
    auto saved = std::make_shared<LinearSaved>();
    r.step = [=, &x, &dy, &y] {
      layer->forward(x.data(), rows, y.data(), *saved);
      size_t held = saved->held_bytes();
      layer->backward(*saved, dy.data(), dxp);
      return held;
    };
    r.bump = [layer] { ++layer->weight.version; };
    r.cache_bytes = [layer] { return layer->weight_cache().bytes(); };
  } else {
    auto layer = std::make_shared<GroupedLinear>("bench", cfg.experts, cfg.in, cfg.out, p);
    layer->weight.value.assign(w.begin(), w.end());
    std::vector<int64_t> counts(size_t(cfg.experts), rows / cfg.experts);
    for (int64_t g = 0; g < rows % cfg.experts; ++g) ++counts[size_t(g)];
    const GroupList groups = GroupList::from_counts(counts, rows);
    auto saved = std::make_shared<GroupedLinearSaved>();
    r.step = [=, &x, &dy, &y] {
      layer->forward(x.data(), rows, groups, y.data(), *saved);
      size_t held = saved->held_bytes();
      layer->backward(*saved, dy.data(), dxp);
      return held;
    };
    r.bump = [layer] { ++layer->weight.version; };
    r.cache_bytes = [layer] {
      size_t n = 0;
      for (const QuantizedWeight& c : layer->weight_caches()) n += c.bytes();
      return n;
    };
  }
  return r;
}

}  // namespace

std::vector<LayerBenchResult> bench_layers_alternating(
    const LayerBenchConfig& cfg, const std::vector<LinearPrecision>& precisions) {
  cfg.validate();
  MXT_CHECK(!precisions.empty(), "bench: no precisions to time");
  for (const LinearPrecision& p : precisions) p.validate();
  const int64_t rows = cfg.tokens * cfg.topk;
  const int64_t E = std::max<int64_t>(cfg.experts, 1);
  const float w_sigma = 1.f / std::sqrt(float(cfg.in));
  const auto x = random_normal(rows * cfg.in, cfg.seed, 1.f);
  const auto dy = random_normal(rows * cfg.out, cfg.seed + 1, 1e-2f);
  const auto w = random_normal(E * cfg.in * cfg.out, cfg.seed + 2, w_sigma);
  std::vector<float> y(size_t(rows * cfg.out)), dx(cfg.need_dx ? size_t(rows * cfg.in) : 0);
  float* dxp = cfg.need_dx ? dx.data() : nullptr;
  std::vector<Runner> runners;
  for (const LinearPrecision& p : precisions)
    runners.push_back(make_runner(cfg, p, w, x, dy, y, dxp));
  std::vector<LayerBenchResult> res(precisions.size());
  const int total = cfg.warmup + cfg.iters;
  for (int i = 0; i < total; ++i) {
    for (size_t k = 0; k < runners.size(); ++k) {
      if (i % cfg.micro_batches == 0) runners[k].bump();
      auto t0 = Clock::now();
      size_t held = runners[k].step();
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i >= cfg.warmup) {
        res[k].samples_ms.push_back(ms);
        res[k].held_bytes = held;
      }
    }
  }
  for (size_t k = 0; k < runners.size(); ++k) {
    LayerBenchResult& r = res[k];
    r.median_ms = median_of(r.samples_ms);
    for (double v : r.samples_ms) r.mean_ms += v / double(r.samples_ms.size());
    r.min_ms = *std::min_element(r.samples_ms.begin(), r.samples_ms.end());
    r.max_ms = *std::max_element(r.samples_ms.begin(), r.samples_ms.end());
    r.weight_cache_bytes = runners[k].cache_bytes();
    r.rows = rows;
  }
  return res;
}

LayerBenchResult bench_layer(const LayerBenchConfig& cfg) {
  return bench_layers_alternating(cfg, {cfg.precision})[0];
}

}  // namespace mxtrain
