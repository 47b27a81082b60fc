// tests/policy/recipe_rules_test.cc — recipes per rule: the rule's `recipe` and the policy's
// `measured_recipes` in the file (canonical form, byte-stable round trip, errors naming the
// file and JSON path), decide() returning the rule's recipe, and the merge of reports of
// several recipes (per key the recipe whose rule has the largest measured speedup, ties to
// the registry's order), its summary and `policy explain`.
#include <functional>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/policy/explain.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::policy {
namespace {

using io::testing::ScratchDir;
using nlohmann::json;

// --- the file --------------------------------------------------------------------------

// Hand-written, keys out of canonical order and measured_recipes out of registry order.
const char* kRecipePolicy = R"({"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8",
  "measured_recipes": ["nvfp4", "mxfp8", "mxfp4"],
  "rules": {
    "row": {"proj": [{"measured_speedup": 1.21, "recipe": "nvfp4", "min_tokens": 0,
                      "max_tokens": 1023, "tp": 1},
                     {"tp": 1, "min_tokens": 1024, "measured_speedup": 1.05}],
            "fc2": [{"tp": 1, "min_tokens": 512, "recipe": "mxfp4"}]},
    "row_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 1024, "recipe": "nvfp4"}]}})";

const char* kRecipeCanonical = R"({
  "version": 1,
  "speedup_threshold": 1.0,
  "recipe": "mxfp8",
  "measured_recipes": ["mxfp8", "nvfp4", "mxfp4"],
  "rules": {
    "row": {
      "fc2": [
        {"tp": 1, "min_tokens": 512, "recipe": "mxfp4"}
      ],
      "proj": [
        {"tp": 1, "min_tokens": 0, "max_tokens": 1023, "recipe": "nvfp4", "measured_speedup": 1.21},
        {"tp": 1, "min_tokens": 1024, "measured_speedup": 1.05}
      ]
    },
    "row_grouped": [
      {"etp": 1, "num_gemms": 8, "min_tokens": 1024, "recipe": "nvfp4"}
    ]
  }
}
)";

TEST(PolicyRecipes, RuleRecipesReadIntoTheStructAndWriteInCanonicalOrder) {
  const Policy p = parse_policy(kRecipePolicy, "r.json");
  EXPECT_EQ(p.recipe, "mxfp8");
  // Kept in the registry's order (mxfp8, ..., nvfp4, mxfp4), whatever the file's order.
  EXPECT_EQ(p.measured_recipes, (std::vector<std::string>{"mxfp8", "nvfp4", "mxfp4"}));
  const auto& proj = p.dense.at("row").at("proj");
  EXPECT_EQ(proj[0].recipe, "nvfp4");
  EXPECT_EQ(proj[1].recipe, "");  // names none: the policy's
  EXPECT_EQ(rule_recipe(p, proj[0]), "nvfp4");
  EXPECT_EQ(rule_recipe(p, proj[1]), "mxfp8");
  EXPECT_EQ(p.grouped.at("row_grouped")[0].recipe, "nvfp4");
  EXPECT_EQ(p.num_rules(), 4u);
  EXPECT_EQ(p.num_rules_naming_no_recipe(), 1u);
  EXPECT_TRUE(p.names_recipes_per_rule());
  EXPECT_EQ(policy_to_json(p), kRecipeCanonical);
  EXPECT_EQ(policy_to_json(parse_policy(kRecipeCanonical, "c.json")), kRecipeCanonical);
}

TEST(PolicyRecipes, SaveLoadSaveIsByteStable) {
  ScratchDir d;
  Policy p = parse_policy(kRecipePolicy, "r.json");
  Rule r;
  r.etp = 2;
  r.num_gemms = 4;
  r.min_tokens = 64;
  r.recipe = "mxfp8";
  p.grouped["column_grouped"].push_back(r);
  p.measured_recipes = {"mxfp4", "mxfp8", "nvfp4"};  // a struct may hold any order
  save_policy(p, d / "p.json");
  const std::string first = io::read_text_file(d / "p.json");
  EXPECT_NE(first.find("\n  \"measured_recipes\": [\"mxfp8\", \"nvfp4\", \"mxfp4\"],\n"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("{\"etp\": 2, \"num_gemms\": 4, \"min_tokens\": 64, \"recipe\": "
                       "\"mxfp8\"}"),
            std::string::npos)
      << first;
  const Policy back = load_policy(d / "p.json");
  EXPECT_EQ(back.grouped.at("column_grouped")[0].recipe, "mxfp8");
  save_policy(back, d / "p2.json");
  EXPECT_EQ(io::read_text_file(d / "p2.json"), first);
}

// A file without the new fields is what it was: no rule names a recipe, recipes() is the
// policy's one recipe, and its canonical text carries neither field.
TEST(PolicyRecipes, OlderFilesReadAndWriteAsBefore) {
  const char* old = R"({"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8-32x32",
    "rules": {"row": {"proj": [{"tp": 1, "min_tokens": 1024, "measured_speedup": 1.05}]}}})";
  const Policy p = parse_policy(old, "old.json");
  EXPECT_FALSE(p.names_recipes_per_rule());
  EXPECT_EQ(p.num_rules_naming_no_recipe(), 1u);
  EXPECT_EQ(p.recipes(), std::vector<std::string>{"mxfp8-32x32"});
  EXPECT_EQ(policy_to_json(p), "{\n  \"version\": 1,\n  \"speedup_threshold\": 1.0,\n"
                               "  \"recipe\": \"mxfp8-32x32\",\n  \"rules\": {\n"
                               "    \"row\": {\n      \"proj\": [\n"
                               "        {\"tp\": 1, \"min_tokens\": 1024, "
                               "\"measured_speedup\": 1.05}\n      ]\n    }\n  }\n}\n");
  EXPECT_TRUE(Policy{}.recipes().empty());
  // Without measured_recipes, recipes() is `recipe` and every rule's, in registry order.
  Policy q = p;
  q.dense["row"]["proj"][0].recipe = "mxfp4";
  q.dense["row"]["fc2"].push_back(q.dense["row"]["proj"][0]);
  q.dense["row"]["fc2"][0].recipe = "mxfp8";
  EXPECT_TRUE(q.names_recipes_per_rule());
  EXPECT_EQ(q.recipes(), (std::vector<std::string>{"mxfp8", "mxfp8-32x32", "mxfp4"}));
}

struct BadPolicy {
  const char* what;
  std::function<void(json&)> edit;
  const char* expect;
};

TEST(PolicyRecipes, MalformedRecipeFieldsNameTheFileAndPath) {
  const json base = json::parse(R"({"version": 1, "speedup_threshold": 1.0,
    "recipe": "mxfp8", "measured_recipes": ["mxfp8", "nvfp4"],
    "rules": {"row": {"proj": [{"tp": 1, "min_tokens": 1024, "recipe": "nvfp4"}],
                      "fc2": [{"tp": 1, "min_tokens": 0}]},
              "column_grouped": [{"etp": 1, "num_gemms": 4, "min_tokens": 0,
                                  "recipe": "mxfp8"}]}})");
  ASSERT_NO_THROW(parse_policy(base.dump(), "ok.json"));
  auto proj = [](json& j) -> json& { return j["rules"]["row"]["proj"][0]; };
  const std::vector<BadPolicy> cases = {
      {"unknown rule recipe", [&](json& j) { proj(j)["recipe"] = "nvfp5"; },
       "rules.row.proj[0].recipe: unknown recipe \"nvfp5\" (quantized recipes: mxfp8, "},
      {"bf16 rule recipe", [&](json& j) { proj(j)["recipe"] = "bf16"; },
       "rules.row.proj[0].recipe: bf16 is not a quantized recipe (quantized recipes: mxfp8, "},
      {"rule recipe type", [&](json& j) { proj(j)["recipe"] = 4; },
       "rules.row.proj[0].recipe: must be a string, got number 4"},
      {"empty rule recipe", [&](json& j) { proj(j)["recipe"] = ""; },
       "rules.row.proj[0].recipe: must not be empty"},
      {"grouped rule recipe",
       [](json& j) { j["rules"]["column_grouped"][0]["recipe"] = "fp8"; },
       "rules.column_grouped[0].recipe: unknown recipe \"fp8\""},
      {"rule recipe not measured",
       [](json& j) { j["measured_recipes"] = {"mxfp8", "mxfp4"}; },
       "rules.row.proj[0].recipe: nvfp4 is not among measured_recipes (mxfp8, mxfp4)"},
      {"policy recipe not measured", [](json& j) { j["recipe"] = "blockwise"; },
       "recipe: blockwise is not among measured_recipes (mxfp8, nvfp4)"},
      {"rule naming none, policy naming none",
       [](json& j) { j.erase("recipe"); },
       "rules.row.fc2[0]: names no recipe, and the policy has no \"recipe\" for such rules (its "
       "measured_recipes lists mxfp8, nvfp4); give the rule a \"recipe\""},
      {"measured_recipes not a list", [](json& j) { j["measured_recipes"] = "mxfp8"; },
       "measured_recipes: must be a non-empty array of recipe names, got string \"mxfp8\""},
      {"measured_recipes empty", [](json& j) { j["measured_recipes"] = json::array(); },
       "measured_recipes: must be a non-empty array of recipe names, got "},
      {"measured_recipes element type", [](json& j) { j["measured_recipes"][1] = 1; },
       "measured_recipes[1]: must be a string, got number 1"},
      {"measured_recipes unknown", [](json& j) { j["measured_recipes"][1] = "fp3"; },
       "measured_recipes[1]: unknown recipe \"fp3\" (quantized recipes: mxfp8, "},
      {"measured_recipes bf16", [](json& j) { j["measured_recipes"][0] = "bf16"; },
       "measured_recipes[0]: bf16 is not a quantized recipe"},
      {"measured_recipes twice", [](json& j) { j["measured_recipes"].push_back("mxfp8"); },
       "measured_recipes[2]: \"mxfp8\" is listed twice"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.edit(j);
    SCOPED_TRACE(c.what);
    EXPECT_ERROR_CONTAINS(parse_policy(j.dump(), "bad.json"), std::string("bad.json: ") + c.expect);
  }
  // The struct meets the same rules on save (validate_policy parses its text).
  Policy p = parse_policy(base.dump(), "ok.json");
  p.dense["row"]["proj"][0].recipe = "mxfp9";
  EXPECT_ERROR_CONTAINS(validate_policy(p, "mem"),
                        "mem: rules.row.proj[0].recipe: unknown recipe \"mxfp9\"");
}

TEST(PolicyRecipes, DescribeNamesEachRulesRecipe) {
  const std::string s = describe_policy(parse_policy(kRecipePolicy, "r.json"));
  EXPECT_NE(s.find("recipe mxfp8, measured recipes mxfp8, nvfp4, mxfp4, 4 rules\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("tokens [0, 1023]              speedup 1.210  recipe nvfp4\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("tokens [1024, inf)            speedup 1.050  recipe mxfp8 (the policy's)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("tokens [512, inf)             speedup -      recipe mxfp4\n"),
            std::string::npos)
      << s;
}

// --- decisions -------------------------------------------------------------------------

DecisionQuery dense_q(const char* name, int64_t tokens) {
  DecisionQuery q;
  q.kind = "row";
  q.name = name;
  q.tokens = tokens;
  return q;
}

TEST(PolicyRecipes, DecideReturnsTheRulesRecipe) {
  const Policy p = parse_policy(kRecipePolicy, "r.json");
  struct Case {
    const char* what;
    DecisionQuery q;
    bool quantized;
    const char* recipe;
    bool named;
    const char* reason;
  };
  DecisionQuery expert = dense_q("fc2", 512);
  expert.is_expert = true;
  expert.num_gemms = 8;
  expert.top_k = 2;
  const std::vector<Case> cases = {
      {"a rule naming nvfp4", dense_q("proj", 512), true, "nvfp4", true,
       "tokens 512 in [0, 1023] (recipe nvfp4, measured speedup 1.210)"},
      {"the next rule of the key names none: the policy's", dense_q("proj", 4096), true,
       "mxfp8", false, "tokens 4096 >= min_tokens 1024 (measured speedup 1.050)"},
      {"a rule naming mxfp4, no speedup", dense_q("fc2", 512), true, "mxfp4", true,
       "tokens 512 >= min_tokens 512 (recipe mxfp4)"},
      {"below every rule", dense_q("fc2", 100), false, "", false,
       "tokens 100 < min_tokens 512"},
      {"expert, top-k applied", expert, true, "nvfp4", true,
       "tokens 1024 (512 x top-k 2) >= min_tokens 1024 (recipe nvfp4)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const Decision d = decide(p, c.q);
    EXPECT_EQ(d.use_fp8, c.quantized);
    EXPECT_EQ(d.recipe, c.recipe);
    EXPECT_EQ(d.rule_names_recipe, c.named);
    EXPECT_EQ(d.reason, c.reason);
  }
  // A rule naming none in a policy that records no recipe: the decision has no recipe (the
  // trainer then runs its own).
  Policy bare = parse_policy(kRecipePolicy, "r.json");
  bare.recipe.clear();
  bare.measured_recipes.clear();
  const Decision d = decide(bare, dense_q("proj", 4096));
  EXPECT_TRUE(d.use_fp8);
  EXPECT_EQ(d.recipe, "");
  EXPECT_FALSE(d.rule_names_recipe);
}

// --- merge of several recipes -----------------------------------------------------------

Report make_report(const std::string& source, const std::string& recipe) {
  Report r;
  r.source = source;
  r.machine = {"cpu", "scalar", 1, "h"};
  r.recipe = recipe;
  r.model = "m.yaml";
  return r;
}

// Dense points with speedup exactly s at each size (bf16_ms = s, fp8_ms = 1, no spread).
void add(Report& r, const char* kind, const char* name,
         const std::vector<std::pair<int64_t, double>>& sizes) {
  for (auto [t, s] : sizes) {
    Point p;
    p.kind = kind;
    p.name = name;
    p.tp = 1;
    p.in = 64;
    p.out = 128;
    p.tokens = t;
    p.bf16 = Timing{s, 0};
    p.fp8 = Timing{1.0, 0};
    r.points.push_back(p);
  }
}

void add_grouped(Report& r, int64_t tokens, double s) {
  Point p;
  p.kind = "column_grouped";
  p.name = "fc1";
  p.etp = 1;
  p.num_gemms = 4;
  p.top_k = 2;
  p.in = 64;
  p.out = 96;
  p.tokens = tokens;
  p.bf16 = Timing{s, 0};
  p.fp8 = Timing{1.0, 0};
  r.points.push_back(p);
}

// Two recipes on one model, each key built for a known outcome:
//   row/proj: mxfp8 [1024, inf) at 1.10, nvfp4 [2048, inf) at 1.30 -> nvfp4 (larger);
//   row/fc2: both 1.20 (mxfp8 [512, inf), nvfp4 [1024, inf)) -> mxfp8 (tie, registry order);
//   layernorm_column/qkv: only nvfp4 wins ([1024, 1024] at 1.05) -> nvfp4;
//   layernorm_column/fc1: neither wins -> no rule;
//   column_grouped etp=1 num_gemms=4: measured in mxfp8 only -> mxfp8.
std::vector<Report> two_recipes() {
  Report a = make_report("a.json", "mxfp8");
  add(a, "row", "proj", {{1024, 1.10}, {2048, 1.20}, {4096, 1.25}});
  add(a, "row", "fc2", {{512, 1.2}, {1024, 1.25}});
  add(a, "layernorm_column", "qkv", {{1024, 0.9}, {2048, 0.95}});
  add(a, "layernorm_column", "fc1", {{1024, 0.8}, {2048, 0.9}});
  add_grouped(a, 848, 1.3);
  Report b = make_report("b.json", "nvfp4");
  add(b, "row", "proj", {{1024, 0.9}, {2048, 1.3}, {4096, 1.4}});
  add(b, "row", "fc2", {{512, 0.8}, {1024, 1.2}});
  add(b, "layernorm_column", "qkv", {{1024, 1.05}, {2048, 0.9}});
  add(b, "layernorm_column", "fc1", {{1024, 0.95}, {2048, 0.99}});
  return {a, b};
}

const char* kTwoRecipePolicy = R"({
  "version": 1,
  "speedup_threshold": 1.0,
  "measured_recipes": ["mxfp8", "nvfp4"],
  "rules": {
    "layernorm_column": {
      "qkv": [
        {"tp": 1, "min_tokens": 1024, "max_tokens": 1024, "recipe": "nvfp4", "measured_speedup": 1.05}
      ]
    },
    "row": {
      "fc2": [
        {"tp": 1, "min_tokens": 512, "recipe": "mxfp8", "measured_speedup": 1.2}
      ],
      "proj": [
        {"tp": 1, "min_tokens": 2048, "recipe": "nvfp4", "measured_speedup": 1.3}
      ]
    },
    "column_grouped": [
      {"etp": 1, "num_gemms": 4, "min_tokens": 848, "recipe": "mxfp8", "measured_speedup": 1.3}
    ]
  }
}
)";

TEST(MergeRecipes, EachKeyKeepsTheRecipeWhoseRuleHasTheLargestSpeedup) {
  MergeSummary sum;
  const std::vector<Report> rs = two_recipes();
  const Policy p = merge_reports(rs, 1.0, &sum);
  EXPECT_EQ(policy_to_json(p), kTwoRecipePolicy);
  // The report order does not matter: recipes are taken in the registry's order.
  EXPECT_EQ(policy_to_json(merge_reports({rs[1], rs[0]})), kTwoRecipePolicy);
  EXPECT_EQ(sum.recipes, (std::vector<std::string>{"mxfp8", "nvfp4"}));
  ASSERT_EQ(sum.keys.size(), 5u);
  std::map<std::string, const KeySummary*> by_key;
  for (const auto& k : sum.keys) by_key[k.key] = &k;
  EXPECT_EQ(by_key.at("row/proj tp=1")->choice,
            "nvfp4, the largest measured speedup (mxfp8 1.1000 over [1024, inf); nvfp4 1.3000 "
            "over [2048, inf))");
  EXPECT_EQ(by_key.at("row/fc2 tp=1")->choice,
            "mxfp8, the earliest in the registry's order of those tied at the largest measured "
            "speedup (mxfp8 1.2000 over [512, inf); nvfp4 1.2000 over [1024, inf))");
  EXPECT_EQ(by_key.at("layernorm_column/qkv tp=1")->choice,
            "nvfp4, the only recipe with a rule (mxfp8: no rule; nvfp4 1.0500 over [1024, 1024])");
  EXPECT_EQ(by_key.at("layernorm_column/fc1 tp=1")->choice,
            "no rule: mxfp8 and nvfp4 win at no measured size in every report");
  EXPECT_FALSE(by_key.at("layernorm_column/fc1 tp=1")->rule.has_value());
  EXPECT_EQ(by_key.at("column_grouped etp=1 num_gemms=4")->choice,
            "mxfp8, the only recipe measured at this key");
  // Each key's per-recipe merge is the one-recipe merge of that recipe's reports.
  const KeySummary& proj = *by_key.at("row/proj tp=1");
  ASSERT_EQ(proj.per_recipe.size(), 2u);
  EXPECT_EQ(proj.per_recipe[0].recipe, "mxfp8");
  EXPECT_EQ(proj.per_recipe[0].outcomes, "1024:1.10+ 2048:1.20+ 4096:1.25+");
  EXPECT_EQ(proj.per_recipe[1].outcomes, "1024:0.90- 2048:1.30+ 4096:1.40+");
  EXPECT_EQ(proj.per_recipe[1].measurements[0].recipe, "nvfp4");
  EXPECT_EQ(proj.recipe, "nvfp4");
  const std::string pad(28, ' ');  // "%-40s " after the key "row/proj tp=1"
  EXPECT_NE(sum.to_string().find(
                "  row/proj tp=1" + pad + "nvfp4 for tokens [2048, inf), min speedup 1.300\n"
                "      mxfp8: 1024:1.10+ 2048:1.20+ 4096:1.25+\n"
                "        mxfp8 for tokens [1024, inf), min speedup 1.100\n"
                "      nvfp4: 1024:0.90- 2048:1.30+ 4096:1.40+\n"
                "        nvfp4 for tokens [2048, inf), min speedup 1.300\n"
                "      chosen: nvfp4, the largest measured speedup (mxfp8 1.1000 over [1024, "
                "inf); nvfp4 1.3000 over [2048, inf))\n"),
            std::string::npos)
      << sum.to_string();
  EXPECT_EQ(sum.to_string().rfind("4 rules from 5 measured keys\n", 0), 0u)
      << sum.to_string();
}

// The comparison is of measured speedups, not of ranges: a narrower range at a larger
// minimum speedup wins. Reports of one recipe combine within it as a one-recipe merge does
// (every report must win, minimum speedup), and three recipes tie-break in registry order.
TEST(MergeRecipes, SpeedupDecidesAndReportsOfARecipeCombine) {
  Report a = make_report("a.json", "mxfp8");
  add(a, "row", "proj", {{1024, 1.1}, {2048, 1.2}});
  Report c = make_report("c.json", "mxfp8");
  add(c, "row", "proj", {{1024, 0.9}, {2048, 1.25}});
  Report b = make_report("b.json", "nvfp4");
  add(b, "row", "proj", {{1024, 1.15}, {2048, 1.18}});
  MergeSummary sum;
  Policy p = merge_reports({a, b, c}, 1.0, &sum);
  const Rule& r = p.dense.at("row").at("proj").at(0);
  EXPECT_EQ(r.recipe, "mxfp8");  // [2048, inf) at 1.2 beats nvfp4's [1024, inf) at 1.15
  EXPECT_EQ(r.min_tokens, 2048);
  EXPECT_EQ(*r.measured_speedup, 1.2);
  EXPECT_EQ(sum.keys[0].per_recipe[0].outcomes, "1024:0.90-x2 2048:1.20+x2");
  // Three recipes: blockwise and nvfp4 tie above mxfp8; blockwise is earlier in the registry.
  Report x = make_report("x.json", "mxfp8");
  add(x, "row", "proj", {{1024, 1.1}});
  Report y = make_report("y.json", "blockwise");
  add(y, "row", "proj", {{1024, 1.3}});
  Report z = make_report("z.json", "nvfp4");
  add(z, "row", "proj", {{1024, 1.3}});
  p = merge_reports({z, y, x});
  EXPECT_EQ(p.measured_recipes, (std::vector<std::string>{"mxfp8", "blockwise", "nvfp4"}));
  EXPECT_EQ(p.dense.at("row").at("proj").at(0).recipe, "blockwise");
}

// A converted report built in code may record no recipe (every report read from a file
// records one).
Report blank_report() {
  Report blank = make_report("blank.json", "");
  blank.format = "loongforge";
  add(blank, "row", "proj", {{1024, 1.3}});
  return blank;
}

// Reports of one recipe merge exactly as before: the policy records the recipe, no rule
// names one, no measured_recipes; a report built in code without a recipe joins them.
TEST(MergeRecipes, OneRecipeMergesAsBefore) {
  Report a = make_report("a.json", "nvfp4");
  add(a, "row", "proj", {{1024, 1.1}, {2048, 1.2}});
  Report b = make_report("b.json", "nvfp4");
  add(b, "row", "proj", {{1024, 1.2}, {2048, 1.3}});
  Report blank = blank_report();
  MergeSummary sum;
  const Policy p = merge_reports({a, b, blank}, 1.0, &sum);
  EXPECT_EQ(policy_to_json(p),
            "{\n  \"version\": 1,\n  \"speedup_threshold\": 1.0,\n  \"recipe\": \"nvfp4\",\n"
            "  \"rules\": {\n    \"row\": {\n      \"proj\": [\n        {\"tp\": 1, "
            "\"min_tokens\": 1024, \"measured_speedup\": 1.1}\n      ]\n    }\n  }\n}\n");
  EXPECT_TRUE(sum.recipes.empty());
  EXPECT_TRUE(sum.keys[0].per_recipe.empty());
  EXPECT_EQ(sum.to_string().find("chosen"), std::string::npos);
  EXPECT_EQ(sum.to_string().rfind("1 rule from 1 measured key\n", 0), 0u);
}

TEST(MergeRecipes, InputErrors) {
  std::vector<Report> rs = two_recipes();
  EXPECT_ERROR_CONTAINS(merge_reports({rs[0], rs[1], blank_report()}),
                        "policy merge: blank.json records no recipe, but the other reports "
                        "measured several (mxfp8, nvfp4); merging several recipes needs each "
                        "report's");
  for (const char* bad : {"mxfp9", "bf16"}) {
    Report r = make_report("x.json", bad);
    add(r, "row", "proj", {{1024, 1.3}});
    EXPECT_ERROR_CONTAINS(merge_reports({rs[0], r}),
                          std::string("policy merge: x.json measured recipe \"") + bad +
                              "\", which is not a registered quantized recipe");
  }
  // One model across recipes: a key's GEMM shape must agree in every report.
  rs[1].points[0].out = 256;
  rs[1].points[1].out = 256;
  rs[1].points[2].out = 256;
  EXPECT_ERROR_CONTAINS(merge_reports(rs), "row/proj tp=1 has shape in=64 out=256 in b.json but "
                                           "in=64 out=128 in a.json; merge reports of one model");
}

TEST(MergeRecipes, MergedPolicySavesLoadsAndDecides) {
  ScratchDir d;
  const Policy p = merge_reports(two_recipes());
  save_policy(p, d / "p.json");
  EXPECT_EQ(io::read_text_file(d / "p.json"), kTwoRecipePolicy);
  const Policy back = load_policy(d / "p.json");
  const Decision proj = decide(back, dense_q("proj", 4096));
  EXPECT_EQ(proj.recipe, "nvfp4");
  EXPECT_EQ(proj.reason, "tokens 4096 >= min_tokens 2048 (recipe nvfp4, measured speedup 1.300)");
  EXPECT_EQ(decide(back, dense_q("fc2", 512)).recipe, "mxfp8");
  EXPECT_FALSE(decide(back, dense_q("proj", 1024)).use_fp8);
}

TEST(MergeRecipes, ExplainSaysWhichRecipesWereMeasuredAndWhyOneWasKept) {
  const std::vector<Report> rs = two_recipes();
  const std::vector<LoadedReport> loaded = {{rs[0], std::nullopt}, {rs[1], std::nullopt}};
  auto has = [](const std::string& text, const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing line:\n" << line << "\nin:\n"
                                                         << text;
  };
  const std::string text = explain_reports(loaded, 1.0);
  has(text, "recipes: 2 measured (mxfp8, nvfp4); each key is merged per recipe and keeps the "
            "rule with the largest measured speedup (ties: the recipe earlier in the registry's "
            "order)");
  has(text, "\nrow/proj tp=1\n  recipes measured: mxfp8, nvfp4\n  mxfp8:");
  has(text, "          1024     1024     1.1000     1.0000   1.100  0.000 +  a.json");
  has(text, "    rule: mxfp8 for tokens [1024, inf)");
  has(text, "    why: nvfp4 wins in every report at each of the 2 sizes 2048..4096, the longest "
            "such run; below it 1024 loses (0.900x in b.json); it reaches the largest measured "
            "size, so there is no upper bound");
  has(text, "  rule: nvfp4 for tokens [2048, inf)\n  recipe: nvfp4, the largest measured speedup "
            "(mxfp8 1.1000 over [1024, inf); nvfp4 1.3000 over [2048, inf))");
  has(text, "\ncolumn_grouped etp=1 num_gemms=4\n  recipes measured: mxfp8");
  has(text, "    why: mxfp8 wins at no measured size in every report");
  // With a given policy whose proj rule keeps mxfp8: it is explained per recipe and pointed
  // out against the merge.
  Policy given = merge_reports(rs);
  Rule& r = given.dense.at("row").at("proj")[0];
  r.recipe = "mxfp8";
  r.min_tokens = 1024;
  const std::string g = explain_reports(loaded, 1.0, &given, "p.json");
  // The mxfp8 section: p.json's mxfp8 rule against the merge, which emits none for mxfp8.
  EXPECT_NE(g.find("  mxfp8:\n"), std::string::npos);
  EXPECT_NE(g.find("    rule: mxfp8 for tokens [1024, inf)\n    why: mxfp8 wins in every report "
                   "at each of the 3 sizes 1024..4096, the longest such run; it starts at the "
                   "smallest measured size (nothing below is extrapolated); it reaches the "
                   "largest measured size, so there is no upper bound\n    note: p.json differs "
                   "from the merge of these reports, which gives no rule (BF16)\n  nvfp4:\n"),
            std::string::npos)
      << g;
  has(g, "    rule: no rule (BF16)");
  has(g, "    note: p.json differs from the merge of these reports, which gives nvfp4 for tokens "
         "[2048, inf)");
  EXPECT_NE(g.find("\n  rule: mxfp8 for tokens [1024, inf)\n  recipe: nvfp4, the largest "
                   "measured speedup (mxfp8 1.1000 over [1024, inf); nvfp4 1.3000 over [2048, "
                   "inf))\n"),
            std::string::npos)
      << g;
  has(g, "  note: p.json differs from the merge of these reports, which gives nvfp4 for tokens "
         "[2048, inf)");
}

}  // namespace
}  // namespace mxtrain::policy
