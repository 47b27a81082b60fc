// policy/merge.cc — benchmark reports -> policy (docs/adaptive.md §5 "Merge"; rules in
// policy/policy.h and docs/adaptive.md §4).
//
// Three steps: pair each report's BF16 and FP8 timings by unpadded token count (reports
// converted from LoongForge's format arrive paired); combine every measurement of a
// (key, tokens) across reports into one outcome (win only if all win, minimum speedup);
// turn each key's sorted outcomes into at most one rule — the longest run of winning sizes,
// open-ended when it reaches the largest measured size. Reports of several recipes go
// through those steps per recipe; then each key keeps the rule of the recipe with the
// largest measured speedup (ties: the recipe earlier in the registry's order), naming it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"
#include "mxtrain/recipe.h"

namespace mxtrain::policy {

namespace {

int kind_rank(const std::string& kind) {
  int i = 0;
  for (const auto* v : {&dense_kinds(), &grouped_kinds()})
    for (const auto& k : *v) {
      if (k == kind) return i;
      ++i;
    }
  return i;
}

// Policy key: dense (kind, name, tp); grouped (kind, etp, num_gemms), name empty.
struct Key {
  int rank = 0;
  std::string kind, name;
  int tp = 0, etp = 0, num_gemms = 0;
  auto tie() const { return std::tie(rank, kind, name, tp, etp, num_gemms); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
  bool grouped() const { return is_grouped_kind(kind); }
  std::string text() const {
    if (grouped())
      return kind + " etp=" + std::to_string(etp) + " num_gemms=" + std::to_string(num_gemms);
    return kind + "/" + name + " tp=" + std::to_string(tp);
  }
};

Key policy_key(const Point& p) {
  Key k;
  k.rank = kind_rank(p.kind);
  k.kind = p.kind;
  if (is_grouped_kind(p.kind)) {
    k.etp = p.etp;
    k.num_gemms = p.num_gemms;
  } else {
    k.name = p.name;
    k.tp = p.tp;
  }
  return k;
}

// Full point identity (the name kept for grouped kinds too).
std::string point_id(const Point& p) {
  std::string s = p.kind + "/" + p.name;
  if (is_grouped_kind(p.kind))
    return s + " etp=" + std::to_string(p.etp) + " num_gemms=" + std::to_string(p.num_gemms);
  return s + " tp=" + std::to_string(p.tp);
}

// Every measurement of one (key, tokens).
struct Outcome {
  bool win = true;
  bool outright_loss = false;  // some measurement had speedup <= threshold
  double min_speedup = INFINITY;
  int measurements = 0;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

using SourceOf = std::function<std::string(size_t)>;

// One key's merge over a set of reports of one recipe (docs/adaptive.md §5, steps 1-5).
struct KeyMerge {
  Key key;
  KeySummary ks;  // rule without a recipe of its own
};

// Steps 1-5 over the reports `idx` (one recipe, or recipes not recorded), keys in key order;
// report-level notes go to `notes`. Shapes are checked by the caller, over all reports.
std::vector<KeyMerge> merge_one_recipe(const std::vector<Report>& reports,
                                       const std::vector<size_t>& idx, double threshold,
                                       const std::string& recipe, const SourceOf& source_of,
                                       std::vector<std::string>& notes) {
  std::map<Key, std::map<int64_t, Outcome>> outcomes;
  std::map<Key, std::vector<Measurement>> measured;
  auto add = [&](size_t ri, const Point& p) {
    Outcome& o = outcomes[policy_key(p)][p.tokens];
    const double s = p.speedup(), sp = p.spread();
    const bool win = s - sp > threshold;
    o.win = o.win && win;
    o.outright_loss = o.outright_loss || s <= threshold;
    o.min_speedup = std::min(o.min_speedup, s);
    ++o.measurements;
    measured[policy_key(p)].push_back({source_of(ri), reports[ri].recipe, p.origin, p.tokens,
                                       p.padded_tokens ? p.padded_tokens : p.tokens, p.bf16->ms,
                                       p.fp8->ms, s, sp, win});
  };
  for (size_t ri : idx) {
    const Report& r = reports[ri];
    for (const auto& n : r.notes) notes.push_back(source_of(ri) + ": " + n);
    if (r.format == "loongforge") {  // paired at conversion, shapes may differ per model
      for (const Point& p : r.points) add(ri, p);
      continue;
    }
    // Pair sides within the report by (identity, unpadded tokens).
    std::map<std::pair<std::string, int64_t>, Point> paired;
    for (const Point& p : r.points) {
      auto [it, first] = paired.try_emplace({point_id(p), p.tokens}, p);
      if (first) continue;
      if (p.bf16) it->second.bf16 = p.bf16;
      if (p.fp8) it->second.fp8 = p.fp8;
      it->second.padded_tokens = std::max(it->second.padded_tokens, p.padded_tokens);
    }
    for (const auto& [idk, p] : paired) {
      if (!p.paired()) {
        notes.push_back(source_of(ri) + ": " + idk.first + " tokens=" +
                        std::to_string(idk.second) + " has only a " + (p.bf16 ? "bf16" : "fp8") +
                        " timing; not used");
        continue;
      }
      add(ri, p);
    }
  }

  std::vector<KeyMerge> out;
  for (const auto& [key, by_tokens] : outcomes) {
    KeySummary ks;
    ks.key = key.text();
    ks.kind = key.kind;
    ks.name = key.name;
    ks.recipe = recipe;
    ks.measurements = measured[key];
    std::stable_sort(ks.measurements.begin(), ks.measurements.end(),
                     [](const Measurement& a, const Measurement& b) { return a.tokens < b.tokens; });
    std::vector<int64_t> t;
    std::vector<const Outcome*> o;
    for (const auto& [tokens, oc] : by_tokens) {
      t.push_back(tokens);
      o.push_back(&oc);
      ks.outcomes += (ks.outcomes.empty() ? "" : " ") + std::to_string(tokens) + ":" +
                     fmt("%.2f", oc.min_speedup) + (oc.win ? "+" : oc.outright_loss ? "-" : "~");
      if (oc.measurements > 1) ks.outcomes += "x" + std::to_string(oc.measurements);
    }
    // Maximal runs of consecutive winning sizes, as [first, last] indices.
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t i = 0; i < t.size(); ++i) {
      if (!o[i]->win) continue;
      if (!runs.empty() && runs.back().second + 1 == i) runs.back().second = i;
      else runs.push_back({i, i});
    }
    // The longest run; equal lengths go to the run at larger sizes (later in `runs`).
    const size_t n = t.size();
    const std::pair<size_t, size_t>* chosen = nullptr;
    auto len = [](const std::pair<size_t, size_t>& r) { return r.second - r.first + 1; };
    for (const auto& run : runs)
      if (!chosen || len(run) >= len(*chosen)) chosen = &run;
    auto range_text = [&](const std::pair<size_t, size_t>& r) {
      return "[" + std::to_string(t[r.first]) + ", " + std::to_string(t[r.second]) + "]";
    };
    for (const auto& run : runs) {
      if (&run == chosen) continue;
      ks.notes.push_back("FP8 also wins at " + range_text(run) + "; not emitted (" +
                         (len(run) < len(*chosen) ? "shorter than" : "as long as, but below,") +
                         " the chosen range)");
    }
    if (chosen) {
      Rule rule;
      if (key.grouped()) {
        rule.etp = key.etp;
        rule.num_gemms = key.num_gemms;
      } else {
        rule.tp = key.tp;
      }
      rule.min_tokens = t[chosen->first];
      if (chosen->second != n - 1) rule.max_tokens = t[chosen->second];
      double ms = INFINITY;
      for (size_t i = chosen->first; i <= chosen->second; ++i) ms = std::min(ms, o[i]->min_speedup);
      rule.measured_speedup = std::round(ms * 1e4) / 1e4;  // informational: 4 decimals
      ks.rule = rule;
    }
    out.push_back({key, std::move(ks)});
  }
  return out;
}

void emit_rule(Policy& pol, const Key& key, const Rule& rule) {
  if (key.grouped()) pol.grouped[key.kind].push_back(rule);
  else pol.dense[key.kind][key.name].push_back(rule);
}

// "nvfp4 1.3000 over [2048, inf)" or "mxfp8: no rule".
std::string candidate_text(const KeySummary& k) {
  if (!k.rule) return k.recipe + ": no rule";
  return k.recipe + " " + fmt("%.4f", *k.rule->measured_speedup) + " over " +
         rule_range(*k.rule);
}

// A key measured with several recipes: `per` holds its merge per recipe (registry order).
// The rule of the recipe with the largest measured speedup is kept, ties to the earlier.
KeySummary choose_recipe(const Key& key, std::vector<KeySummary> per) {
  KeySummary ks;
  ks.key = key.text();
  ks.kind = key.kind;
  ks.name = key.name;
  const KeySummary* best = nullptr;
  size_t with_rule = 0, tied = 0;
  for (const KeySummary& k : per) {
    if (!k.rule) continue;
    ++with_rule;
    const double s = *k.rule->measured_speedup;
    if (!best || s > *best->rule->measured_speedup) {
      best = &k;
      tied = 1;
    } else if (s == *best->rule->measured_speedup) {
      ++tied;
    }
  }
  std::vector<std::string> all;
  for (const KeySummary& k : per) all.push_back(candidate_text(k));
  if (!best) {
    std::vector<std::string> names;
    for (const KeySummary& k : per) names.push_back(k.recipe);
    ks.choice = "no rule: " + join(names, " and ") +
                (per.size() == 1 ? " wins" : " win") + " at no measured size in every report";
  } else {
    ks.recipe = best->recipe;
    ks.rule = best->rule;
    ks.rule->recipe = best->recipe;
    if (per.size() == 1)
      ks.choice = best->recipe + ", the only recipe measured at this key";
    else if (with_rule == 1)
      ks.choice = best->recipe + ", the only recipe with a rule (" + join(all, "; ") + ")";
    else if (tied > 1)
      ks.choice = best->recipe + ", the earliest in the registry's order of those tied at the "
                  "largest measured speedup (" + join(all, "; ") + ")";
    else
      ks.choice = best->recipe + ", the largest measured speedup (" + join(all, "; ") + ")";
  }
  for (KeySummary& k : per)
    if (k.rule) k.rule->recipe = k.recipe;
  ks.per_recipe = std::move(per);
  return ks;
}

}  // namespace

Policy merge_reports(const std::vector<Report>& reports, double threshold,
                     MergeSummary* summary) {
  MXT_CHECK(!reports.empty(), "policy merge: no reports given");
  MXT_CHECK(std::isfinite(threshold) && threshold > 0,
            "policy merge: speedup threshold must be a finite number > 0, got ", threshold);
  MergeSummary local;
  MergeSummary& sum = summary ? *summary : local;
  sum = MergeSummary{};

  const SourceOf source_of = [&](size_t i) {
    return reports[i].source.empty() ? "reports[" + std::to_string(i) + "]" : reports[i].source;
  };
  // The recipes the reports name (every report read from a file names one: mxtrain's name
  // it, LoongForge's are blockwise unless they say), in order of first appearance.
  std::vector<std::string> recipes;
  std::vector<size_t> first_of;
  for (size_t i = 0; i < reports.size(); ++i) {
    const bool lf = reports[i].format == "loongforge";
    MXT_CHECK(lf || reports[i].format.empty(), "policy merge: ", source_of(i),
              ": unknown report format \"", reports[i].format, "\"");
    if (lf) {
      for (const Point& p : reports[i].points)
        MXT_CHECK(p.paired() && p.tokens > 0, "policy merge: ", source_of(i), ": ",
                  point_id(p), " is not a paired point with tokens > 0");
    } else {
      validate_report(reports[i], source_of(i));
    }
    const std::string& r = reports[i].recipe;
    if (!r.empty() && std::find(recipes.begin(), recipes.end(), r) == recipes.end()) {
      recipes.push_back(r);
      first_of.push_back(i);
    }
  }
  const bool several = recipes.size() > 1;
  if (several) {
    for (size_t i = 0; i < reports.size(); ++i)
      MXT_CHECK(!reports[i].recipe.empty(), "policy merge: ", source_of(i),
                " records no recipe, but the other reports measured several (", join(recipes),
                "); merging several recipes needs each report's");
    for (size_t k = 0; k < recipes.size(); ++k) {
      const size_t rank = recipe_rank(recipes[k]);
      MXT_CHECK(rank < registered_recipes().size() && registered_recipes()[rank].quantized(),
                "policy merge: ", source_of(first_of[k]), " measured recipe \"", recipes[k],
                "\", which is not a registered quantized recipe; reports of several recipes "
                "merge into rules naming theirs");
    }
    std::stable_sort(recipes.begin(), recipes.end(), [](const std::string& a,
                                                        const std::string& b) {
      return recipe_rank(a) < recipe_rank(b);
    });
  }

  // One GEMM shape per point identity across mxtrain's reports (all recipes: one model).
  std::map<std::string, std::tuple<int64_t, int64_t, size_t>> shapes;
  for (size_t ri = 0; ri < reports.size(); ++ri) {
    if (reports[ri].format == "loongforge") continue;  // a key may have a shape per model
    for (const Point& p : reports[ri].points) {
      const std::string id = point_id(p);
      auto [sit, fresh] = shapes.try_emplace(id, p.in, p.out, ri);
      auto [in0, out0, r0] = sit->second;
      MXT_CHECK(fresh || (in0 == p.in && out0 == p.out), "policy merge: ", id, " has shape in=",
                p.in, " out=", p.out, " in ", source_of(ri), " but in=", in0, " out=", out0,
                " in ", source_of(r0), "; merge reports of one model");
    }
  }

  Policy pol;
  pol.speedup_threshold = threshold;
  if (!several) {
    std::vector<size_t> all(reports.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (!recipes.empty()) pol.recipe = recipes[0];
    for (auto& km : merge_one_recipe(reports, all, threshold, pol.recipe, source_of, sum.notes)) {
      if (km.ks.rule) emit_rule(pol, km.key, *km.ks.rule);
      sum.keys.push_back(std::move(km.ks));
    }
    return pol;
  }

  // Several recipes: each merged alone, then one rule per key.
  pol.measured_recipes = recipes;
  sum.recipes = recipes;
  std::map<Key, std::vector<KeySummary>> per_key;
  for (const std::string& recipe : recipes) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < reports.size(); ++i)
      if (reports[i].recipe == recipe) idx.push_back(i);
    for (auto& km : merge_one_recipe(reports, idx, threshold, recipe, source_of, sum.notes))
      per_key[km.key].push_back(std::move(km.ks));
  }
  for (auto& [key, per] : per_key) {
    KeySummary ks = choose_recipe(key, std::move(per));
    if (ks.rule) emit_rule(pol, key, *ks.rule);
    sum.keys.push_back(std::move(ks));
  }
  return pol;
}

std::string MergeSummary::to_string() const {
  std::ostringstream os;
  size_t rules = 0;
  for (const auto& k : keys) rules += k.rule ? 1 : 0;
  os << rules << (rules == 1 ? " rule" : " rules") << " from " << keys.size()
     << (keys.size() == 1 ? " measured key\n" : " measured keys\n");
  auto rule_text = [](const KeySummary& k, const std::string& what) {
    if (!k.rule) return std::string("no rule (BF16)");
    std::string s = what + " for tokens " + rule_range(*k.rule);
    if (k.rule->measured_speedup) s += ", min speedup " + fmt("%.3f", *k.rule->measured_speedup);
    return s;
  };
  for (const auto& k : keys) {
    char line[256];
    const std::string what = rule_text(k, k.per_recipe.empty() ? "FP8" : k.recipe);
    std::snprintf(line, sizeof line, "  %-40s %s\n", k.key.c_str(), what.c_str());
    os << line;
    if (k.per_recipe.empty()) {
      os << "      " << k.outcomes << "\n";
      for (const auto& n : k.notes) os << "      note: " << n << "\n";
      continue;
    }
    for (const auto& r : k.per_recipe) {
      os << "      " << r.recipe << ": " << r.outcomes << "\n"
         << "        " << rule_text(r, r.recipe) << "\n";
      for (const auto& n : r.notes) os << "        note: " << n << "\n";
    }
    os << "      chosen: " << k.choice << "\n";
  }
  for (const auto& n : notes) os << "  note: " << n << "\n";
  os << "  (tokens:min speedup, + FP8 wins: speedup - spread > threshold in every report; "
        "- loses; ~ above the threshold but within the spread; xN measured N times)\n";
  return os.str();
}

}  // namespace mxtrain::policy
