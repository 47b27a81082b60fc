// tests/nn/layer_bench_test.cc — the layer timing helper (nn/layer_bench.h): its statistics
// and bookkeeping, not its speed (speed is never asserted in tests).
#include <gtest/gtest.h>

#include "mxtrain/common.h"
#include "mxtrain/nn/layer_bench.h"

namespace mxtrain {
namespace {

TEST(LayerBench, MedianOf) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({3.0}), 3.0);
  EXPECT_EQ(median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(LayerBench, ReportsSamplesHeldBytesAndCache) {
  LayerBenchConfig c;
  c.tokens = 40;
  c.in = 64;
  c.out = 32;
  c.warmup = 1;
  c.iters = 3;
  c.precision.recipe = get_recipe("mxfp8");
  LayerBenchResult r = bench_layer(c);
  ASSERT_EQ(r.samples_ms.size(), 3u);
  EXPECT_LE(r.min_ms, r.median_ms);
  EXPECT_LE(r.median_ms, r.max_ms);
  EXPECT_EQ(r.rows, 40);
  // defer off: x colwise (40x64 data + 2x64 scales) + W colwise (32x64 + 1x64).
  EXPECT_EQ(r.held_bytes, size_t(40 * 64 + 2 * 64 + 32 * 64 + 64));
  // W rowwise (32x64 + 32x2 scales) + colwise copies.
  EXPECT_EQ(r.weight_cache_bytes, size_t(2 * 32 * 64 + 32 * 2 + 64));

  c.experts = 4;
  c.topk = 2;
  c.precision.defer_backward_quant = true;
  r = bench_layer(c);
  EXPECT_EQ(r.rows, 80);
  EXPECT_EQ(r.held_bytes, 0u);  // defer on: only a reference to x is kept
}

TEST(LayerBench, BadConfigsAreErrors) {
  LayerBenchConfig c;
  c.tokens = 0;
  EXPECT_THROW(bench_layer(c), Error);
  c = LayerBenchConfig{};
  c.topk = 2;  // top-k without experts
  EXPECT_THROW(c.validate(), Error);
  c.experts = 1;
  EXPECT_THROW(c.validate(), Error);  // top-k > experts
  c = LayerBenchConfig{};
  c.iters = 0;
  EXPECT_THROW(c.validate(), Error);
  c = LayerBenchConfig{};
  c.precision.defer_backward_quant = true;  // with bf16
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace mxtrain
