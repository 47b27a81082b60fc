// Tests for train/optim.h and train/data.h: AdamW against a hand-unrolled FP64 update, the
// AVX-512 AdamW against the scalar reference (bit for bit: same FP32 operations, same order),
// on awkward sizes, with NaN/Inf gradients and for 1 vs 2 threads; the LR schedule's key
// points, data determinism and splits.
#include "mxtrain/train/optim.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "mxtrain/isa.h"
#include "mxtrain/train/data.h"
#include "train/optim_kernels.h"

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

// The same bits, NaN meeting NaN (payloads may differ).
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return false;
  return true;
}

struct AdamWState {
  std::vector<float> w, m, v;
};

// `steps` updates of n elements from seeded gradients, through `update` (the dispatched
// adamw_update or ref::adamw_update).
template <class Update>
AdamWState run_adamw(Update update, int64_t n, bool decay, int steps, bool poison = false) {
  std::mt19937 rng{uint32_t(n)};
  std::normal_distribution<float> nd(0.f, 1.f);
  AdamWState s{std::vector<float>(n), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f)};
  for (float& x : s.w) x = nd(rng);
  const AdamWHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::vector<float> g(n);
  for (int t = 1; t <= steps; ++t) {
    for (float& x : g) x = nd(rng) * (t % 2 ? 1e-3f : 10.f);
    if (poison && n > 2) {
      g[0] = std::numeric_limits<float>::quiet_NaN();
      g[n / 2] = std::numeric_limits<float>::infinity();
      g[n - 1] = -std::numeric_limits<float>::infinity();
    }
    update(s.w.data(), g.data(), s.m.data(), s.v.data(), n, h, t, decay, 1.f);
  }
  return s;
}

class AdamWAvx512 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
    set_isa(Isa::avx512);
  }
  void TearDown() override { clear_isa_override(); }
};

TEST_F(AdamWAvx512, MatchesReferenceBitForBit) {
  for (int64_t n : {1, 15, 16, 17, 31, 33, 63, 65, 256, 672, 65536 + 17, 200003})
    for (bool decay : {false, true})
      for (bool poison : {false, true}) {
        const AdamWState a = run_adamw(adamw_update, n, decay, 4, poison);
        const AdamWState b = run_adamw(ref::adamw_update, n, decay, 4, poison);
        const std::string what = "n=" + std::to_string(n) + " decay=" + std::to_string(decay) +
                                 " poison=" + std::to_string(poison);
        EXPECT_TRUE(same_values(a.w, b.w)) << what;
        EXPECT_TRUE(same_values(a.m, b.m)) << what;
        EXPECT_TRUE(same_values(a.v, b.v)) << what;
        if (poison && n > 2) {
          EXPECT_TRUE(std::isnan(a.w[0]) && std::isnan(a.w[n / 2])) << what;
        }
      }
}

// The clip factor passed as grad_scale gives the bits of the gradient scaled beforehand, on
// every path (the trainer relies on it: it no longer scales the gradients in place).
TEST(AdamW, GradScaleEqualsScalingTheGradientFirst) {
  const AdamWHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (int64_t n : {1, 17, 65536 + 17}) {
      for (float scale : {1.f, 0.37f, 1.f / 3.f}) {
        std::mt19937 rng{uint32_t(n)};
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> w(n), g(n), m1(n, 0.f), v1(n, 0.f), m2(n, 0.f), v2(n, 0.f);
        for (float& x : w) x = nd(rng);
        std::vector<float> w2 = w;
        for (int t = 1; t <= 3; ++t) {
          for (float& x : g) x = nd(rng);
          const std::vector<float> g0 = g;
          adamw_update(w.data(), g.data(), m1.data(), v1.data(), n, h, t, true, scale);
          EXPECT_TRUE(same_values(g, g0)) << "the gradient was written";
          for (float& x : g) x *= scale;
          adamw_update(w2.data(), g.data(), m2.data(), v2.data(), n, h, t, true);
        }
        EXPECT_TRUE(same_values(w, w2) && same_values(m1, m2) && same_values(v1, v2))
            << isa_name(isa) << " n=" << n << " scale=" << scale;
      }
    }
  }
  clear_isa_override();
}

TEST(AdamW, IndependentOfThreadCountOnEveryPath) {
  const int64_t n = 300007;  // above the parallel threshold, not a multiple of 16
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    const int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    const AdamWState a = run_adamw(adamw_update, n, true, 3);
    omp_set_num_threads(2);
    const AdamWState b = run_adamw(adamw_update, n, true, 3);
    omp_set_num_threads(prev);
    EXPECT_TRUE(same_values(a.w, b.w) && same_values(a.m, b.m) && same_values(a.v, b.v))
        << isa_name(isa);
  }
  clear_isa_override();
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
