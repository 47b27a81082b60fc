// Tests for the training loop (train/trainer.h): the loss falls on real text, resume is
// bit-identical, non-finite steps are skipped without touching weights, and dry runs record
// decisions. Uses the fortunes corpus that scripts/setup.sh installs.
#include "mxtrain/train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <filesystem>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checkpoint.h"
#include "mxtrain/train/checkpointing.h"
#include "train/param_sync.h"

namespace mxtrain {
namespace {
namespace fs = std::filesystem;

// The one-process ParamSync with a NaN written into the first parameter's gradient in the
// chosen (0-based) steps, after the micro-batches and before the reduction: what a step whose
// backward overflowed looks like to the trainer.
class PoisonedSync : public ParamSync {
 public:
  PoisonedSync(GPT& model, std::vector<int64_t> steps)
      : inner_(make_local_sync(model)), first_(model.parameters()[0]), steps_(std::move(steps)) {}
  void begin_step() override { inner_->begin_step(); }
  void reduce_gradients() override {
    if (std::count(steps_.begin(), steps_.end(), step_)) first_->grad[0] = std::nanf("");
    ++step_;
    inner_->reduce_gradients();
  }
  bool grads_finite() override { return inner_->grads_finite(); }
  double grad_sum_squares() override { return inner_->grad_sum_squares(); }
  double grad_sum_squares_checked() override { return inner_->grad_sum_squares_checked(); }
  std::vector<OptimView> views() override { return inner_->views(); }
  std::string save(const std::string& dir, const TrainConfig& cfg, const TrainerState& st,
                   const std::vector<io::NamedTensor>& extra) override {
    return inner_->save(dir, cfg, st, extra);
  }
  TrainerState load(const std::string& dir, const TrainConfig& cfg,
                    std::vector<io::NamedTensor>& extra) override {
    TrainerState st = inner_->load(dir, cfg, extra);
    step_ = st.step;
    return st;
  }

 private:
  std::unique_ptr<ParamSync> inner_;
  Parameter* first_;
  std::vector<int64_t> steps_;
  int64_t step_ = 0;
};

// run_training with NaN gradients in `steps`.
TrainSummary run_poisoned(const TrainConfig& c, const TrainOptions& o, std::vector<int64_t> steps) {
  return run_training(c, o, [&](GPT& model, const TrainConfig&, dist::Mesh*) {
    return std::make_unique<PoisonedSync>(model, steps);
  });
}

TrainConfig tiny(const std::string& recipe, int64_t steps, bool moe = false) {
  std::string y = R"(
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32)";
  if (moe) y += ", moe: {num_experts: 4, top_k: 2, d_ff: 32}";
  y += "}\ntraining: {steps: " + std::to_string(steps) +
       ", seq_len: 32, micro_batch_size: 4, grad_accum: 2, lr: 0.01, warmup_steps: 5, "
       "eval_every: 0, eval_batches: 2}\nprecision: {recipe: " + recipe + "}\n";
  return parse_config(y, "tiny-test");
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("mxtrain_trainer_test_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter()++));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

TrainOptions quiet() {
  TrainOptions o;
  o.progress = false;
  o.print_decisions = false;
  return o;
}

TEST(Trainer, LossFallsWellBelowUniformOnText) {
  for (const char* recipe : {"bf16", "mxfp8", "mxfp8-32x32"}) {
    TrainConfig c = tiny(recipe, 60);
    TrainSummary s = run_training(c, quiet());
    ASSERT_EQ(s.steps_done, 60);
    // ln(256) = 5.545 is the loss of a uniform byte model; 60 steps of a tiny model on
    // English text reliably reach the unigram/bigram regime (~3).
    EXPECT_GT(s.losses.front(), 5.0) << recipe;
    EXPECT_LT(s.losses.back(), 3.6) << recipe;
    EXPECT_LT(s.final_val_loss, 3.8) << recipe;
  }
}

// 8 steps in one run and 4 + 4 with a resume give the same losses and final weight bytes.
// `interrupt` makes the first part stop after 4 steps (default: --stop-after 4). Returns the
// losses of the one run.
std::vector<double> expect_resume_bit_identical(
    const TrainConfig& c, const std::string& what,
    const std::function<void(TrainOptions&)>& interrupt = [](TrainOptions& o) {
      o.stop_after = 4;
    }) {
  TempDir a, b;
  TrainOptions oa = quiet();
  oa.checkpoint_dir = a.path.string();
  TrainSummary full = run_training(c, oa);

  TrainOptions ob = quiet();
  ob.checkpoint_dir = b.path.string();
  interrupt(ob);
  TrainSummary first = run_training(c, ob);
  EXPECT_EQ(first.steps_done, 4) << what;
  TrainOptions oc = quiet();
  oc.checkpoint_dir = b.path.string();
  oc.resume = true;
  TrainSummary second = run_training(c, oc);

  EXPECT_EQ(first.losses.size() + second.losses.size(), full.losses.size()) << what;
  for (size_t i = 0; i < full.losses.size() && i < 4 + second.losses.size(); ++i) {
    const double l = i < 4 ? first.losses[i] : second.losses[i - 4];
    EXPECT_EQ(l, full.losses[i]) << "step " << i << " " << what;
  }
  io::LoadedCheckpoint ca = io::load_checkpoint(a.path.string());
  io::LoadedCheckpoint cb = io::load_checkpoint(b.path.string());
  EXPECT_EQ(ca.model.size(), cb.model.size()) << what;
  for (size_t i = 0; i < ca.model.size() && i < cb.model.size(); ++i)
    EXPECT_EQ(ca.model[i].data, cb.model[i].data) << ca.model[i].name << " " << what;
  return full.losses;
}

// With the SwiGLU input kept in FP32 and in FP8 (precision.swiglu_input): the FP8 run's first
// loss equals the FP32-input run's (the forward is the same) and its last does not (the
// trainer wired the setting through to the model); the default (auto) under mxfp8 is the FP8
// run, loss for loss.
TEST(Trainer, ResumeIsBitIdentical) {
  for (bool moe : {false, true}) {
    TrainConfig c = tiny("mxfp8", 8, moe);
    EXPECT_EQ(c.precision.swiglu_input, SwigluInput::follow_fc1);
    const std::vector<double> lauto = run_training(c, quiet()).losses;
    c.precision.swiglu_input = SwigluInput::fp32;
    c = parse_config(config_to_yaml(c), "tiny-test");
    const std::vector<double> l32 = expect_resume_bit_identical(c, moe ? "moe" : "dense");
    c.precision.swiglu_input = SwigluInput::fp8;
    c = parse_config(config_to_yaml(c), "tiny-test");
    const std::vector<double> l8 = expect_resume_bit_identical(c, moe ? "moe fp8" : "dense fp8");
    ASSERT_EQ(l8.size(), l32.size());
    EXPECT_EQ(l8.front(), l32.front());
    EXPECT_NE(l8.back(), l32.back());
    EXPECT_EQ(lauto, l8);
  }
}

// nvfp4 with every switch on (stochastic rounding of gradients keyed by the global
// micro-batch; the tiny runs take two micro-batches a step): a resumed run is bit-identical to
// the uninterrupted one, dense and MoE; and the switches reach the layers (turning stochastic
// rounding off changes the losses after the first step).
TEST(Trainer, Nvfp4WithStochasticRoundingResumesBitIdentically) {
  for (bool moe : {false, true}) {
    TrainConfig c = tiny("nvfp4", 8, moe);
    const std::vector<double> l = expect_resume_bit_identical(c, moe ? "moe" : "dense");
    TrainConfig rne = c;
    rne.precision.fp4_stochastic_rounding.value = false;
    rne = parse_config(config_to_yaml(rne), "tiny-test");
    const std::vector<double> lr = run_training(rne, quiet()).losses;
    ASSERT_EQ(lr.size(), l.size());
    EXPECT_EQ(lr.front(), l.front()) << "the first step's loss is a forward: no rounding of dy";
    EXPECT_NE(lr.back(), l.back());
  }
}

// The tensors of a checkpoint's optimizer file whose name ends with `suffix`.
std::vector<io::NamedTensor> optimizer_tensors(const std::string& dir, const std::string& suffix) {
  std::vector<io::NamedTensor> out;
  for (const io::NamedTensor& t : io::load_checkpoint(dir).optimizer)
    if (t.name.size() >= suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(t);
  return out;
}

// Delayed scaling (fp8-delayed) with a 3-step history, so the ring wraps within the run and
// the scales move: a run resumed from step 4 continues with the uninterrupted run's losses and
// weights bit for bit (the checkpoint carries every history and scale), dense and MoE; the
// scales really come from the histories (the losses are not fp8-current's); and validation
// forwards in between change nothing (their amaxes are not the step's).
TEST(Trainer, DelayedScalingResumesBitIdenticallyAndValidationDoesNotMoveScales) {
  for (bool moe : {false, true}) {
    TrainConfig c = tiny("fp8-delayed", 8, moe);
    c.precision.amax_history.length = 3;
    c = parse_config(config_to_yaml(c), "tiny-test");
    const std::vector<double> l = expect_resume_bit_identical(c, moe ? "moe" : "dense");
    EXPECT_NE(l, run_training(tiny("fp8-current", 8, moe), quiet()).losses);
    TrainConfig ce = c;
    ce.training.eval_every = 1;
    ce = parse_config(config_to_yaml(ce), "tiny-test");
    EXPECT_EQ(run_training(ce, quiet()).losses, l) << (moe ? "moe" : "dense");
    TempDir d;
    TrainOptions o = quiet();
    o.checkpoint_dir = d.path.string();
    run_training(c, o);
    const auto hist = optimizer_tensors(d.path.string(), ".amax_history");
    const auto scales = optimizer_tensors(d.path.string(), ".delayed_scale");
    // qkv, proj, fc1, fc2 per layer (MoE: the experts' fc1 and fc2, 4 groups each) x 3 roles.
    ASSERT_EQ(hist.size(), size_t(2 * 4 * 3));
    ASSERT_EQ(scales.size(), hist.size());
    for (const io::NamedTensor& t : hist) {
      const bool expert = t.name.find("experts") != std::string::npos;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{expert ? 4 : 1, 3})) << t.name;
      for (float a : t.data) EXPECT_GT(a, 0.f) << t.name;  // 8 steps filled all 3 entries
    }
    for (const io::NamedTensor& t : scales)
      for (float v : t.data) EXPECT_NE(v, 1.f) << t.name;
  }
}

// A skipped step leaves the histories as they were: 3 steps with the third skipped end with
// the state of 2 steps.
TEST(Trainer, SkippedStepLeavesDelayedScalesAlone) {
  TrainConfig c = tiny("fp8-delayed", 3);
  TempDir a, b;
  TrainOptions oa = quiet();
  oa.checkpoint_dir = a.path.string();
  EXPECT_EQ(run_poisoned(c, oa, {2}).skipped_steps, 1);
  TrainOptions ob = quiet();
  ob.checkpoint_dir = b.path.string();
  ob.stop_after = 2;
  run_training(c, ob);
  for (const char* suffix : {".amax_history", ".delayed_scale"}) {
    const auto ta = optimizer_tensors(a.path.string(), suffix);
    const auto tb = optimizer_tensors(b.path.string(), suffix);
    ASSERT_EQ(ta.size(), tb.size());
    ASSERT_FALSE(ta.empty());
    for (size_t i = 0; i < ta.size(); ++i) EXPECT_EQ(ta[i].data, tb[i].data) << ta[i].name;
  }
}

// A stop request (what the CLI's SIGTERM handler answers) asked during step 4 ends the run
// after it: a checkpoint at step 4, the summary says why; resuming continues bit for bit.
TEST(Trainer, StopRequestEndsAtTheStepWithACheckpointAndResumesBitIdentically) {
  TrainConfig c = tiny("mxfp8", 8);
  TempDir m;
  fs::create_directories(m.path);
  const std::string metrics = (m.path / "m.jsonl").string();
  expect_resume_bit_identical(c, "SIGTERM at step 4", [&](TrainOptions& o) {
    auto asked = std::make_shared<int>(0);
    o.stop_requested = [asked] { return ++*asked == 4 ? SIGTERM : 0; };  // asked once per step
    o.metrics_out = metrics;
  });
  const std::string rows = io::read_text_file(metrics);
  EXPECT_NE(rows.find("\"step\":4,\"step_ms\""), std::string::npos) << rows;
  EXPECT_EQ(rows.find("\"step\":5,"), std::string::npos) << rows;
  EXPECT_NE(rows.find("\"stopped_by_signal\":15"), std::string::npos) << rows;
  EXPECT_NE(rows.find("\"steps\":4,"), std::string::npos) << rows;
  EXPECT_EQ(rows.find("{\"step\":4,\"val_loss\""), std::string::npos) << "no validation when stopped";
}

// The validation rows of a metrics file: step -> val_loss; a step seen twice fails the test.
std::map<int64_t, double> val_losses(const std::string& path) {
  std::map<int64_t, double> out;
  std::istringstream in(io::read_text_file(path));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (!r.contains("val_loss")) continue;
    const int64_t step = r.at("step").get<int64_t>();
    EXPECT_EQ(out.count(step), 0u) << "step " << step << " validated twice in " << path;
    out[step] = r.at("val_loss").get<double>();
  }
  return out;
}

// A stop after a step whose validation is due (eval_every 2, SIGTERM asked during step 4)
// saves at once, without it, and the checkpoint says the validation is due; the resume runs it
// first, so the metrics hold every validation of an uninterrupted run, once, equal. A resume
// killed after that validation but before its next checkpoint (here: the checkpoints put back
// as they were, the metrics kept) drops the row it wrote and validates again, once.
TEST(Trainer, StopBeforeADueValidationLeavesItToTheResume) {
  TrainConfig c = tiny("mxfp8", 8);
  c.training.eval_every = 2;
  c.source_text = config_to_yaml(c);
  TempDir a, b, saved, m;
  fs::create_directories(m.path);
  const std::string ma = (m.path / "a.jsonl").string(), mb = (m.path / "b.jsonl").string();
  TrainOptions oa = quiet();
  oa.checkpoint_dir = a.path.string();
  oa.metrics_out = ma;
  run_training(c, oa);
  ASSERT_EQ(val_losses(ma).size(), 4u);  // steps 2, 4, 6, 8

  TrainOptions ob = quiet();
  ob.checkpoint_dir = b.path.string();
  ob.metrics_out = mb;
  auto asked = std::make_shared<int>(0);
  ob.stop_requested = [asked] { return ++*asked == 4 ? SIGTERM : 0; };  // asked once per step
  EXPECT_EQ(run_training(c, ob).steps_done, 4);
  EXPECT_EQ(val_losses(mb).count(4), 0u) << "no validation when stopped";
  EXPECT_TRUE(io::load_checkpoint(b.path.string()).trainer_state.at("validation_due").get<bool>());
  fs::copy(b.path, saved.path, fs::copy_options::recursive);

  TrainOptions oc = quiet();
  oc.checkpoint_dir = b.path.string();
  oc.metrics_out = mb;
  oc.resume = true;
  const TrainSummary resumed = run_training(c, oc);
  EXPECT_EQ(val_losses(mb), val_losses(ma));
  EXPECT_EQ(resumed.val_losses.front().first, 4);
  EXPECT_FALSE(io::load_checkpoint(b.path.string()).trainer_state.at("validation_due").get<bool>());

  fs::remove_all(b.path);
  fs::copy(saved.path, b.path, fs::copy_options::recursive);
  run_training(c, oc);
  EXPECT_EQ(val_losses(mb), val_losses(ma));
}

TEST(Trainer, StopSummaryNamesTheSignalAndTheCheckpoint) {
  TempDir d;
  TrainOptions o = quiet();
  o.checkpoint_dir = d.path.string();
  o.stop_requested = [] { return SIGINT; };  // at once: after the first step
  const TrainSummary s = run_training(tiny("bf16", 5), o);
  EXPECT_EQ(s.stopped_by, SIGINT);
  EXPECT_EQ(s.steps_done, 1);
  EXPECT_EQ(s.checkpoint, d.path.string() + "/step_1");
  EXPECT_EQ(io::load_checkpoint(d.path.string()).step, 1);
}

// A validation split shorter than a sequence is refused before step 1 (it used to end the
// run at its final validation, with nothing saved): 5000 bytes, val_fraction 0.01 (49 bytes:
// the float 0.01 is a little below 1/100), seq 64.
TEST(Trainer, ShortValidationSplitIsRefusedAtStart) {
  TempDir d;
  fs::create_directories(d.path);
  const std::string corpus = (d.path / "small.txt").string();
  std::string text;
  while (text.size() < 5000) text += "the quick brown fox jumps over the lazy dog. ";
  text.resize(5000);
  io::write_file_atomic(corpus, text);
  TrainConfig c = parse_config(
      "model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, max_seq_len: 64}\n"
      "training: {steps: 300, seq_len: 64, micro_batch_size: 2, eval_every: 0}\n"
      "data: {path: " + corpus + ", val_fraction: 0.01}\nprecision: {recipe: bf16}\n",
      "short-val");
  TrainOptions o = quiet();
  o.metrics_out = (d.path / "m.jsonl").string();
  o.checkpoint_dir = (d.path / "ck").string();
  try {
    run_training(c, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the validation split (data.val_fraction 0.01) has 49 bytes, fewer than "
                  "training.seq_len + 2 = 66"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(d.path / "m.jsonl"));   // no step ran, no row written
  EXPECT_FALSE(fs::exists(d.path / "ck/step_0"));
  EXPECT_FALSE(fs::exists(d.path / "ck/.lock"));  // the lock went with the run
}

TEST(Trainer, NonFiniteStepIsSkippedAndWeightsUntouched) {
  TrainConfig c = tiny("mxfp8", 3);
  TempDir a, b;
  TrainOptions oa = quiet();
  oa.checkpoint_dir = a.path.string();
  TrainSummary s = run_poisoned(c, oa, {2});
  EXPECT_EQ(s.skipped_steps, 1);
  ASSERT_EQ(s.losses.size(), 3u);
  EXPECT_TRUE(std::isnan(s.losses[2]));

  TrainOptions ob = quiet();
  ob.checkpoint_dir = b.path.string();
  ob.stop_after = 2;  // same two good steps, no third
  run_training(c, ob);
  io::LoadedCheckpoint ca = io::load_checkpoint(a.path.string());
  io::LoadedCheckpoint cb = io::load_checkpoint(b.path.string());
  for (size_t i = 0; i < ca.model.size(); ++i)
    EXPECT_EQ(ca.model[i].data, cb.model[i].data) << ca.model[i].name;
}

TEST(Trainer, TooManyNonFiniteStepsStopWithClearError) {
  TrainConfig c = tiny("bf16", 5);
  c.training.max_nonfinite_steps = 1;
  TrainOptions o = quiet();
  try {
    run_poisoned(c, o, {0, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_nonfinite_steps"), std::string::npos) << e.what();
  }
}

TEST(Trainer, ResumeErrors) {
  TrainConfig c = tiny("bf16", 4);
  TempDir d;
  TrainOptions o = quiet();
  o.checkpoint_dir = d.path.string();
  o.resume = true;
  EXPECT_THROW(run_training(c, o), Error);  // nothing to resume from
  o.resume = false;
  run_training(c, o);
  o.resume = true;
  EXPECT_THROW(run_training(c, o), Error);  // already at the last step
  TrainConfig other = tiny("bf16", 8);
  other.model.d_model = 64;
  other.model.n_heads = 2;
  try {
    run_training(other, o);
    FAIL();
  } catch (const Error& e) {
    // One line naming each changed key with both values.
    EXPECT_NE(std::string(e.what()).find("was written for a different model (checkpoint -> "
                                         "config: model.d_model: 32 -> 64)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

// The batch a run used is reported; one process is world 1.
TEST(Trainer, SummaryRecordsTheBatch) {
  TrainSummary s = run_training(tiny("bf16", 1), quiet());
  EXPECT_EQ(s.micro_batch_size, 4);
  EXPECT_EQ(s.world_size, 1);
  EXPECT_EQ(s.grad_accum, 2);
  EXPECT_EQ(s.global_batch, 8);
}

// Resuming at another world size keeps the checkpoint's global batch through grad_accum.
TEST(Trainer, ResumeGradAccumKeepsTheGlobalBatch) {
  TrainerState two;  // 2 ranks x micro-batch 8 x grad_accum 1
  two.world_size = 2;
  two.global_batch = 16;
  std::string note;
  EXPECT_EQ(resume_grad_accum(two, 8, 1, 1, &note), 2);
  EXPECT_NE(note.find("training.grad_accum 1 -> 2 keeps the global batch of 16 sequences"),
            std::string::npos) << note;
  EXPECT_EQ(resume_grad_accum(two, 4, 4, 3, nullptr), 1);
  EXPECT_EQ(resume_grad_accum(two, 8, 1, 2, nullptr), 2);  // already equal: as asked
  EXPECT_EQ(resume_grad_accum(two, 8, 2, 3, nullptr), 3);  // same world: as asked
  try {
    resume_grad_accum(two, 8, 3, 1, nullptr);
    FAIL() << "3 x 8 does not divide 16";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("16 sequences per step (written at 2 rank(s))"), std::string::npos) << m;
    EXPECT_NE(m.find("micro_batch_size 8 x 3 rank(s) = 24 does not divide"), std::string::npos)
        << m;
  }
}

// A checkpoint records the world size and global batch of the run that wrote it.
TEST(Trainer, CheckpointRecordsWorldSizeAndGlobalBatch) {
  TrainConfig c = tiny("bf16", 2);
  TempDir d;
  TrainOptions o = quiet();
  o.checkpoint_dir = d.path.string();
  run_training(c, o);
  const io::LoadedCheckpoint ck = io::load_checkpoint(d.path.string());
  EXPECT_EQ(ck.trainer_state.at("world_size").get<int64_t>(), 1);
  EXPECT_EQ(ck.trainer_state.at("global_batch").get<int64_t>(), 8);

  // Without them (checkpoints written before they were recorded) it resumes as one process.
  TempDir old;
  nlohmann::json state = ck.trainer_state;
  state.erase("world_size");
  state.erase("global_batch");
  io::CheckpointOptions co;
  co.config_text = ck.config_text;
  io::save_checkpoint(old.path.string(), ck.step, ck.model, ck.optimizer, state, co);
  TrainOptions r = quiet();
  r.checkpoint_dir = old.path.string();
  r.resume = true;
  const TrainSummary s = run_training(tiny("bf16", 3), r);
  EXPECT_EQ(s.steps_done, 1);
  EXPECT_EQ(s.grad_accum, 2);
}

}  // namespace
}  // namespace mxtrain
