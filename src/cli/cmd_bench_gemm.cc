// cli/cmd_bench_gemm.cc — `mxtrain bench gemm`: the three products of a Linear layer per
// recipe, as a training step runs them, against the BF16 product of the same shape.
//
// For x [m, k], W [n, k] (a Linear with k inputs and n outputs over m tokens):
//   fwd   y  = x · W^T      timed: convert/quantize x (rowwise), then the product
//   dgrad dx = dy · W       timed: convert/quantize dy (rowwise), then the product
//   wgrad dW += dy^T · x    timed: convert/quantize dy (colwise), then the product; x's copy
//                           (BF16, or MX colwise) is the one forward saved, made untimed
// The weight copies are made before timing (BF16: converted; mxfp8: rowwise for fwd, colwise
// for dgrad; mxfp8-32x32: one tile32 copy for both), as they are inside a step that reuses
// them. Every (recipe, op) is timed once per iteration in turn, so load on a shared machine
// hits all alike; the median over --iters is reported next to the BF16 median of that op.
// The activation's converted or quantized copy is written into storage made once, as the
// layers reuse theirs across steps.
// --bf16-shapes exact,runtime times the BF16 product under both of oneDNN's primitive shapings
// (mxtrain/gemm.h, GemmShapes) in the same rounds: the baseline `bf16` row uses the shaping a
// dense product gets (exact, unless MXTRAIN_GEMM_SHAPES says otherwise), and `bf16@<other>`
// the other, with its time against the baseline.
// Every row also gives its rate, 2·m·k·n FLOPs over the op's median time (quantization
// included), as a percentage of the machine's reference peak (mxtrain/peak.h): measured at the
// start of the run at the OpenMP thread count, or the figure given with --peak.
// --cold flushes every operand and buffer from the caches before each timed product: a weight
// that fits the last-level cache (a 4096x4096 BF16 one is 32 MiB) is otherwise read from it
// on every round after the first, and at a few rows the product's time is the weight's read.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/peak_fields.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/stats.h"
#include "mxtrain/gemm.h"
#include "mxtrain/peak.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain::cli {
namespace {

struct BenchGemmOptions {
  bool json = false;
  std::vector<int64_t> m{4};
  int64_t k = 4096, n = 4096;
  int warmup = 2, iters = 9;
  std::vector<std::string> recipes{"bf16", "mxfp8", "mxfp8-32x32"};
  std::vector<std::string> ops{"fwd", "dgrad", "wgrad"};
  bool fp32_scales = false;  // also time each pow2 FP32-scaled recipe with fp32 scales
  double peak_gflops = 0;    // 0: measure the reference peak in this run
  std::vector<std::string> bf16_shapes;  // empty: the default shaping only
  bool cold = false;  // every operand flushed from the caches before each timed product
};

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

// Writes back and evicts [p, p + bytes) from every cache level (CLFLUSH, in SSE2), so that the
// next read of it comes from memory.
void flush_from_caches(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  if (bytes) _mm_clflush(c + bytes - 1);
  _mm_mfence();
}

template <class V>
void flush_from_caches(const V& v) {
  flush_from_caches(v.data(), v.size() * sizeof(v[0]));
}

void flush_from_caches(const QTensor& t) {
  flush_from_caches(t.bf16);
  for (const ScaledTensor* s : {&t.rowwise, &t.colwise, &t.tile}) {
    flush_from_caches(s->data);
    flush_from_caches(s->scales);
  }
}

std::vector<float> randn(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// One recipe's operands for one m, made untimed, and its three timed products: each op makes
// the activation's copies it reads (copies_needed) and runs the layer's product on them.
struct Case {
  Recipe r;
  int64_t M, K, N;
  const std::vector<float>*x, *dy;
  QTensor w, x_saved;         // the weight's copies; x's wgrad copy
  QTensor a_fwd, a_dgrad, a_wgrad;  // the activation's copies per op, reused as in a step
  GroupList one;              // the whole batch as one row group
  std::vector<float> out;
  std::optional<GemmShapes> shapes;  // oneDNN's shaping for this case; none: the default

  Case(const Recipe& rc, int64_t m, int64_t k, int64_t n, const std::vector<float>& wv,
       const std::vector<float>& xv, const std::vector<float>& dyv)
      : r(rc), M(m), K(k), N(n), x(&xv), dy(&dyv) {
    make_copies(wv.data(), N, K, r.role(Role::weight), w, copies_needed(r, Role::weight));
    make_copies(xv.data(), M, K, r.role(Role::input), x_saved,
                copies_needed(r, Role::input, Use::wgrad));
    one.offsets = {0, M};
    out.resize(size_t(std::max({M * N, M * K, N * K})));  // y, dx, dW
  }

  // Every operand and buffer a product reads or writes, out of the caches (--cold).
  void flush() const {
    flush_from_caches(*x);
    flush_from_caches(*dy);
    flush_from_caches(out);
    for (const QTensor* t : {&w, &x_saved, &a_fwd, &a_dgrad, &a_wgrad}) flush_from_caches(*t);
  }

  void run(const std::string& op) {
    if (shapes) set_gemm_shapes(*shapes);
    run_op(op);
    if (shapes) clear_gemm_shapes_override();
  }

  void run_op(const std::string& op) {
    const QTensor* wp = &w;
    if (op == "fwd") {
      make_copies(x->data(), M, K, r.role(Role::input), a_fwd,
                  copies_needed(r, Role::input, Use::forward));
      grouped_forward(r, one, &a_fwd, &wp, out.data(), N);
    } else if (op == "dgrad") {
      make_copies(dy->data(), M, N, r.role(Role::grad), a_dgrad,
                  copies_needed(r, Role::grad, Use::dgrad));
      grouped_dgrad(r, one, &a_dgrad, &wp, out.data(), K);
    } else {
      make_copies(dy->data(), M, N, r.role(Role::grad), a_wgrad,
                  copies_needed(r, Role::grad, Use::wgrad));
      float* dw = out.data();
      grouped_wgrad(r, one, &a_wgrad, &x_saved, &dw, true);
    }
  }
};

int run_bench_gemm(const BenchGemmOptions& o) {
  for (const std::string& op : o.ops)
    MXT_CHECK(op == "fwd" || op == "dgrad" || op == "wgrad", "--ops: unknown op '", op,
              "'; valid: fwd, dgrad, wgrad");
  std::vector<Recipe> recipes{Recipe{}};  // the bf16 baseline is always measured
  std::vector<std::string> labels{"bf16"};
  for (const std::string& n : o.recipes)
    if (n != "bf16") {
      recipes.push_back(get_recipe(n));
      check_products_built(recipes.back());
      labels.push_back(n);
      // --fp32-scales: the same recipe again with its FP32 scales kept unrounded.
      if (o.fp32_scales && recipes.back().quantized() &&
          recipes.back().role(Role::input).scale == ScaleType::fp32_pow2) {
        Recipe f = recipes.back();
        set_fp32_scales(f);
        recipes.push_back(f);
        labels.push_back(n + "+fp32");
      }
    }
  const bool show_bf16 = std::find(o.recipes.begin(), o.recipes.end(), "bf16") != o.recipes.end();
  // The BF16 product again under the shaping a dense product does not get.
  std::optional<GemmShapes> other_shapes;
  for (const std::string& s : o.bf16_shapes) {
    const std::optional<GemmShapes> g = gemm_shapes_from_name(s);
    MXT_CHECK(g, "--bf16-shapes: unknown shaping '", s, "'; valid: exact, runtime");
    if (*g != gemm_shapes()) other_shapes = g;
  }
  if (other_shapes) {
    recipes.push_back(Recipe{});
    labels.push_back(std::string("bf16@") + gemm_shapes_name(*other_shapes));
  }
  const ReferencePeak peak = reference_peak(o.peak_gflops);
  const std::vector<float> w = randn(o.n * o.k, 1, 0.02f);
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf("gemm path: %s; peak %s\n%-15s %-6s %6s %6s %6s %10s %10s %8s %9s %7s\n",
                path_name(gemm_mx_path()), peak.describe().c_str(), "recipe", "op", "m", "k",
                "n", "ms", "bf16_ms", "vs_bf16", "GFLOP/s", "%peak");
  for (int64_t M : o.m) {
    const std::vector<float> x = randn(M * o.k, 2, 1.f), dy = randn(M * o.n, 3, 1e-3f);
    std::vector<std::unique_ptr<Case>> cases;
    for (const Recipe& rc : recipes)
      cases.push_back(std::make_unique<Case>(rc, M, o.k, o.n, w, x, dy));
    if (other_shapes) cases.back()->shapes = other_shapes;
    std::map<std::pair<size_t, std::string>, std::vector<double>> times;
    for (int it = 0; it < o.warmup + o.iters; ++it)
      for (const std::string& op : o.ops)
        for (size_t c = 0; c < cases.size(); ++c) {
          if (o.cold) cases[c]->flush();
          const double t0 = now_ms();
          cases[c]->run(op);
          if (it >= o.warmup) times[{c, op}].push_back(now_ms() - t0);
        }
    for (const std::string& op : o.ops)
      for (size_t c = show_bf16 ? 0 : 1; c < cases.size(); ++c) {
        const double ms = median_of(times[{c, op}]), base = median_of(times[{0, op}]);
        const double gflops = 2.0 * double(M) * double(o.k) * double(o.n) / (ms * 1e6);
        const GemmShapes shaping = cases[c]->shapes.value_or(gemm_shapes());
        const std::string name = cases[c]->shapes ? labels[c] : recipes[c].name;
        nlohmann::json row = {{"recipe", name}, {"op", op},  {"m", M},
                              {"bf16_shapes", gemm_shapes_name(shaping)},
                              {"scales", recipes[c].quantized()
                                             ? scale_type_name(recipes[c].role(Role::input).scale)
                                             : "none"},
                              {"k", o.k},                  {"n", o.n},   {"ms", ms},
                              {"bf16_ms", base},           {"vs_bf16", ms / base},
                              {"gemm_path", path_name(gemm_mx_path())}, {"iters", o.iters},
                              {"gflops", gflops}, {"pct_of_peak", 100 * gflops / peak.gflops},
                              {"cold", o.cold}};
        if (recipes[c].quantized())
          row["stream_rows"] = stream_rows(recipes[c].role(Role::input).is_4bit(),
                                           block_is_2d(recipes[c].role(Role::weight).block));
        add_peak_fields(row, peak);
        if (o.json)
          rows.push_back(row);
        else
          std::printf("%-15s %-6s %6lld %6lld %6lld %10.3f %10.3f %7.2fx %9.1f %6.1f%%\n",
                      labels[c].c_str(), op.c_str(), (long long)M, (long long)o.k,
                      (long long)o.n, ms, base, ms / base, gflops, 100 * gflops / peak.gflops);
      }
  }
  if (o.json) std::cout << rows.dump(1) << std::endl;
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("bench gemm", [](CLI::App& app) {
  auto opts = std::make_shared<BenchGemmOptions>();
  CLI::App* sub = mxtrain::cli::group(app, "bench", "Benchmarks")->add_subcommand(
      "gemm",
      "Time a Linear's products (fwd, dgrad, wgrad) per recipe for x [m, k] and W [n, k], the "
      "weight already converted/quantized and the activation's conversion/quantization timed, "
      "against BF16 in the same run, and as a percentage of the machine's peak. JSON rows: "
      "recipe, op, m, k, n, ms (median), bf16_ms, vs_bf16, gemm_path, iters, gflops (2mkn / "
      "ms), pct_of_peak, peak_gflops, peak_source (measured | given), peak_kind and "
      "peak_threads when measured, bf16_shapes (oneDNN's shaping of BF16 products: exact | "
      "runtime), scales (the input role's scale type: none, e8m0, fp32_pow2, "
      "fp32), stream_rows (quantized recipes: the rows up to which forwards stream W on this "
      "path; MXTRAIN_STREAM_ROWS), cold (--cold)");
  sub->add_flag("--json", opts->json, "Print one JSON array instead of a table");
  sub->add_option("--m", opts->m, "Token counts (rows of x) to sweep (default 4)")
      ->delimiter(',')
      ->check(whole_number(1));
  sub->add_option("--k", opts->k, "Input features (default 4096)")->check(whole_number(1));
  sub->add_option("--n", opts->n, "Output features (default 4096)")->check(whole_number(1));
  sub->add_option("--warmup", opts->warmup, "Untimed rounds first (default 2)")
      ->check(whole_number(0));
  sub->add_option("--iters", opts->iters, "Timed rounds; the median is reported (default 9)")
      ->check(whole_number(1));
  sub->add_option("--recipes", opts->recipes, "Recipes (default bf16,mxfp8,mxfp8-32x32)")
      ->delimiter(',');
  sub->add_option("--ops", opts->ops, "Products to time (default fwd,dgrad,wgrad)")
      ->delimiter(',');
  sub->add_flag("--fp32-scales", opts->fp32_scales,
                "Also time every recipe with power-of-two FP32 scales (blockwise) with its "
                "scales kept unrounded (fp32_scales: true), as recipe '<name>+fp32' (JSON: the "
                "recipe's name and scales \"fp32\")");
  sub->add_option("--bf16-shapes", opts->bf16_shapes,
                  "exact,runtime: also time the BF16 product under the oneDNN primitive shaping "
                  "a dense product does not get (exact by default; see MXTRAIN_GEMM_SHAPES), "
                  "as recipe 'bf16@<shaping>' (default: the dense shaping only)")
      ->delimiter(',');
  sub->add_flag("--cold", opts->cold,
                "Flush every operand from the caches before each timed product, so that the "
                "weight is read from memory as a model larger than the last-level cache reads it "
                "(default: warm, the weight cached by the previous round where it fits)");
  add_peak_option(sub, opts->peak_gflops);
  sub->callback([opts] { exit_code() = run_bench_gemm(*opts); });
});

}  // namespace mxtrain::cli
