// policy/decide.cc — the per-module decision at model build (docs/adaptive.md §6):
// look up the module's key in the policy and use FP8 when a rule covers its token count.
//
// Dense modules: key (kind, name, tp). Expert modules: promoted to the grouped kind, key
// (etp, num_gemms), token count x top-k. No rule for the key, or no rule covering the token
// count, means BF16; the reason says which. A covering rule enables its recipe (its own, else
// the policy's).
#include <climits>
#include <set>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::policy {

namespace {

std::string promote(const std::string& kind) {
  if (is_grouped_kind(kind)) return kind;
  if (kind == "layernorm_column" || kind == "column") return "column_grouped";
  if (kind == "row") return "row_grouped";
  MXT_FAIL("decide: an expert module of kind \"", kind,
           "\" has no grouped form (experts are layernorm_column, column or row)");
}

// " (measured speedup 1.050)", " (recipe nvfp4, measured speedup 1.210)", " (recipe nvfp4)"
// or "": a rule's own recipe is named, the policy's is not (the reason of every older policy
// stays as it was).
std::string speedup_text(const Rule& r) {
  std::ostringstream os;
  os.precision(3);
  if (!r.recipe.empty()) os << "recipe " << r.recipe;
  if (r.measured_speedup)
    os << std::fixed << (r.recipe.empty() ? "" : ", ") << "measured speedup "
       << *r.measured_speedup;
  const std::string s = os.str();
  return s.empty() ? s : " (" + s + ")";
}

// Why `r` does not cover `tokens` ("tokens 512 < min_tokens 4096").
std::string miss_text(const Rule& r, int64_t tokens, const std::string& tok) {
  std::ostringstream os;
  if (tokens < r.min_tokens) os << tok << " < min_tokens " << r.min_tokens;
  else os << tok << " > max_tokens " << *r.max_tokens;
  return os.str();
}

}  // namespace

Decision decide(const Policy& p, const DecisionQuery& q) {
  MXT_CHECK(is_dense_kind(q.kind) || is_grouped_kind(q.kind), "decide: unknown layer kind \"",
            q.kind, "\" for module \"", q.name, "\" (valid: ", all_kinds_list(), ")");
  MXT_CHECK(q.tokens >= 0, "decide: module \"", q.name, "\": token count must be >= 0, got ",
            q.tokens);
  Decision d;
  const bool grouped = q.is_expert || is_grouped_kind(q.kind);
  std::vector<const Rule*> candidates;
  std::string key, tok, others;
  if (grouped) {
    d.kind = promote(q.kind);
    MXT_CHECK(q.top_k >= 1, "decide: expert module \"", q.name, "\": top_k must be >= 1, got ",
              q.top_k);
    MXT_CHECK(q.etp >= 1 && q.num_gemms >= 1, "decide: expert module \"", q.name,
              "\": etp and num_gemms must be >= 1, got etp=", q.etp, " num_gemms=", q.num_gemms);
    MXT_CHECK(q.tokens <= INT64_MAX / q.top_k, "decide: tokens ", q.tokens, " x top_k ",
              q.top_k, " overflows");
    d.tokens = q.tokens * q.top_k;
    key = d.kind + " etp=" + std::to_string(q.etp) + " num_gemms=" + std::to_string(q.num_gemms);
    tok = "tokens " + std::to_string(d.tokens) + " (" + std::to_string(q.tokens) + " x top-k " +
          std::to_string(q.top_k) + ")";
    std::set<std::pair<int, int>> seen;
    if (auto it = p.grouped.find(d.kind); it != p.grouped.end()) {
      for (const Rule& r : it->second) {
        if (r.etp == q.etp && r.num_gemms == q.num_gemms) candidates.push_back(&r);
        else seen.insert({r.etp, r.num_gemms});
      }
    }
    for (auto [etp, n] : seen)
      others += std::string(others.empty() ? "" : ", ") + "etp=" + std::to_string(etp) +
                " num_gemms=" + std::to_string(n);
  } else {
    d.kind = q.kind;
    MXT_CHECK(!q.name.empty(), "decide: a ", q.kind, " module needs a name (qkv, proj, ...)");
    MXT_CHECK(q.tp >= 1, "decide: module \"", q.name, "\": tp must be >= 1, got ", q.tp);
    d.tokens = q.tokens;
    key = q.kind + "/" + q.name + " tp=" + std::to_string(q.tp);
    tok = "tokens " + std::to_string(d.tokens);
    std::set<int> seen;
    if (auto it = p.dense.find(q.kind); it != p.dense.end()) {
      if (auto nt = it->second.find(q.name); nt != it->second.end()) {
        for (const Rule& r : nt->second) {
          if (r.tp == q.tp) candidates.push_back(&r);
          else seen.insert(r.tp);
        }
      }
    }
    for (int tp : seen) others += (others.empty() ? "tp=" : ", tp=") + std::to_string(tp);
  }

  if (candidates.empty()) {
    d.reason = "no rule for " + key + (others.empty() ? "" : " (policy has " + others + ")");
    return d;
  }
  for (const Rule* r : candidates) {
    if (!r->covers(d.tokens)) continue;
    d.use_fp8 = true;
    d.rule = r;
    d.recipe = rule_recipe(p, *r);
    d.rule_names_recipe = !r->recipe.empty();
    d.reason = r->max_tokens ? tok + " in " + rule_range(*r)
                             : tok + " >= min_tokens " + std::to_string(r->min_tokens);
    d.reason += speedup_text(*r);
    return d;
  }
  for (const Rule* r : candidates)
    d.reason += (d.reason.empty() ? "" : "; ") + miss_text(*r, d.tokens, tok);
  return d;
}

}  // namespace mxtrain::policy
