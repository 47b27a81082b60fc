// policy/explain.cc — the text of `mxtrain policy explain`: per key the measured points,
// the chosen range and why, and where LoongForge's own merge would differ and at what cost;
// with reports of several recipes, that per recipe, then the recipe the key keeps and why.
#include "mxtrain/policy/explain.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain::policy {

namespace {

std::string fmt(const char* f, ...) {
  char b[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(b, sizeof b, f, ap);
  va_end(ap);
  return b;
}

// "FP8 for tokens [a, b] and [c, inf)" (`label` for rules naming no recipe), or, when a rule
// names its recipe, "nvfp4 for tokens [a, b] and mxfp8 for tokens [c, inf)".
std::string rules_text(const std::vector<Rule>& rules, const std::string& label = "FP8") {
  if (rules.empty()) return "no rule (BF16)";
  bool named = false;
  for (const auto& r : rules) named = named || !r.recipe.empty();
  std::string s = named ? "" : label + " for tokens ";
  for (size_t i = 0; i < rules.size(); ++i) {
    s += i ? " and " : "";
    if (named) s += (rules[i].recipe.empty() ? label : rules[i].recipe) + " for tokens ";
    s += rule_range(rules[i]);
  }
  return s;
}

bool covers(const std::vector<Rule>& rules, int64_t t) {
  for (const auto& r : rules)
    if (r.covers(t)) return true;
  return false;
}

// The rules of `p` that belong to the key of `ks`; with `recipe`, only those enabling it.
std::vector<Rule> rules_of(const Policy& p, const KeySummary& ks, const std::string& recipe = "") {
  std::vector<Rule> out;
  auto take = [&](const Rule& r, const std::string& name) {
    if (rule_key(ks.kind, name, r) == ks.key && (recipe.empty() || rule_recipe(p, r) == recipe))
      out.push_back(r);
  };
  if (is_grouped_kind(ks.kind)) {
    auto it = p.grouped.find(ks.kind);
    if (it == p.grouped.end()) return out;
    for (const auto& r : it->second) take(r, "");
  } else {
    auto k = p.dense.find(ks.kind);
    if (k == p.dense.end()) return out;
    auto n = k->second.find(ks.name);
    if (n == k->second.end()) return out;
    for (const auto& r : n->second) take(r, ks.name);
  }
  return out;
}

// Every rule of a policy with its key text.
std::map<std::string, std::vector<Rule>> rules_by_key(const Policy& p) {
  std::map<std::string, std::vector<Rule>> out;
  for (const auto& [kind, names] : p.dense)
    for (const auto& [name, rules] : names)
      for (const auto& r : rules) out[rule_key(kind, name, r)].push_back(r);
  for (const auto& [kind, rules] : p.grouped)
    for (const auto& r : rules) out[rule_key(kind, "", r)].push_back(r);
  return out;
}

// Measurements of one token count, in the order the merge saw them.
std::vector<const Measurement*> at_size(const KeySummary& ks, int64_t t) {
  std::vector<const Measurement*> v;
  for (const auto& m : ks.measurements)
    if (m.tokens == t) v.push_back(&m);
  return v;
}

const Measurement* worst(const std::vector<const Measurement*>& v) {
  const Measurement* w = nullptr;
  for (const auto* m : v)
    if (!w || m->speedup < w->speedup) w = m;
  return w;
}

std::string where(const Measurement& m) {
  return m.source + (m.origin.empty() ? "" : " " + m.origin);
}

// Why size t is not a win: its worst non-winning measurement.
std::string not_a_win(const KeySummary& ks, int64_t t, double threshold) {
  std::vector<const Measurement*> lost;
  for (const auto* m : at_size(ks, t))
    if (!m->win) lost.push_back(m);
  const Measurement* m = worst(lost);
  if (!m) return std::to_string(t) + " does not win";
  if (m->speedup <= threshold)
    return fmt("%lld loses (%.3fx in %s)", (long long)t, m->speedup, where(*m).c_str());
  return fmt("%lld is within the spread (%.3fx - %.3f in %s)", (long long)t, m->speedup,
             m->spread, where(*m).c_str());
}

std::string why(const KeySummary& ks, const std::vector<int64_t>& sizes, double threshold,
                const std::string& label) {
  if (!ks.rule) return label + " wins at no measured size in every report";
  const Rule& r = *ks.rule;
  const size_t i = size_t(std::find(sizes.begin(), sizes.end(), r.min_tokens) - sizes.begin());
  const int64_t last = r.max_tokens ? *r.max_tokens : sizes.back();
  const size_t j = size_t(std::find(sizes.begin(), sizes.end(), last) - sizes.begin());
  std::string s = label + fmt(" wins in every report at each of the %zu sizes %lld..%lld, the "
                              "longest such run",
                              j - i + 1, (long long)r.min_tokens, (long long)last);
  if (i > 0) s += "; below it " + not_a_win(ks, sizes[i - 1], threshold);
  else s += "; it starts at the smallest measured size (nothing below is extrapolated)";
  if (j + 1 < sizes.size())
    s += "; above it " + not_a_win(ks, sizes[j + 1], threshold) + ", so max_tokens = " +
         std::to_string(last);
  else s += "; it reaches the largest measured size, so there is no upper bound";
  return s;
}

// LoongForge's own merge over the LoongForge reports of one recipe (all of them: "").
struct LoongForgeSide {
  std::optional<LoongForgeMerge> merge;
  std::map<std::string, std::vector<Rule>> rules;  // by key text
};

LoongForgeSide loongforge_side(const std::vector<LoadedReport>& reports, double threshold,
                               const std::string& recipe) {
  std::vector<LoongForgeReport> lfs;
  for (const auto& lr : reports)
    if (lr.loongforge && (recipe.empty() || lr.report.recipe == recipe))
      lfs.push_back(*lr.loongforge);
  LoongForgeSide side;
  if (lfs.empty()) return side;
  side.merge = loongforge_own_merge(lfs, threshold);
  side.rules = rules_by_key(side.merge->policy);
  return side;
}

// The body of one key (of one recipe): measurements, rule, why, notes, LoongForge's merge.
// `label` names the quantized side ("FP8", or the recipe in a merge of several), `in` the
// indent. `chosen` is the rule the explanation is of (merged, or the given policy's);
// `merged`, what the merge emits, which a given policy's rules are compared with.
void explain_key(std::ostringstream& os, const KeySummary& ks, const std::vector<Rule>& chosen,
                 const std::vector<Rule>& merged_rules, const Policy* given,
                 const std::string& given_source, double threshold,
                 const LoongForgeSide& lf_side, const std::string& label, const std::string& in) {
  std::vector<int64_t> sizes;  // measured sizes, ascending
  for (const auto& m : ks.measurements)
    if (sizes.empty() || sizes.back() != m.tokens) sizes.push_back(m.tokens);
  os << in << "measured (tokens, fp8 rows, bf16 ms, fp8 ms, speedup, spread, + win / - not):\n";
  for (const auto& m : ks.measurements)
    os << in
       << fmt("  %8lld %8lld %10.4f %10.4f %7.3f %6.3f %s  %s\n", (long long)m.tokens,
              (long long)m.padded_tokens, m.bf16_ms, m.fp8_ms, m.speedup, m.spread,
              m.win ? "+" : "-", where(m).c_str());
  os << in << "rule: " << rules_text(chosen, label) << "\n";
  os << in << "why: " << why(ks, sizes, threshold, label) << "\n";
  for (const auto& n : ks.notes) os << in << "note: " << n << "\n";
  if (given && rules_text(chosen, label) != rules_text(merged_rules, label))
    os << in << "note: " << given_source << " differs from the merge of these reports, which "
       << "gives " << rules_text(merged_rules, label) << "\n";
  if (!lf_side.merge) return;
  auto lit = lf_side.rules.find(ks.key);
  const std::vector<Rule> lf = lit == lf_side.rules.end() ? std::vector<Rule>{} : lit->second;
  std::vector<std::string> diffs, unpaired;
  for (int64_t t : sizes) {
    const bool ours = covers(chosen, t), theirs = covers(lf, t);
    const auto ms = at_size(ks, t);
    if (ours != theirs) {
      const Measurement& w = *worst(ms);
      const std::string n = ms.size() > 1 ? fmt(", worst of %zu", ms.size()) : "";
      if (theirs)
        diffs.push_back(fmt("%lld: LoongForge FP8, here BF16; FP8 at %.3fx (%s%s): FP8 "
                            "changes the time by %+.1f%% (%.4f -> %.4f ms)",
                            (long long)t, w.speedup, where(w).c_str(), n.c_str(),
                            (w.fp8_ms / w.bf16_ms - 1) * 100, w.bf16_ms, w.fp8_ms));
      else
        diffs.push_back(fmt("%lld: LoongForge BF16, here FP8; FP8 at %.3fx (%s%s): BF16 "
                            "changes the time by %+.1f%% (%.4f -> %.4f ms)",
                            (long long)t, w.speedup, where(w).c_str(), n.c_str(),
                            (w.bf16_ms / w.fp8_ms - 1) * 100, w.fp8_ms, w.bf16_ms));
    }
    bool from_lf = false;
    int64_t padded = t;
    for (const auto* m : ms)
      if (!m->origin.empty()) from_lf = true, padded = std::max(padded, m->padded_tokens);
    const auto pt = lf_side.merge->paired_tokens.find(ks.key);
    if (from_lf && (pt == lf_side.merge->paired_tokens.end() || !pt->second.count(t)))
      unpaired.push_back(fmt("%lld (fp8 ran %lld rows)", (long long)t, (long long)padded));
  }
  os << in << "LoongForge's merge: " << rules_text(lf);
  if (diffs.empty()) os << "; the same decision at every measured size\n";
  else os << "; differs at " << diffs.size() << (diffs.size() == 1 ? " size:\n" : " sizes:\n");
  for (const auto& d : diffs) os << in << "  " << d << "\n";
  if (!unpaired.empty()) {
    os << in << "  it paired no BF16/FP8 records at";
    for (size_t i = 0; i < unpaired.size(); ++i) os << (i ? ", " : " ") << unpaired[i];
    os << " (FP8 num_tokens padded)\n";
  }
}

// LoongForge's rules for keys the merge did not see (its pairing across files found them).
void explain_unseen_loongforge(std::ostringstream& os, const LoongForgeSide& side,
                               const std::map<std::string, bool>& seen,
                               const std::string& recipe_note) {
  for (const auto& [key, rules] : side.rules)
    if (!seen.count(key))
      os << "\n" << key << "\n  no paired measurement in these reports; LoongForge's merge "
         << "(pairing records across files" << recipe_note << ") gives " << rules_text(rules)
         << "\n";
}

}  // namespace

std::string explain_reports(const std::vector<LoadedReport>& reports, double threshold,
                            const Policy* given, const std::string& given_source) {
  std::vector<Report> rs;
  std::ostringstream os;
  os << "explain: " << reports.size() << (reports.size() == 1 ? " report" : " reports")
     << fmt(", speedup threshold %g", threshold) << "\n";
  for (const auto& lr : reports) {
    rs.push_back(lr.report);
    os << "  " << lr.report.source << ": "
       << (lr.loongforge ? "LoongForge records, " + std::to_string(lr.loongforge->records.size()) +
                               " records, " + std::to_string(lr.report.points.size()) +
                               " paired cases"
                         : "mxtrain report, recipe " + lr.report.recipe)
       << "\n";
  }
  MergeSummary sum;
  merge_reports(rs, threshold, &sum);  // the summary holds the rules and measurements
  os << "rules: " << (given ? "from " + given_source : std::string("merged from these reports"))
     << "\n";
  for (const auto& n : sum.notes) os << "note: " << n << "\n";
  std::map<std::string, bool> seen;

  if (sum.recipes.empty()) {  // one recipe
    const LoongForgeSide lf_side = loongforge_side(reports, threshold, "");
    for (const auto& ks : sum.keys) {
      seen[ks.key] = true;
      os << "\n" << ks.key << "\n";
      const std::vector<Rule> merged =
          ks.rule ? std::vector<Rule>{*ks.rule} : std::vector<Rule>{};
      explain_key(os, ks, given ? rules_of(*given, ks) : merged, merged, given, given_source,
                  threshold, lf_side, "FP8", "  ");
    }
    if (given)
      for (const auto& [key, rules] : rules_by_key(*given))
        if (!seen.count(key))
          os << "\n" << key << "\n  rule: " << rules_text(rules) << " in " << given_source
             << "; no paired measurement of this key in these reports\n";
    explain_unseen_loongforge(os, lf_side, seen, "");
    return os.str();
  }

  // Several recipes: each key's merge per recipe, then the recipe it keeps.
  std::map<std::string, LoongForgeSide> lf_sides;
  for (const auto& recipe : sum.recipes)
    lf_sides[recipe] = loongforge_side(reports, threshold, recipe);
  os << "recipes: " << sum.recipes.size() << " measured (";
  for (size_t i = 0; i < sum.recipes.size(); ++i) os << (i ? ", " : "") << sum.recipes[i];
  os << "); each key is merged per recipe and keeps the rule with the largest measured "
        "speedup (ties: the recipe earlier in the registry's order)\n";
  for (const auto& ks : sum.keys) {
    seen[ks.key] = true;
    os << "\n" << ks.key << "\n  recipes measured:";
    for (size_t i = 0; i < ks.per_recipe.size(); ++i)
      os << (i ? ", " : " ") << ks.per_recipe[i].recipe;
    os << "\n";
    const std::vector<Rule> merged =
        ks.rule ? std::vector<Rule>{*ks.rule} : std::vector<Rule>{};
    for (const auto& r : ks.per_recipe) {
      os << "  " << r.recipe << ":\n";
      // This recipe's own rule; a given policy's rules enabling it, compared with what the
      // merge emits for it (its rule when it was chosen, else none).
      const std::vector<Rule> own = r.rule ? std::vector<Rule>{*r.rule} : std::vector<Rule>{};
      const std::vector<Rule> emitted = ks.recipe == r.recipe ? merged : std::vector<Rule>{};
      explain_key(os, r, given ? rules_of(*given, r, r.recipe) : own, emitted, given,
                  given_source, threshold, lf_sides[r.recipe], r.recipe, "    ");
    }
    const std::vector<Rule> final_rules = given ? rules_of(*given, ks) : merged;
    os << "  rule: " << rules_text(final_rules) << "\n";
    os << "  recipe: " << ks.choice << "\n";
    if (given && rules_text(final_rules) != rules_text(merged))
      os << "  note: " << given_source << " differs from the merge of these reports, which "
         << "gives " << rules_text(merged) << "\n";
  }
  if (given)
    for (const auto& [key, rules] : rules_by_key(*given))
      if (!seen.count(key))
        os << "\n" << key << "\n  rule: " << rules_text(rules) << " in " << given_source
           << "; no paired measurement of this key in these reports\n";
  for (const auto& [recipe, side] : lf_sides)
    explain_unseen_loongforge(os, side, seen, ", recipe " + recipe);
  return os.str();
}

}  // namespace mxtrain::policy
