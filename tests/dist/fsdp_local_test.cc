// tests/dist/fsdp_local_test.cc — Fsdp on a one-rank communicator that never touches MPI
// (Comm::local()): the single-process path and the errors a caller can cause. The multi-rank
// behaviour is tested under mpirun in tests/mpi.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

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
  f.fetch(0, WeightUse::forward);
  EXPECT_TRUE(l.weight_cache().has_tile);
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

TEST(FsdpLocal, VersionBumpInvalidatesGatheredWeights) {
  Linear l("l", 32, 32, false, prec("mxfp8"));
  for (size_t i = 0; i < l.weight.value.size(); ++i) l.weight.value[i] = float(i);
  Fsdp f(Comm::local());
  f.add(l);
  f.fetch(0, WeightUse::forward);
  const auto before = l.weight_cache().rowwise.data;
  f.shards()[0].value[0] = 1000.f;  // an optimizer step changed the shard ...
  f.bump_versions();                 // ... and says so
  f.fetch(0, WeightUse::forward);
  EXPECT_NE(l.weight_cache().rowwise.data, before);
  EXPECT_EQ(f.stats().shard_quantizations, 2);
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
  EXPECT_NE(error_of([&] { f.prefetch(3, WeightUse::forward); }).find("module index 3 outside [0, 1)"),
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
