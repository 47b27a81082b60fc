// tests/policy/bench_layers_test.cc — the layer-benchmark plan and driver with a fake timer:
// per-rank shapes under TP/EP/ETP, the default token sweep, Zipf expert splits, the report
// the driver builds, and the policy that report merges into.
#include "mxtrain/policy/bench_layers.h"

#include <numeric>

#include "io/io_test_util.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::policy {
namespace {

// The quantizable modules of a 2-layer model (d_model 128, d_ff 384, vocab 256) whose second
// layer is MoE with 4 experts of width 192, top-2.
std::vector<BenchModule> model_modules() {
  std::vector<BenchModule> m;
  for (int layer = 0; layer < 2; ++layer) {
    m.push_back({"layernorm_column", "qkv", false, 128, 384, 0, 1});
    m.push_back({"row", "proj", false, 128, 128, 0, 1});
    if (layer == 0) {
      m.push_back({"layernorm_column", "fc1", false, 128, 768, 0, 1});
      m.push_back({"row", "fc2", false, 384, 128, 0, 1});
    } else {
      m.push_back({"layernorm_column", "fc1", true, 128, 384, 4, 2});
      m.push_back({"row", "fc2", true, 192, 128, 4, 2});
    }
  }
  m.push_back({"column", "lm_head", false, 128, 256, 0, 1});
  m.push_back({"duplicated", "kv_down_proj", false, 128, 96, 0, 1});
  return m;
}

TEST(BenchPlan, PerRankShapesWithoutParallelism) {
  const auto cases = plan_bench_cases(model_modules(), {});
  ASSERT_EQ(cases.size(), 8u);
  EXPECT_EQ(cases[0].label(), "layernorm_column/qkv tp=1 [128->384]");
  EXPECT_EQ(cases[0].modules, 2);
  EXPECT_EQ(cases[1].label(), "row/proj tp=1 [128->128]");
  EXPECT_EQ(cases[2].label(), "layernorm_column/fc1 tp=1 [128->768]");
  EXPECT_EQ(cases[2].modules, 1);
  EXPECT_EQ(cases[4].label(), "column_grouped/fc1 etp=1 num_gemms=4 top_k=2 [128->384]");
  EXPECT_EQ(cases[5].label(), "row_grouped/fc2 etp=1 num_gemms=4 top_k=2 [192->128]");
  EXPECT_TRUE(cases[5].grouped());
  EXPECT_EQ(cases[5].tp, 0);
}

TEST(BenchPlan, TensorAndExpertParallelismDivideTheRightAxis) {
  const auto cases = plan_bench_cases(model_modules(), {2, 2, 2});
  ASSERT_EQ(cases.size(), 8u);
  EXPECT_EQ(cases[0].label(), "layernorm_column/qkv tp=2 [128->192]");   // out / tp
  EXPECT_EQ(cases[1].label(), "row/proj tp=2 [64->128]");                // in / tp
  EXPECT_EQ(cases[3].label(), "row/fc2 tp=2 [192->128]");
  EXPECT_EQ(cases[4].label(), "column_grouped/fc1 etp=2 num_gemms=2 top_k=2 [128->192]");
  EXPECT_EQ(cases[5].label(), "row_grouped/fc2 etp=2 num_gemms=2 top_k=2 [96->128]");
  EXPECT_EQ(cases[6].label(), "column/lm_head tp=2 [128->128]");
  EXPECT_EQ(cases[7].label(), "duplicated/kv_down_proj tp=2 [128->96]");  // not split
}

TEST(BenchPlan, ErrorsNameTheModuleAndTheSize) {
  EXPECT_ERROR_CONTAINS(plan_bench_cases(model_modules(), {5, 1, 1}),
                        "layernorm_column/qkv: out=384 is not divisible by tp=5");
  EXPECT_ERROR_CONTAINS(plan_bench_cases(model_modules(), {1, 3, 1}),
                        "layernorm_column/fc1 (experts): num_experts=4 is not divisible by ep=3");
  EXPECT_ERROR_CONTAINS(plan_bench_cases(model_modules(), {1, 1, 0}), "must be >= 1");
  EXPECT_ERROR_CONTAINS(plan_bench_cases({{"duplicated", "x", true, 8, 8, 4, 2}}, {}),
                        "no grouped form");
  EXPECT_ERROR_CONTAINS(plan_bench_cases({{"attention", "x", false, 8, 8, 0, 1}}, {}),
                        "has kind \"attention\"");
  EXPECT_ERROR_CONTAINS(plan_bench_cases({{"row", "fc2", true, 8, 8, 2, 3}}, {}),
                        "needs 1 <= top_k <= num_experts");
}

TEST(BenchPlan, DefaultSweepCentresOnTheTrainingTokenCount) {
  EXPECT_EQ(default_token_sweep(1024), (std::vector<int64_t>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(default_token_sweep(100), (std::vector<int64_t>{25, 50, 100, 200, 400}));
  EXPECT_EQ(default_token_sweep(8), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(default_token_sweep(2), (std::vector<int64_t>{2}));
  EXPECT_ERROR_CONTAINS(default_token_sweep(0), "must be >= 1");
}

TEST(BenchPlan, ZipfSplitExactCases) {
  // Shares 6.67 and 3.33: floors 6, 3, the remaining row to the larger fraction.
  EXPECT_EQ(zipf_split(10, 2, 1.0), (std::vector<int64_t>{7, 3}));
  // Exponent 0: even; the 2 remaining rows go to the lowest experts (equal fractions).
  EXPECT_EQ(zipf_split(10, 4, 0.0), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(zipf_split(0, 3, 1.2), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(zipf_split(7, 1, 1.2), (std::vector<int64_t>{7}));
  EXPECT_ERROR_CONTAINS(zipf_split(10, 0, 1.2), "groups >= 1");
  EXPECT_ERROR_CONTAINS(zipf_split(10, 2, -1), "exponent must be");
}

TEST(BenchPlan, ZipfSplitSumsAndSkews) {
  for (int64_t rows : {1, 5, 31, 33, 1000, 4097}) {
    for (int64_t groups : {1, 3, 8, 64}) {
      auto c = zipf_split(rows, groups, 1.2);
      ASSERT_EQ(int64_t(c.size()), groups);
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t(0)), rows) << rows << " " << groups;
      for (int64_t g = 1; g < groups; ++g) EXPECT_LE(c[g], c[g - 1] + 1) << rows << " " << g;
    }
  }
  auto c = zipf_split(1000, 8, 1.2);
  // Share of expert 0: 1 / sum_{g=1..8} g^-1.2 = 0.42863 -> 428.6 rows; expert 7: 35.3.
  EXPECT_EQ(c[0], 429);
  EXPECT_EQ(c[7], 35);
}

// Fake timer: every recipe's samples are {base, base * 1.1, base * 0.9} x rows / 100, where
// base is 2.0 for bf16 and 2.0 / speedup(rows) for FP8 — FP8 wins from 200 rows up.
struct FakeTimer {
  std::vector<TimingRequest> seen;
  double speedup(int64_t rows) const { return rows >= 200 ? 1.25 : 0.8; }
  std::vector<std::vector<double>> operator()(const TimingRequest& r) {
    seen.push_back(r);
    std::vector<std::vector<double>> out;
    for (const auto& rc : r.recipes) {
      const double base = (rc == "bf16" ? 2.0 : 2.0 / speedup(r.rows)) * double(r.rows) / 100;
      out.push_back({base, base * 1.1, base * 0.9});
    }
    return out;
  }
};

TEST(BenchDriver, BuildsAValidReportThatMergesIntoTheExpectedPolicy) {
  std::vector<BenchModule> mods = {{"row", "proj", false, 128, 128, 0, 1},
                                   {"layernorm_column", "fc1", true, 128, 384, 4, 2}};
  const auto cases = plan_bench_cases(mods, {});
  BenchLayersOptions o;
  o.tokens = {256, 64, 256, 128};  // sorted and de-duplicated -> 64, 128, 256
  o.warmup = 1;
  o.iters = 3;
  o.model = "m.yaml";
  FakeTimer fake;
  std::vector<std::string> progress;
  Report r = run_bench_layers(
      cases, o, [&](const TimingRequest& q) { return fake(q); },
      [&](size_t done, size_t total, const std::string& what) {
        progress.push_back(std::to_string(done) + "/" + std::to_string(total));
      });
  ASSERT_EQ(fake.seen.size(), 6u);
  EXPECT_EQ(fake.seen[0].recipes, (std::vector<std::string>{"bf16", "mxfp8"}));
  EXPECT_EQ(fake.seen[0].rows, 64);
  EXPECT_EQ(fake.seen[0].warmup, 1);
  EXPECT_TRUE(fake.seen[0].group_rows.empty());
  EXPECT_EQ(fake.seen[3].rows, 128);  // expert: 64 tokens x top-2
  EXPECT_EQ(fake.seen[3].group_rows, zipf_split(128, 4, 1.2));
  EXPECT_EQ(progress.front(), "1/6");
  EXPECT_EQ(progress.back(), "6/6");

  EXPECT_EQ(r.recipe, "mxfp8");
  EXPECT_EQ(r.model, "m.yaml");
  EXPECT_EQ(r.iters, 3);
  EXPECT_GE(r.machine.threads, 1);
  ASSERT_EQ(r.points.size(), 6u);
  const Point& p0 = r.points[0];
  EXPECT_EQ(p0.kind, "row");
  EXPECT_EQ(p0.tp, 1);
  EXPECT_EQ(p0.tokens, 64);
  EXPECT_EQ(p0.padded_tokens, 64);
  EXPECT_DOUBLE_EQ(p0.bf16->ms, 1.28);                       // median of 1.28 x {1, 1.1, 0.9}
  EXPECT_DOUBLE_EQ(p0.bf16->spread, 0.2);                    // (1.1 - 0.9) / 1
  EXPECT_DOUBLE_EQ(p0.speedup(), 0.8);
  const Point& g = r.points[5];
  EXPECT_EQ(g.kind, "column_grouped");
  EXPECT_EQ(g.num_gemms, 4);
  EXPECT_EQ(g.top_k, 2);
  EXPECT_EQ(g.tokens, 512);  // 256 tokens x top-2: the unit of grouped min_tokens

  // Spread 0.2 per side -> half-range 0.25 at speedup 1.25: 1.25 - 0.25 = 1.0 does not
  // clear 1.05 although the speedup alone would.
  EXPECT_EQ(merge_reports({r}, 1.05).num_rules(), 0u);
  // With a 0.9 threshold FP8 wins from 200 rows: proj at 256 tokens, experts at 128 x 2 rows.
  Policy p = merge_reports({r}, 0.9);
  ASSERT_EQ(p.num_rules(), 2u);
  EXPECT_EQ(p.dense.at("row").at("proj")[0].min_tokens, 256);
  EXPECT_EQ(p.grouped.at("column_grouped")[0].min_tokens, 256);
  DecisionQuery q;
  q.kind = "layernorm_column";
  q.name = "fc1";
  q.is_expert = true;
  q.num_gemms = 4;
  q.top_k = 2;
  q.tokens = 128;
  EXPECT_TRUE(decide(p, q).use_fp8);
  q.tokens = 64;
  EXPECT_FALSE(decide(p, q).use_fp8);
}

TEST(BenchDriver, OnePrecisionAndInputErrors) {
  const auto cases = plan_bench_cases({{"row", "proj", false, 8, 8, 0, 1}}, {});
  BenchLayersOptions o;
  o.tokens = {32};
  o.iters = 3;
  o.time_bf16 = false;
  o.recipe = "mxfp8-32x32";
  FakeTimer fake;
  Report r = run_bench_layers(cases, o, [&](const TimingRequest& q) { return fake(q); });
  EXPECT_EQ(fake.seen[0].recipes, std::vector<std::string>{"mxfp8-32x32"});
  EXPECT_EQ(r.recipe, "mxfp8-32x32");
  EXPECT_FALSE(r.points[0].bf16.has_value());
  EXPECT_TRUE(r.points[0].fp8.has_value());

  auto timer = [&](const TimingRequest& q) { return fake(q); };
  o.recipe = "bf16";
  EXPECT_ERROR_CONTAINS(run_bench_layers(cases, o, timer), "must be an FP8 recipe");
  o.recipe = "mxfp8";
  o.time_fp8 = false;
  EXPECT_ERROR_CONTAINS(run_bench_layers(cases, o, timer), "nothing to time");
  o.time_fp8 = true;
  o.iters = 4;  // the fake returns 3 samples
  EXPECT_ERROR_CONTAINS(run_bench_layers(cases, o, timer), "returned 3 samples for 4");
  o.iters = 3;
  o.tokens = {0};
  EXPECT_ERROR_CONTAINS(run_bench_layers(cases, o, timer), "token counts must be >= 1");
  EXPECT_ERROR_CONTAINS(run_bench_layers(cases, o, LayerTimer{}), "no timer");
}

}  // namespace
}  // namespace mxtrain::policy
