// tests/policy/merge_test.cc — reports -> policy: pairing by unpadded tokens, winning ranges
// (min_tokens, max_tokens), the spread margin, several reports, the threshold, and errors.
#include <cmath>

#include "io/io_test_util.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::policy {
namespace {

using io::testing::ScratchDir;

Report make_report(const std::string& source) {
  Report r;
  r.source = source;
  r.machine = {"cpu", "scalar", 1, "h"};
  r.recipe = "mxfp8";
  r.model = "m.yaml";
  return r;
}

// A paired dense point with speedup exactly `speedup` (bf16_ms = speedup, fp8_ms = 1).
Point dense(const char* kind, const char* name, int tp, int64_t tokens, double speedup,
            double bf16_spread = 0, double fp8_spread = 0) {
  Point p;
  p.kind = kind;
  p.name = name;
  p.tp = tp;
  p.in = 64;
  p.out = 128;
  p.tokens = tokens;
  p.bf16 = Timing{speedup, bf16_spread};
  p.fp8 = Timing{1.0, fp8_spread};
  return p;
}

Point grouped(const char* kind, int etp, int num_gemms, int64_t tokens, double speedup) {
  Point p;
  p.kind = kind;
  p.name = kind == std::string("column_grouped") ? "fc1" : "fc2";
  p.etp = etp;
  p.num_gemms = num_gemms;
  p.top_k = 2;
  p.in = 64;
  p.out = 96;
  p.tokens = tokens;
  p.bf16 = Timing{speedup, 0};
  p.fp8 = Timing{1.0, 0};
  return p;
}

// One report of row/proj tp=1 with the given speedup at each size.
Report sweep(const std::vector<std::pair<int64_t, double>>& points,
             const std::string& source = "r.json") {
  Report r = make_report(source);
  for (auto [t, s] : points) r.points.push_back(dense("row", "proj", 1, t, s));
  return r;
}

const std::vector<Rule>& proj_rules(const Policy& p) { return p.dense.at("row").at("proj"); }

TEST(Merge, MonotoneSweepGivesMinTokensAtFirstWinningSize) {
  MergeSummary sum;
  Policy p = merge_reports(
      {sweep({{512, 0.9}, {1024, 0.95}, {2048, 1.05}, {4096, 1.1}, {8192, 1.2}})}, 1.0, &sum);
  EXPECT_EQ(p.speedup_threshold, 1.0);
  EXPECT_EQ(p.recipe, "mxfp8");
  ASSERT_EQ(p.num_rules(), 1u);
  const Rule& r = proj_rules(p)[0];
  EXPECT_EQ(r.tp, 1);
  EXPECT_EQ(r.min_tokens, 2048);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(*r.measured_speedup, 1.05);  // minimum over the range
  ASSERT_EQ(sum.keys.size(), 1u);
  EXPECT_EQ(sum.keys[0].key, "row/proj tp=1");
  EXPECT_EQ(sum.keys[0].outcomes, "512:0.90- 1024:0.95- 2048:1.05+ 4096:1.10+ 8192:1.20+");
  EXPECT_NE(sum.to_string().find("FP8 for tokens [2048, inf), min speedup 1.050"),
            std::string::npos)
      << sum.to_string();
}

TEST(Merge, PairsSplitSidesByUnpaddedTokens) {
  Report r = make_report("split.json");
  Point b = dense("layernorm_column", "qkv", 1, 1000, 1.3);
  b.fp8.reset();
  b.padded_tokens = 1000;
  Point f = dense("layernorm_column", "qkv", 1, 1000, 1.3);
  f.bf16.reset();
  f.padded_tokens = 1024;  // FP8 ran padded rows; pairing must still use 1000
  r.points = {f, b};
  Point gb = grouped("column_grouped", 1, 4, 3000, 1.2);
  gb.fp8.reset();
  Point gf = grouped("column_grouped", 1, 4, 3000, 1.2);
  gf.bf16.reset();
  gf.padded_tokens = 3072;
  r.points.push_back(gb);
  r.points.push_back(gf);
  MergeSummary sum;
  Policy p = merge_reports({r}, 1.0, &sum);
  ASSERT_EQ(p.num_rules(), 2u);
  const Rule& q = p.dense.at("layernorm_column").at("qkv")[0];
  EXPECT_EQ(q.min_tokens, 1000);
  EXPECT_DOUBLE_EQ(*q.measured_speedup, 1.3);
  const Rule& g = p.grouped.at("column_grouped")[0];
  EXPECT_EQ(g.etp, 1);
  EXPECT_EQ(g.num_gemms, 4);
  EXPECT_EQ(g.min_tokens, 3000);
  EXPECT_TRUE(sum.notes.empty());
}

TEST(Merge, UnpairedSideIsNotedAndUnused) {
  Report r = sweep({{1024, 1.5}});
  Point lone = dense("row", "proj", 1, 2048, 1.5);
  lone.fp8.reset();
  r.points.push_back(lone);
  MergeSummary sum;
  Policy p = merge_reports({r}, 1.0, &sum);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 1024);
  ASSERT_EQ(sum.notes.size(), 1u);
  EXPECT_EQ(sum.notes[0], "r.json: row/proj tp=1 tokens=2048 has only a bf16 timing; not used");
}

TEST(Merge, NonMonotoneWinLoseWinKeepsOnlyTheRangeAtTheLargestSize) {
  MergeSummary sum;
  Policy p = merge_reports({sweep({{512, 1.2}, {1024, 0.9}, {2048, 1.1}})}, 1.0, &sum);
  ASSERT_EQ(proj_rules(p).size(), 1u);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 2048);
  EXPECT_FALSE(proj_rules(p)[0].max_tokens.has_value());
  ASSERT_EQ(sum.keys[0].notes.size(), 1u);
  EXPECT_EQ(sum.keys[0].notes[0],
            "FP8 also wins at [512, 512]; not emitted (as long as, but below, the chosen range)");
}

TEST(Merge, LossAtTheLargestSizeBoundsTheRange) {
  // The original implementation took the first winning size as an open-ended threshold
  // (docs/adaptive.md §5); here the loss at 8192
  // bounds the range instead.
  Policy p = merge_reports({sweep({{512, 0.9}, {1024, 1.1}, {2048, 1.2}, {4096, 1.3},
                                   {8192, 0.95}})});
  ASSERT_EQ(proj_rules(p).size(), 1u);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 1024);
  EXPECT_EQ(*proj_rules(p)[0].max_tokens, 4096);
  EXPECT_EQ(*proj_rules(p)[0].measured_speedup, 1.1);
}

TEST(Merge, FP8WinningOnlyAtSmallSizesGivesMaxTokens) {
  Policy p = merge_reports({sweep({{256, 1.3}, {512, 1.2}, {1024, 1.1}, {2048, 0.9},
                                   {4096, 0.8}})});
  ASSERT_EQ(proj_rules(p).size(), 1u);
  const Rule& r = proj_rules(p)[0];
  EXPECT_EQ(r.min_tokens, 256);
  EXPECT_EQ(*r.max_tokens, 1024);
  EXPECT_EQ(*r.measured_speedup, 1.1);
}

TEST(Merge, LongestRunWinsOverShorterOnes) {
  MergeSummary sum;
  // [256, 1024] (3 sizes) beats [4096] and the open-ended [8192] (1 size each).
  Policy p = merge_reports({sweep({{256, 1.3}, {512, 1.2}, {1024, 1.1}, {2048, 0.9},
                                   {4096, 1.1}, {6144, 0.9}, {8192, 1.1}})},
                           1.0, &sum);
  ASSERT_EQ(proj_rules(p).size(), 1u);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 256);
  EXPECT_EQ(*proj_rules(p)[0].max_tokens, 1024);
  ASSERT_EQ(sum.keys[0].notes.size(), 2u);
  EXPECT_EQ(sum.keys[0].notes[0],
            "FP8 also wins at [4096, 4096]; not emitted (shorter than the chosen range)");
  EXPECT_EQ(sum.keys[0].notes[1],
            "FP8 also wins at [8192, 8192]; not emitted (shorter than the chosen range)");
  // Two sizes at the top beat one at the bottom.
  p = merge_reports({sweep({{256, 1.3}, {512, 0.9}, {1024, 1.1}, {2048, 1.1}})});
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 1024);
  EXPECT_FALSE(proj_rules(p)[0].max_tokens.has_value());
}

TEST(Merge, AllSizesWinGivesSmallestSizeAndNoUpperBound) {
  Policy p = merge_reports({sweep({{128, 1.5}, {256, 1.4}})});
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 128);
  EXPECT_FALSE(proj_rules(p)[0].max_tokens.has_value());
  EXPECT_EQ(*proj_rules(p)[0].measured_speedup, 1.4);
}

TEST(Merge, AllLoseGivesNoRuleButIsSummarised) {
  MergeSummary sum;
  Policy p = merge_reports({sweep({{128, 0.5}, {256, 0.7}})}, 1.0, &sum);
  EXPECT_EQ(p.num_rules(), 0u);
  EXPECT_TRUE(p.dense.empty());
  ASSERT_EQ(sum.keys.size(), 1u);
  EXPECT_FALSE(sum.keys[0].rule.has_value());
  EXPECT_NE(sum.to_string().find("no rule (BF16)"), std::string::npos);
}

TEST(Merge, AWinInsideTheSpreadIsNotAWin) {
  // speedup 2, spreads 0.25 + 0.25 -> spread = 2 * 0.25 = 0.5; 2 - 0.5 = 1.5 exactly, which
  // does not clear threshold 1.5 (strict).
  Report r = make_report("s.json");
  r.points.push_back(dense("row", "proj", 1, 1024, 2.0, 0.25, 0.25));
  MergeSummary sum;
  EXPECT_EQ(merge_reports({r}, 1.5, &sum).num_rules(), 0u);
  EXPECT_EQ(sum.keys[0].outcomes, "1024:2.00~");  // above the threshold, inside the spread
  // A hair less spread and it wins.
  r.points[0] = dense("row", "proj", 1, 1024, 2.0, 0.25, 0.2499);
  EXPECT_EQ(merge_reports({r}, 1.5).num_rules(), 1u);
  // Typical noise: 1.05 with 6% + 6% spread (spread 0.063) loses; with 4% + 4% it wins.
  r.points[0] = dense("row", "proj", 1, 1024, 1.05, 0.06, 0.06);
  EXPECT_EQ(merge_reports({r}, 1.0).num_rules(), 0u);
  r.points[0] = dense("row", "proj", 1, 1024, 1.05, 0.04, 0.04);
  EXPECT_EQ(merge_reports({r}, 1.0).num_rules(), 1u);
}

TEST(Merge, ThresholdIsAppliedAndRecorded) {
  Report r = sweep({{1024, 1.1}, {2048, 1.25}});
  Policy p = merge_reports({r}, 1.2);
  EXPECT_EQ(p.speedup_threshold, 1.2);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 2048);
  EXPECT_EQ(merge_reports({r}, 1.3).num_rules(), 0u);
  EXPECT_ERROR_CONTAINS(merge_reports({r}, 0.0), "threshold must be a finite number > 0");
  EXPECT_ERROR_CONTAINS(merge_reports({r}, NAN), "threshold must be a finite number > 0");
}

TEST(Merge, SeveralReportsMustAllWinAndReportTheMinimumSpeedup) {
  MergeSummary sum;
  Policy p = merge_reports({sweep({{1024, 1.2}, {2048, 1.3}}, "a.json"),
                            sweep({{1024, 1.1}, {2048, 1.4}}, "b.json")},
                           1.0, &sum);
  ASSERT_EQ(proj_rules(p).size(), 1u);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 1024);
  EXPECT_EQ(*proj_rules(p)[0].measured_speedup, 1.1);
  EXPECT_EQ(sum.keys[0].outcomes, "1024:1.10+x2 2048:1.30+x2");
  // Wins everywhere in one report, loses everywhere in the other: no rule.
  p = merge_reports({sweep({{1024, 1.2}, {2048, 1.3}}, "a.json"),
                     sweep({{1024, 0.9}, {2048, 0.95}}, "b.json")});
  EXPECT_EQ(p.num_rules(), 0u);
  // Losing at the largest size in one report turns the other's open range into a bound one.
  p = merge_reports({sweep({{1024, 1.2}, {2048, 1.3}, {4096, 1.3}}, "a.json"),
                     sweep({{1024, 1.2}, {2048, 1.3}, {4096, 0.99}}, "b.json")});
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 1024);
  EXPECT_EQ(*proj_rules(p)[0].max_tokens, 2048);
}

TEST(Merge, ReportsWithDifferentSweepsInterleave) {
  // a: 1024 win, 4096 win; b: 2048 lose -> sorted W L W -> the range at the largest size.
  Policy p = merge_reports({sweep({{1024, 1.2}, {4096, 1.2}}, "a.json"),
                            sweep({{2048, 0.9}}, "b.json")});
  ASSERT_EQ(proj_rules(p).size(), 1u);
  EXPECT_EQ(proj_rules(p)[0].min_tokens, 4096);
}

TEST(Merge, KeysFromSeveralReportsBecomeSortedRules) {
  Report tp1 = make_report("tp1.json");
  tp1.tp = 1;
  tp1.points = {dense("row", "proj", 1, 4096, 1.2), dense("row", "fc2", 1, 4096, 1.3),
                grouped("row_grouped", 1, 16, 512, 1.1)};
  Report tp2 = make_report("tp2.json");
  tp2.tp = 2;
  tp2.points = {dense("row", "proj", 2, 8192, 1.1), grouped("row_grouped", 1, 8, 512, 1.2),
                grouped("column_grouped", 1, 8, 512, 0.8)};
  tp2.points[0].in = 32;  // row kinds divide `in` by tp: a different key, so no conflict
  Policy p = merge_reports({tp2, tp1});
  ASSERT_EQ(proj_rules(p).size(), 2u);
  EXPECT_EQ(proj_rules(p)[0].tp, 1);
  EXPECT_EQ(proj_rules(p)[1].tp, 2);
  EXPECT_EQ(proj_rules(p)[1].min_tokens, 8192);
  EXPECT_EQ(p.dense.at("row").at("fc2")[0].min_tokens, 4096);
  ASSERT_EQ(p.grouped.at("row_grouped").size(), 2u);
  EXPECT_EQ(p.grouped.at("row_grouped")[0].num_gemms, 8);
  EXPECT_EQ(p.grouped.at("row_grouped")[1].num_gemms, 16);
  EXPECT_EQ(p.grouped.count("column_grouped"), 0u);
}

TEST(Merge, MergedPolicySavesLoadsAndDecides) {
  ScratchDir d;
  Policy p = merge_reports({sweep({{256, 1.3}, {512, 1.2}, {1024, 0.9}})});
  save_policy(p, d / "p.json");
  Policy back = load_policy(d / "p.json");
  EXPECT_EQ(policy_to_json(back), policy_to_json(p));
  DecisionQuery q;
  q.kind = "row";
  q.name = "proj";
  q.tp = 1;
  q.tokens = 512;
  EXPECT_TRUE(decide(back, q).use_fp8);
  q.tokens = 1024;
  Decision d2 = decide(back, q);
  EXPECT_FALSE(d2.use_fp8);
  EXPECT_EQ(d2.reason, "tokens 1024 > max_tokens 512");
}

TEST(Merge, InputErrors) {
  EXPECT_ERROR_CONTAINS(merge_reports({}), "no reports given");
  Report a = sweep({{1024, 1.2}}, "a.json");
  Report b = sweep({{2048, 1.2}}, "b.json");
  b.points[0].out = 256;
  EXPECT_ERROR_CONTAINS(merge_reports({a, b}), "row/proj tp=1 has shape in=64 out=256 in b.json "
                                               "but in=64 out=128 in a.json");
  Report bad = sweep({{1024, 1.2}}, "bad.json");
  bad.points[0].tp = 0;
  EXPECT_ERROR_CONTAINS(merge_reports({bad}), "bad.json: points[0].tp: must be an integer >= 1");
}

}  // namespace
}  // namespace mxtrain::policy
