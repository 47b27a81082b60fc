// policy/loongforge.cc — LoongForge's benchmark record lists: strict reading, conversion to
// paired Points at unpadded token counts, and a reproduction of LoongForge's own merge for
// `mxtrain policy explain` (rules in policy/loongforge.h and docs/adaptive.md).
#include "mxtrain/policy/loongforge.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <tuple>

#include "mxtrain/common.h"
#include "policy/json_util.h"

namespace mxtrain::policy {

using detail::fail_at;
using detail::json;
using detail::Object;

namespace {

const std::vector<std::string>& loongforge_kinds() {
  static const std::vector<std::string> k{"layernorm_column", "column", "row", "duplicated",
                                          "column_grouped", "row_grouped"};
  return k;
}

// Transformer Engine's recipe names (LoongForge's fp8_recipe) -> mxtrain's.
const std::vector<std::pair<std::string, std::string>>& te_recipe_names() {
  static const std::vector<std::pair<std::string, std::string>> names{
      {"blockwise", "blockwise"}, {"mxfp8", "mxfp8"},         {"tensorwise", "fp8-current"},
      {"current", "fp8-current"}, {"delayed", "fp8-delayed"}};
  return names;
}

std::optional<std::string> recipe_from_te(const std::string& te) {
  for (const auto& [name, ours] : te_recipe_names())
    if (name == te) return ours;
  return std::nullopt;
}

std::string unknown_te_recipe(const std::string& te) {
  std::string known;
  for (const auto& [name, ours] : te_recipe_names()) known += (known.empty() ? "" : ", ") + name;
  return "unknown fp8_recipe \"" + te + "\" (known: " + known + ")";
}

std::vector<int64_t> parse_shape(Object& o, const std::string& key) {
  const json& v = o.at(key);
  const std::string path = o.key_path(key);
  if (!v.is_array() || v.empty())
    fail_at(o.source(), path, "must be a non-empty list of sizes, got " + detail::describe_value(v));
  std::vector<int64_t> shape;
  for (size_t i = 0; i < v.size(); ++i)
    shape.push_back(detail::as_integer(v[i], 1, o.source(), detail::index_path(path, i)));
  return shape;
}

LoongForgeRecord parse_record(const json& v, const std::string& source, size_t index) {
  Object o(v, source, detail::index_path("", index));
  LoongForgeRecord r;
  r.case_name = o.string("case_name");
  r.model_name = o.string("model_name");
  r.module_name = o.string("module_name");
  r.module_kind = o.string("module_kind");
  const auto& kinds = loongforge_kinds();
  if (std::find(kinds.begin(), kinds.end(), r.module_kind) == kinds.end())
    fail_at(source, o.key_path("module_kind"),
            "unknown module_kind \"" + r.module_kind + "\" (valid: " + all_kinds_list() + ")");
  r.precision = o.string("precision");
  if (r.precision != "bf16" && r.precision != "fp8")
    fail_at(source, o.key_path("precision"),
            "must be \"bf16\" or \"fp8\", got \"" + r.precision + "\"");
  r.input_shape = parse_shape(o, "input_shape");
  r.output_shape = parse_shape(o, "output_shape");
  r.num_tokens = o.integer("num_tokens", 1);
  r.forward_ms = o.number_nonneg("forward_ms");
  r.backward_ms = o.number_nonneg("backward_ms");
  r.total_ms = o.number("total_ms", 0.0);
  r.tokens_per_second = o.number_nonneg("tokens_per_second");
  r.forward_flops = o.number_nonneg("forward_flops");
  r.backward_flops = o.number_nonneg("backward_flops");
  r.total_flops = o.number_nonneg("total_flops");
  r.achieved_tflops = o.number_nonneg("achieved_tflops");
  r.tp_size = int(o.integer_or("tp_size", 1, 1));
  r.etp_size = int(o.integer_or("etp_size", 1, 1));
  r.num_gemms = int(o.integer_or("num_gemms", 1, 1));
  if (o.has("ub_name") && !o.at("ub_name").is_null()) r.ub_name = o.string("ub_name");
  if (o.has("fp8_recipe")) {
    const std::string te = o.string("fp8_recipe");
    r.recipe = recipe_from_te(te);
    if (!r.recipe) fail_at(source, o.key_path("fp8_recipe"), unknown_te_recipe(te));
  }
  if (!r.ub_name && is_dense_kind(r.module_kind))
    fail_at(source, o.key_path("ub_name"),
            "a " + r.module_kind + " record needs its module name (qkv, proj, fc1, fc2) here");
  static const std::regex suffix("_s([0-9]+)_b([0-9]+)$");
  std::smatch m;
  if (!std::regex_search(r.model_name, m, suffix))
    fail_at(source, o.key_path("model_name"),
            "\"" + r.model_name + "\" does not end in _s{seq}_b{mbs}; the unpadded token "
            "count is seq x mbs");
  try {
    r.seq = std::stoll(m[1].str());
    r.mbs = std::stoll(m[2].str());
  } catch (const std::exception&) {
    r.seq = r.mbs = 0;
  }
  if (r.seq < 1 || r.mbs < 1 || r.seq > (int64_t(1) << 40) / r.mbs)
    fail_at(source, o.key_path("model_name"),
            "\"" + r.model_name + "\": seq and mbs must be >= 1 and their product reasonable");
  o.finish();
  return r;
}

std::string rec(size_t i) { return "[" + std::to_string(i) + "]"; }

}  // namespace

std::string loongforge_recipe_name(const std::string& te_name) {
  const std::optional<std::string> ours = recipe_from_te(te_name);
  MXT_CHECK(ours, unknown_te_recipe(te_name));
  return *ours;
}

bool is_loongforge_text(const std::string& text) {
  const size_t i = text.find_first_not_of(" \t\r\n");
  return i != std::string::npos && text[i] == '[';
}

LoongForgeReport parse_loongforge_report(const std::string& text, const std::string& source) {
  json j = detail::parse_json_strict(text, source);
  if (!j.is_array())
    fail_at(source, "", "a LoongForge report is a JSON list of records, got " +
                            detail::describe_value(j));
  LoongForgeReport lf;
  lf.source = source;
  for (size_t i = 0; i < j.size(); ++i) lf.records.push_back(parse_record(j[i], source, i));
  return lf;
}

Report loongforge_to_report(const LoongForgeReport& lf) {
  const std::string& src = lf.source;
  Report r;
  r.source = src;
  r.format = "loongforge";
  // (model_name, case_name) -> record index per precision, in order of first appearance.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::pair<long, long>> sides;
  for (size_t i = 0; i < lf.records.size(); ++i) {
    const LoongForgeRecord& x = lf.records[i];
    auto [it, fresh] = sides.try_emplace({x.model_name, x.case_name}, -1L, -1L);
    if (fresh) order.push_back(it->first);
    long& slot = x.precision == "bf16" ? it->second.first : it->second.second;
    if (slot >= 0)
      fail_at(src, rec(i),
              "second " + x.precision + " record of " + x.model_name + "/" + x.case_name +
                  " (first at " + rec(size_t(slot)) +
                  "); a report holds one record per case and precision");
    slot = long(i);
  }
  // The FP8 recipe: every fp8 record's (absent = blockwise, what LoongForge runs), all equal.
  long recipe_from = -1;
  for (size_t i = 0; i < lf.records.size(); ++i) {
    const LoongForgeRecord& x = lf.records[i];
    if (x.precision != "fp8") continue;
    const std::string recipe = x.recipe.value_or("blockwise");
    if (recipe_from < 0) {
      recipe_from = long(i);
      r.recipe = recipe;
    } else if (recipe != r.recipe) {
      fail_at(src, rec(i),
              "fp8 recipe " + recipe + " differs from " + r.recipe + " of " +
                  rec(size_t(recipe_from)) + "; a report holds one FP8 recipe");
    }
  }
  if (recipe_from < 0) r.recipe = "blockwise";
  std::vector<std::string> models;
  for (const auto& mc : order) {
    // Plain variables, not a structured binding: lambdas below use them (clang 14 cannot
    // capture a structured binding).
    const long bi = sides.at(mc).first, fi = sides.at(mc).second;
    const std::string what = mc.first + "/" + mc.second;
    if (bi < 0 || fi < 0) {
      const long only = bi >= 0 ? bi : fi;
      r.notes.push_back(what + " has only a " + lf.records[size_t(only)].precision +
                        " record (" + rec(size_t(only)) + "); not used");
      continue;
    }
    const LoongForgeRecord& b = lf.records[size_t(bi)];
    const LoongForgeRecord& f = lf.records[size_t(fi)];
    const std::string both = " (bf16 " + rec(size_t(bi)) + ", fp8 " + rec(size_t(fi)) + ")";
    auto same = [&](bool eq, const std::string& field) {
      if (!eq)
        fail_at(src, rec(size_t(fi)),
                what + ": the bf16 and fp8 records disagree on " + field + both);
    };
    same(b.module_kind == f.module_kind, "module_kind");
    same(b.module_name == f.module_name, "module_name");
    same(b.ub_name == f.ub_name, "ub_name");
    same(b.tp_size == f.tp_size, "tp_size");
    same(b.etp_size == f.etp_size, "etp_size");
    same(b.num_gemms == f.num_gemms, "num_gemms");
    same(b.input_shape.back() == f.input_shape.back(), "the input width (input_shape's last dim)");
    same(b.output_shape.back() == f.output_shape.back(),
         "the output width (output_shape's last dim)");
    const int64_t base = b.seq * b.mbs;
    Point p;
    p.kind = b.module_kind;
    p.origin = what;
    p.in = b.input_shape.back();
    p.out = b.output_shape.back();
    if (is_grouped_kind(p.kind)) {
      if (b.num_tokens % base != 0)
        fail_at(src, rec(size_t(bi)) + ".num_tokens",
                std::to_string(b.num_tokens) + " is not a multiple of seq x mbs = " +
                    std::to_string(base) + " from model_name (routed rows are seq x mbs x top_k)");
      p.name = b.ub_name ? *b.ub_name : b.module_name;
      p.etp = b.etp_size;
      p.num_gemms = b.num_gemms;
      p.top_k = int(b.num_tokens / base);
      p.tokens = b.num_tokens;
    } else {
      if (b.num_tokens != base)
        fail_at(src, rec(size_t(bi)) + ".num_tokens",
                std::to_string(b.num_tokens) + " disagrees with seq x mbs = " +
                    std::to_string(base) + " from model_name \"" + b.model_name +
                    "\" (a bf16 record is never padded)");
      p.name = *b.ub_name;
      p.tp = b.tp_size;
      p.tokens = base;
    }
    if (f.num_tokens < p.tokens)
      fail_at(src, rec(size_t(fi)) + ".num_tokens",
              std::to_string(f.num_tokens) + " is less than the unpadded count " +
                  std::to_string(p.tokens) + " of " + what + " (padding only adds rows)");
    p.padded_tokens = f.num_tokens;
    p.bf16 = Timing{b.total_ms, 0.0};
    p.fp8 = Timing{f.total_ms, 0.0};
    static const std::regex sweep_suffix("_s[0-9]+_b[0-9]+$");
    const std::string base_model = std::regex_replace(b.model_name, sweep_suffix, "");
    if (std::find(models.begin(), models.end(), base_model) == models.end())
      models.push_back(base_model);
    r.points.push_back(std::move(p));
  }
  for (const auto& m : models) r.model += (r.model.empty() ? "" : ", ") + m;
  return r;
}

LoadedReport load_any_report(const std::string& path) {
  const std::string text = detail::read_text_file(path, "report");
  LoadedReport out;
  if (is_loongforge_text(text)) {
    out.loongforge = parse_loongforge_report(text, path);
    out.report = loongforge_to_report(*out.loongforge);
  } else {
    out.report = parse_report(text, path);
  }
  return out;
}

LoongForgeMerge loongforge_own_merge(const std::vector<LoongForgeReport>& reports,
                                     double threshold) {
  // Group key: kind, ub_name, tp|etp+num_gemms (as the key text), case, model, num_tokens.
  using GroupKey = std::tuple<std::string, std::string, std::string, int64_t>;
  struct Sides {
    std::string kind, name;
    Rule rule;  // tp | etp, num_gemms
    const LoongForgeRecord* bf16 = nullptr;
    const LoongForgeRecord* fp8 = nullptr;
  };
  std::vector<GroupKey> order;  // insertion order, as a Python dict keeps it
  std::map<GroupKey, Sides> groups;
  for (const auto& lf : reports)
    for (const auto& x : lf.records) {
      Sides s;
      s.kind = x.module_kind;
      s.name = x.ub_name.value_or("");
      if (is_grouped_kind(x.module_kind)) {
        s.rule.etp = x.etp_size;
        s.rule.num_gemms = x.num_gemms;
      } else {
        s.rule.tp = x.tp_size;
      }
      // LoongForge keys grouped kinds by ub_name too; it is fixed per kind (fc1 / fc2).
      const std::string key = rule_key(s.kind, s.name, s.rule) + " ub=" + s.name;
      GroupKey g{key, x.case_name, x.model_name, x.num_tokens};
      auto [it, fresh] = groups.try_emplace(g, s);
      if (fresh) order.push_back(g);
      (x.precision == "bf16" ? it->second.bf16 : it->second.fp8) = &x;
    }
  // Per policy key: (num_tokens, speedup) in insertion order, then a stable sort.
  std::vector<std::string> key_order;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> candidates;
  std::map<std::string, const Sides*> key_sides;
  LoongForgeMerge out;
  out.policy.speedup_threshold = threshold;
  for (const auto& g : order) {
    const Sides& s = groups.at(g);
    if (!s.bf16 || !s.fp8) continue;
    const std::string key = rule_key(s.kind, s.name, s.rule);
    if (!candidates.count(key)) key_order.push_back(key);
    candidates[key].push_back({std::get<3>(g), s.bf16->total_ms / s.fp8->total_ms});
    key_sides[key] = &s;
    out.paired_tokens[key].insert(std::get<3>(g));
  }
  for (const auto& key : key_order) {
    auto& c = candidates[key];
    std::stable_sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (const auto& [tokens, speedup] : c) {
      if (!(speedup > threshold)) continue;
      const Sides& s = *key_sides[key];
      Rule rule = s.rule;
      rule.min_tokens = tokens;
      rule.measured_speedup = std::round(speedup * 1e3) / 1e3;
      if (is_grouped_kind(s.kind)) out.policy.grouped[s.kind].push_back(rule);
      else out.policy.dense[s.kind][s.name].push_back(rule);
      break;
    }
  }
  for (auto& [kind, names] : out.policy.dense)
    for (auto& [name, rules] : names)
      std::stable_sort(rules.begin(), rules.end(), [](auto& a, auto& b) { return a.tp < b.tp; });
  for (auto& [kind, rules] : out.policy.grouped)
    std::stable_sort(rules.begin(), rules.end(), [](auto& a, auto& b) {
      return std::tie(a.etp, a.num_gemms) < std::tie(b.etp, b.num_gemms);
    });
  return out;
}

}  // namespace mxtrain::policy
