// mxtrain/train/policy_oracle.h — the adaptive-FP8 policy as seen by the precision resolver.
//
// Loads a policy file (policy/policy.h) and answers, per module, whether FP8 pays off at the
// module's token count, at the run's layout (parallel.tp, ep, etp; docs/distributed.md):
// dense modules are looked up by (kind, name, tp); experts are promoted to the grouped kind and
// looked up by (etp, num_gemms = the experts one rank holds, experts / ep), with tokens ×
// top-k (an expert-parallel rank's experts see that many rows on average).
#pragma once

#include <string>

#include "mxtrain/train/config.h"
#include "mxtrain/train/precision.h"

namespace mxtrain {

// The recipe rule (docs/adaptive.md §4): a policy that records a recipe other than the run's
// `precision.recipe` is refused with
//   "policy P was measured with recipe A but this run uses B; re-run bench-layers --recipe B,
//    or pass --allow-policy-recipe-mismatch"
// unless `precision.allow_policy_recipe_mismatch`, which turns it into a warning; a policy
// that records no recipe (an older file) is accepted with a warning that it cannot be
// checked. Returns that one warning line (without "warning: "), or "" when the recipes
// agree or the run's recipe is bf16 (which consults no policy).
std::string check_policy_recipe(const std::string& path, const std::string& policy_recipe,
                                const PrecisionConfig& precision);

// Loads the policy and applies check_policy_recipe; its warning goes to `*warning` when given.
PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg,
                                std::string* warning = nullptr);

}  // namespace mxtrain
