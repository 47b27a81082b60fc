// cli/cmd_export.cc — `mxtrain export --format hf` and `mxtrain import --format hf`: a
// checkpoint as a Hugging Face Llama / Mixtral directory, and such a directory as a checkpoint
// (train/hf_llama.h). Outputs are written atomically; details: docs/hf.md.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "mxtrain/common.h"
#include "mxtrain/io/checkpoint.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/io/output_dir.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/hf_llama.h"

namespace mxtrain::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, format = "hf", out;
  bool json = false, quiet = false;
};

int run_export(const ExportArgs& a) {
  MXT_CHECK(a.format == "hf", "--format ", a.format, " is not supported (hf: Hugging Face "
            "safetensors + config.json)");
  io::check_output_dir(a.out, "--out");
  io::check_outputs_apart({{"--out", a.out, /*replaced=*/true}},
                          {{"--checkpoint", a.checkpoint}});
  io::check_replaceable_dir(a.out, "--out");
  const hf::ExportResult r = hf::export_checkpoint(a.checkpoint, a.out);
  if (a.json) {
    const nlohmann::json j = {{"out", a.out}, {"architecture", r.architecture},
                              {"tensors", r.tensors}, {"bytes", r.bytes},
                              {"tokenizer", r.tokenizer}, {"tied", r.tied}};
    std::printf("%s\n", j.dump().c_str());
  }
  if (!a.quiet)
    std::fprintf(stderr, "wrote %s: %s, %zu tensors (%.1f MB), tokenizer %s%s\n", a.out.c_str(),
                 r.architecture.c_str(), r.tensors, r.bytes * 1e-6, r.tokenizer.c_str(),
                 r.tied ? ", head tied to the embedding" : "");
  return 0;
}

struct ImportArgs {
  std::string input, format = "hf", out, config;
  bool quiet = false, allow_nonfinite = false;
};

int run_import(const ImportArgs& a) {
  MXT_CHECK(a.format == "hf", "--format ", a.format, " is not supported (hf)");
  io::check_output_dir(a.out, "--out");
  io::check_outputs_apart({{"--out", a.out}}, {{"--input", a.input}, {"--config", a.config}});
  const int64_t latest = io::latest_checkpoint_step(a.out);
  MXT_CHECK(latest < 0, "--out ", a.out, ": holds checkpoints already (the latest is step_",
            latest, "); import into a new directory");
  // The settings a later `train --resume` or `eval` sees: a config's, or the defaults.
  TrainConfig base = a.config.empty()
                         ? parse_config("model: {}\nprecision: {recipe: mxfp8}\n", "defaults")
                         : load_config(a.config);
  const std::string dir = hf::import_to_checkpoint(a.input, a.out, base, a.allow_nonfinite);
  if (!a.quiet) std::fprintf(stderr, "wrote %s from %s\n", dir.c_str(), a.input.c_str());
  return 0;
}

MXT_REGISTER_COMMAND("export", [](CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (LlamaForCausalLM, or "
                "MixtralForCausalLM for MoE models)");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint directory (its latest step) or a step_<N> directory")->required();
  sub->add_option("--format", a->format, "Output format: hf (default)");
  sub->add_option("--out", a->out, "Directory to write (config.json, model.safetensors, ...; "
                  "an earlier export there is replaced, other files are kept)")->required();
  sub->add_flag("--json", a->json, "Print one JSON object with what was written");
  sub->add_flag("--quiet", a->quiet, "No summary line on stderr");
  sub->callback([a] { exit_code() = run_export(*a); });
});

MXT_REGISTER_COMMAND("import", [](CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* sub = app.add_subcommand(
      "import", "Read a Hugging Face Llama / Mixtral directory into an mxtrain checkpoint "
                "(step 0), for generate, eval, export or train --resume");
  sub->add_option("--input", a->input, "The Hugging Face model directory")->required();
  sub->add_option("--format", a->format, "Input format: hf (default)");
  sub->add_option("--out", a->out, "Checkpoint directory to write")->required();
  sub->add_option("--config", a->config,
                  "Training settings to record (their model section is replaced by the "
                  "imported model); default: mxtrain's defaults")->check(CLI::ExistingFile);
  sub->add_flag("--allow-nonfinite", a->allow_nonfinite,
                "Keep weights that are NaN or infinite (refused by default, naming the tensor)");
  sub->add_flag("--quiet", a->quiet, "No summary line on stderr");
  sub->callback([a] { exit_code() = run_import(*a); });
});

}  // namespace
}  // namespace mxtrain::cli
