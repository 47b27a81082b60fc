// mxtrain/train/precision.h — per-module precision decisions at model build.
//
// Every quantizable module (nn/transformer.h ModuleInfo) gets a LinearPrecision from, in
// order of precedence:
//   1. name-glob overrides (`layers.0.*: bf16`; the last matching pattern wins),
//   2. first/last-N transformer layers in BF16,
//   3. the LM head's own recipe (`precision.lm_head`, BF16 by default),
//   4. the adaptive FP8 policy when `selective_fp8` is on (no matching rule -> BF16; a rule
//      naming its recipe -> that recipe, else the run's),
//   5. the run's recipe.
// Each decision is recorded with the reason, printed as a table at start-up and written as
// JSON by `--decisions-out`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/train/config.h"

namespace mxtrain {

struct ModuleDecision {
  std::string module, kind, name;
  int64_t tokens = 0;        // tokens the decision was made for (× top-k for experts)
  std::string precision;     // "bf16" or the FP8 recipe name
  std::string reason;
  int tp = 1, etp = 1;       // the layout it was decided at (parallel.tp; experts parallel.etp)
};

// An adaptive-FP8 oracle: given a module and its token count per micro-batch (before
// top-k), says whether FP8 pays off (and why), and in which recipe. Supplied by the policy
// module; empty when selective FP8 is off.
struct PolicyVerdict {
  bool use_fp8 = false;
  std::string reason;
  std::string recipe;  // the registered recipe the rule names; "" = the run's recipe
};
using PolicyOracle = std::function<PolicyVerdict(const ModuleInfo& m, int64_t tokens)>;

class PrecisionResolver {
 public:
  PrecisionResolver(const TrainConfig& cfg, PolicyOracle policy = {});
  // Decide one module and record the decision.
  LinearPrecision operator()(const ModuleInfo& m);
  const std::vector<ModuleDecision>& decisions() const { return decisions_; }
  // Token count used for policy decisions of this module (dense: seq_len × micro-batch or
  // the fp8_dynamic_num_tokens override; experts: that × top-k).
  int64_t tokens_for(const ModuleInfo& m) const;

 private:
  const TrainConfig& cfg_;
  PolicyOracle policy_;
  std::vector<ModuleDecision> decisions_;
};

// The run's scale settings on any module's recipe (the run's, an override's, or the one a
// policy rule names): on an FP32-scaled recipe (blockwise, fp8-current, fp8-delayed;
// has_fp32_scales), applies
// the run's fp32_scales and each role's amax epsilon (resolve_amax_epsilon: the config key,
// else the LoongForge environment variable, else the recipe's), and on a delayed-scaling one
// (uses_amax_history) the run's amax history; other recipes are left as they are. The
// resolver applies it to every module's recipe.
void apply_scale_settings(const PrecisionConfig& p, Recipe& r);
// One line for the start of a run on an FP32-scaled recipe, naming the scale type, each
// role's epsilon with where it came from and the amax history; "" for other recipes.
std::string describe_scale_settings(const PrecisionConfig& p);

// layernorm_column / column -> column_grouped, row -> row_grouped.
std::string grouped_kind(const std::string& kind);

// Human-readable table of decisions (one line per module).
std::string format_decisions(const std::vector<ModuleDecision>& d);
// JSON array text with module, kind, name, tokens, precision, reason.
std::string decisions_json(const std::vector<ModuleDecision>& d);

}  // namespace mxtrain
