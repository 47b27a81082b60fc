// tests/train/profile_test.cc — `--profile-steps` and MFU in the trainer (train/trainer.h,
// train/profile_report.h): the profile's rows add up to the measured step times, every region
// the model has appears (dense and MoE, BF16 and MXFP8), profiling leaves the numbers alone,
// the FLOPs credited to the rows are PaLM's count, and the metrics carry MFU against the peak.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/flops.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/trainer.h"
#include "train/profile_report.h"

namespace mxtrain {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

TrainConfig tiny(const std::string& recipe, int64_t steps, bool moe) {
  std::string y = "model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32";
  if (moe) y += ", moe: {num_experts: 4, top_k: 2, d_ff: 32}";
  y += "}\ntraining: {steps: " + std::to_string(steps) +
       ", seq_len: 32, micro_batch_size: 4, grad_accum: 2, lr: 0.01, warmup_steps: 5, "
       "eval_every: 0, eval_batches: 2}\nprecision: {recipe: " + recipe + "}\n";
  return parse_config(y, "profile-test");
}

struct Files {
  fs::path dir = fs::temp_directory_path() /
                 ("mxtrain_profile_test_" + std::to_string(::getpid()) + "_" +
                  std::to_string(counter()++));
  Files() { fs::create_directories(dir); }
  ~Files() { fs::remove_all(dir); }
  std::string operator()(const char* name) const { return (dir / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

std::vector<json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TrainOptions quiet() {
  TrainOptions o;
  o.progress = false;
  o.print_decisions = false;
  return o;
}

// The (region, pass) rows a model of this kind has: its products both ways, attention (RoPE
// inside it), the elementwise ops it runs, and the rows every profile holds.
std::set<std::string> expected_rows(bool moe, bool fp8) {
  std::set<std::string> s{"qkv fwd",       "qkv bwd",        "proj fwd",     "proj bwd",
                          "lm_head fwd",   "lm_head bwd",    "attention fwd", "attention bwd",
                          "embedding fwd", "embedding bwd",  "norm fwd",     "norm bwd",
                          "swiglu fwd",    "swiglu bwd",
                          "residual fwd",  "cross_entropy fwd", "cross_entropy bwd",
                          "optimizer ",    "communication ", "wait ",        "data ",
                          "other "};
  for (const char* p : {" fwd", " bwd"}) {
    if (moe) {
      for (const char* r : {"experts.fc1", "experts.fc2", "router", "moe_routing"})
        s.insert(std::string(r) + p);
    } else {
      s.insert(std::string("fc1") + p);
      s.insert(std::string("fc2") + p);
    }
    if (fp8) s.insert(std::string("swiglu_fp8") + p);  // SwiGLU's input kept in FP8 (auto)
  }
  return s;
}

TEST(ProfileSteps, RowsAddUpToTheStepsAndEveryRegionOfTheModelAppears) {
  for (bool moe : {false, true})
    for (const char* recipe : {"bf16", "mxfp8"}) {
      SCOPED_TRACE(std::string(moe ? "moe " : "dense ") + recipe);
      Files f;
      TrainOptions o = quiet();
      o.profile_steps = 2;
      o.profile_out = f("profile.json");
      o.metrics_out = f("metrics.jsonl");
      o.peak_gflops = 100;
      const TrainConfig c = tiny(recipe, 4, moe);
      run_training(c, o);
      std::ifstream in(o.profile_out);
      const json p = json::parse(in);

      // Steps 2 and 3 (1-based) after the warm-up step 1, each as long as the metrics say.
      ASSERT_EQ(p.at("steps"), json::array({2, 3}));
      const std::vector<json> rows = read_lines(o.metrics_out);
      for (int i = 0; i < 2; ++i) {
        const double metric_ms = rows.at(size_t(1 + i)).at("step_ms").get<double>();
        // The profile's step is the sum of its cells over the same two clock reads the
        // trainer times the step by: equal up to the rounding of that sum.
        EXPECT_NEAR(p.at("step_ms").at(size_t(i)).get<double>(), metric_ms, 1e-9 * metric_ms);
      }
      double sum = 0;
      std::set<std::string> seen;
      for (const json& r : p.at("rows")) {
        sum += r.at("ms").get<double>();
        seen.insert(r.at("region").get<std::string>() + " " + r.at("pass").get<std::string>());
        EXPECT_GE(r.at("ms").get<double>(), 0.0);
      }
      const double mean = p.at("mean_step_ms").get<double>();
      EXPECT_NEAR(sum, mean, 1e-9 * mean);  // rows (means per step) add up to the mean step
      EXPECT_NEAR(p.at("rows_sum_ms").get<double>(), mean, 1e-9 * mean);
      EXPECT_EQ(seen, expected_rows(moe, std::string(recipe) == "mxfp8"));
      EXPECT_EQ(p.at("tokens_per_step"), 4 * 32 * 2);

      // MFU of the profiled steps, and each product row's rate against the given peak.
      const double fpt = model_flops(c.model, 32).flops_per_token;
      EXPECT_EQ(p.at("peak_source"), "given");
      EXPECT_EQ(p.at("flops_per_token"), fpt);
      EXPECT_DOUBLE_EQ(p.at("mfu").get<double>(), 256 * fpt / (mean * 1e6) / 100);
      for (const json& r : p.at("rows")) {
        if (r.at("group") != "products") continue;
        EXPECT_GT(r.at("flops").get<double>(), 0) << r;
        EXPECT_DOUBLE_EQ(r.at("gflops").get<double>(),
                         r.at("flops").get<double>() / (r.at("ms").get<double>() * 1e6));
        EXPECT_DOUBLE_EQ(r.at("pct_of_peak").get<double>(), r.at("gflops").get<double>());
      }
    }
}

TEST(ProfileSteps, ProfilingLeavesTheTrainingNumbersAlone) {
  const TrainConfig c = tiny("mxfp8", 4, true);
  TrainOptions o = quiet();
  const TrainSummary plain = run_training(c, o);
  o.profile_steps = 2;
  const TrainSummary profiled = run_training(c, o);
  EXPECT_EQ(plain.losses, profiled.losses);
}

TEST(ProfileSteps, ProductAndAttentionFlopsArePalmsCountLessTheGains) {
  // Σ over the rows' credited FLOPs = (6N + 12·L·d·T) per token x tokens, except that 6N also
  // counts the RMSNorm gains (2 per layer and the final one, d each), which no product holds.
  for (bool moe : {false, true}) {
    const ModelConfig m = tiny("bf16", 4, moe).model;
    const int64_t tokens = 256;
    const auto f = region_flops(m, tokens, 32);
    double sum = 0;
    for (double v : f) sum += v;
    const double gains = double(2 * m.n_layers + 1) * m.d_model;
    EXPECT_EQ(sum, (model_flops(m, 32).flops_per_token - 6 * gains) * double(tokens))
        << (moe ? "moe" : "dense");
  }
}

TEST(ProfileSteps, BadRequestsAreErrorsSayingWhatToChange) {
  TrainOptions o = quiet();
  o.profile_steps = 4;
  try {
    run_training(tiny("bf16", 4, false), o);
    FAIL() << "no error for 4 profiled steps in a 4-step run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-steps 4 needs 5 steps"), std::string::npos)
        << e.what();
  }
  o = quiet();
  o.profile_out = "p.json";
  EXPECT_THROW(run_training(tiny("bf16", 4, false), o), Error);
}

TEST(Mfu, MetricsRowsAndSummaryCarryMfuAgainstTheGivenPeak) {
  Files f;
  TrainOptions o = quiet();
  o.metrics_out = f("metrics.jsonl");
  o.peak_gflops = 100;
  const TrainConfig c = tiny("bf16", 3, false);
  const TrainSummary s = run_training(c, o);
  const double fpt = model_flops(c.model, 32).flops_per_token;
  const std::vector<json> rows = read_lines(o.metrics_out);
  ASSERT_GE(rows.size(), 4u);  // 3 steps, a validation row, the summary
  for (int i = 0; i < 3; ++i) {
    const json& r = rows[size_t(i)];
    EXPECT_DOUBLE_EQ(r.at("mfu").get<double>(),
                     r.at("tokens_per_s").get<double>() * fpt / 100e9);
  }
  const json& summary = rows.back();
  EXPECT_EQ(summary.at("peak_source"), "given");
  EXPECT_EQ(summary.at("peak_gflops"), 100.0);
  EXPECT_EQ(summary.at("flops_per_token"), fpt);
  EXPECT_DOUBLE_EQ(summary.at("mfu").get<double>(), s.tokens_per_s * fpt / 100e9);
  EXPECT_DOUBLE_EQ(s.median_step_mfu, 4 * 32 * 2 / (s.median_step_ms / 1e3) * fpt / 100e9);

  // Without a given peak, a metrics file gets one measured at start.
  o.peak_gflops = 0;
  run_training(c, o);
  const json measured = read_lines(o.metrics_out).back();
  EXPECT_EQ(measured.at("peak_source"), "measured");
  EXPECT_GT(measured.at("peak_gflops").get<double>(), 0.0);
  EXPECT_GT(measured.at("mfu").get<double>(), 0.0);
}

}  // namespace
}  // namespace mxtrain
