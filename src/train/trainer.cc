// train/trainer.cc — the training loop (train/trainer.h). `run_training` reads top to bottom:
// start (launch agreed across ranks, outputs checked and locked, policy -> precision
// decisions -> model, data, parameter sync, optional resume), then per step train_step
// (micro-batches forward/backward, finite check, clip, AdamW) -> log_step (metrics row,
// progress) -> the stop request agreed -> evaluate (when due) -> save_checkpoint (when due),
// then the summary. The run's state lives in one `Run`; what differs between one process and
// FSDP is behind ParamSync (train/param_sync.h).
#include "mxtrain/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/dist/mesh.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/nn/flops.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/peak.h"
#include "mxtrain/profile.h"
#include "mxtrain/stats.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/delayed_scaling.h"
#include "mxtrain/train/hf_llama.h"
#include "mxtrain/train/memory_check.h"
#include "mxtrain/train/optim.h"
#include "mxtrain/train/policy_oracle.h"
#include "mxtrain/train/precision.h"
#include "train/launch.h"
#include "train/param_sync.h"
#include "train/profile_report.h"
#include "train/progress.h"
#include "train/run_outputs.h"

namespace mxtrain {
namespace {

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

// Everything one training run holds, from start to summary.
struct Run {
  Run(const TrainConfig& config, const TrainOptions& options) : cfg(config), opt(options) {}
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  TrainConfig cfg;  // grad_accum may change on resume (see resume())
  const TrainOptions& opt;
  bool lead = true;  // prints and writes files (under MPI world rank 0 only)
  bool distributed = false;  // FSDP or a layout: the run spans the processes of an MPI job
  std::unique_ptr<dist::Mesh> mesh;  // a tensor/expert-parallel layout (null: none)
  int B = 0, T = 0;  // sequences per micro-batch on this rank, tokens per sequence
  int W = 1, rank = 0, A = 1;
  int64_t global_batch = 0, tokens_per_step = 0, end_step = 0;

  PolicyOracle oracle;
  std::unique_ptr<PrecisionResolver> resolver;
  std::unique_ptr<GPT> model;
  std::vector<Parameter*> params;
  corpus::Tokenizer tokenizer;     // model.tokenizer, or byte-level
  std::unique_ptr<TokenData> data;  // text or token shards
  std::unique_ptr<ParamSync> sync;
  ModelScales scales;  // delayed scaling's histories (empty for other recipes)
  TrainerState st;

  OutputLocks locks;  // the checkpoint directory's and the metrics file's (the writing rank)
  MetricsWriter metrics;
  std::unique_ptr<ProgressLine> progress;
  std::vector<int32_t> tok, tgt;   // one micro-batch: [B, T] tokens and next-token targets
  Clock::time_point t_run;
  std::vector<double> step_times;  // seconds, steps that updated the weights
  int stop_signal = 0;             // the signal that asked the run to stop, agreed by all ranks
  TrainSummary sum;

  // MFU: FLOPs per token (nn/flops.h) against the job's peak (0: none), and this rank's share.
  ModelFlops flops;
  double peak_gflops = 0, rank_peak_gflops = 0;
  std::string peak_source = "none";  // "measured" | "given" | "none"
  // --profile-steps: steps [profile_first, profile_first + opt.profile_steps) are profiled.
  std::unique_ptr<prof::Profiler> profiler;
  int64_t profile_first = -1;
  std::vector<int64_t> profiled;  // 1-based numbers of the steps profiled so far
};

// What one optimizer step produced, for log_step.
struct StepResult {
  bool finite = true;
  double loss = 0, aux = 0, gnorm = 0, seconds = 0;
  float lr = 0;
  size_t held = 0;
};

// ---- start ---------------------------------------------------------------------------------

// Every output path is checked before any work, so a run that cannot save is refused now
// rather than after its last step.
void check_outputs(const Run& r) {
  const TrainOptions& opt = r.opt;
  // A dry run trains nothing: a flag only training uses would be silently ignored.
  for (const auto& [given, flag] :
       {std::pair{opt.resume, "--resume"}, std::pair{opt.stop_after > 0, "--stop-after"},
        std::pair{!opt.metrics_out.empty(), "--metrics-out"},
        std::pair{!opt.checkpoint_dir.empty(), "--checkpoint-dir"},
        std::pair{opt.overwrite_checkpoints, "--overwrite-checkpoints"}})
    MXT_CHECK(!(opt.dry_run && given), "--dry-run builds the model and prints its precision "
              "decisions but trains nothing, so ", flag, " would do nothing; drop one of them");
  MXT_CHECK(opt.stop_after == 0 || !opt.checkpoint_dir.empty(), "--stop-after ",
            opt.stop_after, " stops the run early so that --resume can continue it, which needs "
            "a checkpoint: add --checkpoint-dir DIR (or lower --steps to train fewer steps)");
  MXT_CHECK(!opt.overwrite_checkpoints || !opt.checkpoint_dir.empty(),
            "--overwrite-checkpoints needs --checkpoint-dir (the directory whose checkpoints it "
            "replaces)");
  MXT_CHECK(!(opt.overwrite_checkpoints && opt.resume), "--resume continues the checkpoints "
            "in --checkpoint-dir and --overwrite-checkpoints removes them: give one of them");
  if (r.lead) {
    io::check_output_file(opt.decisions_out, "--decisions-out");
    if (!opt.dry_run) {
      io::check_output_file(opt.metrics_out, "--metrics-out");
      if (!opt.checkpoint_dir.empty() && !opt.resume) {
        io::check_output_dir(opt.checkpoint_dir, "--checkpoint-dir");
        const int64_t latest = io::latest_checkpoint_step(opt.checkpoint_dir);
        MXT_CHECK(latest < 0 || opt.overwrite_checkpoints, "--checkpoint-dir ",
                  opt.checkpoint_dir, ": holds another run's checkpoints (the latest is step_",
                  latest, "); continue that run with --resume, or start over with "
                  "--overwrite-checkpoints, which removes them");
      }
    }
  }
  if (opt.resume && !opt.dry_run) {
    MXT_CHECK(!opt.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    if (r.lead) io::check_output_dir(opt.checkpoint_dir, "--checkpoint-dir");
  }
  MXT_CHECK(opt.profile_steps >= 0, "--profile-steps: must be >= 0, got ", opt.profile_steps);
  MXT_CHECK(opt.profile_out.empty() || opt.profile_steps > 0,
            "--profile-out needs --profile-steps N (how many steps to profile)");
  MXT_CHECK(opt.peak_gflops >= 0, "--peak-gflops: must be positive, got ", opt.peak_gflops);
  if (r.lead && !opt.dry_run) io::check_output_file(opt.profile_out, "--profile-out");
  // No output may be one of the run's inputs (or inside an input directory).
  io::check_outputs_apart(
      {{"--metrics-out", opt.metrics_out}, {"--decisions-out", opt.decisions_out},
       {"--profile-out", opt.profile_out}, {"--checkpoint-dir", opt.checkpoint_dir}},
      {{"--config", r.cfg.source_path}, {"data.path", r.cfg.data.path},
       {"model.tokenizer", r.cfg.tokenizer},
       {"precision.fp8_dynamic_policy_path",
        r.cfg.precision.selective_fp8 ? r.cfg.precision.fp8_dynamic_policy_path : ""},
       {"--init-from", opt.init_from}});
}

// Policy -> precision decisions -> model (no model on a dry run); the decisions are printed
// and written as asked.
void build_model(Run& r) {
  const TrainConfig& cfg = r.cfg;
  if (cfg.precision.selective_fp8) {
    std::string warning;
    r.oracle = load_policy_oracle(cfg.precision.fp8_dynamic_policy_path, cfg, &warning);
    if (!warning.empty() && r.lead) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  }
  r.resolver = std::make_unique<PrecisionResolver>(r.cfg, r.oracle);
  PrecisionResolver& resolver = *r.resolver;
  if (r.opt.dry_run) {
    for (const ModuleInfo& m : describe_modules(cfg.model)) resolver(m);
  } else {
    r.model = std::make_unique<GPT>(
        cfg.model, [&](const ModuleInfo& m) { return resolver(m); }, cfg.training.seed,
        r.mesh ? r.mesh->model_parallel() : ModelParallel{});
    r.model->set_swiglu_input(cfg.precision.swiglu_input, cfg.precision.scale_rounding);
    r.model->set_recompute(parse_recompute(cfg.training.recompute));
  }
  if (!r.opt.decisions_out.empty() && r.lead)
    io::write_file_atomic(r.opt.decisions_out, decisions_json(resolver.decisions()));
  if (const std::string line = describe_scale_settings(cfg.precision);
      !line.empty() && r.lead)
    std::fprintf(stderr, "%s\n", line.c_str());
  if ((r.opt.print_decisions || r.opt.dry_run) && r.lead)
    std::fprintf(stderr, "precision decisions (%zu quantizable modules):\n%s",
                 resolver.decisions().size(), format_decisions(resolver.decisions()).c_str());
}

// The whole model's parameter count (each rank of a mesh holds slices).
int64_t model_parameters(const Run& r) {
  int64_t n = 0;
  for (const Parameter* p : r.params) {
    int64_t k = 1;
    for (int64_t d : p->full_shape()) k *= d;
    n += k;
  }
  return n;
}

// The data's checks, made at start-up (dry runs included): both splits hold a sequence and
// its next-token target (found now, not at step 1 or at the first validation), and every
// token the data can give is inside the model's vocabulary (not found at step 1 either).
void check_data(const Run& r) {
  const TrainConfig& cfg = r.cfg;
  const int T = cfg.training.seq_len;
  const std::string path = shown(cfg.data.path);
  const auto* text = dynamic_cast<const TextCorpus*>(r.data.get());
  const char* unit = text ? "bytes" : "tokens";
  MXT_CHECK(r.data->train_tokens() > T + 1, "data `", path, "`: the training split "
            "has ", r.data->train_tokens(), " ", unit, ", fewer than training.seq_len + 2 = ",
            T + 2, "; use a larger corpus or a shorter seq_len");
  MXT_CHECK(!text || r.data->val_tokens() > T + 1, "data `", path, "`: the "
            "validation split (data.val_fraction ", cfg.data.val_fraction, ") has ",
            r.data->val_tokens(), " bytes, fewer than training.seq_len + 2 = ", T + 2,
            "; raise data.val_fraction, use a larger corpus or a shorter seq_len");
  MXT_CHECK(text || r.data->val_tokens() > T + 1, "data `", path, "`: the "
            "validation shard has ", r.data->val_tokens(), " tokens, fewer than "
            "training.seq_len + 2 = ", T + 2, "; prepare the shards with a larger "
            "--val-fraction or use a shorter seq_len");
  const int vocab = cfg.model.vocab_size;
  if (text) {
    const int top = text->max_byte();
    MXT_CHECK(top < vocab, "data `", path, "`: holds byte ", top, ", outside the model's "
              "vocabulary (model.vocab_size ", vocab, "); set model.vocab_size to at least ",
              top + 1, " (256 holds every byte)");
  } else {
    const int tok_vocab = r.tokenizer.vocab_size();
    MXT_CHECK(tok_vocab <= vocab, "data `", path, "`: its shards hold tokens of a ", tok_vocab,
              "-token vocabulary (", r.tokenizer.id().str(), "), more than model.vocab_size ",
              vocab, "; set model.vocab_size to at least ", tok_vocab);
  }
}

// The run's earlier checkpoints, removed as --overwrite-checkpoints asks (under the lock).
void remove_earlier_checkpoints(const Run& r) {
  const std::vector<std::string> gone = io::remove_checkpoints(r.opt.checkpoint_dir);
  if (gone.empty() || !r.lead) return;
  std::string list;
  for (const std::string& g : gone) list += (list.empty() ? "" : ", ") + g;
  std::fprintf(stderr, "note: --overwrite-checkpoints: removed %s from %s\n", list.c_str(),
               r.opt.checkpoint_dir.c_str());
}

// The initial weights of --init-from, and the parameter sync (one process or FSDP shards).
void attach_data_and_sync(Run& r, const SyncFactory& make_sync) {
  const TrainConfig& cfg = r.cfg;
  r.params = r.model->parameters();
  if (!r.opt.init_from.empty()) {  // before FSDP shards the values: every rank reads the files
    MXT_CHECK(!r.opt.resume, "--init-from and --resume exclude each other");
    const hf::HfModel h = hf::import_dir(r.opt.init_from);
    TrainConfig want = cfg;
    MXT_CHECK(hf::apply_model(want, h).empty(), "--init-from ", r.opt.init_from, ": the "
              "config's model section or tokenizer is not the directory's (hf::apply_model "
              "sets them)");
    hf::load_weights(h, r.params);
    if (r.opt.progress && r.lead)
      std::fprintf(stderr, "initial weights: %s (%s)\n", r.opt.init_from.c_str(),
                   h.architecture.c_str());
  }
  r.sync = make_sync(*r.model, cfg, r.mesh.get());
  r.scales = ModelScales(*r.model);
  r.W = r.sync->world();
  r.rank = r.sync->rank();
  // Each rank reads data.path on its own machine: they must all have read the same bytes.
  r.sync->check_same("training data (" + cfg.data.path + ")",
                     r.data->description() + " fnv1a64 " +
                         std::to_string(r.data->content_hash()));
  std::string over;
  if (r.mesh)
    over = "; layout " + r.mesh->describe();
  else if (r.W > 1)
    over = "; FSDP over " + std::to_string(r.W) + " ranks";
  if (r.opt.progress && r.lead)
    std::fprintf(stderr, "model: %lld parameters, %d layers%s; data: %s%s\n",
                 (long long)model_parameters(r), cfg.model.n_layers,
                 cfg.model.moe_num_experts ? " (MoE)" : "", r.data->description().c_str(),
                 over.c_str());
}

// Loads the latest checkpoint; at another world size grad_accum changes to keep the
// checkpoint's global batch (train/checkpointing.h, resume_grad_accum).
void resume(Run& r) {
  const TrainOptions& opt = r.opt;
  std::vector<io::NamedTensor> extra;  // check_outputs made sure there is a checkpoint
  r.st = r.sync->load(opt.checkpoint_dir, r.cfg, extra);
  if (opt.progress && r.lead)
    std::fprintf(stderr, "resumed from %s at step %lld\n", opt.checkpoint_dir.c_str(),
                 (long long)r.st.step);
  const int fresh = r.scales.restore([&](const std::string& name) -> const io::NamedTensor* {
    for (const io::NamedTensor& t : extra)
      if (t.name == name) return &t;
    return nullptr;
  });
  if (fresh > 0 && r.lead)
    std::fprintf(stderr, "note: the checkpoint holds no amax history for %d layer role(s) "
                 "(written with another recipe); their delayed scales start at 1\n", fresh);
  // The metrics rows of steps after the checkpoint's (a run killed after its last save) go,
  // and a validation of its step when that is still due, so every step appears once.
  if (r.lead && !opt.metrics_out.empty()) {
    const int64_t dropped = trim_metrics(opt.metrics_out, r.st.step, r.st.validation_due);
    if (dropped > 0 && opt.progress)
      std::fprintf(stderr, "%s: dropped %lld row(s) after step %lld (the checkpoint's)\n",
                   opt.metrics_out.c_str(), (long long)dropped, (long long)r.st.step);
  }
  // Every rank has the same state (FSDP broadcasts it), so every rank decides alike.
  std::string note;
  const int a = resume_grad_accum(r.st, r.B, r.W, r.cfg.training.grad_accum, &note);
  if (a != r.cfg.training.grad_accum) {
    if (r.lead) std::fprintf(stderr, "%s\n", note.c_str());
    r.cfg.training.grad_accum = a;
    r.cfg.source_text = config_to_yaml(r.cfg);  // later checkpoints record what ran
  }
}

// The batch, buffers, metrics file and progress line of the steps to run.
void prepare_steps(Run& r) {
  const TrainingConfig& tc = r.cfg.training;
  r.A = tc.grad_accum;
  r.global_batch = int64_t(r.B) * r.W * r.A;  // sequences per optimizer step
  r.tokens_per_step = r.global_batch * r.T;
  r.model->reserve(r.B, r.T);  // activations, backward scratch and gradients, once
  r.st.world_size = r.W;
  r.st.global_batch = r.global_batch;
  if (r.opt.progress && r.lead)
    std::fprintf(stderr, "batch: %lld sequences of %d tokens per step (micro_batch_size %d x "
                 "%d rank(s) x grad_accum %d)\n",
                 (long long)r.global_batch, r.T, r.B, r.W, r.A);
  MXT_CHECK(r.st.step < tc.steps || (r.st.validation_due && r.st.step == tc.steps),
            "checkpoint is at step ", r.st.step, " but training.steps is ", tc.steps,
            ": nothing left to do (raise --steps)");
  r.metrics.open(r.lead ? r.opt.metrics_out : std::string(), r.opt.resume);
  r.progress = std::make_unique<ProgressLine>(r.st.step, tc.steps, r.opt.progress && r.lead);
  r.tok.resize(size_t(r.B) * r.T);
  r.tgt.resize(size_t(r.B) * r.T);
  r.t_run = Clock::now();
  r.sum.first_step = r.st.step;
  r.end_step = r.opt.stop_after > 0 ? std::min(tc.steps, r.st.step + r.opt.stop_after)
                                    : tc.steps;
  if (r.opt.profile_steps > 0) {
    MXT_CHECK(r.end_step - r.st.step >= r.opt.profile_steps + 1, "--profile-steps ",
              r.opt.profile_steps, " needs ", r.opt.profile_steps + 1,
              " steps in this run (the first is a warm-up), but it runs ",
              r.end_step - r.st.step, " (raise --steps)");
    r.profiler = std::make_unique<prof::Profiler>();
    r.profile_first = r.st.step + 1;
  }
}

// PaLM's FLOPs per token, and the peak MFU is against: given, or measured now on every rank
// (each at its own thread count, at the same time) and summed — when anything reports MFU.
void prepare_mfu(Run& r) {
  r.flops = model_flops(r.cfg.model, r.T);
  if (r.opt.peak_gflops > 0) {
    r.peak_gflops = r.opt.peak_gflops;
    r.rank_peak_gflops = r.peak_gflops / r.W;
    r.peak_source = "given";
  } else if (r.distributed || r.opt.progress || !r.opt.metrics_out.empty() ||
             r.opt.profile_steps > 0) {  // a collective when distributed: every rank joins
    const ReferencePeak p = reference_peak(0);
    r.rank_peak_gflops = p.gflops;
    r.peak_gflops = r.sync->sum_over_processes(p.gflops);
    r.peak_source = "measured";
    if (r.opt.progress && r.lead)
      std::fprintf(stderr, "peak: %s%s; %.3g FLOPs per token (6N + 12·L·d·T, N = %lld)\n",
                   p.describe().c_str(),
                   r.W > 1 ? (" per rank, " + std::to_string(r.W) + " ranks: " +
                              std::to_string(int64_t(r.peak_gflops + 0.5)) + " GFLOP/s").c_str()
                           : "",
                   r.flops.flops_per_token, (long long)r.flops.n_params);
  }
}

double step_mfu(const Run& r, double tokens_per_s) {
  return mfu(tokens_per_s, r.flops.flops_per_token, r.peak_gflops);
}

// After the last profiled step: the table on stderr and the JSON file.
void report_profile(Run& r) {
  const ProfileReport rep = make_profile_report(
      *r.profiler, r.profiled, r.cfg.model, int64_t(r.B) * r.T * r.A, r.T,
      r.flops.flops_per_token, r.rank_peak_gflops, r.peak_source, r.cfg.precision.recipe.name, r.W);
  if (!r.lead) return;
  std::string table = profile_table(rep);
  if (r.opt.progress) {
    table.pop_back();  // message() ends the line
    r.progress->message(table);
  } else {
    std::fputs(table.c_str(), stderr);  // asked for, so shown without the progress line too
  }
  if (!r.opt.profile_out.empty()) io::write_file_atomic(r.opt.profile_out, profile_json(rep) + "\n");
}

// ---- one step ------------------------------------------------------------------------------

// Forward + backward over this rank's micro-batches, then (when loss and gradients are
// finite) clip and AdamW. Grads accumulate unscaled (their sum) and become the mean over the
// global batch after the reduction over ranks (mean) and the 1/A below. Scaling each
// micro-batch's loss by 1/A instead would scale the output gradients before the backward
// GEMMs quantize them, which rounds differently unless A is a power of two — and W ranks
// would not match one process with grad_accum W*A. Rank r's micro-batch a is global
// micro-batch a*W + r, sequences [(a*W + r)*B, (a*W + r + 1)*B).
void step_body(Run& r, int64_t step, StepResult& s) {
  const TrainingConfig& tc = r.cfg.training;
  const int A = r.A, B = r.B, T = r.T;
  {
    MXT_PROFILE(communication, none);
    r.sync->begin_step();
    r.model->reset_parallel_stats();
  }
  for (Parameter* p : r.params) p->clear_grad();  // the first micro-batch writes them
  r.scales.begin_step();
  for (int a = 0; a < A; ++a) {
    const int64_t first = (int64_t(a) * r.W + r.rank) * B;
    // Stochastic rounding's keys: the global micro-batch, as one process with grad_accum
    // W * A counts it (a checkpoint's step gives it back on resume).
    r.model->rounding_clock() = {uint64_t(tc.seed),
                                 uint32_t(step * A * r.W + int64_t(a) * r.W + r.rank)};
    {
      MXT_PROFILE(data, none);
      for (int i = 0; i < B; ++i)
        r.data->train_sequence(tc.seed, step, first + i, T, &r.tok[size_t(i) * T],
                               &r.tgt[size_t(i) * T]);
    }
    s.loss += r.model->forward_backward(r.tok.data(), r.tgt.data(), B, T, 1.0f) / A;
    s.aux += r.model->last_aux_loss() / A;
    s.held = std::max(s.held, r.model->last_held_bytes());
  }
  {
    MXT_PROFILE(communication, none);
    r.sync->reduce_gradients();
    s.loss = r.sync->mean_over_ranks(s.loss);
    s.aux = r.sync->mean_over_ranks(s.aux);
  }
  MXT_PROFILE(optimizer, none);

  // Non-finite loss or gradients: the step is skipped; weights stay untouched.
  const double grad_squares = r.sync->grad_sum_squares_checked();
  s.finite = std::isfinite(grad_squares) && std::isfinite(s.loss);
  if (!s.finite) return;

  // Clip, then AdamW on every parameter (or shard); the version bump invalidates the
  // quantized weight copies. The gradient is the accumulated sum / A (see above): the 1/A
  // is applied together with the clip factor.
  s.gnorm = std::sqrt(grad_squares) / A;
  const float clip =
      (tc.grad_clip > 0 && s.gnorm > tc.grad_clip) ? float(tc.grad_clip / s.gnorm) : 1.f;
  const float grad_mult = clip / float(A);
  const AdamWHyper h{lr_at(step, tc.warmup_steps, tc.steps, tc.lr, tc.min_lr), tc.beta1,
                     tc.beta2, tc.eps, tc.weight_decay};
  s.lr = h.lr;
  ++r.st.opt_steps;
  for (const OptimView& ov : r.sync->views()) {
    adamw_update(ov.value, ov.grad, ov.m, ov.v, ov.n, h, r.st.opt_steps, ov.decay, grad_mult);
    ++*ov.version;
  }
  // Delayed scaling: the step's amaxes, max-reduced over the ranks, give the next scales.
  r.scales.end_step([&](float* amax, size_t n) { r.sync->max_over_ranks(amax, n); });
}

// One step, timed; profiled (mxtrain/profile.h) when it is one of --profile-steps' steps, with
// the profiler's step spanning exactly the time the step is timed by.
StepResult train_step(Run& r, int64_t step) {
  const bool profiled = r.profiler && step >= r.profile_first &&
                        step < r.profile_first + r.opt.profile_steps;
  const auto t_step = Clock::now();
  if (profiled) {
    r.profiler->begin_step(t_step);
    prof::set_active(r.profiler.get());
  }
  StepResult s;
  try {
    step_body(r, step, s);
  } catch (...) {
    prof::set_active(nullptr);
    throw;
  }
  const auto t_end = Clock::now();
  s.seconds = std::chrono::duration<double>(t_end - t_step).count();
  if (profiled) {
    prof::set_active(nullptr);
    r.profiler->end_step(t_end);
    r.profiled.push_back(step + 1);
  }
  return s;
}

// The step's metrics row and progress line; a skipped step is counted, said, and ends the
// run once more than training.max_nonfinite_steps were skipped.
void log_step(Run& r, int64_t step, const StepResult& s) {
  if (!s.finite) {
    ++r.st.skipped;
    r.sum.losses.push_back(std::nan(""));
    r.progress->message("step " + std::to_string(step + 1) +
                        ": non-finite loss or gradient, step skipped (" +
                        std::to_string(r.st.skipped) + " so far)");
    r.metrics.write(
        {{"step", step + 1}, {"skipped", true}, {"reason", "non-finite loss or gradient"}});
    MXT_CHECK(r.st.skipped <= r.cfg.training.max_nonfinite_steps, "training stopped: ",
              r.st.skipped, " steps had non-finite loss or gradients (limit "
              "training.max_nonfinite_steps = ", r.cfg.training.max_nonfinite_steps, ")");
    return;
  }
  r.step_times.push_back(s.seconds);
  r.sum.losses.push_back(s.loss);
  r.sum.held_bytes = s.held;
  nlohmann::json row = {{"step", step + 1}, {"loss", s.loss}, {"aux_loss", s.aux},
                        {"lr", s.lr}, {"grad_norm", s.gnorm},
                        {"tokens_per_s", double(r.tokens_per_step) / s.seconds},
                        {"step_ms", s.seconds * 1e3}, {"held_bytes", s.held},
                        {"peak_rss_bytes", peak_rss_bytes()}};
  if (r.peak_gflops > 0) row["mfu"] = step_mfu(r, double(r.tokens_per_step) / s.seconds);
  if (r.W > 1) {
    const CommCounters cc = r.sync->counters();
    row["allgather_bytes"] = cc.allgather_bytes;
    row["allgather_ms"] = cc.allgather_ms;
    row["reduce_scatter_bytes"] = cc.reduce_scatter_bytes;
    row["reduce_scatter_ms"] = cc.reduce_scatter_ms;
    row["allreduce_bytes"] = cc.allreduce_bytes;
    row["allreduce_ms"] = cc.allreduce_ms;
    // Communication time: total = in flight (all-gathers, reduce-scatters, all-reduce);
    // exposed = spent waiting, with nothing to compute.
    row["comm_total_ms"] = cc.allgather_span_ms + cc.reduce_scatter_span_ms + cc.allreduce_ms;
    row["comm_exposed_ms"] = cc.allgather_ms + cc.reduce_scatter_ms + cc.allreduce_ms;
  }
  if (r.mesh) {  // the layers' tensor- and expert-parallel traffic (nn/parallel.h)
    const ParallelStats& ps = r.model->parallel_stats();
    row["tp_comm_bytes"] = ps.tp_comm_bytes;
    row["tp_allgather_bytes"] = ps.tp_allgather_bytes;
    row["tp_comm_ms"] = ps.tp_ms;
    row["ep_comm_bytes"] = ps.ep_comm_bytes;
    row["ep_dispatch_bytes"] = ps.ep_dispatch_bytes;
    row["ep_comm_ms"] = ps.ep_ms;
  }
  r.metrics.write(row);
  const double elapsed = seconds_since(r.t_run);
  const double tps = double(r.tokens_per_step) * double(step + 1 - r.sum.first_step) / elapsed;
  char extra[32] = "";
  if (r.peak_gflops > 0) std::snprintf(extra, sizeof extra, " | MFU %.1f%%", 100 * step_mfu(r, tps));
  r.progress->update(step, s.loss, tps, s.seconds, elapsed, extra);
}

struct ValidationLoss {
  double loss = 0, nats_per_byte = 0;
};

// Mean loss over `eval_batches` validation batches of B sequences: the same sequences and the
// same value (up to summation order) at every world size. The ranks share the batches: in
// round k rank r computes batch k*W + r. Every rank runs the same number of forwards (FSDP's
// weight gathers are collective), so a rank past the last batch computes batch 0 again and
// leaves it out of the sum. Also per byte of text: the loss times the targets' tokens over
// their bytes (the tokenizer's token_bytes), exactly the loss for byte-level models.
ValidationLoss validation_loss(Run& r) {
  const int B = r.B, T = r.T, W = r.W, n_batches = r.cfg.training.eval_batches;
  double sum = 0, bytes = 0;
  for (int k = 0; int64_t(k) * W < n_batches; ++k) {
    const int b = k * W + r.rank;
    const bool counted = b < n_batches;
    for (int i = 0; i < B; ++i)
      r.data->val_sequence(int64_t(counted ? b : 0) * B + i, int64_t(n_batches) * B, T,
                           &r.tok[size_t(i) * T], &r.tgt[size_t(i) * T]);
    const double loss = r.model->forward_loss(r.tok.data(), r.tgt.data(), B, T);
    if (!counted) continue;
    sum += loss;
    for (int32_t t : r.tgt) bytes += double(r.tokenizer.token_bytes(t).size());
  }
  ValidationLoss v;
  v.loss = r.sync->sum_over_ranks(sum) / n_batches;
  const double tokens = double(n_batches) * B * T;
  bytes = r.sync->sum_over_ranks(bytes);
  v.nats_per_byte = bytes > 0 ? v.loss * (tokens / bytes) : 0.0;
  return v;
}

// Validation after step `step` (0-based): recorded, written and said.
void evaluate(Run& r, int64_t step) {
  const ValidationLoss v = validation_loss(r);
  r.sum.val_losses.emplace_back(step + 1, v.loss);
  r.sum.final_val_loss = v.loss;
  r.sum.final_val_nats_per_byte = v.nats_per_byte;
  r.metrics.write(
      {{"step", step + 1}, {"val_loss", v.loss}, {"val_nats_per_byte", v.nats_per_byte}});
  char buf[128];
  std::snprintf(buf, sizeof buf, "step %lld: val_loss %.4f (%.4f nats/byte)",
                (long long)(step + 1), v.loss, v.nats_per_byte);
  r.progress->message(buf);
}

void save_checkpoint(Run& r) {
  r.sum.checkpoint = r.sync->save(r.opt.checkpoint_dir, r.cfg, r.st, r.scales.state());
}

// The stop request (a signal number, 0: none) as every rank sees it: the largest over ranks,
// so a signal delivered to any one rank stops all of them after the same step.
int agreed_stop(Run& r) {
  if (!r.opt.stop_requested) return 0;
  return int(r.sync->max_over_ranks(r.opt.stop_requested()));
}

// ---- end -----------------------------------------------------------------------------------

// Throughput over the steps that updated the weights; the median leaves out the first step
// (it builds oneDNN primitives and buffers). The summary row closes the metrics file.
void finish(Run& r) {
  TrainSummary& sum = r.sum;
  sum.steps_done = r.st.step - sum.first_step;
  sum.skipped_steps = r.st.skipped;
  double total_s = 0;
  for (double t : r.step_times) total_s += t;
  const size_t n = r.step_times.size();
  sum.mean_step_ms = n == 0 ? 0 : total_s / double(n) * 1e3;
  sum.tokens_per_s = total_s > 0 ? double(r.tokens_per_step) * double(n) / total_s : 0;
  sum.median_step_ms =
      median_of(std::vector<double>(r.step_times.begin() + (n > 1), r.step_times.end())) * 1e3;
  sum.peak_rss_bytes = peak_rss_bytes();
  sum.global_batch = r.global_batch;
  sum.micro_batch_size = r.B;
  sum.world_size = r.W;
  sum.grad_accum = r.A;
  sum.flops_per_token = r.flops.flops_per_token;
  sum.peak_gflops = r.peak_gflops;
  sum.mfu = step_mfu(r, sum.tokens_per_s);
  sum.median_step_mfu =
      sum.median_step_ms > 0 ? step_mfu(r, double(r.tokens_per_step) / (sum.median_step_ms / 1e3))
                             : 0;
  sum.stopped_by = r.stop_signal;
  sum.lead = r.lead;
  nlohmann::json row = {{"summary", true}, {"recipe", r.cfg.precision.recipe.name},
                        {"steps", r.st.step},
                        {"final_loss", sum.losses.empty() ? 0.0 : sum.losses.back()},
                        {"final_val_loss", nullptr}, {"final_val_nats_per_byte", nullptr},
                        {"tokens_per_s", sum.tokens_per_s},
                        {"mean_step_ms", sum.mean_step_ms}, {"median_step_ms", sum.median_step_ms},
                        {"skipped_steps", r.st.skipped}, {"held_bytes", sum.held_bytes},
                        {"peak_rss_bytes", sum.peak_rss_bytes},
                        {"parameters", r.model->num_parameters()},
                        {"global_batch", r.global_batch}, {"micro_batch_size", r.B},
                        {"world_size", r.W}, {"grad_accum", r.A},
                        {"flops_per_token", sum.flops_per_token}, {"peak_gflops", sum.peak_gflops},
                        {"peak_source", r.peak_source}, {"mfu", sum.mfu},
                        {"median_step_mfu", sum.median_step_mfu}};
  if (r.mesh) {
    const ParallelConfig& p = r.cfg.parallel;
    row["layout"] = {{"dp", r.mesh->dp_size()}, {"tp", p.tp}, {"ep", p.ep}, {"etp", p.etp},
                     {"edp", r.mesh->edp_size()}, {"sequence_parallel", p.sequence_parallel}};
    if (p.sequence_parallel) row["layout"]["sp_wire"] = sequence_wire_name(p.sp_wire);
  }
  if (!sum.val_losses.empty()) {  // null when no validation ran (e.g. stopped before one)
    row["final_val_loss"] = sum.final_val_loss;
    row["final_val_nats_per_byte"] = sum.final_val_nats_per_byte;
  }
  if (r.stop_signal) row["stopped_by_signal"] = r.stop_signal;
  r.metrics.write(row);
  r.metrics.close();
}

}  // namespace

TrainSummary run_training(const TrainConfig& config, const TrainOptions& opt,
                          const SyncFactory& make_sync) {
  config.validate();
  agree_on_launch(config, opt);  // under mpirun: before anything else waits on another rank
  Run r(config, opt);
  r.B = r.cfg.training.micro_batch_size;
  r.T = r.cfg.training.seq_len;
  // Under MPI only rank 0 prints and writes files (every rank computes the same decisions).
  const ParallelConfig& pc = r.cfg.parallel;
  r.distributed = r.cfg.fsdp.enabled || pc.used();
  r.lead = !r.distributed || dist::Comm::world().rank() == 0;
  r.sum.lead = r.lead;
  if (pc.used())  // collective: every rank makes the same sub-communicators
    r.mesh = std::make_unique<dist::Mesh>(
        dist::Comm::world(), dist::MeshShape{pc.tp, pc.ep, pc.etp, pc.sequence_parallel, pc.sp_wire});

  // A model that cannot fit is refused before anything is allocated.
  if (!opt.dry_run && !opt.ignore_memory_check)
    check_training_memory(r.cfg, machine_memory_limit());
  check_outputs(r);
  // The tokenizer is read once (checkpoints copy it); its vocabulary must fit the model's.
  r.tokenizer = open_run_tokenizer(r.cfg);
  // Every check that could fail at step 1 is made before any output is touched: the data
  // (its tokens fit the model's vocabulary), on a dry run too.
  r.data = open_training_data(r.cfg.data, r.tokenizer);
  check_data(r);
  build_model(r);
  if (opt.dry_run) return r.sum;
  if (r.lead) {
    r.locks = lock_outputs(opt.checkpoint_dir, opt.metrics_out);
    if (opt.overwrite_checkpoints) remove_earlier_checkpoints(r);
  }
  attach_data_and_sync(r, make_sync);
  if (opt.resume) resume(r);
  prepare_steps(r);
  prepare_mfu(r);

  const TrainingConfig& tc = r.cfg.training;
  // A checkpoint saved by a stop before its step's validation: that validation first, so the
  // metrics hold it as an uninterrupted run's do.
  if (r.st.validation_due) {
    evaluate(r, r.st.step - 1);
    r.st.validation_due = false;
  }
  for (int64_t step = r.st.step; step < r.end_step && !r.stop_signal; ++step) {
    log_step(r, step, train_step(r, step));
    if (r.profiler && step + 1 == r.profile_first + opt.profile_steps) report_profile(r);
    r.st.step = step + 1;
    r.stop_signal = agreed_stop(r);
    const bool last = r.st.step == r.end_step || r.stop_signal;
    const bool validate =
        (tc.eval_every > 0 && r.st.step % tc.eval_every == 0) || r.st.step == r.end_step;
    // A stopped run saves at once (a scheduler's grace period is short): its validation, if
    // this step has one, is left to the resume (TrainerState::validation_due).
    if (validate && !r.stop_signal) evaluate(r, step);
    r.st.validation_due = validate && r.stop_signal;
    if (!opt.checkpoint_dir.empty() &&
        (last || (tc.checkpoint_every > 0 && r.st.step % tc.checkpoint_every == 0)))
      save_checkpoint(r);
  }
  finish(r);
  return r.sum;
}

TrainSummary run_training(const TrainConfig& cfg, const TrainOptions& opt) {
  return run_training(cfg, opt, [](GPT& model, const TrainConfig& c, dist::Mesh* mesh) {
    if (c.fsdp.enabled) return make_fsdp_sync(model, c, mesh);
    return mesh ? make_mesh_sync(model, *mesh) : make_local_sync(model);
  });
}

}  // namespace mxtrain
