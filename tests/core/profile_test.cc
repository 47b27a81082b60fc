// tests/core/profile_test.cc — the step profiler's bookkeeping (mxtrain/profile.h): time is
// exclusive and every interval of a step lands in exactly one cell, so the cells add up to the
// step; nothing is recorded without an active profiler or outside a step; module names map to
// their product regions.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "mxtrain/common.h"
#include "mxtrain/profile.h"

namespace mxtrain::prof {
namespace {

using Clock = std::chrono::steady_clock;

// Busy for about `us` microseconds (a sleep could be cut short or stretched by the scheduler
// just as well; only "more than zero" is asserted of it).
void spin(int us) {
  const auto end = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < end) {
  }
}

double cell_ms(const StepProfile& s, Region r, Pass p) { return s.ms[size_t(cell_index(r, p))]; }
int64_t cell_calls(const StepProfile& s, Region r, Pass p) {
  return s.calls[size_t(cell_index(r, p))];
}

// Cells are sums of the same intervals the step is: equal up to the rounding of ~10 additions.
constexpr double kSumTol = 1e-9;

TEST(Profiler, CellsAreExclusiveAndAddUpToTheStep) {
  Profiler p;
  set_active(&p);
  const auto t0 = Clock::now();
  p.begin_step(t0);
  spin(200);  // other
  {
    MXT_PROFILE(norm, fwd);
    spin(300);
    {
      MXT_PROFILE(wait, none);  // nested: stops norm's clock
      spin(400);
    }
    spin(100);
  }
  {
    MXT_PROFILE_PRODUCT("layers.0.attention.qkv", bwd);
    spin(100);
  }
  {
    MXT_PROFILE(norm, fwd);  // a second entry of the same cell
    spin(100);
  }
  const auto t1 = Clock::now();
  p.end_step(t1);
  set_active(nullptr);

  ASSERT_EQ(p.steps().size(), 1u);
  const StepProfile& s = p.steps()[0];
  const double step = std::chrono::duration<double, std::milli>(t1 - t0).count();
  EXPECT_NEAR(s.step_ms, step, kSumTol * step);
  EXPECT_NEAR(std::accumulate(s.ms.begin(), s.ms.end(), 0.0), step, kSumTol * step);
  EXPECT_EQ(cell_calls(s, Region::norm, Pass::fwd), 2);
  EXPECT_EQ(cell_calls(s, Region::wait, Pass::none), 1);
  EXPECT_EQ(cell_calls(s, Region::qkv, Pass::bwd), 1);
  // Every cell got at least its own busy time; as they add up to the step (above), the 400 us
  // wait nested in norm was not counted in norm as well.
  EXPECT_GE(cell_ms(s, Region::norm, Pass::fwd), 0.5);
  EXPECT_GE(cell_ms(s, Region::wait, Pass::none), 0.4);
  EXPECT_GE(cell_ms(s, Region::qkv, Pass::bwd), 0.1);
  EXPECT_GE(cell_ms(s, Region::other, Pass::none), 0.2);
  for (int c = 0; c < kCells; ++c) {
    if (s.calls[size_t(c)] == 0 && c != cell_index(Region::other, Pass::none)) {
      EXPECT_EQ(s.ms[size_t(c)], 0.0) << "cell " << c;
    }
  }
}

TEST(Profiler, NothingIsRecordedWithoutAnActiveProfilerOrOutsideAStep) {
  Profiler p;
  {
    MXT_PROFILE(attention, fwd);  // no active profiler: a no-op
  }
  EXPECT_EQ(active(), nullptr);
  set_active(&p);
  {
    MXT_PROFILE(attention, fwd);  // active, but no step has begun
  }
  p.begin_step(Clock::now());
  set_active(nullptr);
  {
    MXT_PROFILE(attention, bwd);  // inside a step, but not on an active thread
  }
  p.end_step(Clock::now());
  ASSERT_EQ(p.steps().size(), 1u);
  for (int64_t c : p.steps()[0].calls) EXPECT_EQ(c, 0);
}

TEST(Profiler, AStepEndingWithARegionOpenIsAnError) {
  Profiler p;
  p.begin_step(Clock::now());
  p.enter(Region::norm, Pass::fwd);
  EXPECT_THROW(p.end_step(Clock::now()), Error);
  p.leave();
  p.end_step(Clock::now());
  EXPECT_EQ(p.steps().size(), 1u);
}

TEST(Profiler, ModuleNamesMapToTheirProductRegions) {
  EXPECT_EQ(product_region("layers.3.attention.qkv"), Region::qkv);
  EXPECT_EQ(product_region("layers.0.attention.proj"), Region::proj);
  EXPECT_EQ(product_region("layers.1.mlp.fc1"), Region::fc1);
  EXPECT_EQ(product_region("layers.1.mlp.fc2"), Region::fc2);
  EXPECT_EQ(product_region("layers.2.mlp.experts.fc1"), Region::experts_fc1);
  EXPECT_EQ(product_region("layers.2.mlp.experts.fc2"), Region::experts_fc2);
  EXPECT_EQ(product_region("layers.2.mlp.router"), Region::router);
  EXPECT_EQ(product_region("lm_head"), Region::lm_head);
  EXPECT_EQ(product_region("bench"), Region::other_products);
  EXPECT_EQ(product_region("xfc1"), Region::other_products);  // whole name components only
  EXPECT_EQ(std::string(region_name(Region::experts_fc1)), "experts.fc1");
  EXPECT_EQ(region_group(Region::lm_head), Group::products);
  EXPECT_EQ(region_group(Region::attention), Group::attention);
  EXPECT_EQ(region_group(Region::cross_entropy), Group::elementwise);
  EXPECT_EQ(region_group(Region::wait), Group::wait);
  EXPECT_EQ(region_group(Region::other), Group::other);
}

}  // namespace
}  // namespace mxtrain::prof
