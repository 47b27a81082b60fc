// mxtrain/train/policy_oracle.h — the adaptive-FP8 policy as seen by the precision resolver.
//
// Loads a policy file (policy/policy.h) and answers, per module, whether FP8 pays off at the
// module's token count, at the run's layout (parallel.tp, ep, etp; docs/distributed.md):
// dense modules are looked up by (kind, name, tp); experts are promoted to the grouped kind and
// looked up by (etp, num_gemms = the experts one rank holds, experts / ep), with tokens ×
// top-k (an expert-parallel rank's experts see that many rows on average). A rule that names
// its recipe gives the module that recipe; one that names none, the run's.
#pragma once

#include <string>

#include "mxtrain/train/config.h"
#include "mxtrain/train/precision.h"

namespace mxtrain {

namespace policy {
struct Policy;
}

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

// The recipe rules of a policy whose rules may name their recipes
// (docs/adaptive.md, "Recipes per rule"). A policy that names none per rule
// (Policy::names_recipes_per_rule() is false: every file before per-rule recipes) goes
// through check_policy_recipe unchanged. Otherwise, for a quantized run recipe R:
//   * rules naming no recipe run R, so they are checked as a whole policy was: the policy's
//     `recipe` must be R — refused, unless allow_policy_recipe_mismatch (then a warning and
//     they run R); with no `recipe` recorded, a warning that they cannot be checked;
//   * rules naming their recipe run it, whatever R is: what was measured is what runs, so
//     they are never a mismatch;
//   * R must be among the recipes the policy was measured with (Policy::recipes()): the
//     keys it leaves in BF16 were compared with those, not with R — refused, unless
//     allow_policy_recipe_mismatch (a warning; the rules still run the recipes they name).
// Returns the one warning line, or "".
std::string check_policy_recipes(const std::string& path, const policy::Policy& p,
                                 const PrecisionConfig& precision);

// Loads the policy and applies check_policy_recipes; its warning goes to `*warning` when
// given. At a tensor/expert-parallel layout, a module whose rule names a recipe that cannot
// run there (one scale per tensor; NVFP4's per-tensor scale) is refused when it is decided,
// naming the module, the rule's key and the recipe.
PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg,
                                std::string* warning = nullptr);

}  // namespace mxtrain
