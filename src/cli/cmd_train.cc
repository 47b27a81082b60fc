// cli/cmd_train.cc — `mxtrain train`: run (or dry-run) training from a YAML config.
//
// Command-line flags override the config's values; the result is validated again, so a bad
// flag value gets the same clear error as a bad YAML value.
#include <cstdio>

#include "cli/commands.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/recipe.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/hf_llama.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain::cli {
namespace {

struct TrainArgs {
  std::string config, recipe, data, metrics_out, checkpoint_dir, decisions_out, fp8_policy,
      swiglu_input, init_from, recompute;
  int64_t steps = 0, stop_after = 0;
  int seq_len = 0, micro_batch_size = 0, grad_accum = 0;
  uint64_t seed = 0;
  bool resume = false, dry_run = false, fsdp = false, quiet = false, ignore_memory_check = false;
};

int run_train(const TrainArgs& a, CLI::App* sub) {
  TrainConfig cfg = load_config(a.config);
  if (!a.recipe.empty()) {
    get_recipe(a.recipe);  // throws listing the registered names
    cfg.precision.recipe = a.recipe;
    MXT_CHECK(!(cfg.precision.defer_backward_quant && !get_recipe(a.recipe).quantized()),
              "--recipe ", a.recipe, ": precision.defer_backward_quant is only valid with an "
              "FP8 recipe; set it to false in the config");
    MXT_CHECK(!(cfg.precision.swiglu_input == "fp8" && !get_recipe(a.recipe).quantized()),
              "--recipe ", a.recipe, ": precision.swiglu_input fp8 is only valid with an FP8 "
              "recipe; set it to fp32 in the config");
  }
  if (!a.swiglu_input.empty()) cfg.precision.swiglu_input = a.swiglu_input;
  if (a.steps) cfg.training.steps = a.steps;
  if (a.seq_len) cfg.training.seq_len = a.seq_len;
  if (a.micro_batch_size) cfg.training.micro_batch_size = a.micro_batch_size;
  if (a.grad_accum) cfg.training.grad_accum = a.grad_accum;
  if (sub->count("--seed")) cfg.training.seed = a.seed;
  if (!a.data.empty()) cfg.data.path = a.data;
  if (!a.fp8_policy.empty()) {
    cfg.precision.selective_fp8 = true;
    cfg.precision.fp8_dynamic_policy_path = a.fp8_policy;
  }
  if (a.fsdp) cfg.fsdp.enabled = true;
  if (!a.recompute.empty()) cfg.training.recompute = a.recompute;
  if (!a.init_from.empty()) {  // the model section and tokenizer become the directory's
    MXT_CHECK(!a.resume, "--init-from starts a new run from a Hugging Face model; --resume "
              "continues a checkpoint: give one of them");
    for (const std::string& n : hf::apply_model(cfg, hf::import_dir(a.init_from, false)))
      if (!a.quiet) std::fprintf(stderr, "note: --init-from %s: %s\n", a.init_from.c_str(),
                                 n.c_str());
  }
  // Re-parse the merged config so every override is validated like YAML input.
  cfg = parse_config(config_to_yaml(cfg), a.config + " (with command-line overrides)");

  TrainOptions opt;
  opt.metrics_out = a.metrics_out;
  opt.checkpoint_dir = a.checkpoint_dir;
  opt.resume = a.resume;
  opt.stop_after = a.stop_after;
  opt.dry_run = a.dry_run;
  opt.decisions_out = a.decisions_out;
  opt.ignore_memory_check = a.ignore_memory_check;
  opt.init_from = a.init_from;
  opt.progress = !a.quiet;
  opt.print_decisions = !a.quiet;
  const TrainSummary s = run_training(cfg, opt);
  const bool lead = !cfg.fsdp.enabled || dist::Comm::world().rank() == 0;  // FSDP: rank 0 says it
  if (!a.dry_run && !a.quiet && lead)
    std::fprintf(stderr, "done: %lld steps, final loss %.4f, val_loss %.4f, %.0f tok/s\n",
                 (long long)(s.first_step + s.steps_done),
                 s.losses.empty() ? 0.0 : s.losses.back(), s.final_val_loss, s.tokens_per_s);
  return 0;
}

MXT_REGISTER_COMMAND("train", [](CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand("train", "Train the GPT model described by a YAML config");
  sub->add_option("--config", a->config, "Model/training YAML (e.g. configs/tiny.yaml)")
      ->required()->check(CLI::ExistingFile);
  sub->add_option("--recipe", a->recipe, "Precision recipe: bf16, mxfp8, mxfp8-32x32");
  sub->add_option("--swiglu-input", a->swiglu_input,
                  "What SwiGLU's input is kept in for backward: auto (FP8 where fc1 runs an "
                  "FP8 recipe), fp32 or fp8 (precision.swiglu_input)");
  sub->add_option("--steps", a->steps, "Optimizer steps (training.steps)");
  sub->add_option("--seq-len", a->seq_len, "Sequence length (training.seq_len)");
  sub->add_option("--micro-batch-size", a->micro_batch_size,
                  "Sequences per micro-batch on each rank (global batch = this x ranks x "
                  "grad-accum)");
  sub->add_option("--grad-accum", a->grad_accum, "Micro-batches per rank per optimizer step");
  sub->add_option("--seed", a->seed, "Seed for init and data order (training.seed)");
  sub->add_option("--data", a->data, "Text file, fortunes directory or token-shard directory "
                  "(default: Debian fortunes)");
  sub->add_option("--metrics-out", a->metrics_out, "JSON Lines metrics file");
  sub->add_option("--checkpoint-dir", a->checkpoint_dir, "Directory for checkpoints");
  sub->add_option("--stop-after", a->stop_after,
                  "Stop after N steps of this run (checkpointing there); the LR schedule still "
                  "spans --steps, so --resume continues the same run");
  sub->add_flag("--resume", a->resume, "Continue from the latest checkpoint in --checkpoint-dir");
  sub->add_flag("--dry-run", a->dry_run, "Build the model, print precision decisions, exit");
  sub->add_option("--decisions-out", a->decisions_out, "Write per-module decisions as JSON");
  sub->add_option("--fp8-policy", a->fp8_policy,
                  "Adaptive FP8 policy file (same as selective_fp8 + fp8_dynamic_policy_path)");
  sub->add_flag("--fsdp", a->fsdp, "Shard weights with FSDP over MPI (run under mpirun)");
  sub->add_option("--recompute", a->recompute,
                  "Activation recompute: none, attention or layer (training.recompute)");
  sub->add_option("--init-from", a->init_from,
                  "Start from the weights of a Hugging Face Llama/Mixtral directory (mxtrain "
                  "export --format hf); its config replaces the model section");
  sub->add_flag("--ignore-memory-check", a->ignore_memory_check,
                "Train even when the start-up estimate says the model does not fit in memory");
  sub->add_flag("--quiet", a->quiet, "No progress line and no decision table");
  sub->callback([a, sub] { exit_code() = run_train(*a, sub); });
});

}  // namespace
}  // namespace mxtrain::cli
