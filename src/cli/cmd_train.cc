// cli/cmd_train.cc — `mxtrain train`: run (or dry-run) training from a YAML config.
//
// Flags that set a config value (--steps, --recipe, ...) are overrides of one dotted key each:
// the config file and the overrides are parsed once, every override converted and checked
// exactly as the same value in the file would be, and a bad one is an error naming the flag
// (`--steps: `training.steps` must be >= 1, got 0`). Integers must be decimal (cli/values.h).
//
// SIGINT, SIGTERM and SIGHUP ask the run to stop: the handler only records the signal; the
// trainer finishes the step in progress, agrees with the other ranks, saves a checkpoint and
// the summary row, and the command prints one line and exits with 128 + the signal's number.
// A second signal ends the process at once (the default action, re-raised).
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/hf_llama.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // the second one: stop now
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);  // delivered when this handler returns
    return;
  }
  g_stop_signal = sig;
  static const char msg[] =
      "mxtrain: stopping after this step (a checkpoint follows when --checkpoint-dir is set); "
      "signal again to stop at once\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

const int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Installs the handler for the command's lifetime. The default actions come back when it ends,
// an error included: a failing run (under mpirun, the job being aborted) is not "stopping
// after this step".
struct StopHandlers {
  StopHandlers() { set(on_stop_signal); }
  ~StopHandlers() { set(SIG_DFL); }
  static void set(void (*handler)(int)) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (int s : kStopSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
    sa.sa_flags = SA_RESTART;
    for (int s : kStopSignals) sigaction(s, &sa, nullptr);
  }
};

std::string fixed4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

struct TrainArgs {
  std::string config, metrics_out, checkpoint_dir, decisions_out, init_from, profile_out;
  std::vector<ConfigOverride> overrides;  // in the order the flags are declared
  int64_t stop_after = 0;
  int profile_steps = 0;
  double peak_gflops = 0;
  bool resume = false, dry_run = false, fsdp = false, quiet = false, ignore_memory_check = false,
       overwrite_checkpoints = false;
};

int run_train(TrainArgs a) {
  if (a.fsdp) a.overrides.push_back({"fsdp.enabled", "true", "--fsdp"});
  TrainConfig cfg = load_config(a.config, a.overrides);
  if (!a.init_from.empty()) {  // the model section and tokenizer become the directory's
    MXT_CHECK(!a.resume, "--init-from starts a new run from a Hugging Face model; --resume "
              "continues a checkpoint: give one of them");
    for (const std::string& n : hf::apply_model(cfg, hf::import_dir(a.init_from, false)))
      if (!a.quiet) std::fprintf(stderr, "note: --init-from %s: %s\n", a.init_from.c_str(),
                                 n.c_str());
    cfg.validate();
  }

  TrainOptions opt;
  opt.metrics_out = a.metrics_out;
  opt.checkpoint_dir = a.checkpoint_dir;
  opt.resume = a.resume;
  opt.overwrite_checkpoints = a.overwrite_checkpoints;
  opt.stop_after = a.stop_after;
  opt.dry_run = a.dry_run;
  opt.decisions_out = a.decisions_out;
  opt.ignore_memory_check = a.ignore_memory_check;
  opt.init_from = a.init_from;
  opt.progress = !a.quiet;
  opt.print_decisions = !a.quiet;
  opt.peak_gflops = a.peak_gflops;
  opt.profile_steps = a.profile_steps;
  opt.profile_out = a.profile_out;
  std::unique_ptr<StopHandlers> handlers;
  if (!a.dry_run) {
    handlers = std::make_unique<StopHandlers>();
    opt.stop_requested = [] { return int(g_stop_signal); };
  }
  const TrainSummary s = run_training(cfg, opt);
  const bool lead = s.lead;  // under MPI rank 0 alone says it
  if (s.stopped_by) {
    const int64_t step = s.first_step + s.steps_done;
    if (lead && !s.checkpoint.empty())
      std::fprintf(stderr, "stopped by %s at step %lld; checkpoint at %s; resume with --resume\n",
                   signal_name(s.stopped_by), (long long)step, s.checkpoint.c_str());
    else if (lead)
      std::fprintf(stderr, "stopped by %s at step %lld; no checkpoint (no --checkpoint-dir)\n",
                   signal_name(s.stopped_by), (long long)step);
    return 128 + s.stopped_by;
  }
  if (!a.dry_run && !a.quiet && lead)
    std::fprintf(stderr, "done: %lld steps, final loss %.4f, %s, %.0f tok/s%s\n",
                 (long long)(s.first_step + s.steps_done),
                 s.losses.empty() ? 0.0 : s.losses.back(),
                 s.val_losses.empty() ? "no validation"
                                      : ("val_loss " + fixed4(s.final_val_loss)).c_str(),
                 s.tokens_per_s,
                 s.peak_gflops > 0 ? (", MFU " + std::to_string(int(1000 * s.mfu + 0.5) / 10) +
                                      "." + std::to_string(int(1000 * s.mfu + 0.5) % 10) + "%")
                                         .c_str()
                                   : "");
  return 0;
}

// A flag that sets config key `key` to its value (as YAML text). `integer`: decimal digits
// only (the config's own check then applies the key's range).
enum class Value { text, integer, unsigned_integer };
void add_override(CLI::App* sub, const std::shared_ptr<TrainArgs>& a, const std::string& flag,
                  const std::string& key, const std::string& help, Value kind = Value::text) {
  CLI::Option* o = sub->add_option_function<std::string>(
      flag, [a, flag, key](const std::string& v) { a->overrides.push_back({key, v, flag}); },
      help + " (" + key + ")");
  if (kind == Value::integer) o->check(whole_number(std::numeric_limits<int64_t>::min()));
  if (kind == Value::unsigned_integer) o->check(unsigned_number());
}

MXT_REGISTER_COMMAND("train", [](CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand("train", "Train the GPT model described by a YAML config");
  sub->add_option("--config", a->config, "Model/training YAML (e.g. configs/tiny.yaml)")
      ->required()->check(CLI::ExistingFile);
  add_override(sub, a, "--recipe", "precision.recipe",
               "Precision recipe: bf16, mxfp8, mxfp8-32x32, blockwise, fp8-current, fp8-delayed, "
               "nvfp4, mxfp4 (`mxtrain recipes` lists them)");
  add_override(sub, a, "--amax-history-len", "precision.amax_history_len",
               "fp8-delayed: steps of amax history a scale is computed from (default 1024)",
               Value::integer);
  add_override(sub, a, "--amax-compute-algo", "precision.amax_compute_algo",
               "fp8-delayed: max (the history's largest amax, default) or most_recent");
  add_override(sub, a, "--margin", "precision.margin",
               "fp8-delayed: scale = fp8_max / amax / 2^margin (default 0)", Value::integer);
  add_override(sub, a, "--fp4-stochastic-rounding", "precision.fp4_stochastic_rounding",
               "4-bit recipes: round gradients stochastically (true, nvfp4's default), to "
               "nearest even (false), or as the recipe registers it (recipe)");
  add_override(sub, a, "--fp4-rht", "precision.fp4_rht",
               "4-bit recipes: the random Hadamard transform on both wgrad operands (true, "
               "nvfp4's default), off (false), or recipe");
  add_override(sub, a, "--fp4-2d-weights", "precision.fp4_2d_weights",
               "4-bit recipes: weights in 16x16 (nvfp4's default) / 32x32 tiles, one copy "
               "(true), or 1-D blocks, a copy per axis (false), or recipe");
  add_override(sub, a, "--nvfp4-order", "precision.nvfp4_order",
               "nvfp4: the order of its two scale levels: torchao (default) or te");
  add_override(sub, a, "--bf16-first-layers", "precision.bf16_first_layers",
               "Keep the first N transformer layers in BF16", Value::integer);
  add_override(sub, a, "--bf16-last-layers", "precision.bf16_last_layers",
               "Keep the last N transformer layers in BF16", Value::integer);
  add_override(sub, a, "--swiglu-input", "precision.swiglu_input",
               "What SwiGLU's input is kept in for backward: auto (FP8 where fc1 runs an FP8 "
               "recipe), fp32, fp8 or fp4 (4-bit recipes: fc1's 4-bit format)");
  add_override(sub, a, "--steps", "training.steps", "Optimizer steps", Value::integer);
  add_override(sub, a, "--seq-len", "training.seq_len", "Sequence length", Value::integer);
  add_override(sub, a, "--micro-batch-size", "training.micro_batch_size",
               "Sequences per micro-batch on each rank (global batch = this x ranks x "
               "grad-accum)", Value::integer);
  add_override(sub, a, "--grad-accum", "training.grad_accum",
               "Micro-batches per rank per optimizer step", Value::integer);
  add_override(sub, a, "--seed", "training.seed", "Seed for init and data order",
               Value::unsigned_integer);
  add_override(sub, a, "--data", "data.path",
               "Text file, fortunes directory or token-shard directory (default: Debian "
               "fortunes)");
  sub->add_option_function<std::string>(
      "--fp8-policy",
      [a](const std::string& v) {
        a->overrides.push_back({"precision.selective_fp8", "true", "--fp8-policy"});
        a->overrides.push_back({"precision.fp8_dynamic_policy_path", v, "--fp8-policy"});
      },
      "Adaptive FP8 policy file (same as selective_fp8 + fp8_dynamic_policy_path)");
  sub->add_flag_function(
      "--allow-policy-recipe-mismatch",
      [a](int64_t) {
        a->overrides.push_back({"precision.allow_policy_recipe_mismatch", "true",
                                "--allow-policy-recipe-mismatch"});
      },
      "Use an FP8 policy measured with another recipe than the run's, with a warning "
      "(precision.allow_policy_recipe_mismatch)");
  sub->add_option("--metrics-out", a->metrics_out, "JSON Lines metrics file");
  sub->add_option("--checkpoint-dir", a->checkpoint_dir, "Directory for checkpoints");
  sub->add_option("--stop-after", a->stop_after,
                  "Stop after N steps of this run (checkpointing there); the LR schedule still "
                  "spans --steps, so --resume continues the same run")
      ->check(whole_number(1));
  sub->add_flag("--resume", a->resume, "Continue from the latest checkpoint in --checkpoint-dir");
  sub->add_flag("--overwrite-checkpoints", a->overwrite_checkpoints,
                "Start a new run in a --checkpoint-dir that holds another run's checkpoints, "
                "removing them (without it, or --resume, such a directory is refused)");
  sub->add_flag("--dry-run", a->dry_run, "Build the model, print precision decisions, exit");
  sub->add_option("--decisions-out", a->decisions_out, "Write per-module decisions as JSON");
  sub->add_flag("--fsdp", a->fsdp, "Shard weights with FSDP over MPI (run under mpirun)");
  add_override(sub, a, "--tp", "parallel.tp",
               "Tensor parallelism: split heads and MLP columns over N ranks (run under mpirun; "
               "data parallel = ranks / N)", Value::integer);
  add_override(sub, a, "--ep", "parallel.ep",
               "Expert parallelism: spread an MoE model's experts over N ranks", Value::integer);
  add_override(sub, a, "--etp", "parallel.etp",
               "Expert-tensor parallelism: split each expert's hidden units over N ranks",
               Value::integer);
  sub->add_flag_function(
      "--sequence-parallel",
      [a](int64_t) {
        a->overrides.push_back({"parallel.sequence_parallel", "true", "--sequence-parallel"});
      },
      "With --tp: norms and residuals on sequence shards (parallel.sequence_parallel)");
  add_override(sub, a, "--sp-wire", "parallel.sp_wire",
               "What sequence parallelism's all-gathers carry: exact (every copy a product "
               "reads) or rowwise (one per-token copy; wgrad's copies made from it)");
  add_override(sub, a, "--recompute", "training.recompute",
               "Activation recompute: none, attention or layer");
  sub->add_option("--init-from", a->init_from,
                  "Start from the weights of a Hugging Face Llama/Mixtral directory (mxtrain "
                  "export --format hf); its config replaces the model section");
  sub->add_flag("--ignore-memory-check", a->ignore_memory_check,
                "Train even when the start-up estimate says the model does not fit in memory");
  sub->add_flag("--quiet", a->quiet, "No progress line and no decision table");
  sub->add_option("--peak-gflops", a->peak_gflops,
                  "Peak GFLOP/s of the whole job that MFU is against (default: measured at "
                  "start on every rank with a short run of `bench peak`'s reference loop)")
      ->check(number_at_least(0, /*exclusive=*/true));
  sub->add_option("--profile-steps", a->profile_steps,
                  "Profile N steps after the first (warm-up) step: where the time went (each "
                  "module's products, attention, elementwise ops, optimizer, communication, "
                  "waiting, the rest), as a table on stderr")
      ->check(whole_number(1));
  sub->add_option("--profile-out", a->profile_out,
                  "Also write the profile as JSON to this file (needs --profile-steps)");
  sub->callback([a] { exit_code() = run_train(*a); });
});

}  // namespace
}  // namespace mxtrain::cli
