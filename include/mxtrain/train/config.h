// mxtrain/train/config.h — the training configuration: YAML file + command-line overrides.
//
// A config has four sections: `model` (nn/transformer.h ModelConfig, and the tokenizer),
// `training` (optimizer,
// schedule, batch, checkpoints), `data` (corpus) and `precision` (recipe, scale rounding,
// defer_backward_quant, first/last-N BF16 layers, name-glob overrides, adaptive FP8 policy),
// plus `fsdp`. Parsing is strict: an unknown key or a bad value is an error that names the key
// (`training.lr: must be > 0, got -1`), so a typo never silently runs the default. Command-line
// flags are overrides of single keys, parsed in the same pass (ConfigOverride).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain {

struct TrainingConfig {
  int64_t steps = 200;
  int seq_len = 128;
  int micro_batch_size = 8;
  int grad_accum = 1;
  float lr = 3e-3f;
  float min_lr = 3e-4f;
  int64_t warmup_steps = 20;
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;              // global-norm clip; 0 disables
  uint64_t seed = 1234;
  int64_t eval_every = 50;             // 0 disables periodic validation
  int eval_batches = 8;
  int64_t checkpoint_every = 0;        // 0: only at the end (when a checkpoint dir is set)
  int keep_checkpoints = 2;
  int max_nonfinite_steps = 5;         // stop with an error after this many skipped steps
  // Activations the backward recomputes instead of keeping: none | attention | layer
  // (nn/transformer.h, Recompute).
  std::string recompute = "none";
};

struct DataConfig {
  std::string path = "fortunes";       // "fortunes" = the Debian fortunes corpus
  float val_fraction = 0.05f;
};

// Parsed once: recipes are registry values (recipe.h), not names.
// precision.<role>_amax_epsilon: a number (>= 0, finite), or `auto`: the role's environment
// variable (LoongForge's FP8_QUANT_FWD_INP_AMAX_EPS, FP8_QUANT_FWD_WEIGHT_AMAX_EPS,
// FP8_QUANT_BWD_GRAD_AMAX_EPS) when it is set, else the recipe's own (0).
struct AmaxEpsilon {
  std::optional<float> value;  // nullopt: auto
  bool operator==(const AmaxEpsilon&) const = default;
};
// The environment variable an `auto` epsilon of `role` reads.
const char* amax_epsilon_env(Role role);
// The epsilon a run uses for `role` and where it came from ("precision.input_amax_epsilon",
// "FP8_QUANT_FWD_INP_AMAX_EPS" or "recipe default"). Throws on an environment value that is
// not a finite decimal number >= 0.
struct ResolvedEpsilon {
  float value = 0.f;
  std::string source;
};
ResolvedEpsilon resolve_amax_epsilon(const AmaxEpsilon& e, Role role, const Recipe& r);

struct PrecisionConfig {
  Recipe recipe = get_recipe("mxfp8");
  ScaleRounding scale_rounding = ScaleRounding::rceil;  // applied to every FP8 recipe used
  bool defer_backward_quant = false;
  int bf16_first_layers = 0;
  int bf16_last_layers = 0;
  Recipe lm_head;  // the LM head's recipe (bf16)
  // SwiGLU input kept for backward: auto (FP8 where fc1 runs an FP8 recipe without
  // defer_backward_quant) | fp32 | fp8 (nn/fp8_activation.h)
  SwigluInput swiglu_input = SwigluInput::follow_fc1;
  // Module-name glob -> recipe, applied in order; the last match wins.
  std::vector<std::pair<std::string, Recipe>> overrides;
  bool selective_fp8 = false;
  std::string fp8_dynamic_policy_path;
  // A policy measured with another FP8 recipe than `recipe`: a warning instead of an error.
  bool allow_policy_recipe_mismatch = false;
  // Token count used for policy decisions, per model component (key "" = whole model).
  std::map<std::string, int64_t> fp8_dynamic_num_tokens;
  // FP32-scaled recipes (blockwise) only: plain FP32 scales instead of powers of two, and the
  // amax epsilon per role (docs/config.md). Applied to every FP32-scaled recipe the run uses.
  bool fp32_scales = false;
  std::array<AmaxEpsilon, kNumRoles> amax_epsilon;  // by Role
  // Delayed-scaling recipes (fp8-delayed) only: the amax history (TransformerEngine's
  // amax_history_len, margin, amax_compute_algo; docs/config.md). Applied to every
  // delayed-scaling recipe the run uses; any other value than the default on another recipe
  // is refused.
  AmaxHistorySpec amax_history{1024, 0, AmaxAlgo::max};
};

struct FsdpConfig {
  bool enabled = false;
  std::string mxfp8_gather = "on-demand";  // "on-demand" | "all"
  int prefetch = 1;  // modules whose weights are gathered ahead of use (0: none; at most 8)
  bool progress_thread = false;  // a thread drives MPI transfers during compute
};

// Megatron's parallel layouts (docs/distributed.md, "Parallel layouts"; dist/mesh.h): dense
// layers split over tp ranks (dp = world / tp), experts over ep ranks (edp = world / (ep·etp)).
// All 1 and off: one process, or FSDP alone.
struct ParallelConfig {
  int tp = 1, ep = 1, etp = 1;
  bool sequence_parallel = false;
  // What sequence parallelism's all-gathers carry (nn/parallel.h, SequenceWire): exact | rowwise.
  SequenceWire sp_wire = SequenceWire::exact;
  bool used() const { return tp > 1 || ep > 1 || etp > 1; }
};

struct TrainConfig {
  ModelConfig model;
  // model.tokenizer: a SentencePiece model file (corpus/tokenizer.h); "" = byte-level.
  std::string tokenizer;
  TrainingConfig training;
  DataConfig data;
  PrecisionConfig precision;
  FsdpConfig fsdp;
  ParallelConfig parallel;
  std::string source_text;  // the YAML text (after overrides are applied, re-emitted)
  std::string source_path;  // the file it was read from (load_config), "" when given as text
  // The tokenizer model file's contents, read once when training starts (not YAML):
  // checkpoints store them as tokenizer.model. Empty for byte-level.
  std::string tokenizer_model;

  void validate() const;    // cross-field checks (seq_len <= max_seq_len, ...)
};

// One setting given outside the file (a command-line flag): `key` is the dotted YAML key
// (`training.steps`), `value` its text as a YAML scalar would hold it, `flag` what the user
// typed (`--steps`), named in the error when the value is bad.
struct ConfigOverride {
  std::string key, value, flag;
};

// Parse YAML text / file, with the overrides put in place of (or beside) the file's values
// before anything is interpreted: each one is converted and checked once, exactly as the
// same value in the file. Throws mxtrain::Error naming the offending key (and the flag).
TrainConfig parse_config(const std::string& yaml_text, const std::string& origin = "<config>",
                         const std::vector<ConfigOverride>& overrides = {});
TrainConfig load_config(const std::string& path, const std::vector<ConfigOverride>& overrides = {});
// Canonical YAML of a config (used for checkpoints and consistency checks across ranks).
std::string config_to_yaml(const TrainConfig& c);

// Settings of `training`, `data`, `precision` and `fsdp` that differ between two configs,
// one "key: old -> new" line each, in field order (resuming prints these).
std::vector<std::string> config_changes(const TrainConfig& before, const TrainConfig& after);
// The same for the `model` section (`model.d_model: 128 -> 256`, `model.moe.top_k: 2 -> 1`).
std::vector<std::string> model_changes(const ModelConfig& before, const ModelConfig& after);

// Glob match with '*' (any run of characters, including dots) and '?'.
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace mxtrain
