// train/trainer.cc — the training loop (train/trainer.h), read top to bottom:
// build (policy -> precision decisions -> model) -> optional resume -> for each step:
// micro-batches forward/backward -> finite check -> clip -> AdamW -> metrics/progress ->
// validation -> checkpoint -> summary.
#include "mxtrain/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/memory_check.h"
#include "mxtrain/train/optim.h"
#include "mxtrain/train/policy_oracle.h"
#include "mxtrain/train/precision.h"
#include "train/param_sync.h"
#include "train/progress.h"

namespace mxtrain {
namespace {

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

// Appends one JSON object per line and flushes, so a crash keeps what was written; a
// failed write (full disk) stops the run with the path.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append) {
    if (!path.empty()) out_ = std::make_unique<io::LineWriter>(path, append);
  }
  void write(const nlohmann::json& j) {
    if (out_) out_->write(j.dump() + "\n");
  }
  void close() {
    if (out_) out_->close();
  }

 private:
  std::unique_ptr<io::LineWriter> out_;
};

// Mean loss over `n_batches` validation batches of B sequences: the same sequences and the
// same value (up to summation order) at every world size. The ranks share the batches: in
// round k rank r computes batch k*W + r. Every rank runs the same number of forwards (FSDP's
// weight gathers are collective), so a rank past the last batch computes batch 0 again and
// leaves it out of the sum.
double validation_loss(GPT& model, const TextCorpus& corpus, ParamSync& sync, int B, int T,
                       int n_batches) {
  const int W = sync.world();
  std::vector<int32_t> tok(size_t(B) * T), tgt(size_t(B) * T);
  double sum = 0;
  for (int k = 0; int64_t(k) * W < n_batches; ++k) {
    const int b = k * W + sync.rank();
    const bool counted = b < n_batches;
    for (int i = 0; i < B; ++i)
      corpus.val_sequence(int64_t(counted ? b : 0) * B + i, int64_t(n_batches) * B, T,
                          &tok[size_t(i) * T], &tgt[size_t(i) * T]);
    const double loss = model.forward_loss(tok.data(), tgt.data(), B, T);
    if (counted) sum += loss;
  }
  return sync.sum_over_ranks(sum) / n_batches;
}

}  // namespace

TrainSummary run_training(const TrainConfig& config, const TrainOptions& opt) {
  config.validate();
  TrainConfig cfg = config;  // grad_accum may change on resume (see below)
  const auto& tc = cfg.training;
  const int B = tc.micro_batch_size, T = tc.seq_len;  // B: sequences per rank

  // Under FSDP only rank 0 prints and writes files (every rank computes the same decisions).
  const bool lead = !cfg.fsdp.enabled || dist::Comm::world().rank() == 0;

  // ---- memory: a model that cannot fit is refused before anything is allocated.
  if (!opt.dry_run && !opt.ignore_memory_check) check_training_memory(cfg, machine_memory_limit());

  // ---- outputs: every path is checked before any work, so a run that cannot save is
  // refused now rather than after its last step.
  if (lead) {
    io::check_output_file(opt.decisions_out, "--decisions-out");
    if (!opt.dry_run) {
      io::check_output_file(opt.metrics_out, "--metrics-out");
      if (!opt.checkpoint_dir.empty() && !opt.resume)
        io::check_output_dir(opt.checkpoint_dir, "--checkpoint-dir");
    }
  }
  if (opt.resume && !opt.dry_run) {
    MXT_CHECK(!opt.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    if (lead) io::check_output_dir(opt.checkpoint_dir, "--checkpoint-dir");
  }

  // ---- build: policy -> precision decisions -> model --------------------------------------
  PolicyOracle oracle;
  if (cfg.precision.selective_fp8) oracle = load_policy_oracle(cfg.precision.fp8_dynamic_policy_path, cfg);
  PrecisionResolver resolver(cfg, oracle);
  if (opt.dry_run) {
    for (const ModuleInfo& m : describe_modules(cfg.model)) resolver(m);
  }
  std::unique_ptr<GPT> model;
  if (!opt.dry_run)
    model = std::make_unique<GPT>(cfg.model, [&](const ModuleInfo& m) { return resolver(m); },
                                  tc.seed);
  if (model)
    model->set_swiglu_input(parse_swiglu_input(cfg.precision.swiglu_input),
                            cfg.precision.scale_rounding);
  if (!opt.decisions_out.empty() && lead)
    io::write_file_atomic(opt.decisions_out, decisions_json(resolver.decisions()));
  if ((opt.print_decisions || opt.dry_run) && lead)
    std::fprintf(stderr, "precision decisions (%zu quantizable modules):\n%s",
                 resolver.decisions().size(), format_decisions(resolver.decisions()).c_str());
  TrainSummary sum;
  if (opt.dry_run) return sum;

  const TextCorpus corpus = TextCorpus::load(cfg.data.path, cfg.data.val_fraction);
  std::vector<Parameter*> params = model->parameters();
  std::unique_ptr<ParamSync> sync =
      cfg.fsdp.enabled ? make_fsdp_sync(*model, cfg) : make_local_sync(*model);
  const int W = sync->world(), rank = sync->rank();
  // Each rank reads data.path on its own machine: they must all have read the same bytes.
  sync->check_same("training data (" + cfg.data.path + ")",
                   corpus.description() + " fnv1a64 " + std::to_string(corpus.content_hash()));
  if (opt.progress && lead)
    std::fprintf(stderr, "model: %lld parameters, %d layers%s; data: %s%s\n",
                 (long long)model->num_parameters(), cfg.model.n_layers,
                 cfg.model.moe_num_experts ? " (MoE)" : "", corpus.description().c_str(),
                 W > 1 ? ("; FSDP over " + std::to_string(W) + " ranks").c_str() : "");

  // ---- resume ------------------------------------------------------------------------------
  TrainerState st;
  if (opt.resume) {
    MXT_CHECK(!opt.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    st = sync->load(opt.checkpoint_dir, cfg);
    if (opt.progress && lead)
      std::fprintf(stderr, "resumed from %s at step %lld\n", opt.checkpoint_dir.c_str(),
                   (long long)st.step);
    // Every rank has the same state (FSDP broadcasts it), so every rank decides alike.
    std::string note;
    const int a = resume_grad_accum(st, B, W, tc.grad_accum, &note);
    if (a != tc.grad_accum) {
      if (lead) std::fprintf(stderr, "%s\n", note.c_str());
      cfg.training.grad_accum = a;
      cfg.source_text = config_to_yaml(cfg);  // later checkpoints record what ran
    }
  }
  const int A = tc.grad_accum;
  const int64_t global_batch = int64_t(B) * W * A;  // sequences per optimizer step
  model->reserve(B, T);  // activations, backward scratch and gradients, once
  st.world_size = W;
  st.global_batch = global_batch;
  if (opt.progress && lead)
    std::fprintf(stderr, "batch: %lld sequences of %d tokens per step (micro_batch_size %d x "
                 "%d rank(s) x grad_accum %d)\n",
                 (long long)global_batch, T, B, W, A);
  MXT_CHECK(st.step < tc.steps, "checkpoint is at step ", st.step, " but training.steps is ",
            tc.steps, ": nothing left to do (raise --steps)");

  MetricsWriter metrics(lead ? opt.metrics_out : std::string(), opt.resume);
  ProgressLine progress(st.step, tc.steps, opt.progress && lead);
  std::vector<int32_t> tok(size_t(B) * T), tgt(size_t(B) * T);
  const int64_t tokens_per_step = global_batch * T;
  const auto t_run = Clock::now();
  std::vector<double> step_times;  // seconds, steps that updated the weights
  sum.first_step = st.step;

  const int64_t end_step =
      opt.stop_after > 0 ? std::min(tc.steps, st.step + opt.stop_after) : tc.steps;
  for (int64_t step = st.step; step < end_step; ++step) {
    const auto t_step = Clock::now();
    sync->begin_step();
    for (Parameter* p : params) p->clear_grad();  // the first micro-batch writes them

    // Forward + backward over this rank's micro-batches; grads accumulate unscaled (their sum)
    // and become the mean over the global batch after the reduction over ranks (mean) and the
    // 1/A below. Scaling each micro-batch's loss by 1/A instead would scale the output
    // gradients before the backward GEMMs quantize them, which rounds differently unless A is
    // a power of two — and W ranks would not match one process with grad_accum W*A. Rank r's
    // micro-batch a is global micro-batch a*W + r, sequences [(a*W + r)*B, (a*W + r + 1)*B).
    double loss = 0, aux = 0;
    size_t held = 0;
    for (int a = 0; a < A; ++a) {
      const int64_t first = (int64_t(a) * W + rank) * B;
      for (int i = 0; i < B; ++i)
        corpus.train_sequence(tc.seed, step, first + i, T, &tok[size_t(i) * T],
                              &tgt[size_t(i) * T]);
      loss += model->forward_backward(tok.data(), tgt.data(), B, T, 1.0f) / A;
      aux += model->last_aux_loss() / A;
      held = std::max(held, model->last_held_bytes());
    }
    if (std::count(opt.poison_steps.begin(), opt.poison_steps.end(), step))
      params[0]->grad[0] = std::nanf("");
    sync->reduce_gradients();
    loss = sync->mean_over_ranks(loss);
    aux = sync->mean_over_ranks(aux);

    // Non-finite loss or gradients: report and skip; weights stay untouched.
    const bool finite = sync->grads_finite() && std::isfinite(loss);
    if (!finite) {
      ++st.skipped;
      sum.losses.push_back(std::nan(""));
      progress.message("step " + std::to_string(step + 1) +
                       ": non-finite loss or gradient, step skipped (" +
                       std::to_string(st.skipped) + " so far)");
      metrics.write({{"step", step + 1}, {"skipped", true}, {"reason", "non-finite loss or gradient"}});
      MXT_CHECK(st.skipped <= tc.max_nonfinite_steps, "training stopped: ", st.skipped,
                " steps had non-finite loss or gradients (limit training.max_nonfinite_steps = ",
                tc.max_nonfinite_steps, ")");
    } else {
      // Clip, then AdamW on every parameter (or shard); the version bump invalidates the
      // quantized weight copies. The gradient is the accumulated sum / A (see above): the 1/A
      // is applied together with the clip factor.
      const double gnorm = std::sqrt(sync->grad_sum_squares()) / A;
      const float clip =
          (tc.grad_clip > 0 && gnorm > tc.grad_clip) ? float(tc.grad_clip / gnorm) : 1.f;
      const float grad_mult = clip / float(A);
      AdamWHyper h{lr_at(step, tc.warmup_steps, tc.steps, tc.lr, tc.min_lr), tc.beta1,
                   tc.beta2, tc.eps, tc.weight_decay};
      ++st.opt_steps;
      for (const OptimView& ov : sync->views()) {
        if (grad_mult != 1.f)
          for (int64_t i = 0; i < ov.n; ++i) ov.grad[i] *= grad_mult;
        adamw_update(ov.value, ov.grad, ov.m, ov.v, ov.n, h, st.opt_steps, ov.decay);
        ++*ov.version;
      }

      const double step_s = seconds_since(t_step);
      step_times.push_back(step_s);
      sum.losses.push_back(loss);
      sum.held_bytes = held;
      const CommCounters cc = sync->counters();
      nlohmann::json row = {{"step", step + 1}, {"loss", loss}, {"aux_loss", aux},
                            {"lr", h.lr}, {"grad_norm", gnorm},
                            {"tokens_per_s", double(tokens_per_step) / step_s},
                            {"step_ms", step_s * 1e3}, {"held_bytes", held},
                            {"peak_rss_bytes", peak_rss_bytes()}};
      if (W > 1) {
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
      metrics.write(row);
      progress.update(step, loss,
                      double(tokens_per_step) * double(step + 1 - sum.first_step) /
                          seconds_since(t_run),
                      step_s, seconds_since(t_run));
    }

    const bool last = step + 1 == end_step;
    if ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last) {
      const double vl = validation_loss(*model, corpus, *sync, B, T, tc.eval_batches);
      sum.val_losses.emplace_back(step + 1, vl);
      sum.final_val_loss = vl;
      metrics.write({{"step", step + 1}, {"val_loss", vl}});
      char buf[96];
      std::snprintf(buf, sizeof buf, "step %lld: val_loss %.4f", (long long)(step + 1), vl);
      progress.message(buf);
    }
    st.step = step + 1;
    if (!opt.checkpoint_dir.empty() &&
        (last || (tc.checkpoint_every > 0 && st.step % tc.checkpoint_every == 0)))
      sync->save(opt.checkpoint_dir, cfg, st);
  }

  sum.steps_done = st.step - sum.first_step;
  sum.skipped_steps = st.skipped;
  // Throughput over the steps that updated the weights; the median leaves out the first
  // step (it builds oneDNN primitives and buffers).
  double total_s = 0;
  for (double t : step_times) total_s += t;
  sum.mean_step_ms = step_times.empty() ? 0 : total_s / double(step_times.size()) * 1e3;
  sum.tokens_per_s = total_s > 0 ? double(tokens_per_step) * double(step_times.size()) / total_s : 0;
  std::vector<double> steady(step_times.begin() + (step_times.size() > 1), step_times.end());
  std::sort(steady.begin(), steady.end());
  sum.median_step_ms = steady.empty() ? 0 : steady[steady.size() / 2] * 1e3;
  sum.peak_rss_bytes = peak_rss_bytes();
  sum.global_batch = global_batch;
  sum.micro_batch_size = B;
  sum.world_size = W;
  sum.grad_accum = A;
  metrics.write({{"summary", true}, {"recipe", cfg.precision.recipe}, {"steps", st.step},
                 {"final_loss", sum.losses.empty() ? 0.0 : sum.losses.back()},
                 {"final_val_loss", sum.final_val_loss}, {"tokens_per_s", sum.tokens_per_s},
                 {"mean_step_ms", sum.mean_step_ms}, {"median_step_ms", sum.median_step_ms}, {"skipped_steps", st.skipped},
                 {"held_bytes", sum.held_bytes}, {"peak_rss_bytes", sum.peak_rss_bytes},
                 {"parameters", model->num_parameters()}, {"global_batch", global_batch},
                 {"micro_batch_size", B}, {"world_size", W}, {"grad_accum", A}});
  metrics.close();
  return sum;
}

}  // namespace mxtrain
