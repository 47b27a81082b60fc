// tests/dist/fsdp_local_test.cc — Fsdp on a one-rank communicator that never touches MPI
// (Comm::local()): the single-process path and the errors a caller can cause. The multi-rank
// behaviour is tested under mpirun in tests/mpi.
#include <gtest/gtest.h>

#include <cmath>

#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/fsdp.h"

namespace mxtrain::dist {
namespace {

LinearPrecision prec(const std::string& r) {
  LinearPrecision p;
  p.recipe = get_recipe(r);
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FsdpLocal, OneRankGathersNothingAndKeepsWholeShards) {
  Linear l("l", 40, 33, true, prec("mxfp8-32x32"));
  for (size_t i = 0; i < l.weight.value.size(); ++i) l.weight.value[i] = float(i % 7) - 3.f;
  const auto full = l.weight.value;
  Fsdp f(Comm::local());
  EXPECT_EQ(f.add(l), 0);
  EXPECT_EQ(f.world(), 1);
  EXPECT_EQ(f.layout(0).rows_per_rank, 64);
  f.fetch(0, Use::forward);
  EXPECT_TRUE(l.weight_cache().has(Copy::tile));
  EXPECT_EQ(f.stats().allgather_payload_bytes, 0u) << "one process: nothing is gathered";
  EXPECT_EQ(f.stats().allgather_bytes, 0u);
  EXPECT_EQ(f.stats().allgather_calls, 1);
  const auto views = f.shards();
  ASSERT_EQ(views.size(), 2u);  // weight shard + replicated bias
  EXPECT_EQ(views[0].value.size(), 64u * 40);
  EXPECT_EQ(views[0].numel_valid, 33 * 40);
  EXPECT_TRUE(views[0].decay);
  EXPECT_FALSE(views[1].decay);
  EXPECT_TRUE(views[1].replicated);
  EXPECT_EQ(f.gather_full("l.weight", ShardField::value), full);
}

TEST(FsdpLocal, GradientsPassThroughAndNormsCountEachElementOnce) {
  Linear l("l", 8, 4, true, prec("bf16"));
  Fsdp f(Comm::local());
  f.add(l);
  EXPECT_TRUE(l.weight.grad.empty()) << "a sharded layer keeps no full-size gradient";
  l.weight.grad.assign(32, 1.f);  // a backward run without pre_backward: the layer's own
  for (float& g : l.bias.grad) g = 2.f;
  f.reduce_gradients();
  EXPECT_EQ(f.shards()[0].grad[0], 1.f);
  EXPECT_DOUBLE_EQ(f.grad_sum_squares(), 32.0 + 4 * 4.0);
  EXPECT_TRUE(f.grads_finite());
  l.bias.grad[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(f.grads_finite());
}

// ZeRO-3: the layer holds a full-size gradient only between pre_backward and post_backward;
// the shard grad is the sum of the micro-batches' reduce-scatters — here (one rank, no
// padding reorder issue: 40 rows pad to 64) exactly the sum the layer would accumulate itself.
TEST(FsdpLocal, LentGradientLivesOnlyThroughTheBackwardAndShardsSumMicroBatches) {
  for (const char* recipe : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise"}) {
    Linear lent("l", 40, 33, false, prec(recipe)), own("l", 40, 33, false, prec(recipe));
    for (size_t i = 0; i < lent.weight.value.size(); ++i)
      lent.weight.value[i] = own.weight.value[i] = float(int(i % 13) - 6) / 8.f;
    Fsdp f(Comm::local());
    f.add(lent);
    const int64_t T = 37;
    std::vector<float> x(T * 40), dy(T * 33), y(T * 33), dx(T * 40);
    own.weight.grad.assign(33 * 40, 0.f);
    for (int mb = 0; mb < 3; ++mb) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(int((i * 7 + mb) % 17) - 8) / 4.f;
      for (size_t i = 0; i < dy.size(); ++i) dy[i] = float(int((i * 5 + mb) % 11) - 5) / 16.f;
      LinearSaved s1, s2;
      lent.forward(x.data(), T, y.data(), s1);
      f.post_forward(0);
      own.forward(x.data(), T, y.data(), s2);
      f.pre_backward(0);
      ASSERT_EQ(lent.weight.grad.size(), 33u * 40) << recipe;
      std::fill(lent.weight.grad.begin(), lent.weight.grad.end(), 1e30f);  // written, not added
      lent.backward(s1, dy.data(), dx.data());
      f.post_backward(0);
      EXPECT_TRUE(lent.weight.grad.empty()) << recipe << ": the full gradient outlived the backward";
      own.backward(s2, dy.data(), dx.data());
    }
    f.reduce_gradients();
    const std::span<float> shard = f.shards()[0].grad;
    // 33 rows padded to a multiple of the weight's block edge: 32 (MX, BF16) or 128 (blockwise).
    ASSERT_EQ(shard.size(), (std::string(recipe) == "blockwise" ? 128u : 64u) * 40);
    for (size_t i = 0; i < 33u * 40; ++i) ASSERT_EQ(shard[i], own.weight.grad[i]) << recipe << " " << i;
    for (size_t i = 33u * 40; i < shard.size(); ++i) ASSERT_EQ(shard[i], 0.f) << "padding " << i;
    // The next step starts a new sum: one micro-batch's gradient, not added to the last.
    LinearSaved s;
    lent.forward(x.data(), T, y.data(), s);
    f.pre_backward(0);
    lent.backward(s, dy.data(), dx.data());
    f.post_backward(0);
    f.reduce_gradients();
    LinearSaved s3;
    own.weight.grad.assign(33 * 40, 0.f);
    own.forward(x.data(), T, y.data(), s3);
    own.backward(s3, dy.data(), dx.data());
    for (size_t i = 0; i < 33u * 40; ++i)
      ASSERT_EQ(f.shards()[0].grad[i], own.weight.grad[i]) << recipe << " step 2, " << i;
  }
}

// A per-tensor-scaled weight is gathered with its agreed scale: the current amax of the
// whole weight (fp8-current), or the layer's amax history, whose amax the pack records
// (fp8-delayed) — byte-identical to the layer quantizing its own weight.
TEST(FsdpLocal, PerTensorScaledWeightsGatherLikeTheLayer) {
  for (const char* recipe : {"fp8-current", "fp8-delayed"}) {
    Linear own("l", 40, 33, false, prec(recipe)), lent("l", 40, 33, false, prec(recipe));
    for (size_t i = 0; i < own.weight.value.size(); ++i)
      own.weight.value[i] = lent.weight.value[i] = std::sin(float(i)) * float(i % 7 + 1);
    for (Linear* l : {&own, &lent})
      if (ScaleHistory* h = l->scale_histories().get(Role::weight, 0)) {
        h->record(5.f);  // an earlier step's amax: the scale is not 1
        h->update();
      }
    Fsdp f(Comm::local());
    f.add(lent);
    f.fetch(0, Use::forward);
    const std::vector<float> x(5 * 40, 0.25f);
    std::vector<float> y(5 * 33);
    LinearSaved s;
    own.forward(x.data(), 5, y.data(), s);
    EXPECT_TRUE(lent.weight_cache().tile.data == own.weight_cache().tile.data) << recipe;
    EXPECT_TRUE(lent.weight_cache().tile.scales == own.weight_cache().tile.scales) << recipe;
    if (ScaleHistory* h = lent.scale_histories().get(Role::weight, 0)) {
      EXPECT_GT(h->step_amax(), 0.f);
      EXPECT_EQ(h->step_amax(), own.scale_histories().get(Role::weight, 0)->step_amax());
    }
  }
}

TEST(FsdpLocal, VersionBumpInvalidatesGatheredWeights) {
  Linear l("l", 32, 32, false, prec("mxfp8"));
  for (size_t i = 0; i < l.weight.value.size(); ++i) l.weight.value[i] = float(i);
  Fsdp f(Comm::local());
  f.add(l);
  f.fetch(0, Use::forward);
  const auto before = l.weight_cache().rowwise.data;
  f.shards()[0].value[0] = 1000.f;  // an optimizer step changed the shard ...
  f.bump_versions();                 // ... and says so
  f.fetch(0, Use::forward);
  EXPECT_NE(l.weight_cache().rowwise.data, before);
  EXPECT_EQ(f.stats().shard_quantizations, 2);
}

TEST(FsdpLocal, GradientLendingErrors) {
  Linear l("l", 8, 4, false, prec("bf16"));
  Fsdp f(Comm::local());
  f.add(l);
  f.pre_backward(0);
  EXPECT_NE(error_of([&] { f.pre_backward(0); }).find("pre_backward(0) twice"), std::string::npos);
  EXPECT_NE(error_of([&] { f.reduce_gradients(); }).find("between pre_backward and post_backward"),
            std::string::npos);
  f.post_backward(0);
  l.weight.grad.assign(32, 0.f);
  EXPECT_NE(error_of([&] { f.pre_backward(0); }).find("holds its own gradient (32 values)"),
            std::string::npos);
  FsdpOptions o;
  o.prefetch_depth = 0;
  EXPECT_NE(error_of([&] { Fsdp g(Comm::local(), o); }).find("prefetch_depth must be >= 1, got 0"),
            std::string::npos);
}

TEST(FsdpLocal, ClearErrors) {
  Linear l("l", 8, 4, false, prec("bf16"));
  Fsdp f(Comm::local());
  f.add(l);
  EXPECT_NE(error_of([&] { f.add(l); }).find("holds 0 values, expected 32"), std::string::npos);
  EXPECT_NE(error_of([&] { f.gather_full("nope", ShardField::value); }).find("no parameter named 'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.scatter_full("l.weight", ShardField::value, nullptr); })
                .find("root rank must pass the whole tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.prefetch(3, Use::forward); }).find("module index 3 outside [0, 1)"),
            std::string::npos);
  l.weight.grad.resize(5);
  EXPECT_NE(error_of([&] { f.reduce_gradients(); }).find("gradient holds 5 values, expected 32"),
            std::string::npos);
  Parameter vec;
  vec.init("v", {4});
  vec.value.resize(3);
  EXPECT_NE(error_of([&] { f.add_replicated(vec); }).find("holds 3 values, expected 4"),
            std::string::npos);
}

}  // namespace
}  // namespace mxtrain::dist
