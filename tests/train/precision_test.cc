// Tests for per-module precision decisions (train/precision.h, train/policy_oracle.h):
// precedence of overrides, first/last-N BF16, the LM head, the adaptive policy; token counts.
#include "mxtrain/train/precision.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "mxtrain/common.h"
#include "mxtrain/train/policy_oracle.h"

namespace mxtrain {
namespace {

TrainConfig cfg(const std::string& precision, bool moe = false,
               const std::string& parallel = "") {
  std::string y = "model: {d_model: 64, n_layers: 4, n_heads: 2, d_ff: 128, max_seq_len: 64";
  if (moe) y += ", moe: {num_experts: 8, top_k: 2, d_ff: 64, every: 2}";
  y += "}\ntraining: {seq_len: 64, micro_batch_size: 4}\nprecision: " + precision + "\n";
  if (!parallel.empty()) y += "parallel: " + parallel + "\n";
  return parse_config(y, "precision-test");
}

// module -> (precision, reason) for every quantizable module.
std::map<std::string, ModuleDecision> decide_all(const TrainConfig& c, PolicyOracle o = {}) {
  PrecisionResolver r(c, o);
  for (const ModuleInfo& m : describe_modules(c.model)) r(m);
  std::map<std::string, ModuleDecision> out;
  for (const auto& d : r.decisions()) out[d.module] = d;
  return out;
}

TEST(Precision, RecipeFirstLastAndLmHead) {
  auto d = decide_all(cfg("{recipe: mxfp8, bf16_first_layers: 1, bf16_last_layers: 1}"));
  EXPECT_EQ(d.at("layers.0.attention.qkv").precision, "bf16");
  EXPECT_EQ(d.at("layers.0.mlp.fc2").reason, "first 1 layer(s) kept in BF16");
  EXPECT_EQ(d.at("layers.1.attention.qkv").precision, "mxfp8");
  EXPECT_EQ(d.at("layers.2.mlp.fc1").precision, "mxfp8");
  EXPECT_EQ(d.at("layers.3.attention.proj").precision, "bf16");
  EXPECT_EQ(d.at("lm_head").precision, "bf16");
  EXPECT_EQ(d.at("layers.1.attention.qkv").tokens, 256);  // seq_len × micro-batch
}

TEST(Precision, OverridesWinAndLastMatchCounts) {
  auto d = decide_all(cfg("{recipe: mxfp8, bf16_first_layers: 1, lm_head: mxfp8-32x32, "
                          "overrides: {'layers.*.mlp.*': bf16, 'layers.0.mlp.fc1': mxfp8-32x32}}"));
  EXPECT_EQ(d.at("layers.0.mlp.fc1").precision, "mxfp8-32x32");  // override beats first-N
  EXPECT_EQ(d.at("layers.0.mlp.fc1").reason, "override `layers.0.mlp.fc1`");
  EXPECT_EQ(d.at("layers.2.mlp.fc2").precision, "bf16");
  EXPECT_EQ(d.at("layers.2.attention.qkv").precision, "mxfp8");
  EXPECT_EQ(d.at("lm_head").precision, "mxfp8-32x32");
}

TEST(Precision, DeferAndRoundingFollowTheRecipe) {
  TrainConfig c = cfg("{recipe: mxfp8, scale_rounding: floor, defer_backward_quant: true, "
                      "bf16_first_layers: 1}");
  PrecisionResolver r(c);
  for (const ModuleInfo& m : describe_modules(c.model)) {
    LinearPrecision p = r(m);
    if (p.recipe.quantized()) {
      EXPECT_TRUE(p.defer_backward_quant) << m.module;
      for (const TensorFormat& f : p.recipe.roles)
        EXPECT_EQ(f.rule, ScaleRounding::floor) << m.module;
    } else {
      EXPECT_FALSE(p.defer_backward_quant) << m.module;  // never defer with bf16
    }
  }
}

TEST(Precision, PolicyDecidesOnlyWhereNothingElseDoes) {
  const auto path = std::filesystem::temp_directory_path() / "mxtrain_precision_policy.json";
  std::ofstream(path) << R"({"version": 1, "speedup_threshold": 1.0, "rules": {
    "layernorm_column": {"fc1": [{"tp": 1, "min_tokens": 128, "measured_speedup": 1.2}],
                         "qkv": [{"tp": 1, "min_tokens": 4096, "measured_speedup": 1.1}]},
    "row": {"fc2": [{"tp": 1, "min_tokens": 16, "max_tokens": 128, "measured_speedup": 1.1}]},
    "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 512, "measured_speedup": 1.05}]
  }})";
  TrainConfig c = cfg("{recipe: mxfp8, selective_fp8: true, bf16_last_layers: 1, "
                      "fp8_dynamic_policy_path: '" + path.string() + "'}", /*moe=*/true);
  auto d = decide_all(c, load_policy_oracle(path.string(), c));
  EXPECT_EQ(d.at("layers.0.mlp.fc1").precision, "mxfp8");         // 256 >= 128
  EXPECT_EQ(d.at("layers.0.attention.qkv").precision, "bf16");     // 256 < 4096
  EXPECT_EQ(d.at("layers.0.mlp.fc2").precision, "bf16");           // 256 > max 128
  EXPECT_EQ(d.at("layers.0.attention.proj").precision, "bf16");    // no rule
  EXPECT_NE(d.at("layers.0.attention.proj").reason.find("policy"), std::string::npos);
  // Layer 1 is MoE: experts are promoted, tokens × top-k = 512 >= 512, num_gemms = 8.
  EXPECT_EQ(d.at("layers.1.mlp.experts.fc1").kind, "column_grouped");
  EXPECT_EQ(d.at("layers.1.mlp.experts.fc1").tokens, 512);
  EXPECT_EQ(d.at("layers.1.mlp.experts.fc1").precision, "mxfp8");
  EXPECT_EQ(d.at("layers.1.mlp.experts.fc2").precision, "bf16");   // no row_grouped rule
  EXPECT_EQ(d.at("layers.3.mlp.experts.fc1").precision, "bf16");   // last-N beats policy

  // A per-component token override changes the decision.
  c.precision.fp8_dynamic_num_tokens["layers.0."] = 8192;
  auto d2 = decide_all(c, load_policy_oracle(path.string(), c));
  EXPECT_EQ(d2.at("layers.0.attention.qkv").precision, "mxfp8");
  EXPECT_EQ(d2.at("layers.0.attention.qkv").tokens, 8192);
  EXPECT_EQ(d2.at("layers.2.attention.qkv").precision, "bf16");
  std::filesystem::remove(path);
}

// The policy is looked up at the run's layout: dense modules by their tp (a rule for tp 1 and
// another for tp 2 give different decisions), experts by etp and the experts one rank holds
// (num_gemms = experts / ep); the decisions record the tp and etp they were made at.
TEST(Precision, PolicyIsLookedUpAtTheRunsLayout) {
  const auto path = std::filesystem::temp_directory_path() / "mxtrain_layout_policy.json";
  std::ofstream(path) << R"({"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8", "rules": {
    "layernorm_column": {"fc1": [{"tp": 1, "min_tokens": 128, "measured_speedup": 1.2},
                                 {"tp": 2, "min_tokens": 4096, "measured_speedup": 1.1}]},
    "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 4096, "measured_speedup": 1.1},
                       {"etp": 1, "num_gemms": 4, "min_tokens": 16, "measured_speedup": 1.1}]
  }})";
  const std::string p = "{recipe: mxfp8, selective_fp8: true, fp8_dynamic_policy_path: '" +
                        path.string() + "'}";
  TrainConfig one = cfg(p);
  auto d1 = decide_all(one, load_policy_oracle(path.string(), one));
  EXPECT_EQ(d1.at("layers.0.mlp.fc1").precision, "mxfp8");  // tp 1: 256 >= 128
  EXPECT_EQ(d1.at("layers.0.mlp.fc1").tp, 1);
  TrainConfig two = cfg(p, false, "{tp: 2}");
  auto d2 = decide_all(two, load_policy_oracle(path.string(), two));
  EXPECT_EQ(d2.at("layers.0.mlp.fc1").precision, "bf16");   // tp 2's rule: 256 < 4096
  EXPECT_EQ(d2.at("layers.0.mlp.fc1").reason, "policy: tokens 256 < min_tokens 4096");
  EXPECT_EQ(d2.at("layers.0.mlp.fc1").tp, 2);
  // Experts: 8 per layer, so num_gemms 8 in one process and 4 at ep 2.
  TrainConfig moe1 = cfg(p, true), moe2 = cfg(p, true, "{ep: 2}");
  EXPECT_EQ(decide_all(moe1, load_policy_oracle(path.string(), moe1))
                .at("layers.1.mlp.experts.fc1").precision, "bf16");   // 512 < 4096
  EXPECT_EQ(decide_all(moe2, load_policy_oracle(path.string(), moe2))
                .at("layers.1.mlp.experts.fc1").precision, "mxfp8");  // 512 >= 16
  std::filesystem::remove(path);
}

TEST(Precision, MalformedPolicyIsAClearError) {
  const auto path = std::filesystem::temp_directory_path() / "mxtrain_bad_policy.json";
  std::ofstream(path) << R"({"version": 2, "rules": {}})";
  TrainConfig c = cfg("{recipe: mxfp8}");
  EXPECT_THROW(load_policy_oracle(path.string(), c), Error);
  std::ofstream(path) << R"({"version": 1, "rules": {"rowz": {}}})";
  EXPECT_THROW(load_policy_oracle(path.string(), c), Error);
  std::filesystem::remove(path);
}

// A policy measured with one FP8 recipe is refused for a run of another, unless
// allow_policy_recipe_mismatch; a policy that records none is accepted with a warning.
TEST(Precision, PolicyRecipeMismatchIsRefusedUnlessAllowed) {
  const auto path = std::filesystem::temp_directory_path() / "mxtrain_recipe_policy.json";
  std::ofstream(path) << R"({"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8-32x32", "rules": {}})";
  TrainConfig c = cfg("{recipe: mxfp8}");
  try {
    load_policy_oracle(path.string(), c);
    ADD_FAILURE() << "a mismatching policy was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "policy " + path.string() + " was measured with recipe mxfp8-32x32 but this "
                  "run uses mxfp8; re-run bench-layers --recipe mxfp8, or pass "
                  "--allow-policy-recipe-mismatch", 0),
              0u)
        << e.what();
  }
  c.precision.allow_policy_recipe_mismatch = true;
  std::string warning;
  load_policy_oracle(path.string(), c, &warning);
  EXPECT_EQ(warning, "policy " + path.string() + " was measured with recipe mxfp8-32x32 but "
                     "this run uses mxfp8; using it anyway (precision.allow_policy_recipe_mismatch)");
  c = cfg("{recipe: mxfp8-32x32}");
  load_policy_oracle(path.string(), c, &warning);
  EXPECT_EQ(warning, "");  // the recipes agree
  c = cfg("{recipe: bf16}");
  load_policy_oracle(path.string(), c, &warning);
  EXPECT_EQ(warning, "");  // a BF16 run consults no policy
  std::ofstream(path) << R"({"version": 1, "speedup_threshold": 1.0, "rules": {}})";
  c = cfg("{recipe: mxfp8}");
  load_policy_oracle(path.string(), c, &warning);
  EXPECT_NE(warning.find("records no FP8 recipe"), std::string::npos) << warning;
  EXPECT_TRUE(parse_config(config_to_yaml(cfg("{recipe: mxfp8, allow_policy_recipe_mismatch: "
                                              "true}")))
                  .precision.allow_policy_recipe_mismatch);
  std::filesystem::remove(path);
}

TEST(Precision, DecisionsJsonHasTheContractFields) {
  auto c = cfg("{recipe: mxfp8}");
  PrecisionResolver r(c);
  for (const ModuleInfo& m : describe_modules(c.model)) r(m);
  const std::string j = decisions_json(r.decisions());
  for (const char* k : {"\"module\"", "\"kind\"", "\"name\"", "\"tokens\"", "\"precision\"",
                        "\"reason\"", "\"tp\"", "\"etp\""})
    EXPECT_NE(j.find(k), std::string::npos) << k;
  EXPECT_EQ(r.decisions().size(), describe_modules(c.model).size());
}

}  // namespace
}  // namespace mxtrain
