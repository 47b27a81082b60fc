// tests/core/scale_history_test.cc — delayed scaling's history and scale update
// (mxtrain/scale_history.h), step by step against hand-computed values of TransformerEngine's
// rule: scale = fl32(fl32(fp8_max / amax) / 2^margin), amax the history's max (or the latest),
// a step without an amax changes nothing, a non-finite amax keeps the scale.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/scale_history.h"

namespace mxtrain {
namespace {

TensorFormat delayed(int length, int margin = 0, AmaxAlgo algo = AmaxAlgo::max,
                     Elem elem = Elem::e4m3) {
  TensorFormat f = get_recipe("fp8-delayed").role(Role::input);
  f.elem = elem;
  f.history = {length, margin, algo};
  return f;
}

// One step: record the amaxes of its quantizations, then update.
void step(ScaleHistory& h, std::vector<float> amaxes) {
  for (float a : amaxes) h.record(a);
  h.update();
}

TEST(ScaleHistory, FreshHistoryQuantizesWithScaleOne) {
  ScaleHistory h(delayed(4));
  EXPECT_EQ(h.scale(), 1.f);
  EXPECT_EQ(h.length(), 4);
  EXPECT_EQ(h.history(), std::vector<float>(4, 0.f));
  EXPECT_EQ(h.step_amax(), 0.f);
}

TEST(ScaleHistory, MaxOfTheLastLengthStepsGivesTheScale) {
  ScaleHistory h(delayed(3));
  // The step amax is the largest of its quantizations; NaN is ignored.
  step(h, {1.f, 2.f, std::nanf(""), 0.5f});
  EXPECT_EQ(h.scale(), 448.f / 2.f);
  EXPECT_EQ(h.history(), (std::vector<float>{0.f, 0.f, 2.f}));
  step(h, {8.f});
  EXPECT_EQ(h.scale(), 448.f / 8.f);
  step(h, {4.f});
  EXPECT_EQ(h.history(), (std::vector<float>{2.f, 8.f, 4.f}));
  EXPECT_EQ(h.scale(), 448.f / 8.f);
  step(h, {1.f});  // 2 leaves the history; 8 is still in it
  EXPECT_EQ(h.scale(), 448.f / 8.f);
  step(h, {1.f});  // 8 leaves: max(4, 1, 1)
  EXPECT_EQ(h.history(), (std::vector<float>{4.f, 1.f, 1.f}));
  EXPECT_EQ(h.scale(), 448.f / 4.f);
  step(h, {3.f});
  EXPECT_EQ(h.scale(), 448.f / 3.f);  // fl32(448 / 3), not a power of two
  EXPECT_NE(h.scale(), std::ldexp(1.f, int(std::floor(std::log2(h.scale())))));
}

TEST(ScaleHistory, AStepWithoutAnAmaxChangesNothing) {
  ScaleHistory h(delayed(2));
  step(h, {5.f});
  const float s = h.scale();
  const std::vector<float> hist = h.history();
  step(h, {});     // not quantized this step
  step(h, {0.f});  // an all-zero tensor
  EXPECT_EQ(h.scale(), s);
  EXPECT_EQ(h.history(), hist);
}

TEST(ScaleHistory, MostRecentMarginAndE5m2) {
  ScaleHistory r(delayed(8, 0, AmaxAlgo::most_recent));
  step(r, {16.f});
  step(r, {2.f});
  EXPECT_EQ(r.scale(), 448.f / 2.f);  // the latest, not the history's max
  ScaleHistory m(delayed(8, 3));
  step(m, {7.f});
  EXPECT_EQ(m.scale(), (448.f / 7.f) / 8.f);
  ScaleHistory e(delayed(8, 0, AmaxAlgo::max, Elem::e5m2));
  step(e, {3.f});
  EXPECT_EQ(e.scale(), 57344.f / 3.f);
}

TEST(ScaleHistory, NonFiniteAndTinyAmaxes) {
  ScaleHistory h(delayed(2));
  step(h, {4.f});
  EXPECT_EQ(h.scale(), 112.f);
  step(h, {std::numeric_limits<float>::infinity()});
  EXPECT_EQ(h.scale(), 112.f);  // an Inf amax keeps the scale while it is in the history
  step(h, {4.f});
  EXPECT_EQ(h.scale(), 112.f);
  step(h, {2.f});  // Inf has left: max(4, 2)
  EXPECT_EQ(h.scale(), 112.f);
  step(h, {1e-45f});  // 448 / 1e-45 overflows FP32: the largest finite scale
  step(h, {1e-45f});
  EXPECT_EQ(h.scale(), FLT_MAX);
  // The amax epsilon bounds the amax from below.
  TensorFormat f = delayed(2);
  f.amax_epsilon = 0.5f;
  ScaleHistory e(f);
  step(e, {0.001f});
  EXPECT_EQ(e.scale(), 448.f / 0.5f);
}

TEST(ScaleHistory, RestoreContinuesExactly) {
  ScaleHistory a(delayed(3));
  for (float x : {3.f, 9.f, 5.f, 2.f}) step(a, {x});
  ScaleHistory b(delayed(3));
  b.restore(a.history(), a.scale());
  EXPECT_EQ(b.history(), a.history());
  EXPECT_EQ(b.scale(), a.scale());
  for (float x : {1.f, 1.f, 6.f}) {
    step(a, {x});
    step(b, {x});
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.history(), b.history());
  }
  ScaleHistory c(delayed(4));
  const std::vector<float> three(3, 1.f);
  try {
    c.restore(three, 1.f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("the saved amax history holds 3 steps but "
                                          "precision.amax_history_len is 4; resume with the "
                                          "length it was saved with", 0),
              0u) << e.what();
  }
  EXPECT_THROW(a.restore(a.history(), 0.f), Error);
  EXPECT_THROW(a.restore(a.history(), std::nanf("")), Error);
}

}  // namespace
}  // namespace mxtrain
