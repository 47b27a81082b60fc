// Tests for train/optim.h and train/data.h: AdamW against a hand-unrolled FP64 update, the LR
// schedule's key points, data determinism and splits.
#include "mxtrain/train/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "mxtrain/train/data.h"

namespace mxtrain {
namespace {

TEST(AdamW, MatchesDoublePrecisionFormula) {
  std::vector<float> w{1.0f, -2.0f, 0.5f}, m(3, 0.f), v(3, 0.f);
  std::vector<double> wd{1.0, -2.0, 0.5}, md(3, 0), vd(3, 0);
  const AdamWHyper h{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (int t = 1; t <= 5; ++t) {
    std::vector<float> g{0.3f * t, -0.1f, float(t % 2)};
    adamw_update(w.data(), g.data(), m.data(), v.data(), 3, h, t, /*decay=*/true);
    for (int i = 0; i < 3; ++i) {
      md[i] = 0.9 * md[i] + 0.1 * g[i];
      vd[i] = 0.95 * vd[i] + 0.05 * double(g[i]) * g[i];
      const double mhat = md[i] / (1 - std::pow(0.9, t)), vhat = vd[i] / (1 - std::pow(0.95, t));
      wd[i] -= 0.01 * 0.1 * wd[i];
      wd[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
  }
  // FP32 arithmetic over 5 updates of O(1) values: a few ulps of drift.
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], wd[i], 2e-6) << i;
}

TEST(AdamW, NoDecayLeavesZeroGradWeightUnchanged) {
  std::vector<float> w{3.0f}, g{0.f}, m{0.f}, v{0.f};
  adamw_update(w.data(), g.data(), m.data(), v.data(), 1, {0.1f, 0.9f, 0.95f, 1e-8f, 0.5f}, 1,
               /*decay=*/false);
  EXPECT_EQ(w[0], 3.0f);
}

TEST(LrSchedule, WarmupThenCosine) {
  EXPECT_FLOAT_EQ(lr_at(0, 10, 110, 1.0f, 0.1f), 0.1f);   // (0+1)/10
  EXPECT_FLOAT_EQ(lr_at(9, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(10, 10, 110, 1.0f, 0.1f), 1.0f);  // cosine starts at lr
  EXPECT_NEAR(lr_at(60, 10, 110, 1.0f, 0.1f), 0.55f, 1e-6);  // halfway: (lr+min)/2
  EXPECT_NEAR(lr_at(110, 10, 110, 1.0f, 0.1f), 0.1f, 1e-6);
  EXPECT_FLOAT_EQ(lr_at(5, 0, 0, 0.5f, 0.1f), 0.5f);
}

TEST(GradReductions, SumSquaresAndFinite) {
  std::vector<float> g(100001, 0.5f);
  EXPECT_DOUBLE_EQ(sum_squares(g.data(), int64_t(g.size())), 0.25 * 100001);
  EXPECT_TRUE(all_finite(g.data(), int64_t(g.size())));
  g[77777] = INFINITY;
  EXPECT_FALSE(all_finite(g.data(), int64_t(g.size())));
}

TEST(Corpus, SplitAndDeterministicSequences) {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += char(32 + (i * 7919 / 13) % 90);  // no short period
  TextCorpus c = TextCorpus::from_text(text, 0.1f);
  EXPECT_EQ(c.train_size(), 9000);
  EXPECT_EQ(c.val_size(), 1000);
  std::vector<int32_t> t1(16), y1(16), t2(16), y2(16);
  c.train_sequence(7, 3, 1, 16, t1.data(), y1.data());
  c.train_sequence(7, 3, 1, 16, t2.data(), y2.data());
  EXPECT_EQ(t1, t2);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(y1[i], t1[i + 1]);
  c.train_sequence(7, 4, 1, 16, t2.data(), y2.data());
  EXPECT_NE(t1, t2);  // another step draws another offset
  c.val_sequence(0, 4, 16, t1.data(), y1.data());
  EXPECT_EQ(t1[0], text[9000]);  // the val split starts where the train split ends
}

TEST(Corpus, ErrorsAreClear) {
  EXPECT_THROW(TextCorpus::load("/nonexistent/file.txt", 0.1f), std::runtime_error);
  TextCorpus c = TextCorpus::from_text(std::string(100, 'x'), 0.1f);
  std::vector<int32_t> t(200), y(200);
  EXPECT_THROW(c.train_sequence(1, 0, 0, 200, t.data(), y.data()), std::runtime_error);
}

}  // namespace
}  // namespace mxtrain
