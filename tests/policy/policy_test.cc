// tests/policy/policy_test.cc — the policy file (original schema + max_tokens), its canonical
// byte-stable form, errors naming file and JSON path, and the per-module decision table.
#include "mxtrain/policy/policy.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::policy {
namespace {

using io::testing::ScratchDir;
using io::testing::list_dir;
using nlohmann::json;

// The example policy of the original selective-FP8 implementation (docs/adaptive.md), verbatim.
const char* kSeedPolicy = R"({
  "version": 1,
  "speedup_threshold": 1.0,
  "rules": {
    "layernorm_column": {
      "qkv": [{"tp": 1, "min_tokens": 16384, "measured_speedup": 1.03}],
      "fc1": [{"tp": 1, "min_tokens": 4096,  "measured_speedup": 1.18}]
    },
    "row": {
      "proj": [{"tp": 1, "min_tokens": 16384, "measured_speedup": 1.05}],
      "fc2":  [{"tp": 1, "min_tokens": 8192,  "measured_speedup": 1.23}]
    },
    "column_grouped": [
      {"etp": 1, "num_gemms": 64, "min_tokens": 424, "measured_speedup": 1.02}
    ],
    "row_grouped": [
      {"etp": 1, "num_gemms": 64, "min_tokens": 424, "measured_speedup": 1.04}
    ]
  }
})";

TEST(PolicyFile, ReadsTheSeedExample) {
  Policy p = parse_policy(kSeedPolicy, "seed.json");
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.speedup_threshold, 1.0);
  EXPECT_EQ(p.recipe, "");
  EXPECT_EQ(p.num_rules(), 6u);
  const Rule& qkv = p.dense.at("layernorm_column").at("qkv").at(0);
  EXPECT_EQ(qkv.tp, 1);
  EXPECT_EQ(qkv.min_tokens, 16384);
  EXPECT_FALSE(qkv.max_tokens.has_value());
  EXPECT_EQ(*qkv.measured_speedup, 1.03);
  const Rule& cg = p.grouped.at("column_grouped").at(0);
  EXPECT_EQ(cg.etp, 1);
  EXPECT_EQ(cg.num_gemms, 64);
  EXPECT_EQ(cg.min_tokens, 424);
  EXPECT_EQ(*p.grouped.at("row_grouped").at(0).measured_speedup, 1.04);
}

// The canonical text form, spelled out: kind order, sorted names, one rule per line.
const char* kCanonical = R"({
  "version": 1,
  "speedup_threshold": 1.0,
  "rules": {
    "layernorm_column": {
      "fc1": [
        {"tp": 1, "min_tokens": 4096, "measured_speedup": 1.18}
      ],
      "qkv": [
        {"tp": 1, "min_tokens": 16384, "measured_speedup": 1.03}
      ]
    },
    "row": {
      "fc2": [
        {"tp": 1, "min_tokens": 8192, "measured_speedup": 1.23}
      ],
      "proj": [
        {"tp": 1, "min_tokens": 16384, "measured_speedup": 1.05}
      ]
    },
    "column_grouped": [
      {"etp": 1, "num_gemms": 64, "min_tokens": 424, "measured_speedup": 1.02}
    ],
    "row_grouped": [
      {"etp": 1, "num_gemms": 64, "min_tokens": 424, "measured_speedup": 1.04}
    ]
  }
}
)";

TEST(PolicyFile, CanonicalTextIsExact) {
  EXPECT_EQ(policy_to_json(parse_policy(kSeedPolicy, "seed.json")), kCanonical);
  EXPECT_EQ(policy_to_json(parse_policy(kCanonical, "c.json")), kCanonical);
  Policy empty;
  EXPECT_EQ(policy_to_json(empty), "{\n  \"version\": 1,\n  \"speedup_threshold\": 1.0,\n"
                                   "  \"rules\": {}\n}\n");
}

TEST(PolicyFile, SaveLoadSaveIsByteStable) {
  ScratchDir d;
  Policy p = parse_policy(kSeedPolicy, "seed.json");
  p.recipe = "mxfp8-32x32";
  p.speedup_threshold = 1.0000001;
  Rule r;
  r.tp = 2;
  r.min_tokens = 0;
  r.max_tokens = 1000;  // no measured_speedup: optional
  p.dense["row"]["proj"].push_back(r);
  p.dense["duplicated"]["kv_down_proj"].push_back(r);
  save_policy(p, d / "p.json");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"p.json"});
  const std::string first = io::read_text_file(d / "p.json");
  Policy back = load_policy(d / "p.json");
  EXPECT_EQ(back.recipe, "mxfp8-32x32");
  EXPECT_EQ(back.speedup_threshold, 1.0000001);
  ASSERT_EQ(back.dense.at("row").at("proj").size(), 2u);
  const Rule& b = back.dense.at("row").at("proj")[1];
  EXPECT_EQ(b.tp, 2);
  EXPECT_EQ(*b.max_tokens, 1000);
  EXPECT_FALSE(b.measured_speedup.has_value());
  save_policy(back, d / "p2.json");
  EXPECT_EQ(io::read_text_file(d / "p2.json"), first);
  save_policy(back, d / "p.json");  // overwrite in place
  EXPECT_EQ(io::read_text_file(d / "p.json"), first);
  EXPECT_EQ(list_dir(d.path()), (std::vector<std::string>{"p.json", "p2.json"}));
}

TEST(PolicyFile, SaveRejectsInvalidPolicyAndLeavesNothing) {
  ScratchDir d;
  Policy p;
  Rule r;
  r.tp = 1;
  r.min_tokens = 200;
  r.max_tokens = 100;
  p.dense["row"]["proj"].push_back(r);
  EXPECT_ERROR_CONTAINS(save_policy(p, d / "p.json"),
                        "rules.row.proj[0].max_tokens: 100 is less than min_tokens 200");
  EXPECT_TRUE(list_dir(d.path()).empty());
  Policy q;
  q.dense["row_grouped"]["x"];
  EXPECT_ERROR_CONTAINS(validate_policy(q, "mem"), "mem: rules.row_grouped: not a dense kind");
  EXPECT_ERROR_CONTAINS(save_policy(Policy{}, d / "no/such/dir/p.json"), "no/such/dir");
}

struct BadPolicy {
  const char* what;
  std::function<void(json&)> edit;
  const char* expect;
};

TEST(PolicyFile, MalformedFilesNameTheProblem) {
  const json base = json::parse(kSeedPolicy);
  const std::vector<BadPolicy> cases = {
      {"version", [](json& j) { j["version"] = 2; }, "version: unsupported policy version 2"},
      {"version type", [](json& j) { j["version"] = "1"; }, "version: must be an integer"},
      {"version missing", [](json& j) { j.erase("version"); },
       "missing required field \"version\""},
      {"threshold missing", [](json& j) { j.erase("speedup_threshold"); },
       "missing required field \"speedup_threshold\""},
      {"threshold negative", [](json& j) { j["speedup_threshold"] = -1; },
       "speedup_threshold: must be a finite number > 0, got -1"},
      {"recipe type", [](json& j) { j["recipe"] = 8; }, "recipe: must be a string"},
      {"unknown top key", [](json& j) { j["rule"] = json::object(); }, "rule: unknown field"},
      {"rules type", [](json& j) { j["rules"] = json::array(); }, "rules: must be an object"},
      {"unknown kind", [](json& j) { j["rules"]["rowx"] = json::object(); },
       "rules.rowx: unknown kind \"rowx\""},
      {"dense kind as list", [](json& j) { j["rules"]["row"] = json::array(); },
       "rules.row: must be an object {module name: [rules]}"},
      {"grouped kind as map", [](json& j) { j["rules"]["row_grouped"] = json::object(); },
       "rules.row_grouped: must be an array of rules"},
      {"rules of a name not a list", [](json& j) { j["rules"]["row"]["proj"] = 5; },
       "rules.row.proj: must be an array of rules, got number 5"},
      {"empty name", [](json& j) { j["rules"]["row"][""] = json::array(); },
       "rules.row: module name must not be empty"},
      {"missing min_tokens", [](json& j) { j["rules"]["row"]["proj"][0].erase("min_tokens"); },
       "rules.row.proj[0]: missing required field \"min_tokens\""},
      {"negative min_tokens", [](json& j) { j["rules"]["row"]["proj"][0]["min_tokens"] = -5; },
       "rules.row.proj[0].min_tokens: must be an integer >= 0, got -5"},
      {"min above max", [](json& j) { j["rules"]["row"]["fc2"][0]["max_tokens"] = 100; },
       "rules.row.fc2[0].max_tokens: 100 is less than min_tokens 8192"},
      {"negative max", [](json& j) { j["rules"]["row"]["fc2"][0]["max_tokens"] = -1; },
       "rules.row.fc2[0].max_tokens: must be an integer >= 0, got -1"},
      {"tp type", [](json& j) { j["rules"]["layernorm_column"]["qkv"][0]["tp"] = "1"; },
       "rules.layernorm_column.qkv[0].tp: must be an integer, got string \"1\""},
      {"tp zero", [](json& j) { j["rules"]["layernorm_column"]["qkv"][0]["tp"] = 0; },
       "rules.layernorm_column.qkv[0].tp: must be an integer >= 1, got 0"},
      {"dense rule with etp", [](json& j) { j["rules"]["row"]["proj"][0]["etp"] = 1; },
       "rules.row.proj[0].etp: unknown field"},
      {"grouped rule without etp", [](json& j) { j["rules"]["column_grouped"][0].erase("etp"); },
       "rules.column_grouped[0]: missing required field \"etp\""},
      {"grouped rule with tp", [](json& j) { j["rules"]["row_grouped"][0]["tp"] = 1; },
       "rules.row_grouped[0].tp: unknown field"},
      {"num_gemms zero", [](json& j) { j["rules"]["row_grouped"][0]["num_gemms"] = 0; },
       "rules.row_grouped[0].num_gemms: must be an integer >= 1, got 0"},
      {"negative speedup",
       [](json& j) { j["rules"]["row_grouped"][0]["measured_speedup"] = -1.04; },
       "rules.row_grouped[0].measured_speedup: must be a finite number > 0"},
      {"rule not an object", [](json& j) { j["rules"]["column_grouped"][0] = "x"; },
       "rules.column_grouped[0]: must be an object, got string"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.edit(j);
    SCOPED_TRACE(c.what);
    EXPECT_ERROR_CONTAINS(parse_policy(j.dump(), "bad.json"), std::string("bad.json: ") + c.expect);
  }
}

TEST(PolicyFile, TextLevelErrors) {
  EXPECT_ERROR_CONTAINS(parse_policy("", "e.json"), "e.json: not valid JSON");
  EXPECT_ERROR_CONTAINS(parse_policy("[1, 2]", "e.json"), "e.json: must be an object");
  std::string dup = kSeedPolicy;
  dup.replace(dup.find("\"min_tokens\": 8192"), 18, "\"min_tokens\": 8192, \"min_tokens\": 1");
  EXPECT_ERROR_CONTAINS(parse_policy(dup, "d.json"),
                        "d.json: rules.row.fc2[0].min_tokens: duplicate key");
  EXPECT_ERROR_CONTAINS(load_policy("/nonexistent/p.json"), "policy file: ");
  EXPECT_ERROR_CONTAINS(load_policy("/nonexistent/p.json"), "/nonexistent/p.json");
}

TEST(PolicyFile, DescribeListsEveryRule) {
  Policy p = parse_policy(kSeedPolicy, "seed.json");
  p.dense["row"]["proj"][0].max_tokens = 65536;
  const std::string s = describe_policy(p);
  EXPECT_NE(s.find("6 rules"), std::string::npos) << s;
  EXPECT_NE(s.find("tokens [16384, 65536]"), std::string::npos) << s;
  EXPECT_NE(s.find("etp=1 num_gemms=64"), std::string::npos) << s;
  EXPECT_NE(s.find("speedup 1.230"), std::string::npos) << s;
  EXPECT_NE(describe_policy(Policy{}).find("no rules"), std::string::npos);
}

// --- decisions ------------------------------------------------------------------------

const char* kDecisionPolicy = R"({"version": 1, "speedup_threshold": 1.0, "rules": {
  "layernorm_column": {"qkv": [{"tp": 1, "min_tokens": 16384, "measured_speedup": 1.03},
                               {"tp": 2, "min_tokens": 32768}]},
  "row": {"proj": [{"tp": 1, "min_tokens": 1024, "max_tokens": 8192, "measured_speedup": 1.05}],
          "fc2": [{"tp": 1, "min_tokens": 4096}, {"tp": 1, "min_tokens": 256, "max_tokens": 512}]},
  "duplicated": {"kv_down_proj": [{"tp": 1, "min_tokens": 0}]},
  "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 4096, "measured_speedup": 1.1}],
  "row_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 1024, "max_tokens": 65536}]}})";

struct DecisionCase {
  const char* what;
  DecisionQuery q;
  bool fp8;
  const char* kind;   // kind looked up
  int64_t tokens;     // tokens compared
  const char* reason; // exact reason
};

DecisionQuery dense_q(const char* kind, const char* name, int tp, int64_t tokens) {
  DecisionQuery q;
  q.kind = kind;
  q.name = name;
  q.tp = tp;
  q.tokens = tokens;
  return q;
}

DecisionQuery expert_q(const char* kind, int etp, int num_gemms, int top_k, int64_t tokens) {
  DecisionQuery q;
  q.kind = kind;
  q.name = "fc";
  q.is_expert = true;
  q.etp = etp;
  q.num_gemms = num_gemms;
  q.top_k = top_k;
  q.tokens = tokens;
  q.tp = 99;  // ignored for experts
  return q;
}

TEST(PolicyDecide, TableOfCases) {
  const Policy p = parse_policy(kDecisionPolicy, "d.json");
  const std::vector<DecisionCase> cases = {
      {"dense hit at min_tokens", dense_q("layernorm_column", "qkv", 1, 16384), true,
       "layernorm_column", 16384, "tokens 16384 >= min_tokens 16384 (measured speedup 1.030)"},
      {"dense miss below min_tokens", dense_q("layernorm_column", "qkv", 1, 16383), false,
       "layernorm_column", 16383, "tokens 16383 < min_tokens 16384"},
      {"tp selects its own rule", dense_q("layernorm_column", "qkv", 2, 20000), false,
       "layernorm_column", 20000, "tokens 20000 < min_tokens 32768"},
      {"tp 2 hit, no speedup recorded", dense_q("layernorm_column", "qkv", 2, 32768), true,
       "layernorm_column", 32768, "tokens 32768 >= min_tokens 32768"},
      {"tp mismatch", dense_q("layernorm_column", "qkv", 4, 1 << 20), false, "layernorm_column",
       1 << 20, "no rule for layernorm_column/qkv tp=4 (policy has tp=1, tp=2)"},
      {"name mismatch", dense_q("layernorm_column", "fc1", 1, 1 << 20), false,
       "layernorm_column", 1 << 20, "no rule for layernorm_column/fc1 tp=1"},
      {"kind without rules", dense_q("column", "qkv", 1, 1 << 20), false, "column", 1 << 20,
       "no rule for column/qkv tp=1"},
      {"max_tokens upper edge", dense_q("row", "proj", 1, 8192), true, "row", 8192,
       "tokens 8192 in [1024, 8192] (measured speedup 1.050)"},
      {"above max_tokens", dense_q("row", "proj", 1, 8193), false, "row", 8193,
       "tokens 8193 > max_tokens 8192"},
      {"below a bounded rule", dense_q("row", "proj", 1, 1023), false, "row", 1023,
       "tokens 1023 < min_tokens 1024"},
      {"second of two ranges", dense_q("row", "fc2", 1, 300), true, "row", 300,
       "tokens 300 in [256, 512]"},
      {"between two ranges", dense_q("row", "fc2", 1, 1000), false, "row", 1000,
       "tokens 1000 < min_tokens 4096; tokens 1000 > max_tokens 512"},
      {"min_tokens 0 covers 0", dense_q("duplicated", "kv_down_proj", 1, 0), true, "duplicated",
       0, "tokens 0 >= min_tokens 0"},
      {"expert layernorm_column promoted, top-k applied",
       expert_q("layernorm_column", 1, 8, 2, 2048), true, "column_grouped", 4096,
       "tokens 4096 (2048 x top-k 2) >= min_tokens 4096 (measured speedup 1.100)"},
      {"expert column just below", expert_q("column", 1, 8, 2, 2047), false, "column_grouped",
       4094, "tokens 4094 (2047 x top-k 2) < min_tokens 4096"},
      {"expert row promoted, inside range", expert_q("row", 1, 8, 4, 16384), true,
       "row_grouped", 65536, "tokens 65536 (16384 x top-k 4) in [1024, 65536]"},
      {"expert row above max_tokens after top-k", expert_q("row", 1, 8, 4, 16385), false,
       "row_grouped", 65540, "tokens 65540 (16385 x top-k 4) > max_tokens 65536"},
      {"num_gemms mismatch", expert_q("row", 1, 16, 1, 2048), false, "row_grouped", 2048,
       "no rule for row_grouped etp=1 num_gemms=16 (policy has etp=1 num_gemms=8)"},
      {"etp mismatch", expert_q("column", 2, 8, 1, 1 << 20), false, "column_grouped", 1 << 20,
       "no rule for column_grouped etp=2 num_gemms=8 (policy has etp=1 num_gemms=8)"},
      {"grouped kind given directly", [] {
         DecisionQuery q = expert_q("column_grouped", 1, 8, 8, 512);
         q.is_expert = false;
         return q;
       }(), true, "column_grouped", 4096, "tokens 4096 (512 x top-k 8) >= min_tokens 4096 "
                                          "(measured speedup 1.100)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Decision d = decide(p, c.q);
    EXPECT_EQ(d.use_fp8, c.fp8);
    EXPECT_EQ(d.kind, c.kind);
    EXPECT_EQ(d.tokens, c.tokens);
    EXPECT_EQ(d.reason, c.reason);
    EXPECT_EQ(d.rule != nullptr, c.fp8);
  }
}

TEST(PolicyDecide, RulePointsIntoThePolicy) {
  const Policy p = parse_policy(kDecisionPolicy, "d.json");
  Decision d = decide(p, dense_q("row", "fc2", 1, 400));
  EXPECT_EQ(d.rule, &p.dense.at("row").at("fc2")[1]);
  d = decide(p, expert_q("row", 1, 8, 1, 2000));
  EXPECT_EQ(d.rule, &p.grouped.at("row_grouped")[0]);
}

TEST(PolicyDecide, EmptyPolicyMeansBf16Everywhere) {
  Decision d = decide(Policy{}, dense_q("row", "proj", 1, 1 << 30));
  EXPECT_FALSE(d.use_fp8);
  EXPECT_EQ(d.reason, "no rule for row/proj tp=1");
  d = decide(Policy{}, expert_q("row", 1, 4, 2, 100));
  EXPECT_EQ(d.reason, "no rule for row_grouped etp=1 num_gemms=4");
}

TEST(PolicyDecide, InvalidQueriesThrow) {
  const Policy p = parse_policy(kDecisionPolicy, "d.json");
  EXPECT_ERROR_CONTAINS(decide(p, dense_q("attention", "qkv", 1, 1)),
                        "unknown layer kind \"attention\" for module \"qkv\"");
  EXPECT_ERROR_CONTAINS(decide(p, expert_q("duplicated", 1, 8, 1, 1)), "has no grouped form");
  EXPECT_ERROR_CONTAINS(decide(p, dense_q("row", "proj", 0, 1)), "tp must be >= 1, got 0");
  EXPECT_ERROR_CONTAINS(decide(p, dense_q("row", "proj", 1, -1)), "must be >= 0, got -1");
  EXPECT_ERROR_CONTAINS(decide(p, dense_q("row", "", 1, 1)), "needs a name");
  EXPECT_ERROR_CONTAINS(decide(p, expert_q("row", 1, 8, 0, 1)), "top_k must be >= 1, got 0");
  EXPECT_ERROR_CONTAINS(decide(p, expert_q("row", 1, 0, 1, 1)), "num_gemms=0");
  EXPECT_ERROR_CONTAINS(decide(p, expert_q("row", 1, 8, 4, int64_t(1) << 62)), "overflows");
}

}  // namespace
}  // namespace mxtrain::policy
