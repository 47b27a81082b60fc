// policy/explain.cc — the text of `mxtrain policy explain`: per key the measured points,
// the chosen range and why, and where LoongForge's own merge would differ and at what cost.
#include "mxtrain/policy/explain.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
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

std::string rules_text(const std::vector<Rule>& rules) {
  if (rules.empty()) return "no rule (BF16)";
  std::string s = "FP8 for tokens ";
  for (size_t i = 0; i < rules.size(); ++i) s += (i ? " and " : "") + rule_range(rules[i]);
  return s;
}

bool covers(const std::vector<Rule>& rules, int64_t t) {
  for (const auto& r : rules)
    if (r.covers(t)) return true;
  return false;
}

// The rules of `p` that belong to key text `key`.
std::vector<Rule> rules_of(const Policy& p, const KeySummary& ks) {
  std::vector<Rule> out;
  if (is_grouped_kind(ks.kind)) {
    auto it = p.grouped.find(ks.kind);
    if (it == p.grouped.end()) return out;
    for (const auto& r : it->second)
      if (rule_key(ks.kind, "", r) == ks.key) out.push_back(r);
  } else {
    auto k = p.dense.find(ks.kind);
    if (k == p.dense.end()) return out;
    auto n = k->second.find(ks.name);
    if (n == k->second.end()) return out;
    for (const auto& r : n->second)
      if (rule_key(ks.kind, ks.name, r) == ks.key) out.push_back(r);
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

std::string why(const KeySummary& ks, const std::vector<int64_t>& sizes, double threshold) {
  if (!ks.rule) return "FP8 wins at no measured size in every report";
  const Rule& r = *ks.rule;
  const size_t i = size_t(std::find(sizes.begin(), sizes.end(), r.min_tokens) - sizes.begin());
  const int64_t last = r.max_tokens ? *r.max_tokens : sizes.back();
  const size_t j = size_t(std::find(sizes.begin(), sizes.end(), last) - sizes.begin());
  std::string s = fmt("FP8 wins in every report at each of the %zu sizes %lld..%lld, the "
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

}  // namespace

std::string explain_reports(const std::vector<LoadedReport>& reports, double threshold,
                            const Policy* given, const std::string& given_source) {
  std::vector<Report> rs;
  std::vector<LoongForgeReport> lfs;
  std::ostringstream os;
  os << "explain: " << reports.size() << (reports.size() == 1 ? " report" : " reports")
     << fmt(", speedup threshold %g", threshold) << "\n";
  for (const auto& lr : reports) {
    rs.push_back(lr.report);
    if (lr.loongforge) lfs.push_back(*lr.loongforge);
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
  std::optional<LoongForgeMerge> lfm;
  std::map<std::string, std::vector<Rule>> lf_rules;
  if (!lfs.empty()) {
    lfm = loongforge_own_merge(lfs, threshold);
    lf_rules = rules_by_key(lfm->policy);
  }
  std::map<std::string, bool> seen;
  for (const auto& ks : sum.keys) {
    seen[ks.key] = true;
    os << "\n" << ks.key << "\n";
    std::vector<int64_t> sizes;  // measured sizes, ascending
    for (const auto& m : ks.measurements)
      if (sizes.empty() || sizes.back() != m.tokens) sizes.push_back(m.tokens);
    os << "  measured (tokens, fp8 rows, bf16 ms, fp8 ms, speedup, spread, + win / - not):\n";
    for (const auto& m : ks.measurements)
      os << fmt("    %8lld %8lld %10.4f %10.4f %7.3f %6.3f %s  %s\n", (long long)m.tokens,
                (long long)m.padded_tokens, m.bf16_ms, m.fp8_ms, m.speedup, m.spread,
                m.win ? "+" : "-", where(m).c_str());
    const std::vector<Rule> merged_rules =
        ks.rule ? std::vector<Rule>{*ks.rule} : std::vector<Rule>{};
    const std::vector<Rule> chosen = given ? rules_of(*given, ks) : merged_rules;
    os << "  rule: " << rules_text(chosen) << "\n";
    os << "  why: " << why(ks, sizes, threshold) << "\n";
    for (const auto& n : ks.notes) os << "  note: " << n << "\n";
    if (given && rules_text(chosen) != rules_text(merged_rules))
      os << "  note: " << given_source << " differs from the merge of these reports, which "
         << "gives " << rules_text(merged_rules) << "\n";
    if (!lfm) continue;
    auto lit = lf_rules.find(ks.key);
    const std::vector<Rule> lf = lit == lf_rules.end() ? std::vector<Rule>{} : lit->second;
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
      const auto pt = lfm->paired_tokens.find(ks.key);
      if (from_lf && (pt == lfm->paired_tokens.end() || !pt->second.count(t)))
        unpaired.push_back(fmt("%lld (fp8 ran %lld rows)", (long long)t, (long long)padded));
    }
    os << "  LoongForge's merge: " << rules_text(lf);
    if (diffs.empty()) os << "; the same decision at every measured size\n";
    else os << "; differs at " << diffs.size() << (diffs.size() == 1 ? " size:\n" : " sizes:\n");
    for (const auto& d : diffs) os << "    " << d << "\n";
    if (!unpaired.empty()) {
      os << "    it paired no BF16/FP8 records at";
      for (size_t i = 0; i < unpaired.size(); ++i) os << (i ? ", " : " ") << unpaired[i];
      os << " (FP8 num_tokens padded)\n";
    }
  }
  if (given)
    for (const auto& [key, rules] : rules_by_key(*given))
      if (!seen.count(key))
        os << "\n" << key << "\n  rule: " << rules_text(rules) << " in " << given_source
           << "; no paired measurement of this key in these reports\n";
  for (const auto& [key, rules] : lf_rules)
    if (!seen.count(key))
      os << "\n" << key << "\n  no paired measurement in these reports; LoongForge's merge "
         << "(pairing records across files) gives " << rules_text(rules) << "\n";
  return os.str();
}

}  // namespace mxtrain::policy
