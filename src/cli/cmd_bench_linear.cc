// cli/cmd_bench_linear.cc — `mxtrain bench linear`: forward+backward timing of the quantized
// Linear / GroupedLinear per recipe and defer state against the BF16 layer of the same shape.
//
// For every token count it times the bf16 layer (the baseline, reported as bf16_fwd_bwd_ms on
// every row) and mxfp8 / mxfp8-32x32 with defer_backward_quant off and on, on the same data,
// alternating the layers within each iteration (bench_layers_alternating, nn/layer_bench.h)
// so that load on a shared machine affects every recipe alike. --json prints one JSON array of row
// objects (fields listed in the help) for other tools; otherwise a readable table.
// Each row's rate counts the three products (fwd, dgrad, wgrad: 3 · 2 · rows · in · out FLOPs)
// over the median fwd+bwd time, as a percentage of the machine's reference peak
// (mxtrain/peak.h): measured at the start of the run at the OpenMP thread count, or --peak.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/peak_fields.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/layer_bench.h"

namespace mxtrain::cli {
namespace {

struct BenchLinearOptions {
  bool json = false;
  std::vector<int64_t> tokens{256, 2048};
  int64_t in = 4096, out = 4096;
  int64_t experts = 0, topk = 1;
  int warmup = 1, iters = 3, micro_batches = 1;
  std::vector<std::string> recipes{"bf16", "mxfp8", "mxfp8-32x32"};
  double peak_gflops = 0;  // 0: measure the reference peak in this run
};

int run_bench_linear(const BenchLinearOptions& o) {
  for (const std::string& name : o.recipes) check_products_built(get_recipe(name));
  const ReferencePeak peak = reference_peak(o.peak_gflops);
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf("peak %s\n%-12s %6s %6s %6s %4s %5s %11s %11s %8s %12s %9s %7s\n",
                peak.describe().c_str(), "recipe", "tokens", "in", "out", "exp", "defer",
                "fwd_bwd_ms", "bf16_ms", "vs_bf16", "held_MiB", "GFLOP/s", "%peak");
  for (int64_t T : o.tokens) {
    LayerBenchConfig cfg;
    cfg.tokens = T;
    cfg.in = o.in;
    cfg.out = o.out;
    cfg.experts = o.experts;
    cfg.topk = o.topk;
    cfg.warmup = o.warmup;
    cfg.iters = o.iters;
    cfg.micro_batches = o.micro_batches;
    // Baseline first, then every requested (recipe, defer) pair; all timed alternately.
    std::vector<LinearPrecision> precs(1);  // LinearPrecision's default recipe: bf16
    std::vector<std::string> names{"bf16"};
    for (const std::string& name : o.recipes) {
      Recipe rc = get_recipe(name);
      if (!rc.quantized()) continue;
      for (bool defer : {false, true}) {
        LinearPrecision p;
        p.recipe = rc;
        p.defer_backward_quant = defer;
        precs.push_back(p);
        names.push_back(name);
      }
    }
    const std::vector<LayerBenchResult> res = bench_layers_alternating(cfg, precs);
    const LayerBenchResult& bf16 = res[0];
    const bool show_bf16 =
        std::find(o.recipes.begin(), o.recipes.end(), "bf16") != o.recipes.end();
    for (size_t k = show_bf16 ? 0 : 1; k < res.size(); ++k) {
      const LayerBenchResult& r = res[k];
      const bool defer = precs[k].defer_backward_quant;
      const double gflops = 3 * 2.0 * double(r.rows) * double(o.in) * double(o.out) /
                            (r.median_ms * 1e6);
      nlohmann::json row = {{"recipe", names[k]},
                            {"tokens", T},
                            {"in", o.in},
                            {"out", o.out},
                            {"defer_backward_quant", defer},
                            {"fwd_bwd_ms", r.median_ms},
                            {"mean_ms", r.mean_ms},
                            {"min_ms", r.min_ms},
                            {"max_ms", r.max_ms},
                            {"held_bytes", r.held_bytes},
                            {"weight_cache_bytes", r.weight_cache_bytes},
                            {"bf16_fwd_bwd_ms", bf16.median_ms},
                            {"bf16_mean_ms", bf16.mean_ms},
                            {"speedup_vs_bf16", bf16.median_ms / r.median_ms},
                            {"rows", r.rows},
                            {"warmup", o.warmup},
                            {"iters", o.iters},
                            {"micro_batches", o.micro_batches},
                            {"gflops", gflops},
                            {"pct_of_peak", 100 * gflops / peak.gflops}};
      add_peak_fields(row, peak);
      if (o.experts > 0) {
        row["experts"] = o.experts;
        row["topk"] = o.topk;
      }
      if (o.json) {
        rows.push_back(row);
      } else {
        std::printf("%-12s %6lld %6lld %6lld %4lld %5s %11.2f %11.2f %7.2fx %12.2f %9.1f %6.1f%%\n",
                    names[k].c_str(), (long long)T, (long long)o.in, (long long)o.out,
                    (long long)o.experts, defer ? "on" : "off", r.median_ms, bf16.median_ms,
                    r.median_ms / bf16.median_ms, r.held_bytes / 1048576.0, gflops,
                    100 * gflops / peak.gflops);
        std::fflush(stdout);
      }
    }
  }
  if (o.json) std::cout << rows.dump(1) << std::endl;
  return 0;
}


}  // namespace

MXT_REGISTER_COMMAND("bench linear", [](CLI::App& app) {
  auto opts = std::make_shared<BenchLinearOptions>();
  CLI::App* sub = mxtrain::cli::group(app, "bench", "Benchmarks")->add_subcommand(
      "linear",
      "Time forward+backward of the quantized Linear (or GroupedLinear with --experts) per "
      "recipe and defer_backward_quant state against the BF16 layer of the same shape. JSON "
      "rows: recipe, tokens, in, out, defer_backward_quant, fwd_bwd_ms (median), min_ms, "
      "mean_ms, max_ms, held_bytes, weight_cache_bytes, bf16_fwd_bwd_ms, bf16_mean_ms, "
      "speedup_vs_bf16, rows, warmup, iters, micro_batches, gflops (3 products: 6 x rows x "
      "in x out / fwd_bwd_ms), pct_of_peak, peak_gflops, peak_source (measured | given), "
      "peak_kind and peak_threads when measured, and experts/topk when grouped");
  sub->add_flag("--json", opts->json, "Print one JSON array instead of a table");
  sub->add_option("--tokens", opts->tokens, "Token counts to sweep (default 256 2048)")
      ->delimiter(',')
      ->check(whole_number(1));
  sub->add_option("--in", opts->in, "Input features (default 4096)")->check(whole_number(1));
  sub->add_option("--out", opts->out, "Output features (default 4096)")
      ->check(whole_number(1));
  sub->add_option("--experts", opts->experts,
                  "Benchmark GroupedLinear with this many experts (default 0 = Linear)")
      ->check(whole_number(0));
  sub->add_option("--topk", opts->topk, "Router top-k: grouped rows = tokens * topk (default 1)")
      ->check(whole_number(1));
  sub->add_option("--warmup", opts->warmup, "Untimed iterations first (default 1)")
      ->check(whole_number(0));
  sub->add_option("--iters", opts->iters, "Timed iterations; the median is reported (default 3)")
      ->check(whole_number(1));
  sub->add_option("--micro-batches", opts->micro_batches,
                  "Iterations per weight version; 1 (default) quantizes the weight every "
                  "iteration, k amortizes it over k micro-batches like gradient accumulation")
      ->check(whole_number(1));
  sub->add_option("--recipes", opts->recipes, "Recipes to time (default bf16,mxfp8,mxfp8-32x32)")
      ->delimiter(',');
  add_peak_option(sub, opts->peak_gflops);
  sub->callback([opts] { exit_code() = run_bench_linear(*opts); });
});

}  // namespace mxtrain::cli
