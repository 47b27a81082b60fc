// Tests for train/config.h: strict YAML parsing, errors that name the key, round trip.
#include "mxtrain/train/config.h"

#include <gtest/gtest.h>

#include "mxtrain/common.h"

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
                        "recipe: mxfp8-32x32, swiglu_input: fp8"})
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
               {"precision.swiglu_input", "auto, fp32 or fp8"});
  expect_error(with("recipe: mxfp8", "recipe: bf16, swiglu_input: fp8"),
               {"swiglu_input", "FP8 recipe"});
  expect_error(with("recipe: mxfp8", "recipe: mxfp8, selective_fp8: true"),
               {"fp8_dynamic_policy_path"});
  expect_error(with("seq_len: 32, micro", "seq_len: 64, micro"), {"seq_len", "max_seq_len"});
  expect_error(with("n_heads: 2", "n_heads: 3"), {"model"});
  expect_error(std::string(kBase) + "fsdp: {prefetch: 9}\n", {"fsdp.prefetch", "between 0 and 8"});
  expect_error(std::string(kBase) + "fsdp: {progress_thread: maybe}\n",
               {"fsdp.progress_thread", "wrong type"});
  expect_error("model: [1, 2]\n", {"`model` must be a mapping"});
  expect_error("model: {d_model: 64\n", {"not valid YAML"});
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
