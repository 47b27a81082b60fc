// mxtrain/policy/bench_layers.h — the adaptive-FP8 benchmark (docs/adaptive.md §2) as a plan and
// a driver; `mxtrain bench-layers` (src/cli/cmd_bench_layers.cc) supplies the model's modules
// and the function that times one layer.
//
//   modules of the model --plan_bench_cases(tp, ep, etp)--> one BenchCase per distinct
//   (kind, name, per-rank shape) --run_bench_layers(sweep, timer)--> Report (policy/report.h)
//
// Per-rank shapes: column kinds (layernorm_column, column) divide `out` by tp, row divides
// `in` by tp, duplicated is unchanged; expert modules become column_grouped / row_grouped with
// num_gemms = experts / ep local experts and `out` (column) or `in` (row) divided by etp.
// For each case and token count the driver times BF16 and the FP8 recipe back to back,
// alternating iteration by iteration;
// expert cases run tokens x top_k rows split over the local experts by a Zipf law (default
// exponent 1.2: real routing is uneven), and their report points carry tokens = rows.
// The policy module does no timing itself, so the driver is tested with a fake timer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/policy/report.h"

namespace mxtrain::policy {

// A quantizable module of the model at full (unsharded) size.
struct BenchModule {
  std::string kind;         // layernorm_column | column | row | duplicated (experts: base kind)
  std::string name;         // qkv | proj | fc1 | fc2 | lm_head | ...
  bool is_expert = false;
  int64_t in = 0, out = 0;  // per expert for experts
  int num_experts = 0;      // experts only
  int top_k = 1;            // experts only
};

struct ParallelSizes {
  int tp = 1, ep = 1, etp = 1;
};

// One layer shape to time.
struct BenchCase {
  std::string kind;             // policy kind (experts promoted to *_grouped)
  std::string name;
  int tp = 0;                   // dense kinds
  int etp = 0, num_gemms = 0;   // grouped kinds: expert-TP size, local experts
  int top_k = 0;                // grouped kinds
  int64_t in = 0, out = 0;      // per rank (per expert)
  int modules = 0;              // modules of the model sharing this case
  bool grouped() const { return is_grouped_kind(kind); }
  std::string label() const;    // "row/proj tp=1 [256x128]" / "column_grouped/fc1 etp=1 ..."
};

// Distinct cases in first-seen order. Throws naming the module when a size does not divide
// (e.g. "layernorm_column/qkv: out=384 is not divisible by tp=5").
std::vector<BenchCase> plan_bench_cases(const std::vector<BenchModule>& modules,
                                        const ParallelSizes& par);

// Token counts to sweep when none are given: train_tokens x 2^k for k = -4..2 (train_tokens
// = seq_len x micro_batch the trainer will decide with), keeping values >= 16, so the
// decision point itself is measured and the range extends 16x below and 4x above it.
std::vector<int64_t> default_token_sweep(int64_t train_tokens);

// Splits `rows` over `groups` with shares proportional to 1/(g+1)^exponent (g = 0..groups-1):
// floor of each share, then the remaining rows one each to the largest fractional parts
// (ties: lower g). exponent 0 = as even as possible. Sums to rows exactly.
std::vector<int64_t> zipf_split(int64_t rows, int64_t groups, double exponent);

struct BenchLayersOptions {
  ParallelSizes par;
  std::string recipe = "mxfp8";   // the FP8 side
  bool time_bf16 = true, time_fp8 = true;
  std::vector<int64_t> tokens;    // empty -> default_token_sweep(train_tokens)
  int64_t train_tokens = 0;
  int warmup = 2, iters = 5;
  int micro_batches = 1;          // timed iterations per weight version
  double zipf_exponent = 1.2;
  std::string model;              // config path, recorded in the report
};

// What the timer is asked to measure: forward + backward of one layer shape in each of
// `recipes` on the same data — `warmup` untimed iterations each, then `iters` timed rounds,
// each round running one iteration of every recipe in turn (so BF16 and FP8 see the same
// machine conditions, iteration by iteration); each layer's weight version is bumped every
// `micro_batches` iterations.
struct TimingRequest {
  const BenchCase* c = nullptr;
  std::vector<std::string> recipes;  // "bf16" and/or the FP8 recipe, in timing order
  int64_t rows = 0;                  // tokens (dense) or tokens x top_k (grouped)
  std::vector<int64_t> group_rows;   // grouped: rows per local expert (sums to rows)
  int warmup = 0, iters = 0, micro_batches = 1;
};
// Returns, per recipe of the request, the milliseconds of each timed iteration (iters values).
using LayerTimer = std::function<std::vector<std::vector<double>>(const TimingRequest&)>;
// Called after each timing with (done, total, description of what was just timed).
using BenchProgress = std::function<void(size_t done, size_t total, const std::string& what)>;

// Times every case at every token count and returns the report (machine = this process).
Report run_bench_layers(const std::vector<BenchCase>& cases, const BenchLayersOptions& o,
                        const LayerTimer& timer, const BenchProgress& progress = {});

}  // namespace mxtrain::policy
