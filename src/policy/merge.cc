// policy/merge.cc — benchmark reports -> policy (docs/adaptive.md §5 "Merge"; rules in
// policy/policy.h and docs/adaptive.md §4).
//
// Three steps: pair each report's BF16 and FP8 timings by unpadded token count (reports
// converted from LoongForge's format arrive paired); combine every measurement of a
// (key, tokens) across reports into one outcome (win only if all win, minimum speedup);
// turn each key's sorted outcomes into at most one rule — the longest run of winning sizes,
// open-ended when it reaches the largest measured size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"

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

}  // namespace

Policy merge_reports(const std::vector<Report>& reports, double threshold,
                     MergeSummary* summary) {
  MXT_CHECK(!reports.empty(), "policy merge: no reports given");
  MXT_CHECK(std::isfinite(threshold) && threshold > 0,
            "policy merge: speedup threshold must be a finite number > 0, got ", threshold);
  MergeSummary local;
  MergeSummary& sum = summary ? *summary : local;
  sum = MergeSummary{};

  auto source_of = [&](size_t i) {
    return reports[i].source.empty() ? "reports[" + std::to_string(i) + "]" : reports[i].source;
  };
  // The recipe: every report that records one must name the same (every report read from
  // a file records one: mxtrain's name it, LoongForge's are blockwise unless they say).
  long recipe_from = -1;
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
    if (reports[i].recipe.empty()) continue;
    if (recipe_from < 0) recipe_from = long(i);
    MXT_CHECK(reports[i].recipe == reports[recipe_from].recipe, "policy merge: ", source_of(i),
              " measured recipe ", reports[i].recipe, " but ", source_of(recipe_from),
              " measured ", reports[recipe_from].recipe,
              "; merge reports of one FP8 recipe into one policy");
  }

  // Shape of every point identity, across mxtrain's reports.
  std::map<std::string, std::tuple<int64_t, int64_t, size_t>> shapes;
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
    measured[policy_key(p)].push_back({source_of(ri), p.origin, p.tokens,
                                       p.padded_tokens ? p.padded_tokens : p.tokens, p.bf16->ms,
                                       p.fp8->ms, s, sp, win});
  };
  for (size_t ri = 0; ri < reports.size(); ++ri) {
    const Report& r = reports[ri];
    for (const auto& n : r.notes) sum.notes.push_back(source_of(ri) + ": " + n);
    if (r.format == "loongforge") {  // paired at conversion, shapes may differ per model
      for (const Point& p : r.points) add(ri, p);
      continue;
    }
    // Pair sides within the report by (identity, unpadded tokens).
    std::map<std::pair<std::string, int64_t>, Point> paired;
    for (const Point& p : r.points) {
      const std::string id = point_id(p);
      auto [sit, fresh] = shapes.try_emplace(id, p.in, p.out, ri);
      auto [in0, out0, r0] = sit->second;
      MXT_CHECK(fresh || (in0 == p.in && out0 == p.out), "policy merge: ", id, " has shape in=",
                p.in, " out=", p.out, " in ", source_of(ri), " but in=", in0, " out=", out0,
                " in ", source_of(r0), "; merge reports of one model");
      auto [it, first] = paired.try_emplace({id, p.tokens}, p);
      if (first) continue;
      if (p.bf16) it->second.bf16 = p.bf16;
      if (p.fp8) it->second.fp8 = p.fp8;
      it->second.padded_tokens = std::max(it->second.padded_tokens, p.padded_tokens);
    }
    for (const auto& [idk, p] : paired) {
      if (!p.paired()) {
        sum.notes.push_back(source_of(ri) + ": " + idk.first + " tokens=" +
                            std::to_string(idk.second) + " has only a " +
                            (p.bf16 ? "bf16" : "fp8") + " timing; not used");
        continue;
      }
      add(ri, p);
    }
  }

  Policy pol;
  pol.speedup_threshold = threshold;
  if (recipe_from >= 0) pol.recipe = reports[recipe_from].recipe;
  for (const auto& [key, by_tokens] : outcomes) {
    KeySummary ks;
    ks.key = key.text();
    ks.kind = key.kind;
    ks.name = key.name;
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
      if (key.grouped()) pol.grouped[key.kind].push_back(rule);
      else pol.dense[key.kind][key.name].push_back(rule);
      ks.rule = rule;
    }
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
  for (const auto& k : keys) {
    char line[256];
    std::string what = "no rule (BF16)";
    if (k.rule) {
      what = "FP8 for tokens " + rule_range(*k.rule);
      if (k.rule->measured_speedup) what += ", min speedup " + fmt("%.3f", *k.rule->measured_speedup);
    }
    std::snprintf(line, sizeof line, "  %-40s %s\n", k.key.c_str(), what.c_str());
    os << line << "      " << k.outcomes << "\n";
    for (const auto& n : k.notes) os << "      note: " << n << "\n";
  }
  for (const auto& n : notes) os << "  note: " << n << "\n";
  os << "  (tokens:min speedup, + FP8 wins: speedup - spread > threshold in every report; "
        "- loses; ~ above the threshold but within the spread; xN measured N times)\n";
  return os.str();
}

}  // namespace mxtrain::policy
