// Tests for train/config.h: strict YAML parsing, errors that name the key, round trip.
#include "mxtrain/train/config.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "mxtrain/common.h"
#include "mxtrain/train/precision.h"

namespace mxtrain {
namespace {

const char* kBase = R"(
model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32}
training: {steps: 10, seq_len: 32, micro_batch_size: 2}
precision: {recipe: mxfp8}
)";

// kBase with its first `from` replaced by `to`.
std::string replaced(const std::string& from, const std::string& to) {
  std::string t = kBase;
  t.replace(t.find(from), from.size(), to);
  return t;
}

// Expect parse_config(text) to throw with every fragment in the message.
void expect_error(const std::string& text, std::vector<std::string> fragments) {
  try {
    parse_config(text, "test.yaml");
    FAIL() << "expected an error for:\n" << text;
  } catch (const Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message `" << e.what() << "` lacks `" << f << "`";
  }
}

TEST(Config, ParsesValuesAndDefaults) {
  TrainConfig c = parse_config(kBase);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.training.steps, 10);
  EXPECT_EQ(c.training.grad_accum, 1);
  EXPECT_FLOAT_EQ(c.training.lr, 3e-3f);
  EXPECT_EQ(c.precision.recipe, get_recipe("mxfp8"));
  EXPECT_EQ(c.precision.scale_rounding, ScaleRounding::rceil);
  EXPECT_EQ(c.precision.swiglu_input, SwigluInput::follow_fc1);
  EXPECT_EQ(c.precision.lm_head, get_recipe("bf16"));
  EXPECT_EQ(c.data.path, "fortunes");
  // auto is valid under every recipe (it keeps FP32 under bf16); fp32 too.
  for (const char* p : {"recipe: bf16, swiglu_input: auto", "recipe: bf16, swiglu_input: fp32",
                        "recipe: mxfp8-32x32, swiglu_input: fp8",
                        "recipe: nvfp4, swiglu_input: fp4", "recipe: mxfp4, swiglu_input: fp4",
                        "recipe: nvfp4, swiglu_input: fp8"})
    EXPECT_EQ(swiglu_input_name(parse_config(replaced("recipe: mxfp8", p)).precision.swiglu_input),
              std::string(p).substr(std::string(p).rfind(' ') + 1)) << p;
}

TEST(Config, TokenizerAndRecompute) {
  TrainConfig c = parse_config(kBase);
  EXPECT_EQ(c.tokenizer, "");
  EXPECT_EQ(c.training.recompute, "none");
  c = parse_config(replaced("max_seq_len: 32}", "max_seq_len: 32, tokenizer: tok.model}"));
  EXPECT_EQ(c.tokenizer, "tok.model");
  EXPECT_EQ(parse_config(config_to_yaml(c)).tokenizer, "tok.model");
  for (const char* r : {"none", "attention", "layer"})
    EXPECT_EQ(parse_config(replaced("micro_batch_size: 2", std::string("micro_batch_size: 2, "
                                                                       "recompute: ") + r))
                  .training.recompute, r);
  expect_error(replaced("micro_batch_size: 2", "micro_batch_size: 2, recompute: full"),
               {"test.yaml", "training.recompute", "full", "none, attention, layer"});
  expect_error(replaced("micro_batch_size: 2", "micro_batch_size: 2, recompute: layer") +
                   "fsdp: {enabled: true}\n",
               {"training.recompute", "fsdp"});
}

TEST(Config, ParallelLayout) {
  const TrainConfig c = parse_config(
      std::string(kBase) + "parallel: {tp: 2, sequence_parallel: true, sp_wire: rowwise}\n",
      "test.yaml");
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.sp_wire, SequenceWire::rowwise);
  EXPECT_EQ(parse_config(kBase, "test.yaml").parallel.sp_wire, SequenceWire::exact);
  // NVFP4 runs at a layout (its tensor scales agreed over the layer's group), with FSDP too
  // (a slice's scale agreed over its data-parallel replicas, then over its group).
  const std::string nv = replaced("recipe: mxfp8", "recipe: nvfp4");
  EXPECT_EQ(parse_config(nv + "parallel: {tp: 2, sequence_parallel: true}\n").parallel.tp, 2);
  const TrainConfig f = parse_config(nv + "parallel: {tp: 2}\nfsdp: {enabled: true}\n");
  EXPECT_EQ(f.parallel.tp, 2);
  EXPECT_TRUE(f.fsdp.enabled);
  expect_error(replaced("recipe: mxfp8", "recipe: fp8-current") + "parallel: {tp: 2}\n",
               {"recipe fp8-current: one scale per tensor is not built for tensor or expert "
                "parallelism"});
}

TEST(Config, RoundTripThroughCanonicalYaml) {
  std::string text = std::string(kBase) +
                     "fsdp: {enabled: true, mxfp8_gather: all, prefetch: 2, "
                     "progress_thread: false}\n";
  text.replace(text.find("precision: {recipe: mxfp8}"), 26,
               "precision: {recipe: mxfp8-32x32, scale_rounding: floor, bf16_first_layers: 1, "
               "overrides: {'layers.1.mlp.*': bf16}, fp8_dynamic_num_tokens: 512}");
  TrainConfig a = parse_config(text);
  TrainConfig b = parse_config(config_to_yaml(a));
  EXPECT_EQ(config_to_yaml(a), config_to_yaml(b));
  EXPECT_EQ(b.precision.recipe.name, "mxfp8-32x32");
  EXPECT_EQ(b.precision.scale_rounding, ScaleRounding::floor);
  ASSERT_EQ(b.precision.overrides.size(), 1u);
  EXPECT_EQ(b.precision.overrides[0].first, "layers.1.mlp.*");
  EXPECT_EQ(b.precision.overrides[0].second, get_recipe("bf16"));
  EXPECT_EQ(b.precision.fp8_dynamic_num_tokens.at(""), 512);
  EXPECT_TRUE(b.fsdp.enabled);
  EXPECT_EQ(b.fsdp.mxfp8_gather, "all");
  EXPECT_EQ(b.fsdp.prefetch, 2);
  EXPECT_FALSE(b.fsdp.progress_thread);
}

TEST(Config, UnknownKeysAreNamed) {
  expect_error(std::string(kBase) + "trainig: {steps: 3}\n", {"unknown key `trainig`"});
  expect_error("model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32, "
               "dmodel: 3}\ntraining: {seq_len: 32}\n",
               {"unknown key `model.dmodel`", "d_model"});
  expect_error(std::string(kBase) + "data: {pth: x}\n", {"`data.pth`"});
}

TEST(Config, BadValuesAreNamed) {
  const auto with = replaced;
  expect_error(with("steps: 10", "steps: 0"), {"training.steps", "must be >= 1"});
  expect_error(with("steps: 10", "steps: ten"), {"training.steps", "wrong type"});
  expect_error(with("steps: 10", "steps: 10, lr: -1"), {"training.lr", "> 0"});
  expect_error(with("recipe: mxfp8", "recipe: fp4"), {"precision.recipe", "mxfp8-32x32"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, scale_rounding: up"),
               {"precision.scale_rounding"});
  expect_error(with("recipe: mxfp8", "recipe: bf16, defer_backward_quant: true"),
               {"defer_backward_quant", "FP8 recipe"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, swiglu_input: fp16"),
               {"precision.swiglu_input", "auto, fp32, fp8 or fp4"});
  expect_error(with("recipe: mxfp8", "recipe: bf16, swiglu_input: fp8"),
               {"swiglu_input", "FP8 recipe"});
  // fp4 keeps 4-bit codes of fc1's 4-bit format: refused without a 4-bit recipe, naming it.
  for (const char* r : {"bf16", "mxfp8", "fp8-delayed"})
    expect_error(with("recipe: mxfp8", std::string("recipe: ") + r + ", swiglu_input: fp4"),
                 {"precision.swiglu_input: fp4", "4-bit recipe (nvfp4, mxfp4)",
                  std::string("recipe is `") + r + "`"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, selective_fp8: true"),
               {"fp8_dynamic_policy_path"});
  expect_error(with("seq_len: 32, micro", "seq_len: 64, micro"), {"seq_len", "max_seq_len"});
  expect_error(with("n_heads: 2", "n_heads: 3"), {"model"});
  expect_error(std::string(kBase) + "fsdp: {prefetch: 9}\n", {"fsdp.prefetch", "between 0 and 8"});
  expect_error(std::string(kBase) + "fsdp: {progress_thread: maybe}\n",
               {"fsdp.progress_thread", "wrong type"});
  expect_error(std::string(kBase) + "parallel: {tp: 0}\n", {"parallel.tp", "between 1 and 4096"});
  expect_error(std::string(kBase) + "parallel: {sequence_parallel: true}\n",
               {"parallel.sequence_parallel", "needs tensor parallelism"});
  expect_error(std::string(kBase) + "parallel: {tp: 2, sequence_parallel: true, sp_wire: fp8}\n",
               {"parallel.sp_wire", "exact, rowwise"});
  expect_error(std::string(kBase) + "parallel: {tp: 2, sp_wire: rowwise}\n",
               {"parallel.sp_wire: rowwise", "parallel.sequence_parallel: true"});
  expect_error("model: [1, 2]\n", {"`model` must be a mapping"});
  expect_error("model: {d_model: 64\n", {"not valid YAML"});
}

// fp32_scales and the per-role amax epsilons (blockwise): the key wins over LoongForge's
// environment variable, which wins over the recipe's 0; both refused on MX recipes.
TEST(Config, Fp32ScaleSettings) {
  const auto with = replaced;
  TrainConfig c = parse_config(with("recipe: mxfp8", "recipe: blockwise, fp32_scales: true, "
                                    "input_amax_epsilon: 1e-12, grad_amax_epsilon: auto"));
  EXPECT_TRUE(c.precision.fp32_scales);
  ASSERT_TRUE(c.precision.amax_epsilon[0].value.has_value());
  EXPECT_EQ(*c.precision.amax_epsilon[0].value, 1e-12f);
  EXPECT_FALSE(c.precision.amax_epsilon[2].value.has_value());
  EXPECT_EQ(parse_config(config_to_yaml(c)).precision.amax_epsilon, c.precision.amax_epsilon);

  ::setenv("FP8_QUANT_FWD_INP_AMAX_EPS", "1e-6", 1);
  ::setenv("FP8_QUANT_BWD_GRAD_AMAX_EPS", "2e-9", 1);
  ::unsetenv("FP8_QUANT_FWD_WEIGHT_AMAX_EPS");
  const ResolvedEpsilon in = resolve_amax_epsilon(c.precision.amax_epsilon[0], Role::input,
                                                  c.precision.recipe);
  EXPECT_EQ(in.value, 1e-12f);  // the key wins
  EXPECT_EQ(in.source, "precision.input_amax_epsilon");
  const ResolvedEpsilon gr = resolve_amax_epsilon(c.precision.amax_epsilon[2], Role::grad,
                                                  c.precision.recipe);
  EXPECT_EQ(gr.value, 2e-9f);
  EXPECT_EQ(gr.source, "FP8_QUANT_BWD_GRAD_AMAX_EPS");
  const ResolvedEpsilon w = resolve_amax_epsilon(c.precision.amax_epsilon[1], Role::weight,
                                                 c.precision.recipe);
  EXPECT_EQ(w.value, 0.f);
  EXPECT_EQ(w.source, "recipe default");
  Recipe r = c.precision.recipe;
  apply_scale_settings(c.precision, r);
  EXPECT_EQ(r.role(Role::input).amax_epsilon, 1e-12f);
  EXPECT_EQ(r.role(Role::grad).amax_epsilon, 2e-9f);
  for (const TensorFormat& f : r.roles) EXPECT_EQ(f.scale, ScaleType::fp32);
  const std::string line = describe_scale_settings(c.precision);
  EXPECT_NE(line.find("FP32 scales"), std::string::npos) << line;
  EXPECT_NE(line.find("grad 2e-09 (FP8_QUANT_BWD_GRAD_AMAX_EPS)"), std::string::npos) << line;
  ::setenv("FP8_QUANT_BWD_GRAD_AMAX_EPS", "-1", 1);
  try {
    resolve_amax_epsilon({}, Role::grad, c.precision.recipe);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FP8_QUANT_BWD_GRAD_AMAX_EPS=-1 is not a finite number"),
              std::string::npos) << e.what();
  }
  ::unsetenv("FP8_QUANT_FWD_INP_AMAX_EPS");
  ::unsetenv("FP8_QUANT_BWD_GRAD_AMAX_EPS");

  // An MX recipe keeps its settings: the environment is not read for it.
  Recipe mx = get_recipe("mxfp8");
  apply_scale_settings(parse_config(kBase).precision, mx);
  EXPECT_EQ(mx, get_recipe("mxfp8"));
  EXPECT_EQ(describe_scale_settings(parse_config(kBase).precision), "");

  expect_error(with("recipe: mxfp8", "recipe: mxfp8, fp32_scales: true"),
               {"precision.fp32_scales", "FP32 scales", "e8m0"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, weight_amax_epsilon: 1e-12"),
               {"precision.weight_amax_epsilon", "FP32 scales"});
  expect_error(with("recipe: mxfp8", "recipe: blockwise, input_amax_epsilon: -1"),
               {"precision.input_amax_epsilon", "finite number >= 0"});
  expect_error(with("recipe: mxfp8", "recipe: blockwise, input_amax_epsilon: .nan"),
               {"precision.input_amax_epsilon", "finite number >= 0"});
  expect_error(with("recipe: mxfp8", "recipe: blockwise, grad_amax_epsilon: small"),
               {"precision.grad_amax_epsilon"});
}

// The 4-bit switches (precision.fp4_*, nvfp4_order): parsed, written back, applied to the
// recipe, described at start-up, and refused on recipes they do not apply to.
TEST(Config, Fp4Switches) {
  const auto with = replaced;
  TrainConfig c = parse_config(with("recipe: mxfp8", "recipe: nvfp4, fp4_stochastic_rounding: "
                                    "false, fp4_rht: off, fp4_2d_weights: recipe, nvfp4_order: te"));
  EXPECT_EQ(c.precision.fp4_stochastic_rounding.value, false);
  EXPECT_EQ(c.precision.fp4_rht.value, false);
  EXPECT_FALSE(c.precision.fp4_2d_weights.value.has_value());
  EXPECT_EQ(c.precision.nvfp4_order.value, Nvfp4Order::te);
  const TrainConfig back = parse_config(config_to_yaml(c));
  EXPECT_EQ(back.precision.fp4_stochastic_rounding, c.precision.fp4_stochastic_rounding);
  EXPECT_EQ(back.precision.fp4_rht, c.precision.fp4_rht);
  EXPECT_EQ(back.precision.fp4_2d_weights, c.precision.fp4_2d_weights);
  EXPECT_EQ(back.precision.nvfp4_order, c.precision.nvfp4_order);
  Recipe r = c.precision.recipe;
  apply_scale_settings(c.precision, r);
  EXPECT_FALSE(r.role(Role::grad).stochastic);
  EXPECT_FALSE(r.role(Role::input).rht || r.role(Role::grad).rht);
  EXPECT_EQ(r.role(Role::weight).block, BlockShape::b16x16);
  for (const TensorFormat& f : r.roles) EXPECT_EQ(f.order, Nvfp4Order::te);
  const std::string line = describe_scale_settings(c.precision);
  EXPECT_NE(line.find("rounded to nearest even"), std::string::npos) << line;
  EXPECT_NE(line.find("te order"), std::string::npos) << line;
  // Unset: the recipe as registered.
  Recipe d = get_recipe("nvfp4");
  apply_scale_settings(parse_config(with("recipe: mxfp8", "recipe: nvfp4")).precision, d);
  EXPECT_EQ(d, get_recipe("nvfp4"));
  // mxfp4 takes the three switches, not the order.
  TrainConfig m = parse_config(with("recipe: mxfp8", "recipe: mxfp4, fp4_2d_weights: true"));
  Recipe mr = m.precision.recipe;
  apply_scale_settings(m.precision, mr);
  EXPECT_EQ(mr.role(Role::weight).block, BlockShape::b32x32);
  expect_error(with("recipe: mxfp8", "recipe: mxfp4, nvfp4_order: te"),
               {"precision.nvfp4_order", "nvfp4"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, fp4_rht: true"),
               {"precision.fp4_rht", "4-bit recipes (nvfp4, mxfp4)", "mxfp8"});
  expect_error(with("recipe: mxfp8", "recipe: nvfp4, fp4_stochastic_rounding: maybe"),
               {"precision.fp4_stochastic_rounding", "true, false or `recipe`"});
  expect_error(with("recipe: mxfp8", "recipe: nvfp4, nvfp4_order: cuda"),
               {"precision.nvfp4_order", "torchao (default), te"});
}

TEST(Config, GlobMatch) {
  EXPECT_TRUE(glob_match("layers.0.*", "layers.0.attention.qkv"));
  EXPECT_FALSE(glob_match("layers.0.*", "layers.10.attention.qkv"));
  EXPECT_TRUE(glob_match("*.fc?", "layers.3.mlp.fc1"));
  EXPECT_TRUE(glob_match("*experts*", "layers.3.mlp.experts.fc2"));
  EXPECT_FALSE(glob_match("layers.*.qkv", "layers.3.attention.proj"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("", "x"));
}

}  // namespace
}  // namespace mxtrain
