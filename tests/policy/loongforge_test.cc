// tests/policy/loongforge_test.cc — LoongForge's benchmark record lists as merge input:
// pairing at unpadded token counts (dense and per-expert padding), conservative rules on
// non-monotone speedups and a disagreeing repeat run, LoongForge's own merge reproduced,
// `policy explain` text, mixing with mxtrain's reports, and one error per malformed record.
#include "mxtrain/policy/loongforge.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "mxtrain/policy/explain.h"

namespace mxtrain::policy {
namespace {

using io::testing::ScratchDir;
using nlohmann::json;

bool grouped_kind(const std::string& kind) { return kind.find("_grouped") != std::string::npos; }

// One record as LoongForge's benchmark writes it. mbs is taken from the model name's _b{mbs}.
json record(const std::string& model, const std::string& case_name, const std::string& kind,
            const char* ub, const std::string& precision, int64_t num_tokens, double total_ms,
            int64_t in = 64, int64_t out = 128, int num_gemms = 1, int64_t mbs = 1) {
  static const std::map<std::string, std::string> cls{
      {"layernorm_column", "TELayerNormColumnParallelLinear"},
      {"column", "TEColumnParallelLinear"},
      {"row", "TERowParallelLinear"},
      {"column_grouped", "TEColumnParallelGroupedLinear"},
      {"row_grouped", "TERowParallelGroupedLinear"}};
  const bool g = grouped_kind(kind);
  json r;
  r["case_name"] = case_name;
  r["model_name"] = model;
  r["module_name"] = cls.at(kind);
  r["module_kind"] = kind;
  r["precision"] = precision;
  r["input_shape"] = g ? json::array({num_tokens, in}) : json::array({num_tokens / mbs, mbs, in});
  r["output_shape"] = g ? json::array({num_tokens, out}) : json::array({num_tokens / mbs, mbs, out});
  r["num_tokens"] = num_tokens;
  r["forward_ms"] = total_ms / 4;
  r["backward_ms"] = total_ms * 3 / 4;
  r["total_ms"] = total_ms;
  r["tokens_per_second"] = num_tokens / (total_ms / 1000.0);
  const double f = 2.0 * num_tokens * in * out;
  r["forward_flops"] = f;
  r["backward_flops"] = 2 * f;
  r["total_flops"] = 3 * f;
  r["achieved_tflops"] = 3 * f / (total_ms * 1e9);
  r["tp_size"] = 1;
  r["etp_size"] = 1;
  r["num_gemms"] = num_gemms;
  r["ub_name"] = ub ? json(ub) : json(nullptr);
  return r;
}

// A BF16 record (unpadded) and an FP8 record (`padded` rows) whose total_ms ratio is exactly
// `speedup` (fp8 1 ms, bf16 `speedup` ms).
void add_pair(json& list, const std::string& model, const std::string& case_name,
              const std::string& kind, const char* ub, int64_t tokens, int64_t padded,
              double speedup, int num_gemms = 1) {
  list.push_back(record(model, case_name, kind, ub, "bf16", tokens, speedup, 64, 128, num_gemms));
  list.push_back(record(model, case_name, kind, ub, "fp8", padded, 1.0, 64, 128, num_gemms));
}

// row/proj of model "m" over (seq, speedup) with mbs 1 and no padding.
json proj_sweep(const std::vector<std::pair<int64_t, double>>& points) {
  json list = json::array();
  for (auto [seq, s] : points)
    add_pair(list, "m_s" + std::to_string(seq) + "_b1", "llm_self_attention_proj", "row", "proj",
             seq, seq, s);
  return list;
}

LoongForgeReport lf(const json& list, const std::string& source = "lf.json") {
  return parse_loongforge_report(list.dump(2), source);
}

LoadedReport loaded(const json& list, const std::string& source) {
  LoadedReport r;
  r.loongforge = lf(list, source);
  r.report = loongforge_to_report(*r.loongforge);
  return r;
}

Policy merge_lf(const std::vector<json>& lists, MergeSummary* sum = nullptr) {
  std::vector<Report> rs;
  for (size_t i = 0; i < lists.size(); ++i)
    rs.push_back(loongforge_to_report(lf(lists[i], "r" + std::to_string(i) + ".json")));
  return merge_reports(rs, 1.0, sum);
}

const Rule& only_rule(const Policy& p, const std::string& kind, const std::string& name) {
  const auto& rules = p.dense.at(kind).at(name);
  EXPECT_EQ(rules.size(), 1u);
  return rules.at(0);
}

// The padded scenario: dense proj at s424 (FP8 padded to 432) and s1024; grouped fc1 with
// top-k 2 over 4 experts, FP8 splits padded per expert.
json padded_report() {
  json list = json::array();
  add_pair(list, "llm_s424_b1", "llm_self_attention_proj", "row", "proj", 424, 432, 1.2);
  add_pair(list, "llm_s1024_b1", "llm_self_attention_proj", "row", "proj", 1024, 1024, 1.3);
  add_pair(list, "llm_s424_b1", "llm_moe_fc1", "column_grouped", "fc1", 848, 896, 1.1, 4);
  add_pair(list, "llm_s1024_b1", "llm_moe_fc1", "column_grouped", "fc1", 2048, 2080, 1.25, 4);
  return list;
}

TEST(LoongForge, ConversionPairsAtUnpaddedCounts) {
  Report r = loongforge_to_report(lf(padded_report()));
  EXPECT_EQ(r.format, "loongforge");
  EXPECT_EQ(r.recipe, "blockwise");  // no fp8_recipe field: what LoongForge runs
  EXPECT_EQ(r.model, "llm");
  ASSERT_EQ(r.points.size(), 4u);
  const Point& d = r.points[0];
  EXPECT_EQ(d.kind, "row");
  EXPECT_EQ(d.name, "proj");
  EXPECT_EQ(d.tp, 1);
  EXPECT_EQ(d.tokens, 424);
  EXPECT_EQ(d.padded_tokens, 432);
  EXPECT_EQ(d.in, 64);
  EXPECT_EQ(d.out, 128);
  EXPECT_EQ(d.bf16->ms, 1.2);
  EXPECT_EQ(d.fp8->ms, 1.0);
  EXPECT_EQ(d.bf16->spread, 0.0);
  EXPECT_EQ(d.origin, "llm_s424_b1/llm_self_attention_proj");
  const Point& g = r.points[2];
  EXPECT_EQ(g.kind, "column_grouped");
  EXPECT_EQ(g.etp, 1);
  EXPECT_EQ(g.num_gemms, 4);
  EXPECT_EQ(g.top_k, 2);  // 848 routed rows / (424 x 1)
  EXPECT_EQ(g.tokens, 848);
  EXPECT_EQ(g.padded_tokens, 896);
  EXPECT_TRUE(r.notes.empty());
}

TEST(LoongForge, PaddedFp8RecordsStillGiveRulesAtUnpaddedCounts) {
  MergeSummary sum;
  Policy p = merge_lf({padded_report()}, &sum);
  EXPECT_EQ(p.recipe, "blockwise");  // the records name none: LoongForge runs blockwise
  const Rule& proj = only_rule(p, "row", "proj");
  EXPECT_EQ(proj.min_tokens, 424);
  EXPECT_FALSE(proj.max_tokens.has_value());
  EXPECT_EQ(*proj.measured_speedup, 1.2);
  ASSERT_EQ(p.grouped.at("column_grouped").size(), 1u);
  const Rule& g = p.grouped.at("column_grouped")[0];
  EXPECT_EQ(g.num_gemms, 4);
  EXPECT_EQ(g.min_tokens, 848);
  EXPECT_EQ(*g.measured_speedup, 1.1);
  // LoongForge's own merge pairs by num_tokens: the padded s424 proj and every grouped
  // case find no partner.
  LoongForgeMerge own = loongforge_own_merge({lf(padded_report())}, 1.0);
  EXPECT_EQ(own.policy.dense.at("row").at("proj")[0].min_tokens, 1024);
  EXPECT_EQ(*own.policy.dense.at("row").at("proj")[0].measured_speedup, 1.3);
  EXPECT_EQ(own.policy.grouped.count("column_grouped"), 0u);
  EXPECT_EQ(own.paired_tokens.at("row/proj tp=1"), (std::set<int64_t>{1024}));
  EXPECT_EQ(own.paired_tokens.count("column_grouped etp=1 num_gemms=4"), 0u);
}

TEST(LoongForge, NonMonotoneSpeedupsGiveOnlyTheWinningRun) {
  // 8192 loses again: the rule stops at 4096. LoongForge's takes 1024 open-ended.
  json list = proj_sweep({{512, 0.9}, {1024, 1.1}, {2048, 1.2}, {4096, 1.3}, {8192, 0.95}});
  // qkv: a lone win at 256, a loss at 512, then wins: the rule starts at 1024.
  for (auto [seq, s] : std::vector<std::pair<int64_t, double>>{
           {256, 1.2}, {512, 0.9}, {1024, 1.1}, {2048, 1.1}})
    add_pair(list, "m_s" + std::to_string(seq) + "_b1", "llm_self_attention_qkv",
             "layernorm_column", "qkv", seq, seq, s);
  Policy p = merge_lf({list});
  const Rule& proj = only_rule(p, "row", "proj");
  EXPECT_EQ(proj.min_tokens, 1024);
  EXPECT_EQ(*proj.max_tokens, 4096);
  EXPECT_EQ(*proj.measured_speedup, 1.1);
  const Rule& qkv = only_rule(p, "layernorm_column", "qkv");
  EXPECT_EQ(qkv.min_tokens, 1024);
  EXPECT_FALSE(qkv.max_tokens.has_value());
  Policy own = loongforge_own_merge({lf(list)}, 1.0).policy;
  EXPECT_EQ(own.dense.at("row").at("proj")[0].min_tokens, 1024);
  EXPECT_FALSE(own.dense.at("row").at("proj")[0].max_tokens.has_value());
  EXPECT_EQ(own.dense.at("layernorm_column").at("qkv")[0].min_tokens, 256);
}

TEST(LoongForge, DisagreeingRepeatRunMustAlsoWin) {
  json run1 = proj_sweep({{1024, 1.1}, {2048, 1.2}, {4096, 1.3}});
  json run2 = proj_sweep({{1024, 0.97}, {2048, 1.15}, {4096, 1.25}});
  for (const auto& order : {std::vector<json>{run1, run2}, std::vector<json>{run2, run1}}) {
    MergeSummary sum;
    Policy p = merge_lf(order, &sum);
    const Rule& r = only_rule(p, "row", "proj");
    EXPECT_EQ(r.min_tokens, 2048);
    EXPECT_FALSE(r.max_tokens.has_value());
    EXPECT_EQ(*r.measured_speedup, 1.15);
    EXPECT_EQ(sum.keys[0].outcomes, "1024:0.97-x2 2048:1.15+x2 4096:1.25+x2");
  }
  // LoongForge's merge: the later file's records replace the earlier ones, so the result
  // depends on the order the files are given in.
  EXPECT_EQ(loongforge_own_merge({lf(run1), lf(run2)}, 1.0).policy.dense.at("row").at("proj")[0]
                .min_tokens,
            2048);
  EXPECT_EQ(loongforge_own_merge({lf(run2), lf(run1)}, 1.0).policy.dense.at("row").at("proj")[0]
                .min_tokens,
            1024);
}

TEST(LoongForge, SeveralModelsOnOneKeyMustAllWin) {
  // A VL report: the vision encoder's and the LLM's qkv share the key layernorm_column/qkv
  // tp=1 at different shapes; at 1024 the LLM's loses, so 1024 is no win.
  json list = json::array();
  for (auto [model, s1024, s2048] :
       std::vector<std::tuple<std::string, double, double>>{{"vit", 1.3, 1.4}, {"llm", 0.9, 1.2}})
    for (auto [seq, s] : std::vector<std::pair<int64_t, double>>{{1024, s1024}, {2048, s2048}}) {
      const std::string m = model + "_s" + std::to_string(seq) + "_b1";
      const int64_t width = model == "vit" ? 96 : 64;
      list.push_back(record(m, model + "_qkv", "layernorm_column", "qkv", "bf16", seq, s, width));
      list.push_back(record(m, model + "_qkv", "layernorm_column", "qkv", "fp8", seq, 1.0, width));
    }
  MergeSummary sum;
  Policy p = merge_lf({list}, &sum);
  EXPECT_EQ(only_rule(p, "layernorm_column", "qkv").min_tokens, 2048);
  EXPECT_EQ(sum.keys[0].outcomes, "1024:0.90-x2 2048:1.20+x2");
  EXPECT_EQ(loongforge_to_report(lf(list)).model, "vit, llm");
}

TEST(LoongForge, OneSidedCaseIsNotedAndUnused) {
  json list = proj_sweep({{1024, 1.2}});
  list.push_back(record("m_s2048_b1", "llm_self_attention_proj", "row", "proj", "fp8", 2048, 1.0));
  MergeSummary sum;
  Policy p = merge_lf({list}, &sum);
  EXPECT_EQ(only_rule(p, "row", "proj").min_tokens, 1024);
  ASSERT_EQ(sum.notes.size(), 1u);
  EXPECT_EQ(sum.notes[0],
            "r0.json: m_s2048_b1/llm_self_attention_proj has only a fp8 record ([2]); not used");
}

TEST(LoongForge, MixedWithMxtrainReportsFromFiles) {
  ScratchDir d;
  {
    std::ofstream(d / "lf.json") << proj_sweep({{1024, 0.9}, {2048, 1.2}}).dump(2);
    json own = {{"version", 1},
                {"machine", {{"cpu", "c"}, {"isa", "scalar"}, {"threads", 1}, {"hostname", "h"}}},
                {"recipe", "blockwise"}, {"tp", 1}, {"ep", 1}, {"etp", 1},
                {"model", "m.yaml"},
                {"points", json::array({{{"kind", "row"}, {"name", "fc2"}, {"tp", 1},
                                         {"in", 64}, {"out", 32}, {"tokens", 512},
                                         {"bf16_ms", 1.5}, {"bf16_spread", 0.0},
                                         {"fp8_ms", 1.0}, {"fp8_spread", 0.0}, {"speedup", 1.5},
                                         {"spread", 0.0}}})}};
    std::ofstream(d / "own.json") << own.dump();
  }
  LoadedReport a = load_any_report(d / "lf.json");
  LoadedReport b = load_any_report(d / "own.json");
  EXPECT_TRUE(a.loongforge.has_value());
  EXPECT_FALSE(b.loongforge.has_value());
  Policy p = merge_reports({a.report, b.report});
  EXPECT_EQ(p.recipe, "blockwise");
  EXPECT_EQ(only_rule(p, "row", "proj").min_tokens, 2048);
  EXPECT_EQ(only_rule(p, "row", "fc2").min_tokens, 512);
  // The policy file is the existing schema: it saves and loads unchanged.
  save_policy(p, d / "p.json");
  EXPECT_EQ(policy_to_json(load_policy(d / "p.json")), policy_to_json(p));
  // An mxfp8 report merges with LoongForge's blockwise one as reports of two recipes: each
  // key is measured by one of them, so each keeps that recipe's rule, naming it.
  b.report.recipe = "mxfp8";
  Policy m = merge_reports({a.report, b.report});
  EXPECT_EQ(m.recipe, "");
  EXPECT_EQ(m.measured_recipes, (std::vector<std::string>{"mxfp8", "blockwise"}));
  EXPECT_EQ(only_rule(m, "row", "proj").recipe, "blockwise");
  EXPECT_EQ(only_rule(m, "row", "proj").min_tokens, 2048);
  EXPECT_EQ(only_rule(m, "row", "fc2").recipe, "mxfp8");
  EXPECT_EQ(only_rule(m, "row", "fc2").min_tokens, 512);
  // Explained per recipe: LoongForge's own merge is compared within the blockwise section.
  const std::string text = explain_reports({a, b}, 1.0);
  EXPECT_NE(text.find("\nrow/proj tp=1\n  recipes measured: blockwise\n  blockwise:\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n    LoongForge's merge: FP8 for tokens [2048, inf); the same decision at "
                      "every measured size\n  rule: blockwise for tokens [2048, inf)\n  recipe: "
                      "blockwise, the only recipe measured at this key\n"),
            std::string::npos)
      << text;
}

TEST(LoongForge, Fp8RecipeFieldNamesTheRecipe) {
  auto recipe_of = [](const char* te) {
    json l = proj_sweep({{1024, 1.2}, {2048, 1.3}});
    for (json& x : l) x["fp8_recipe"] = te;  // bf16 records carry the run's setting too
    return loongforge_to_report(lf(l)).recipe;
  };
  EXPECT_EQ(recipe_of("mxfp8"), "mxfp8");
  EXPECT_EQ(recipe_of("blockwise"), "blockwise");
  EXPECT_EQ(recipe_of("tensorwise"), "fp8-current");
  EXPECT_EQ(recipe_of("current"), "fp8-current");
  EXPECT_EQ(recipe_of("delayed"), "fp8-delayed");
  EXPECT_EQ(loongforge_recipe_name("mxfp8"), "mxfp8");
  EXPECT_ERROR_CONTAINS(loongforge_recipe_name("fp4"), "unknown fp8_recipe \"fp4\" (known: ");
  // Only the fp8 records' field decides; a bf16 record's is still checked.
  json l = proj_sweep({{1024, 1.2}});
  l[1]["fp8_recipe"] = "mxfp8";
  EXPECT_EQ(loongforge_to_report(lf(l)).recipe, "mxfp8");
  // The recipe reaches the merged policy and its file.
  Policy p = merge_reports({loongforge_to_report(lf(l))});
  EXPECT_EQ(p.recipe, "mxfp8");
  EXPECT_NE(policy_to_json(p).find("\n  \"recipe\": \"mxfp8\",\n"), std::string::npos)
      << policy_to_json(p);
}

TEST(LoongForge, Fp8RecipeErrorsNameTheRecordAndTheName) {
  json l = proj_sweep({{1024, 1.2}});
  l[1]["fp8_recipe"] = "nvfp4";
  EXPECT_ERROR_CONTAINS(lf(l, "bad.json"),
            "bad.json: [1].fp8_recipe: unknown fp8_recipe \"nvfp4\" (known: blockwise, mxfp8, "
            "tensorwise, current, delayed)");
  l[1].erase("fp8_recipe");
  l[0]["fp8_recipe"] = "nvfp4";  // a bf16 record's value is checked too
  EXPECT_ERROR_CONTAINS(lf(l, "bad.json"), "bad.json: [0].fp8_recipe: unknown fp8_recipe");
  l[0]["fp8_recipe"] = 3;
  EXPECT_ERROR_CONTAINS(lf(l, "bad.json"), "bad.json: [0].fp8_recipe: must be a string");
  // Two fp8 records of one file naming different recipes (absent counts as blockwise).
  json two = proj_sweep({{1024, 1.2}, {2048, 1.3}});
  two[1]["fp8_recipe"] = "mxfp8";
  EXPECT_ERROR_CONTAINS(loongforge_to_report(lf(two, "two.json")),
            "two.json: [3]: fp8 recipe blockwise differs from mxfp8 of [1]; a report holds one "
            "FP8 recipe");
}

TEST(LoongForge, ExplainListsPointsRangeReasonAndLoongForgeCost) {
  json list = proj_sweep({{512, 0.9}, {1024, 1.1}, {2048, 1.2}, {4096, 1.3}, {8192, 0.95}});
  add_pair(list, "m_s424_b1", "llm_self_attention_proj", "row", "proj", 424, 432, 0.8);
  const std::string text = explain_reports({loaded(list, "a.json")}, 1.0);
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing line:\n" << line << "\nin:\n"
                                                         << text;
  };
  has("explain: 1 report, speedup threshold 1");
  has("  a.json: LoongForge records, 12 records, 6 paired cases");
  has("rules: merged from these reports");
  has("row/proj tp=1");
  has("       424      432     0.8000     1.0000   0.800  0.000 -  a.json "
      "m_s424_b1/llm_self_attention_proj");
  has("      4096     4096     1.3000     1.0000   1.300  0.000 +  a.json "
      "m_s4096_b1/llm_self_attention_proj");
  has("  rule: FP8 for tokens [1024, 4096]");
  has("  why: FP8 wins in every report at each of the 3 sizes 1024..4096, the longest such run; "
      "below it 512 loses (0.900x in a.json m_s512_b1/llm_self_attention_proj); above it 8192 "
      "loses (0.950x in a.json m_s8192_b1/llm_self_attention_proj), so max_tokens = 4096");
  has("  LoongForge's merge: FP8 for tokens [1024, inf); differs at 1 size:");
  has("    8192: LoongForge FP8, here BF16; FP8 at 0.950x (a.json "
      "m_s8192_b1/llm_self_attention_proj): FP8 changes the time by +5.3% (0.9500 -> 1.0000 ms)");
  has("    it paired no BF16/FP8 records at 424 (fp8 ran 432 rows) (FP8 num_tokens padded)");
}

TEST(LoongForge, ExplainShowsLoongForgeForgoingPaddedWins) {
  const std::string text = explain_reports({loaded(padded_report(), "a.json")}, 1.0);
  const std::string expect =
      "column_grouped etp=1 num_gemms=4\n"
      "  measured (tokens, fp8 rows, bf16 ms, fp8 ms, speedup, spread, + win / - not):\n"
      "         848      896     1.1000     1.0000   1.100  0.000 +  a.json llm_s424_b1/llm_moe_fc1\n"
      "        2048     2080     1.2500     1.0000   1.250  0.000 +  a.json llm_s1024_b1/llm_moe_fc1\n"
      "  rule: FP8 for tokens [848, inf)\n"
      "  why: FP8 wins in every report at each of the 2 sizes 848..2048, the longest such run; "
      "it starts at the smallest measured size (nothing below is extrapolated); it reaches the "
      "largest measured size, so there is no upper bound\n"
      "  LoongForge's merge: no rule (BF16); differs at 2 sizes:\n"
      "    848: LoongForge BF16, here FP8; FP8 at 1.100x (a.json llm_s424_b1/llm_moe_fc1): BF16 "
      "changes the time by +10.0% (1.0000 -> 1.1000 ms)\n"
      "    2048: LoongForge BF16, here FP8; FP8 at 1.250x (a.json llm_s1024_b1/llm_moe_fc1): "
      "BF16 changes the time by +25.0% (1.0000 -> 1.2500 ms)\n"
      "    it paired no BF16/FP8 records at 848 (fp8 ran 896 rows), 2048 (fp8 ran 2080 rows) "
      "(FP8 num_tokens padded)\n";
  EXPECT_NE(text.find(expect), std::string::npos) << text;
}

TEST(LoongForge, ExplainAGivenPolicy) {
  // Both sizes lose in a.json, so a merge gives no rule; the given policy says FP8 from 4096.
  json run1 = proj_sweep({{2048, 0.95}, {4096, 0.9}});
  json run2 = proj_sweep({{2048, 1.1}, {4096, 1.2}});
  Policy given;
  Rule r;
  r.tp = 1;
  r.min_tokens = 4096;
  given.dense["row"]["proj"].push_back(r);
  given.dense["row"]["fc2"].push_back(r);  // a key these reports did not measure
  const std::string text =
      explain_reports({loaded(run2, "b.json"), loaded(run1, "a.json")}, 1.0, &given, "p.json");
  for (const std::string line :
       {"rules: from p.json", "  rule: FP8 for tokens [4096, inf)",
        "  why: FP8 wins at no measured size in every report",
        "  note: p.json differs from the merge of these reports, which gives no rule (BF16)",
        "  LoongForge's merge: no rule (BF16); differs at 1 size:",
        "    4096: LoongForge BF16, here FP8; FP8 at 0.900x (a.json "
        "m_s4096_b1/llm_self_attention_proj, worst of 2): BF16 changes the time by -10.0% "
        "(1.0000 -> 0.9000 ms)",
        "row/fc2 tp=1",
        "  rule: FP8 for tokens [4096, inf) in p.json; no paired measurement of this key in "
        "these reports"})
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\nin:\n"
                                                         << text;
}

TEST(LoongForge, MalformedRecordsNameFileAndIndex) {
  auto err = [](json list) {
    return io::testing::error_of([&] { loongforge_to_report(lf(list, "bad.json")); });
  };
  auto contains = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "want \"" << part << "\" in: " << msg;
  };
  json good = proj_sweep({{1024, 1.2}});
  json l = good;
  l[1].erase("total_ms");
  contains(err(l), "bad.json: [1]: missing required field \"total_ms\"");
  l = good;
  l[0]["latency"] = 3;
  contains(err(l), "bad.json: [0].latency: unknown field");
  l = good;
  l[1]["precision"] = "fp16";
  contains(err(l), "bad.json: [1].precision: must be \"bf16\" or \"fp8\", got \"fp16\"");
  l = good;
  l[0]["module_kind"] = "attention";
  contains(err(l), "bad.json: [0].module_kind: unknown module_kind \"attention\"");
  l = good;
  l[1]["total_ms"] = 0;
  contains(err(l), "bad.json: [1].total_ms: must be a finite number > 0");
  l = good;
  l[0]["model_name"] = "m";
  l[1]["model_name"] = "m";
  contains(err(l), "bad.json: [0].model_name: \"m\" does not end in _s{seq}_b{mbs}");
  l = good;
  l[0]["ub_name"] = nullptr;
  contains(err(l), "bad.json: [0].ub_name: a row record needs its module name");
  l = good;
  l[1]["input_shape"] = json::array();
  contains(err(l), "bad.json: [1].input_shape: must be a non-empty list of sizes");
  l = good;
  l.push_back(l[1]);
  contains(err(l), "bad.json: [2]: second fp8 record of m_s1024_b1/llm_self_attention_proj "
                   "(first at [1])");
  l = good;
  l[0]["num_tokens"] = 1000;
  contains(err(l), "bad.json: [0].num_tokens: 1000 disagrees with seq x mbs = 1024");
  l = good;
  l[1]["num_tokens"] = 1000;
  contains(err(l), "bad.json: [1].num_tokens: 1000 is less than the unpadded count 1024");
  l = good;
  l[1]["tp_size"] = 2;
  contains(err(l), "bad.json: [1]: m_s1024_b1/llm_self_attention_proj: the bf16 and fp8 "
                   "records disagree on tp_size (bf16 [0], fp8 [1])");
  json g = json::array();
  add_pair(g, "llm_s424_b1", "llm_moe_fc1", "column_grouped", "fc1", 1000, 1024, 1.1, 4);
  contains(err(g), "bad.json: [0].num_tokens: 1000 is not a multiple of seq x mbs = 424");
  contains(io::testing::error_of([] { lf(json::array({1}), "x.json"); }),
           "x.json: [0]: must be an object");
  contains(io::testing::error_of([] { parse_loongforge_report("{\"a\": 1}", "o.json"); }),
           "o.json: a LoongForge report is a JSON list of records");
  contains(io::testing::error_of([] { parse_loongforge_report("[", "t.json"); }),
           "t.json: not valid JSON");
}

TEST(LoongForge, DetectsTheFormatFromTheFirstCharacter) {
  EXPECT_TRUE(is_loongforge_text("  \n[{}]"));
  EXPECT_FALSE(is_loongforge_text("{\"version\": 1}"));
  EXPECT_FALSE(is_loongforge_text(""));
}

}  // namespace
}  // namespace mxtrain::policy
