// policy/policy.cc — the policy file: strict load, canonical atomic save, text description.
//
// As for the report, parse_policy is the single validator: validate_policy and save_policy
// run it over policy_to_json, so a struct built in code meets the same rules as a file.
#include "mxtrain/policy/policy.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/recipe.h"
#include "policy/json_util.h"

namespace mxtrain::policy {

using detail::fail_at;
using detail::flat_object;
using detail::json;
using detail::Object;
using detail::ordered_json;

size_t Policy::num_rules() const {
  size_t n = 0;
  for (const auto& [kind, names] : dense)
    for (const auto& [name, rules] : names) n += rules.size();
  for (const auto& [kind, rules] : grouped) n += rules.size();
  return n;
}

size_t Policy::num_rules_naming_no_recipe() const {
  size_t n = 0;
  for (const auto& [kind, names] : dense)
    for (const auto& [name, rules] : names)
      for (const Rule& r : rules) n += r.recipe.empty();
  for (const auto& [kind, rules] : grouped)
    for (const Rule& r : rules) n += r.recipe.empty();
  return n;
}

bool Policy::names_recipes_per_rule() const {
  return !measured_recipes.empty() || num_rules_naming_no_recipe() < num_rules();
}

size_t recipe_rank(const std::string& name) {
  const auto& all = registered_recipes();
  size_t i = 0;
  while (i < all.size() && all[i].name != name) ++i;
  return i;
}

namespace {

// Names in the registry's order (names it does not hold last, by name), without repeats.
std::vector<std::string> in_registry_order(std::vector<std::string> v) {
  std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
    const size_t ra = recipe_rank(a), rb = recipe_rank(b);
    return ra != rb ? ra < rb : a < b;
  });
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::vector<std::string> Policy::recipes() const {
  if (!measured_recipes.empty()) return in_registry_order(measured_recipes);
  std::vector<std::string> v;
  if (!recipe.empty()) v.push_back(recipe);
  for (const auto& [kind, names] : dense)
    for (const auto& [name, rules] : names)
      for (const Rule& r : rules)
        if (!r.recipe.empty()) v.push_back(r.recipe);
  for (const auto& [kind, rules] : grouped)
    for (const Rule& r : rules)
      if (!r.recipe.empty()) v.push_back(r.recipe);
  return in_registry_order(std::move(v));
}

const std::string& rule_recipe(const Policy& p, const Rule& r) {
  return r.recipe.empty() ? p.recipe : r.recipe;
}

std::string rule_range(const Rule& r) {
  std::string s = "[" + std::to_string(r.min_tokens) + ", ";
  return s + (r.max_tokens ? std::to_string(*r.max_tokens) + "]" : std::string("inf)"));
}

std::string rule_key(const std::string& kind, const std::string& name, const Rule& r) {
  if (is_grouped_kind(kind))
    return kind + " etp=" + std::to_string(r.etp) + " num_gemms=" + std::to_string(r.num_gemms);
  return kind + "/" + name + " tp=" + std::to_string(r.tp);
}

namespace {

// The quantized recipes of the registry, for messages: "mxfp8, mxfp8-32x32, ...".
std::string quantized_recipe_list() {
  std::string s;
  for (const Recipe& r : registered_recipes())
    if (r.quantized()) s += (s.empty() ? "" : ", ") + r.name;
  return s;
}

// A recipe a policy names (a rule's, or one of measured_recipes) must be registered and
// quantized: a rule enables quantization, and a module without a rule runs BF16.
void check_policy_recipe_name(const std::string& name, const std::string& source,
                              const std::string& path) {
  const size_t rank = recipe_rank(name);
  if (rank == registered_recipes().size())
    fail_at(source, path, "unknown recipe \"" + name + "\" (quantized recipes: " +
                              quantized_recipe_list() + ")");
  if (!registered_recipes()[rank].quantized())
    fail_at(source, path, name + " is not a quantized recipe (quantized recipes: " +
                              quantized_recipe_list() + "); a module without a rule runs BF16");
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// What a rule's recipe is checked against: the policy's `recipe` and measured_recipes.
struct RecipeContext {
  const std::string& policy_recipe;
  const std::vector<std::string>& measured;
};

Rule parse_rule(const json& v, bool grouped, const RecipeContext& rc, const std::string& source,
                const std::string& path) {
  Object o(v, source, path);
  Rule r;
  if (grouped) {
    r.etp = int(o.integer("etp", 1));
    r.num_gemms = int(o.integer("num_gemms", 1));
  } else {
    r.tp = int(o.integer("tp", 1));
  }
  r.min_tokens = o.integer("min_tokens", 0);
  if (o.has("max_tokens")) {
    r.max_tokens = o.integer("max_tokens", 0);
    if (*r.max_tokens < r.min_tokens)
      fail_at(source, o.key_path("max_tokens"),
              std::to_string(*r.max_tokens) + " is less than min_tokens " +
                  std::to_string(r.min_tokens) + " (the rule would cover no token count)");
  }
  if (o.has("recipe")) {
    r.recipe = o.string("recipe");
    check_policy_recipe_name(r.recipe, source, o.key_path("recipe"));
    if (!rc.measured.empty() &&
        std::find(rc.measured.begin(), rc.measured.end(), r.recipe) == rc.measured.end())
      fail_at(source, o.key_path("recipe"),
              r.recipe + " is not among measured_recipes (" + join_names(rc.measured) + ")");
  } else if (!rc.measured.empty() && rc.policy_recipe.empty()) {
    fail_at(source, path,
            "names no recipe, and the policy has no \"recipe\" for such rules (its "
            "measured_recipes lists " + join_names(rc.measured) + "); give the rule a \"recipe\"");
  }
  if (o.has("measured_speedup")) r.measured_speedup = o.number("measured_speedup", 0.0);
  o.finish();
  return r;
}

std::vector<Rule> parse_rule_list(const json& v, bool grouped, const RecipeContext& rc,
                                  const std::string& source, const std::string& path) {
  if (!v.is_array())
    fail_at(source, path, "must be an array of rules, got " + detail::describe_value(v));
  std::vector<Rule> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(parse_rule(v[i], grouped, rc, source, detail::index_path(path, i)));
  return out;
}

std::vector<std::string> parse_measured_recipes(const json& v, const std::string& source) {
  const std::string path = "measured_recipes";
  if (!v.is_array() || v.empty())
    fail_at(source, path, "must be a non-empty array of recipe names, got " +
                              detail::describe_value(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = detail::index_path(path, i);
    if (!v[i].is_string())
      fail_at(source, at, "must be a string, got " + detail::describe_value(v[i]));
    const std::string name = v[i].get<std::string>();
    check_policy_recipe_name(name, source, at);
    if (std::find(out.begin(), out.end(), name) != out.end())
      fail_at(source, at, "\"" + name + "\" is listed twice");
    out.push_back(name);
  }
  return in_registry_order(std::move(out));
}

ordered_json rule_json(const Rule& r, bool grouped) {
  ordered_json o;
  if (grouped) {
    o["etp"] = r.etp;
    o["num_gemms"] = r.num_gemms;
  } else {
    o["tp"] = r.tp;
  }
  o["min_tokens"] = r.min_tokens;
  if (r.max_tokens) o["max_tokens"] = *r.max_tokens;
  if (!r.recipe.empty()) o["recipe"] = r.recipe;
  if (r.measured_speedup) o["measured_speedup"] = *r.measured_speedup;
  return o;
}

void write_rule_list(std::ostringstream& os, const std::vector<Rule>& rules, bool grouped,
                     const std::string& indent) {
  if (rules.empty()) {
    os << "[]";
    return;
  }
  os << "[";
  for (size_t i = 0; i < rules.size(); ++i)
    os << (i ? ",\n" : "\n") << indent << "  " << flat_object(rule_json(rules[i], grouped));
  os << "\n" << indent << "]";
}

}  // namespace

Policy parse_policy(const std::string& json_text, const std::string& source) {
  json j = detail::parse_json_strict(json_text, source);
  Object top(j, source, "");
  Policy p;
  p.version = int(top.integer("version", 0));
  if (p.version != kPolicyVersion)
    fail_at(source, "version",
            "unsupported policy version " + std::to_string(p.version) + " (this build reads " +
                std::to_string(kPolicyVersion) + ")");
  p.speedup_threshold = top.number("speedup_threshold", 0.0);
  if (top.has("recipe")) p.recipe = top.string("recipe");
  if (top.has("measured_recipes")) {
    p.measured_recipes = parse_measured_recipes(top.at("measured_recipes"), source);
    if (!p.recipe.empty() && std::find(p.measured_recipes.begin(), p.measured_recipes.end(),
                                       p.recipe) == p.measured_recipes.end())
      fail_at(source, "recipe",
              p.recipe + " is not among measured_recipes (" + join_names(p.measured_recipes) +
                  ")");
  }
  const RecipeContext rc{p.recipe, p.measured_recipes};
  const json& rules = top.at("rules");
  if (!rules.is_object())
    fail_at(source, "rules", "must be an object, got " + detail::describe_value(rules));
  for (auto it = rules.begin(); it != rules.end(); ++it) {
    const std::string& kind = it.key();
    const std::string kpath = detail::join_path("rules", kind);
    if (is_dense_kind(kind)) {
      if (!it.value().is_object())
        fail_at(source, kpath,
                "must be an object {module name: [rules]}, got " +
                    detail::describe_value(it.value()));
      auto& names = p.dense[kind];
      for (auto nt = it.value().begin(); nt != it.value().end(); ++nt) {
        if (nt.key().empty()) fail_at(source, kpath, "module name must not be empty");
        names[nt.key()] =
            parse_rule_list(nt.value(), false, rc, source, detail::join_path(kpath, nt.key()));
      }
    } else if (is_grouped_kind(kind)) {
      p.grouped[kind] = parse_rule_list(it.value(), true, rc, source, kpath);
    } else {
      fail_at(source, kpath, "unknown kind \"" + kind + "\" (valid: " + all_kinds_list() + ")");
    }
  }
  top.finish();
  return p;
}

Policy load_policy(const std::string& path) {
  return parse_policy(detail::read_text_file(path, "policy file"), path);
}

std::string policy_to_json(const Policy& p) {
  std::ostringstream os;
  os << "{\n  \"version\": " << p.version
     << ",\n  \"speedup_threshold\": " << json(p.speedup_threshold).dump();
  if (!p.recipe.empty()) os << ",\n  \"recipe\": " << json(p.recipe).dump();
  if (!p.measured_recipes.empty()) {
    os << ",\n  \"measured_recipes\": [";
    const auto names = in_registry_order(p.measured_recipes);
    for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << json(names[i]).dump();
    os << "]";
  }
  os << ",\n  \"rules\": {";
  bool first_kind = true;
  auto open_kind = [&](const std::string& kind) {
    os << (first_kind ? "\n" : ",\n") << "    " << json(kind).dump() << ": ";
    first_kind = false;
  };
  for (const auto& kind : dense_kinds()) {
    auto it = p.dense.find(kind);
    if (it == p.dense.end() || it->second.empty()) continue;
    open_kind(kind);
    os << "{";
    bool first_name = true;
    for (const auto& [name, rules] : it->second) {
      os << (first_name ? "\n" : ",\n") << "      " << json(name).dump() << ": ";
      write_rule_list(os, rules, false, "      ");
      first_name = false;
    }
    os << "\n    }";
  }
  for (const auto& kind : grouped_kinds()) {
    auto it = p.grouped.find(kind);
    if (it == p.grouped.end() || it->second.empty()) continue;
    open_kind(kind);
    write_rule_list(os, it->second, true, "    ");
  }
  os << (first_kind ? "}\n}\n" : "\n  }\n}\n");
  return os.str();
}

void validate_policy(const Policy& p, const std::string& source) {
  // Kinds are map keys in the struct, so check them before the text form drops bad ones.
  for (const auto& [kind, names] : p.dense)
    if (!is_dense_kind(kind))
      fail_at(source, "rules." + kind, "not a dense kind (valid: " + all_kinds_list() + ")");
  for (const auto& [kind, rules] : p.grouped)
    if (!is_grouped_kind(kind))
      fail_at(source, "rules." + kind, "not a grouped kind (valid: " + all_kinds_list() + ")");
  parse_policy(policy_to_json(p), source);
}

void save_policy(const Policy& p, const std::string& path) {
  validate_policy(p, path);
  io::write_file_atomic(path, policy_to_json(p));
}

std::string describe_policy(const Policy& p) {
  std::ostringstream os;
  const bool per_rule = p.names_recipes_per_rule();
  os << "policy: version " << p.version << ", speedup_threshold " << p.speedup_threshold
     << ", recipe " << (p.recipe.empty() ? "(not recorded)" : p.recipe);
  if (per_rule) os << ", measured recipes " << join_names(p.recipes());
  os << ", " << p.num_rules() << (p.num_rules() == 1 ? " rule\n" : " rules\n");
  char line[320];
  auto emit = [&](const std::string& kind, const std::string& name, const std::string& key,
                  const Rule& r) {
    std::string sp = "-";
    if (r.measured_speedup) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", *r.measured_speedup);
      sp = b;
    }
    if (per_rule && sp.size() < 5) sp.resize(5, ' ');  // the recipe column lines up
    std::snprintf(line, sizeof line, "  %-17s %-12s %-22s tokens %-22s speedup %s",
                  kind.c_str(), name.c_str(), key.c_str(), rule_range(r).c_str(), sp.c_str());
    os << line;
    if (per_rule) {
      const std::string& rec = rule_recipe(p, r);
      os << "  recipe " << (rec.empty() ? "(not recorded)" : rec)
         << (r.recipe.empty() ? " (the policy's)" : "");
    }
    os << "\n";
  };
  for (const auto& kind : dense_kinds()) {
    auto it = p.dense.find(kind);
    if (it == p.dense.end()) continue;
    for (const auto& [name, rules] : it->second)
      for (const auto& r : rules) emit(kind, name, "tp=" + std::to_string(r.tp), r);
  }
  for (const auto& kind : grouped_kinds()) {
    auto it = p.grouped.find(kind);
    if (it == p.grouped.end()) continue;
    for (const auto& r : it->second)
      emit(kind, "-",
           "etp=" + std::to_string(r.etp) + " num_gemms=" + std::to_string(r.num_gemms), r);
  }
  if (p.num_rules() == 0) os << "  (no rules: every module runs BF16)\n";
  return os.str();
}

}  // namespace mxtrain::policy
