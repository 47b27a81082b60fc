// cli/cmd_policy.cc — `mxtrain policy merge|explain|show|decide`: the adaptive-FP8 policy
// from the command line (policy/policy.h, docs/adaptive.md).
//
//   policy merge --reports A.json [B.json ...] --output P.json [--speedup-threshold 1.0]
//       merges benchmark reports (mxtrain's or LoongForge's, detected per file; of one recipe
//       or several, each key then keeping the recipe that wins best) into a policy file and
//       prints what each key became;
//   policy explain --reports A.json [B.json ...] [--policy P.json] [--speedup-threshold T]
//       prints per key the measured points, the chosen range and why, and where LoongForge's
//       own merge would choose differently and what that would cost;
//   policy show P.json [--json]   validates and prints the rules (or the canonical JSON);
//   policy decide P.json --kind row --name proj --tokens 4096 [--tp N]
//                 [--expert --etp N --num-gemms N --top-k N]
//       prints the decision the trainer would make for one module.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/common.h"
#include "mxtrain/policy/explain.h"
#include "mxtrain/policy/loongforge.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::cli {
namespace {

struct MergeOptions {
  std::vector<std::string> reports;
  std::string output;
  double threshold = 1.0;
};

int run_merge(const MergeOptions& o) {
  io::check_output_file(o.output, "--output");
  std::vector<io::NamedPath> inputs;
  for (const auto& path : o.reports) inputs.push_back({"--reports", path});
  io::check_outputs_apart({{"--output", o.output}}, inputs);
  std::vector<policy::Report> reports;
  for (const auto& path : o.reports) {
    reports.push_back(policy::load_any_report(path).report);
    MXT_CHECK(!reports.back().points.empty(), path, ": the report holds no measured points, so "
              "there is nothing to merge (an interrupted bench-layers run?); give reports with "
              "measurements");
  }
  policy::MergeSummary summary;
  policy::Policy p = policy::merge_reports(reports, o.threshold, &summary);
  policy::save_policy(p, o.output);
  std::string recipes = "recipe " + (p.recipe.empty() ? "not recorded" : p.recipe);
  if (!p.measured_recipes.empty()) {  // several: each rule names the one that won its key
    recipes = "recipes";
    for (size_t i = 0; i < p.measured_recipes.size(); ++i)
      recipes += (i ? ", " : " ") + p.measured_recipes[i];
  }
  std::printf("merged %zu report%s (%s, speedup threshold %g): ", reports.size(),
              reports.size() == 1 ? "" : "s", recipes.c_str(), o.threshold);
  std::fputs(summary.to_string().c_str(), stdout);
  std::printf("wrote %s\n", o.output.c_str());
  return 0;
}

struct ExplainOptions {
  std::vector<std::string> reports;
  std::string policy;
  double threshold = 0;  // 0 = not given
};

int run_explain(const ExplainOptions& o) {
  std::vector<policy::LoadedReport> reports;
  for (const auto& path : o.reports) reports.push_back(policy::load_any_report(path));
  std::optional<policy::Policy> given;
  if (!o.policy.empty()) given = policy::load_policy(o.policy);
  // The threshold: --speedup-threshold, else the given policy's, else 1.0.
  const double threshold = o.threshold > 0 ? o.threshold : given ? given->speedup_threshold : 1.0;
  std::fputs(policy::explain_reports(reports, threshold, given ? &*given : nullptr, o.policy)
                 .c_str(),
             stdout);
  return 0;
}

struct ShowOptions {
  std::string path;
  bool json = false;
};

int run_show(const ShowOptions& o) {
  policy::Policy p = policy::load_policy(o.path);
  std::fputs(o.json ? policy::policy_to_json(p).c_str() : policy::describe_policy(p).c_str(),
             stdout);
  return 0;
}

struct DecideOptions {
  std::string path;
  policy::DecisionQuery q;
};

int run_decide(const DecideOptions& o) {
  policy::Policy p = policy::load_policy(o.path);
  policy::Decision d = policy::decide(p, o.q);
  // A rule naming its recipe prints it ("nvfp4"); a rule enabling the policy's, "FP8".
  const std::string what = !d.use_fp8 ? "BF16" : d.rule_names_recipe ? d.recipe : "FP8 ";
  std::printf("%s  %s tokens=%lld: %s\n", what.c_str(), d.kind.c_str(), (long long)d.tokens,
              d.reason.c_str());
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("policy", [](CLI::App& app) {
  CLI::App* group = app.add_subcommand(
      "policy", "Adaptive FP8: merge benchmark reports into a policy, show or query a policy");
  group->require_subcommand(1);

  auto mo = std::make_shared<MergeOptions>();
  CLI::App* merge = group->add_subcommand(
      "merge",
      "Merge `mxtrain bench-layers` reports (or LoongForge's benchmark reports, detected per "
      "file) into a policy file. A token count is an FP8 win "
      "when speedup - spread > threshold in every report that measured it; each key gets the "
      "longest run of winning sizes as its rule. Reports of several recipes are merged per "
      "recipe, and each key keeps the rule with the largest measured speedup, naming its "
      "recipe (see docs/adaptive.md)");
  merge->add_option("--reports", mo->reports, "Benchmark report files (JSON)")
      ->required()
      ->expected(1, -1)
      ->check(CLI::ExistingFile);
  merge->add_option("--output", mo->output, "Policy file to write (atomically)")->required();
  merge->add_option("--speedup-threshold", mo->threshold,
                    "FP8 must beat BF16 by more than this factor plus the measured spread "
                    "(default 1.0)")
      ->check(number_at_least(0, true));
  merge->callback([mo] { exit_code() = run_merge(*mo); });

  auto eo = std::make_shared<ExplainOptions>();
  CLI::App* explain = group->add_subcommand(
      "explain",
      "Print, per key, the measured points, the chosen token range and why; with LoongForge "
      "reports, also where LoongForge's own merge would choose differently and its cost");
  explain->add_option("--reports", eo->reports, "Benchmark report files (JSON, either format)")
      ->required()
      ->expected(1, -1)
      ->check(CLI::ExistingFile);
  explain->add_option("--policy", eo->policy,
                      "Explain this policy file's rules instead of a fresh merge")
      ->check(CLI::ExistingFile);
  explain->add_option("--speedup-threshold", eo->threshold,
                      "Threshold (default: the --policy file's, else 1.0)")
      ->check(number_at_least(0, true));
  explain->callback([eo] { exit_code() = run_explain(*eo); });

  auto so = std::make_shared<ShowOptions>();
  CLI::App* show = group->add_subcommand("show", "Validate a policy file and print its rules");
  show->add_option("policy", so->path, "Policy file (JSON)")->required();
  show->add_flag("--json", so->json, "Print the canonical JSON form instead of a table");
  show->callback([so] { exit_code() = run_show(*so); });

  auto dop = std::make_shared<DecideOptions>();
  CLI::App* dec = group->add_subcommand(
      "decide", "Print the precision a policy gives one module (as the trainer decides it)");
  dec->add_option("policy", dop->path, "Policy file (JSON)")->required();
  dec->add_option("--kind", dop->q.kind,
                  "Module kind: layernorm_column, column, row, duplicated, column_grouped, "
                  "row_grouped")
      ->required();
  dec->add_option("--name", dop->q.name, "Module name (qkv, proj, fc1, fc2, ...)");
  dec->add_option("--tokens", dop->q.tokens, "seq_len x micro_batch (before top-k)")
      ->required()
      ->check(whole_number(0));
  dec->add_option("--tp", dop->q.tp, "Tensor-parallel size (default 1)");
  dec->add_flag("--expert", dop->q.is_expert, "The module is an MoE expert projection");
  dec->add_option("--etp", dop->q.etp, "Expert tensor-parallel size (default 1)");
  dec->add_option("--num-gemms", dop->q.num_gemms, "Local experts on this rank");
  dec->add_option("--top-k", dop->q.top_k, "Router top-k (default 1)");
  dec->callback([dop] { exit_code() = run_decide(*dop); });
});

}  // namespace mxtrain::cli
