// mxtrain/policy/policy.h — the adaptive-FP8 policy: file format, merge, per-module decision
// (the pipeline is described in docs/adaptive.md).
//
//   bench-layers -> Report (policy/report.h) -> merge_reports -> Policy file -> decide()
//
// Policy file, version 1 (the schema of the original selective-FP8 implementation, see
// docs/adaptive.md, plus optional `max_tokens`, `recipe`, a rule's own `recipe` and
// `measured_recipes`):
//   {"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8",          // recipe optional
//    "rules": {
//      "layernorm_column": {"qkv": [{"tp": 1, "min_tokens": 16384, "measured_speedup": 1.03}]},
//      "row": {"proj": [{"tp": 1, "min_tokens": 1024, "max_tokens": 8192,
//                        "measured_speedup": 1.05}]},
//      "column": {...}, "duplicated": {...},
//      "column_grouped": [{"etp": 1, "num_gemms": 64, "min_tokens": 424,
//                          "measured_speedup": 1.02}],
//      "row_grouped": [...]}}
// Dense kinds map a module name to a list of rules keyed by tp; grouped kinds are one flat
// list keyed by (etp, num_gemms). A rule covers min_tokens <= tokens (<= max_tokens when
// present; absent = no upper bound). Several rules may share a key (disjoint ranges).
// measured_speedup is informational (optional when hand-written). Loading rejects wrong
// version, unknown kinds or keys, duplicate keys, missing fields, wrong types, negative
// numbers and min_tokens > max_tokens with an error naming the file and the JSON path
// (e.g. "p.json: rules.row.proj[0].min_tokens: must be an integer >= 0, got -5").
//
// Recipes per rule (docs/adaptive.md §4): a rule may name the quantized recipe it enables,
// {"tp": 1, "min_tokens": 4096, "recipe": "nvfp4", ...}; a rule that names none enables the
// policy's `recipe` (the meaning of every older file). `measured_recipes` (optional) lists
// every recipe the merged reports measured — written by a merge of several recipes, where
// every rule names its recipe and a recipe may have won no key. Both are registered,
// quantized recipes (get_recipe, mxtrain/recipe.h); measured_recipes, when present, holds
// `recipe` and every rule's recipe. The version stays 1: files without the new fields read
// and write as before, and a reader that predates them refuses a file that uses them
// ("rules.row.proj[0].recipe: unknown field"), never misreads it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/policy/report.h"

namespace mxtrain::policy {

inline constexpr int kPolicyVersion = 1;

struct Rule {
  int tp = 0;                          // dense kinds
  int etp = 0, num_gemms = 0;          // grouped kinds
  int64_t min_tokens = 0;
  std::optional<int64_t> max_tokens;   // absent = no upper bound
  std::string recipe;                  // the recipe it enables; empty = the policy's `recipe`
  std::optional<double> measured_speedup;

  bool covers(int64_t tokens) const {
    return tokens >= min_tokens && (!max_tokens || tokens <= *max_tokens);
  }
};

struct Policy {
  int version = kPolicyVersion;
  double speedup_threshold = 1.0;
  std::string recipe;  // recipe the timings came from (of rules naming none); empty = not recorded
  // Every recipe the merged reports measured, in the registry's order; empty = not recorded
  // (a policy of one recipe: `recipe`).
  std::vector<std::string> measured_recipes;
  // dense kind -> module name -> rules
  std::map<std::string, std::map<std::string, std::vector<Rule>>> dense;
  // grouped kind -> rules
  std::map<std::string, std::vector<Rule>> grouped;

  size_t num_rules() const;
  // Rules that name no recipe of their own (they enable `recipe`).
  size_t num_rules_naming_no_recipe() const;
  // The recipes the policy was measured with: measured_recipes when recorded, else `recipe`
  // (when recorded) and every recipe a rule names, in the registry's order.
  std::vector<std::string> recipes() const;
  // Whether the policy uses the per-rule recipes: some rule names its recipe, or
  // measured_recipes is recorded. A policy that does not reads as every file before them.
  bool names_recipes_per_rule() const;
};

// The recipe a rule enables: its own, else the policy's (empty when neither is recorded).
const std::string& rule_recipe(const Policy& p, const Rule& r);

// --- file I/O --------------------------------------------------------------------------

void validate_policy(const Policy& p, const std::string& source = "policy");
Policy parse_policy(const std::string& json_text, const std::string& source);
Policy load_policy(const std::string& path);
// Canonical JSON text: top-level keys version, speedup_threshold, recipe, measured_recipes
// (in the registry's order), rules; kinds in the order layernorm_column, column, row,
// duplicated, column_grouped, row_grouped; names sorted; rule keys in the order
// tp|etp,num_gemms, min_tokens, max_tokens, recipe, measured_speedup; 2-space indent;
// trailing newline. Optional fields appear only when set. Rules keep their order.
// save -> load -> save gives identical bytes.
std::string policy_to_json(const Policy& p);
// Validates, then writes atomically (temp file, fsync, rename).
void save_policy(const Policy& p, const std::string& path);
// Human-readable table of every rule, one per line.
std::string describe_policy(const Policy& p);
// "[4096, inf)" or "[512, 8192]".
std::string rule_range(const Rule& r);
// Position of a recipe name in the registry's order (registered_recipes), or the registry's
// size for a name it does not hold: the fixed order recipes are listed and compared in.
size_t recipe_rank(const std::string& name);
// The key a rule of `kind` (and module `name`, dense kinds) belongs to, as the merge summary
// writes it: "row/proj tp=1" or "column_grouped etp=1 num_gemms=8".
std::string rule_key(const std::string& kind, const std::string& name, const Rule& r);

// --- merge (docs/adaptive.md "Merge") ---------------------------------------------------
//
// For every key — dense (kind, name, tp), grouped (kind, etp, num_gemms) — and every measured
// token count t of that key:
//   * BF16 and FP8 timings pair by the unpadded `tokens` within one report;
//   * t is a win when every paired measurement of (key, t), across all reports, has
//     speedup - spread > threshold; its speedup is the minimum over those measurements;
//   * maximal runs of consecutive winning sizes are the candidate ranges; the longest (most
//     measured sizes; equal lengths: the one at larger sizes) becomes the key's one rule. If
//     it reaches the largest measured size the rule is {min_tokens: first} with no upper
//     bound (FP8 keeps winning as shapes grow); otherwise {min_tokens: first, max_tokens:
//     last} ("FP8 wins only below N", or only inside a band). Other runs are listed in the
//     summary, not emitted: a lone win between losses is more likely noise than a regime;
//   * min_tokens / max_tokens are measured sizes: nothing is extrapolated below the smallest
//     measured size, and a max_tokens rule is not extrapolated between its last win and the
//     next (losing) measured size;
//   * measured_speedup = the minimum speedup over the rule's range, rounded to 4 decimals.
// Reports of one recipe (a report built in code with an empty recipe matches any) give a
// policy recording it as `recipe`, its rules naming none — the same file as before
// per-rule recipes. Reports of several recipes (each must name its own, a registered
// quantized one) are merged per recipe as above; then, per key, of the recipes whose merge
// gave the key a rule, the one with the largest measured_speedup (as stored, 4 decimals)
// wins, ties going to the recipe earlier in the registry's order (recipe_rank); its rule
// is emitted naming its recipe. The policy then records no `recipe` and lists every
// recipe measured in measured_recipes. A key measured at different GEMM shapes in
// different mxtrain reports is an error (reports of different models), across recipes too.
// Reports converted from LoongForge (Report::format "loongforge") hold already-paired points; their keys may have
// several shapes (LoongForge's key has no shape: a vision encoder's and an LLM's qkv share
// one), and every measurement of (key, t) counts, whatever its shape.

// One paired measurement of a key at one token count, as the merge used it.
struct Measurement {
  std::string source;         // the report it came from
  std::string recipe;         // that report's recipe
  std::string origin;         // Point::origin (LoongForge "model/case"), empty for mxtrain's
  int64_t tokens = 0, padded_tokens = 0;
  double bf16_ms = 0, fp8_ms = 0, speedup = 0, spread = 0;
  bool win = false;           // speedup - spread > threshold
};

struct KeySummary {
  std::string key;                 // "row/proj tp=1" or "column_grouped etp=1 num_gemms=8"
  std::string kind, name;          // name empty for grouped kinds
  std::string recipe;              // the recipe these measurements are of ("" = not recorded)
  std::string outcomes;            // "512:1.02- 1024:1.10+ ..." (+ win, - loss)
  std::optional<Rule> rule;        // the rule emitted, if any
  std::vector<std::string> notes;  // runs not emitted, unpaired sides, ...
  std::vector<Measurement> measurements;  // sorted by tokens, then report order
  // A merge of several recipes: the key's merge per recipe that measured it (registry
  // order), each as above for that recipe alone, with its rule naming its recipe; `rule`
  // and `recipe` are then the chosen one's (`outcomes` and `measurements` stay empty), and
  // `choice` says why it was chosen. Empty for a merge of one recipe.
  std::vector<KeySummary> per_recipe;
  std::string choice;
};

struct MergeSummary {
  std::vector<KeySummary> keys;
  std::vector<std::string> notes;    // report-level notes
  std::vector<std::string> recipes;  // several when the reports measured several recipes
  std::string to_string() const;     // the table `mxtrain policy merge` prints
};

Policy merge_reports(const std::vector<Report>& reports, double speedup_threshold = 1.0,
                     MergeSummary* summary = nullptr);

// --- decision ---------------------------------------------------------------------------

// One module at model build. Dense modules give (kind, name, tp, tokens). Expert modules set
// is_expert (or pass a grouped kind directly): layernorm_column and column are promoted to
// column_grouped, row to row_grouped, the lookup key is (etp, num_gemms) and the token count
// used is tokens x top_k (the caller passes tokens = seq_len x micro_batch, or its
// per-component override, and the router's top_k; decide() multiplies).
struct DecisionQuery {
  std::string kind;       // layernorm_column | column | row | duplicated | *_grouped
  std::string name;       // module name: qkv, proj, fc1, fc2, ...
  int tp = 1;
  bool is_expert = false;
  int etp = 1;
  int num_gemms = 0;      // local experts on this rank
  int top_k = 1;
  int64_t tokens = 0;     // before top-k
};

struct Decision {
  bool use_fp8 = false;       // a rule covers the module: it runs `recipe` (quantized)
  std::string reason;         // human-readable, shown in the trainer's decision table
  const Rule* rule = nullptr; // the rule that matched (points into the Policy), or null
  // The recipe the matching rule enables (rule_recipe: its own, else the policy's; empty
  // when neither is recorded), and whether the rule names it itself. Empty without a rule.
  std::string recipe;
  bool rule_names_recipe = false;
  std::string kind;           // the kind looked up (after promotion)
  int64_t tokens = 0;         // the token count compared (after top-k)
};

// Throws mxtrain::Error for an invalid query (unknown kind, expert `duplicated`, tp/etp/
// num_gemms/top_k < 1 where used, negative tokens). No matching rule -> BF16 with a reason.
// The first rule of the key (in file order) that covers the token count decides; a rule
// naming its recipe says so in the reason ("... (recipe nvfp4, measured speedup 1.210)").
Decision decide(const Policy& p, const DecisionQuery& q);

}  // namespace mxtrain::policy
