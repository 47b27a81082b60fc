// train/policy_oracle.cc — bridging policy::decide to the precision resolver.
#include "mxtrain/train/policy_oracle.h"

#include <memory>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain {

std::string check_policy_recipe(const std::string& path, const std::string& policy_recipe,
                                const PrecisionConfig& precision) {
  const std::string& run = precision.recipe.name;
  if (!precision.recipe.quantized()) return "";  // a BF16 run consults no policy
  if (policy_recipe.empty())
    return "policy " + path + " records no FP8 recipe (written before policies carried one), "
           "so it cannot be checked against this run's recipe " + run +
           "; re-run bench-layers --recipe " + run + " to record it";
  if (policy_recipe == run) return "";
  const std::string what = "policy " + path + " was measured with recipe " + policy_recipe +
                           " but this run uses " + run;
  MXT_CHECK(precision.allow_policy_recipe_mismatch, what, "; re-run bench-layers --recipe ",
            run, ", or pass --allow-policy-recipe-mismatch");
  return what + "; using it anyway (precision.allow_policy_recipe_mismatch)";
}

PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg,
                                std::string* warning) {
  auto pol = std::make_shared<policy::Policy>(policy::load_policy(path));
  const std::string w = check_policy_recipe(path, pol->recipe, cfg.precision);
  if (warning) *warning = w;
  // The layout the run decides at: its tensor-parallel size for dense modules; for experts
  // the expert-tensor-parallel size and the experts one rank holds.
  const int tp = cfg.parallel.tp, etp = cfg.parallel.etp, ep = cfg.parallel.ep;
  return [pol, tp, etp, ep](const ModuleInfo& m, int64_t base_tokens) {
    policy::DecisionQuery q;
    q.kind = m.kind;
    q.name = m.name;
    q.tp = tp;
    q.is_expert = m.is_expert;
    q.etp = etp;
    q.num_gemms = m.num_experts / ep;
    q.top_k = m.is_expert ? m.top_k : 1;
    q.tokens = base_tokens;
    const policy::Decision d = policy::decide(*pol, q);
    return PolicyVerdict{d.use_fp8, d.reason};
  };
}

}  // namespace mxtrain
