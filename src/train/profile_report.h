// train/profile_report.h — private: what `mxtrain train --profile-steps N` reports, built from
// the step profiler's records (mxtrain/profile.h).
//
// One row per (region, pass) the profiled steps entered, plus data, optimizer, communication,
// wait and other (the step's time outside every region) always, each as its mean time per
// step and share of the mean step; the rows add up to the step. Product rows and attention
// also carry the FLOPs they are credited with per step on this rank and the rate that makes:
// a module's forward 2·rows·in·out, its backward (dgrad + wgrad) twice that, rows = tokens x
// top_k for experts; attention 4·T·d per token and layer forward and 8·T·d backward (the whole
// T x T score matrix, as MFU counts it — the causal kernels do about half of that).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/nn/transformer.h"
#include "mxtrain/profile.h"

namespace mxtrain {

struct ProfileRow {
  prof::Region region;
  prof::Pass pass;
  double ms = 0;      // mean per profiled step
  double share = 0;   // of the mean step
  double calls = 0;   // region entries per step
  double flops = 0;   // per step (products and attention; 0 otherwise)
  double gflops = 0, pct_of_peak = 0;  // when flops > 0 (pct: when the peak is known)
};

struct ProfileReport {
  std::vector<int64_t> steps;    // the profiled steps, 1-based as in the metrics rows
  std::vector<double> step_ms;   // each one's wall time
  double mean_step_ms = 0, rows_sum_ms = 0;
  int64_t tokens_per_step = 0;   // this rank's
  double flops_per_token = 0;    // PaLM's (nn/flops.h)
  double peak_gflops = 0;        // this rank's share of the peak (0: unknown)
  double mfu = 0;                // of the mean profiled step against that (0: no peak)
  std::string peak_source;       // "measured", "given" or "none"
  std::string recipe;
  int world_size = 1;
  std::vector<ProfileRow> rows;
};

// FLOPs per step credited to each (region, pass) cell for `tokens` tokens of sequences of T.
std::array<double, prof::kCells> region_flops(const ModelConfig& cfg, int64_t tokens, int T);

// steps_run[i] is the 1-based step number of profiler.steps()[i].
ProfileReport make_profile_report(const prof::Profiler& profiler,
                                  const std::vector<int64_t>& steps_run, const ModelConfig& cfg,
                                  int64_t tokens_per_step, int T, double flops_per_token,
                                  double peak_gflops,
                                  const std::string& peak_source, const std::string& recipe,
                                  int world_size);

std::string profile_table(const ProfileReport& r);  // for stderr
// {steps, step_ms, mean_step_ms, rows_sum_ms, tokens_per_step, flops_per_token, peak_gflops,
//  peak_source, mfu, recipe, world_size, rows: [{region, pass, group, ms, share, calls, flops,
//  gflops, pct_of_peak}]}
std::string profile_json(const ProfileReport& r, int indent = 1);

}  // namespace mxtrain
