// mxtrain/nn/layer_bench.h — timing forward+backward of one Linear or GroupedLinear.
//
// The measurement behind `mxtrain bench linear` and the adaptive-FP8 benchmark
// (docs/adaptive.md §2):
// build a layer of the given shape and precision on random normal data, run `warmup`
// untimed iterations, then `iters` timed ones, and report the median (plus min/max) wall time
// of forward + backward (dgrad and wgrad) per iteration, with the bytes the layer holds
// between forward and backward. Each iteration is one micro-batch; the weight's version is
// bumped every `micro_batches` iterations (an optimizer step), so with the default 1 every
// timed iteration pays for quantizing / converting the weight — the cost of a step without
// gradient accumulation, the least favourable case for FP8. Grouped layers split
// tokens × topk rows as evenly as possible over the experts (real routing is uneven).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mxtrain/nn/linear.h"
#include "mxtrain/stats.h"  // median_of

namespace mxtrain {

struct LayerBenchConfig {
  LinearPrecision precision;
  int64_t tokens = 2048;    // T (grouped: tokens before top-k duplication)
  int64_t in = 4096, out = 4096;
  int64_t experts = 0;      // 0: Linear; >= 1: GroupedLinear with this many experts
  int64_t topk = 1;         // grouped only: rows = tokens * topk
  int warmup = 1, iters = 5;
  int micro_batches = 1;    // iterations per weight version (optimizer step)
  bool need_dx = true;      // run dgrad (false for a first layer whose input needs no grad)
  bool bias = false;        // Linear only
  uint32_t seed = 1;
  void validate() const;    // throws naming the bad field
};

struct LayerBenchResult {
  double median_ms = 0, min_ms = 0, max_ms = 0;  // forward + backward per iteration
  double mean_ms = 0;  // with micro_batches > 1 (and iters a multiple of it) the amortized cost
  std::vector<double> samples_ms;                // every timed iteration, in order
  size_t held_bytes = 0;          // saved state held between forward and backward
  size_t weight_cache_bytes = 0;  // the layer's weight copies (all experts) after the run
  int64_t rows = 0;               // rows the GEMMs see (tokens, or tokens * topk)
};

// Times the layer described by cfg. Single-threaded caller; the layer itself uses OpenMP.
LayerBenchResult bench_layer(const LayerBenchConfig& cfg);

// Times one layer per precision on the same shape and data (cfg.precision is ignored),
// alternating the layers within every iteration so that load changes on a shared machine
// hit all of them alike; results in the order of `precisions`. Each layer holds its own
// weight copy, so memory grows with the number of precisions.
std::vector<LayerBenchResult> bench_layers_alternating(
    const LayerBenchConfig& cfg, const std::vector<LinearPrecision>& precisions);

}  // namespace mxtrain
