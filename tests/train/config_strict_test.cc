// Tests that a config means what it says: required sections, duplicate keys, non-finite
// numbers, bounded nesting and alias expansion are errors naming the key; config_changes
// lists what differs between two configs (printed on resume); command-line overrides are
// checked as the same value in the file would be, and their errors name the flag.
#include <gtest/gtest.h>

#include "mxtrain/common.h"
#include "mxtrain/train/config.h"

namespace mxtrain {
namespace {

const std::string kModel =
    "model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32}\n";
const std::string kTraining = "training: {steps: 10, seq_len: 32, micro_batch_size: 2}\n";
const std::string kPrecision = "precision: {recipe: mxfp8}\n";

std::string error_of(const std::string& text, const std::vector<ConfigOverride>& overrides = {}) {
  try {
    parse_config(text, "test.yaml", overrides);
  } catch (const Error& e) {
    // The message without the " [file:line]" MXT_CHECK appends.
    std::string m = e.what();
    const size_t at = m.rfind(" [");
    return at != std::string::npos && m.back() == ']' ? m.substr(0, at) : m;
  }
  return "<no error>";
}

TEST(ConfigStrict, MissingSectionsAreNamed) {
  EXPECT_EQ(error_of(kTraining + kPrecision),
            "test.yaml: missing required section `model:` (the model's shape: d_model, "
            "n_layers, n_heads, d_ff, max_seq_len)");
  EXPECT_EQ(error_of(kModel + kTraining),
            "test.yaml: missing required section `precision:` (at least `recipe:`)");
  EXPECT_EQ(error_of("model:\n" + kTraining + kPrecision),
            "test.yaml: missing required section `model:` (the model's shape: d_model, "
            "n_layers, n_heads, d_ff, max_seq_len)");
  EXPECT_EQ(error_of(""), "test.yaml: missing required section `model:` (the model's shape: "
                          "d_model, n_layers, n_heads, d_ff, max_seq_len)");
  // Optional sections may be absent; precision without overrides has none.
  TrainConfig c = parse_config(kModel + "training: {seq_len: 32}\n" + kPrecision, "test.yaml");
  EXPECT_TRUE(c.precision.overrides.empty());
  EXPECT_EQ(c.training.steps, TrainConfig().training.steps);
  EXPECT_EQ(c.data.path, "fortunes");
}

TEST(ConfigStrict, DuplicateKeysAreErrors) {
  EXPECT_EQ(error_of(kModel + kTraining + "precision:\n  recipe: bf16\n  recipe: mxfp8\n"),
            "test.yaml: duplicate key `precision.recipe` (each key may appear once)");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision + "training: {steps: 3}\n"),
            "test.yaml: duplicate key `training` (each key may appear once)");
  EXPECT_EQ(error_of(kModel + "training: {lr: 0.1, steps: 2, lr: 0.2}\n" + kPrecision),
            "test.yaml: duplicate key `training.lr` (each key may appear once)");
}

TEST(ConfigStrict, NonFiniteNumbersAreErrors) {
  EXPECT_EQ(error_of(kModel + "training: {lr: .inf}\n" + kPrecision),
            "test.yaml: `training.lr` must be a finite number, got `.inf`");
  EXPECT_EQ(error_of(kModel + "training: {weight_decay: -.inf}\n" + kPrecision),
            "test.yaml: `training.weight_decay` must be a finite number, got `-.inf`");
  EXPECT_EQ(error_of(kModel + "training: {grad_clip: .nan}\n" + kPrecision),
            "test.yaml: `training.grad_clip` must be a finite number, got `.nan`");
  EXPECT_EQ(error_of("model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, "
                     "max_seq_len: 32, init_std: .inf}\n" + kPrecision),
            "test.yaml: `model.init_std` must be a finite number, got `.inf`");
}

TEST(ConfigStrict, NestingAndAliasExpansionAreBounded) {
  std::string deep = kModel + kPrecision + "extra: ";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 40; ++i) deep += "]";
  EXPECT_NE(error_of(deep).find("test.yaml: nested deeper than 32 levels at `extra[0]"),
            std::string::npos)
      << error_of(deep);
  // Each alias doubles the tree: 2^20 nodes from a few lines.
  std::string laughs = kModel + kPrecision + "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 20; ++i)
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" +
              std::to_string(i - 1) + ", *a" + std::to_string(i - 1) + "]\n";
  EXPECT_EQ(error_of(laughs), "test.yaml: more than 100000 YAML nodes (aliases expanding?)");
  // Thousands of levels: yaml-cpp's own limit, reported as invalid YAML (no crash).
  std::string very_deep(100000, '[');
  EXPECT_NE(error_of(very_deep).find("test.yaml: not valid YAML"), std::string::npos);
}

TEST(ConfigStrict, ChangesListWhatDiffers) {
  const TrainConfig a = parse_config(kModel + kTraining + kPrecision, "a.yaml");
  const TrainConfig b = parse_config(
      kModel + "training: {steps: 20, seq_len: 32, micro_batch_size: 2, lr: 0.01}\n" +
          "precision: {recipe: bf16}\n",
      "b.yaml");
  EXPECT_EQ(config_changes(a, b),
            (std::vector<std::string>{"precision.recipe: mxfp8 -> bf16", "training.lr: 0.003 -> 0.01",
                                      "training.steps: 10 -> 20"}));
  EXPECT_TRUE(config_changes(a, a).empty());
}

// Overrides (mxtrain train's --steps, --recipe, ...) go through the file's checks, once, and
// a bad one names the flag; values from the file still name the file.
TEST(ConfigOverrides, AppliedAndCheckedLikeFileValues) {
  const TrainConfig c = parse_config(kModel + kTraining + kPrecision, "test.yaml",
                                     {{"training.steps", "7", "--steps"},
                                      {"data.path", "a: b.txt", "--data"},
                                      {"fsdp.enabled", "true", "--fsdp"},
                                      {"training.seed", "18446744073709551615", "--seed"}});
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_EQ(c.data.path, "a: b.txt");  // a plain string, never re-read as YAML
  EXPECT_TRUE(c.fsdp.enabled);
  EXPECT_EQ(c.training.seed, 18446744073709551615ull);
  EXPECT_EQ(parse_config(c.source_text, "again").training.steps, 7);  // recorded as run

  EXPECT_EQ(error_of(kModel + kTraining + kPrecision, {{"training.steps", "0", "--steps"}}),
            "--steps: `training.steps` must be >= 1, got 0");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision,
                     {{"training.micro_batch_size", "0", "--micro-batch-size"}}),
            "--micro-batch-size: `training.micro_batch_size` must be >= 1, got 0");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision,
                     {{"training.seq_len", "99999999999", "--seq-len"}}),
            "--seq-len: `training.seq_len` must be between -2147483648 and 2147483647, got "
            "99999999999");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision, {{"training.seed", "-1", "--seed"}}),
            "--seed: `training.seed` must be between 0 and 18446744073709551615, got -1");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision, {{"training.seq_len", "64", "--seq-len"}}),
            "--seq-len: training.seq_len (64) exceeds model.max_seq_len (32)");
  EXPECT_EQ(error_of(kModel + kTraining + kPrecision, {{"precision.recipe", "nope", "--recipe"}})
                .rfind("--recipe: `precision.recipe`: unknown recipe 'nope'", 0),
            0u);
  // A cross-field rule broken by the flag names the flag.
  EXPECT_EQ(error_of(kModel + kTraining + "precision: {recipe: mxfp8, defer_backward_quant: true}\n",
                     {{"precision.recipe", "bf16", "--recipe"}}),
            "--recipe: `precision.defer_backward_quant` is only valid with an FP8 recipe "
            "(recipe is `bf16`)");
  // A delayed-scaling setting on a recipe without an amax history names the flag's recipe.
  EXPECT_EQ(error_of(kModel + kTraining + "precision: {recipe: fp8-delayed, amax_history_len: 16}\n",
                     {{"precision.recipe", "fp8-current", "--recipe"}}),
            "test.yaml: `precision.amax_history_len` applies to recipes with delayed scaling "
            "(fp8-delayed: scales from an amax history); recipe 'fp8-current' takes each scale "
            "from the tensor it scales");
  // The file's own bad value still names the file, even with overrides given.
  EXPECT_EQ(error_of(kModel + "training: {steps: 0}\n" + kPrecision,
                     {{"data.path", "x.txt", "--data"}}),
            "test.yaml: `training.steps` must be >= 1, got 0");
}

TEST(ConfigChanges, ModelChangesNameEachKeyWithBothValues) {
  const TrainConfig a = parse_config(kModel + kTraining + kPrecision, "a");
  TrainConfig b = a;
  EXPECT_TRUE(model_changes(a.model, b.model).empty());
  b.model.d_model = 128;
  b.model.moe_top_k = 1;
  EXPECT_EQ(model_changes(a.model, b.model),
            (std::vector<std::string>{"model.d_model: 64 -> 128", "model.moe.top_k: 2 -> 1"}));
}

}  // namespace
}  // namespace mxtrain
