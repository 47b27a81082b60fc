// train/policy_oracle.cc — bridging policy::decide to the precision resolver: the recipe
// checks at load (train/policy_oracle.h) and, per module, the verdict with the recipe a rule
// names.
#include "mxtrain/train/policy_oracle.h"

#include <algorithm>
#include <map>
#include <memory>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"
#include "mxtrain/recipe.h"

namespace mxtrain {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Why recipe r cannot run at a tensor/expert-parallel layout ("" when it can): the rule the
// config parser states for the run's recipe, the LM head's and the overrides'.
std::string layout_refusal(const Recipe& r) {
  if (r.role(Role::weight).block == BlockShape::tensor)
    return "one scale per tensor is not built for tensor or expert parallelism (each rank's "
           "slice would need an amax agreed over its group); name an MX or blockwise recipe "
           "in that rule, or use --fsdp";
  return "";
}

}  // namespace

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

std::string check_policy_recipes(const std::string& path, const policy::Policy& p,
                                 const PrecisionConfig& precision) {
  if (!p.names_recipes_per_rule()) return check_policy_recipe(path, p.recipe, precision);
  const std::string& run = precision.recipe.name;
  if (!precision.recipe.quantized()) return "";  // a BF16 run consults no policy
  const size_t implicit = p.num_rules_naming_no_recipe();
  const std::vector<std::string> measured = p.recipes();
  // "its rule that names no recipe was" / "its 3 rules that name no recipe were".
  const bool one = implicit == 1;
  const std::string rules = one ? "its rule that names no recipe"
                                : "its " + std::to_string(implicit) + " rules that name no recipe";
  std::string what, fix;
  if (implicit > 0 && p.recipe.empty())
    return "policy " + path + " records no recipe for " + rules + ", so " +
           (one ? "it cannot" : "they cannot") + " be checked against this run's recipe " + run +
           "; " + (one ? "it runs " : "they run ") + run;
  if (implicit > 0 && p.recipe != run) {
    what = "policy " + path + ": " + rules + (one ? " was" : " were") +
           " measured with recipe " + p.recipe + " but this run uses " + run + ", which " +
           (one ? "it" : "they") + " would run";
    fix = "; re-run bench-layers --recipe " + run + ", name each rule's recipe, or pass "
          "--allow-policy-recipe-mismatch";
  } else if (std::find(measured.begin(), measured.end(), run) == measured.end()) {
    what = "policy " + path + " was measured with recipe" + (measured.size() == 1 ? " " : "s ") +
           join(measured) +
           " but this run uses " + run + " (its rules run the recipes they name)";
    fix = "; re-run bench-layers --recipe " + run + " and merge its report in, or pass "
          "--allow-policy-recipe-mismatch";
  } else {
    return "";
  }
  MXT_CHECK(precision.allow_policy_recipe_mismatch, what, fix);
  return what + "; using it anyway (precision.allow_policy_recipe_mismatch)";
}

PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg,
                                std::string* warning) {
  auto pol = std::make_shared<policy::Policy>(policy::load_policy(path));
  const std::string w = check_policy_recipes(path, *pol, cfg.precision);
  if (warning) *warning = w;
  // The layout the run decides at: its tensor-parallel size for dense modules; for experts
  // the expert-tensor-parallel size and the experts one rank holds.
  const int tp = cfg.parallel.tp, etp = cfg.parallel.etp, ep = cfg.parallel.ep;
  // Recipes the rules name that cannot run at this layout, with the reason.
  auto refused = std::make_shared<std::map<std::string, std::string>>();
  if (cfg.parallel.used())
    for (const std::string& name : pol->recipes())
      if (policy::recipe_rank(name) < registered_recipes().size())
        if (std::string why = layout_refusal(get_recipe(name)); !why.empty())
          (*refused)[name] = why;
  return [pol, refused, path, tp, etp, ep](const ModuleInfo& m, int64_t base_tokens) {
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
    PolicyVerdict v{d.use_fp8, d.reason, d.rule_names_recipe ? d.recipe : ""};
    if (auto it = refused->find(v.recipe); !v.recipe.empty() && it != refused->end())
      MXT_FAIL("policy ", path, ": the rule for ", policy::rule_key(d.kind, m.name, *d.rule),
               " gives module ", m.module, " recipe ", v.recipe, ", but ", it->second);
    return v;
  };
}

}  // namespace mxtrain
