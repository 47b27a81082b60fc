// train/policy_oracle.cc — bridging policy::decide to the precision resolver.
#include "mxtrain/train/policy_oracle.h"

#include <memory>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain {

PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg) {
  auto pol = std::make_shared<policy::Policy>(policy::load_policy(path));
  const std::string& recipe = cfg.precision.recipe.name;
  MXT_CHECK(pol->recipe.empty() || pol->recipe == recipe, "FP8 policy `", path,
            "` was measured with recipe `", pol->recipe, "` but training uses `", recipe,
            "`; re-run bench-layers with --recipe ", recipe);
  return [pol](const ModuleInfo& m, int64_t base_tokens) {
    policy::DecisionQuery q;
    q.kind = m.kind;
    q.name = m.name;
    q.tp = 1;
    q.is_expert = m.is_expert;
    q.etp = 1;
    q.num_gemms = m.num_experts;
    q.top_k = m.is_expert ? m.top_k : 1;
    q.tokens = base_tokens;
    const policy::Decision d = policy::decide(*pol, q);
    return PolicyVerdict{d.use_fp8, d.reason};
  };
}

}  // namespace mxtrain
