// train/precision.cc — resolving each module's precision (train/precision.h).
#include "mxtrain/train/precision.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain {

// Expert modules are promoted to the grouped kind of their dense counterpart
// (docs/adaptive.md §6).
std::string grouped_kind(const std::string& kind) {
  return kind == "row" ? "row_grouped" : "column_grouped";
}

PrecisionResolver::PrecisionResolver(const TrainConfig& cfg, PolicyOracle policy)
    : cfg_(cfg), policy_(std::move(policy)) {
  MXT_CHECK(!cfg.precision.selective_fp8 || policy_,
            "selective_fp8 is on but no FP8 policy was loaded");
}

// Tokens of one micro-batch on one rank (micro_batch_size is per rank), so an FSDP rank
// decides exactly as one process with the same micro-batch does.
int64_t PrecisionResolver::tokens_for(const ModuleInfo& m) const {
  const auto& nt = cfg_.precision.fp8_dynamic_num_tokens;
  int64_t tokens = int64_t(cfg_.training.seq_len) * cfg_.training.micro_batch_size;
  // Component override: the longest key that prefixes the module name, or "" for all.
  size_t best = 0;
  bool found = false;
  for (const auto& [k, v] : nt) {
    if (m.module.compare(0, k.size(), k) == 0 && (!found || k.size() >= best)) {
      tokens = v;
      best = k.size();
      found = true;
    }
  }
  return m.is_expert ? tokens * m.top_k : tokens;
}

void apply_scale_settings(const PrecisionConfig& p, Recipe& r) {
  if (uses_amax_history(r)) set_amax_history(r, p.amax_history);
  if (is_4bit(r)) {
    Fp4Switches sw{p.fp4_stochastic_rounding.value, p.fp4_rht.value, p.fp4_2d_weights.value,
                   {}};
    if (r.role(Role::weight).tensor_scale) sw.order = p.nvfp4_order.value;
    set_fp4_switches(r, sw);
  }
  if (!has_fp32_scales(r)) return;
  if (p.fp32_scales) set_fp32_scales(r);
  for (int i = 0; i < kNumRoles; ++i) {
    const Role role = Role(i);
    set_amax_epsilon(r, role, resolve_amax_epsilon(p.amax_epsilon[size_t(i)], role, r).value);
  }
}

std::string describe_scale_settings(const PrecisionConfig& p) {
  if (is_4bit(p.recipe)) {
    Recipe r = p.recipe;
    apply_scale_settings(p, r);
    const TensorFormat &in = r.role(Role::input), &w = r.role(Role::weight),
                       &g = r.role(Role::grad);
    std::ostringstream os;
    os << r.name << ": weights in " << block_name(w.block) << " blocks; gradients "
       << (g.stochastic ? "rounded stochastically" : "rounded to nearest even")
       << "; random Hadamard transform on the wgrad operands "
       << (in.rht || g.rht ? "on" : "off");
    if (w.tensor_scale) os << "; " << nvfp4_order_name(w.order) << " order";
    if (p.bf16_first_layers || p.bf16_last_layers)
      os << "; first " << p.bf16_first_layers << " and last " << p.bf16_last_layers
         << " layer(s) in BF16";
    return os.str();
  }
  if (!has_fp32_scales(p.recipe)) return "";
  std::ostringstream os;
  const bool pow2 = !p.fp32_scales && p.recipe.role(Role::input).scale == ScaleType::fp32_pow2;
  os << p.recipe.name << ": " << (pow2 ? "power-of-two" : "FP32") << " scales; amax epsilon";
  for (int i = 0; i < kNumRoles; ++i) {
    const ResolvedEpsilon e =
        resolve_amax_epsilon(p.amax_epsilon[size_t(i)], Role(i), p.recipe);
    os << (i ? ", " : " ") << role_name(Role(i)) << " " << e.value << " (" << e.source << ")";
  }
  if (uses_amax_history(p.recipe))
    os << "; delayed scaling: amax history of " << p.amax_history.length << " steps, "
       << amax_algo_name(p.amax_history.algo) << ", margin " << p.amax_history.margin
       << ", scales updated after every optimizer step";
  return os.str();
}

LinearPrecision PrecisionResolver::operator()(const ModuleInfo& m) {
  const auto& p = cfg_.precision;
  ModuleDecision d{m.module, m.is_expert ? grouped_kind(m.kind) : m.kind, m.name, tokens_for(m),
                   "", "", m.is_expert ? 1 : cfg_.parallel.tp,
                   m.is_expert ? cfg_.parallel.etp : 1};
  const Recipe* recipe = nullptr;
  const Recipe bf16;
  Recipe from_rule;  // the recipe a policy rule names
  for (const auto& [pat, rec] : p.overrides) {
    if (glob_match(pat, m.module)) {
      recipe = &rec;
      d.reason = "override `" + pat + "`";
    }
  }
  const int L = cfg_.model.n_layers;
  if (!recipe && m.layer >= 0 && m.layer < p.bf16_first_layers) {
    recipe = &bf16;
    d.reason = "first " + std::to_string(p.bf16_first_layers) + " layer(s) kept in BF16";
  }
  if (!recipe && m.layer >= 0 && m.layer >= L - p.bf16_last_layers) {
    recipe = &bf16;
    d.reason = "last " + std::to_string(p.bf16_last_layers) + " layer(s) kept in BF16";
  }
  if (!recipe && m.layer < 0) {
    recipe = &p.lm_head;
    d.reason = "precision.lm_head";
  }
  if (!recipe && p.selective_fp8 && p.recipe.quantized()) {
    const PolicyVerdict v = policy_(m, m.is_expert ? d.tokens / m.top_k : d.tokens);
    if (v.use_fp8 && !v.recipe.empty()) from_rule = get_recipe(v.recipe);
    recipe = !v.use_fp8 ? &bf16 : v.recipe.empty() ? &p.recipe : &from_rule;
    d.reason = "policy: " + v.reason;
  }
  if (!recipe) {
    recipe = &p.recipe;
    d.reason = "recipe";
  }
  LinearPrecision lp;
  lp.recipe = *recipe;
  if (lp.recipe.quantized()) {
    lp.recipe.set_rule(p.scale_rounding);
    lp.defer_backward_quant = p.defer_backward_quant;
  }
  apply_scale_settings(p, lp.recipe);
  lp.validate();
  d.precision = lp.recipe.name;
  decisions_.push_back(d);
  return lp;
}

std::string format_decisions(const std::vector<ModuleDecision>& ds) {
  size_t w = 6;
  for (const auto& d : ds) w = std::max(w, d.module.size());
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s  %-16s  %-7s  %8s  %-12s  %s\n", int(w), "module", "kind",
                "name", "tokens", "precision", "reason");
  os << buf;
  for (const auto& d : ds) {
    std::snprintf(buf, sizeof buf, "%-*s  %-16s  %-7s  %8lld  %-12s  %s\n", int(w),
                  d.module.c_str(), d.kind.c_str(), d.name.c_str(), (long long)d.tokens,
                  d.precision.c_str(), d.reason.c_str());
    os << buf;
  }
  return os.str();
}

std::string decisions_json(const std::vector<ModuleDecision>& ds) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : ds)
    a.push_back({{"module", d.module}, {"kind", d.kind}, {"name", d.name}, {"tokens", d.tokens},
                 {"precision", d.precision}, {"reason", d.reason}, {"tp", d.tp},
                 {"etp", d.etp}});
  return a.dump(2) + "\n";
}

}  // namespace mxtrain
