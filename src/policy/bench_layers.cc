// policy/bench_layers.cc — plan and drive the adaptive-FP8 layer benchmark
// (policy/bench_layers.h): per-rank shapes from TP/EP/ETP, the token sweep, Zipf expert
// splits, and the loop that asks a timer for BF16 and FP8 at every point and builds the
// report. The timer itself (real layers) lives with the CLI.
#include "mxtrain/policy/bench_layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <tuple>

#include "mxtrain/common.h"
#include "mxtrain/recipe.h"

namespace mxtrain::policy {

std::string BenchCase::label() const {
  std::ostringstream os;
  os << kind << "/" << name;
  if (grouped()) os << " etp=" << etp << " num_gemms=" << num_gemms << " top_k=" << top_k;
  else os << " tp=" << tp;
  os << " [" << in << "->" << out << "]";
  return os.str();
}

namespace {

int64_t divide(int64_t v, int by, const BenchModule& m, const char* what, const char* par) {
  MXT_CHECK(v % by == 0, m.kind, "/", m.name, m.is_expert ? " (experts)" : "", ": ", what, "=",
            v, " is not divisible by ", par, "=", by, "; choose a ", par,
            " that divides it");
  return v / by;
}

}  // namespace

std::vector<BenchCase> plan_bench_cases(const std::vector<BenchModule>& modules,
                                        const ParallelSizes& par) {
  MXT_CHECK(par.tp >= 1 && par.ep >= 1 && par.etp >= 1,
            "bench-layers: tp, ep and etp must be >= 1, got tp=", par.tp, " ep=", par.ep,
            " etp=", par.etp);
  std::vector<BenchCase> cases;
  for (const BenchModule& m : modules) {
    MXT_CHECK(is_dense_kind(m.kind), "bench-layers: module ", m.name, " has kind \"", m.kind,
              "\"; expected one of ", all_kinds_list(), " (experts use their base kind)");
    MXT_CHECK(m.in >= 1 && m.out >= 1, "bench-layers: module ", m.name,
              " has an empty shape in=", m.in, " out=", m.out);
    BenchCase c;
    c.name = m.name;
    c.in = m.in;
    c.out = m.out;
    if (m.is_expert) {
      MXT_CHECK(m.kind != "duplicated", "bench-layers: expert module ", m.name,
                " of kind duplicated has no grouped form");
      MXT_CHECK(m.num_experts >= 1 && m.top_k >= 1 && m.top_k <= m.num_experts,
                "bench-layers: expert module ", m.name, " needs 1 <= top_k <= num_experts, got "
                "top_k=", m.top_k, " num_experts=", m.num_experts);
      const bool row = m.kind == "row";
      c.kind = row ? "row_grouped" : "column_grouped";
      c.etp = par.etp;
      c.num_gemms = int(divide(m.num_experts, par.ep, m, "num_experts", "ep"));
      c.top_k = m.top_k;
      if (row) c.in = divide(m.in, par.etp, m, "in", "etp");
      else c.out = divide(m.out, par.etp, m, "out", "etp");
    } else {
      c.kind = m.kind;
      c.tp = par.tp;
      if (m.kind == "row") c.in = divide(m.in, par.tp, m, "in", "tp");
      else if (m.kind != "duplicated") c.out = divide(m.out, par.tp, m, "out", "tp");
    }
    auto same = [&](const BenchCase& o) {
      return std::tie(o.kind, o.name, o.tp, o.etp, o.num_gemms, o.top_k, o.in, o.out) ==
             std::tie(c.kind, c.name, c.tp, c.etp, c.num_gemms, c.top_k, c.in, c.out);
    };
    auto it = std::find_if(cases.begin(), cases.end(), same);
    if (it != cases.end()) {
      ++it->modules;
      continue;
    }
    c.modules = 1;
    cases.push_back(c);
  }
  return cases;
}

std::vector<int64_t> default_token_sweep(int64_t train_tokens) {
  MXT_CHECK(train_tokens >= 1, "bench-layers: the training token count (seq_len x "
            "micro_batch) must be >= 1 to fit a sweep, got ", train_tokens);
  std::vector<int64_t> sweep;
  for (int k = -4; k <= 2; ++k) {
    const int64_t t = k < 0 ? train_tokens >> -k : train_tokens << k;
    if (t >= 16 && (sweep.empty() || t != sweep.back())) sweep.push_back(t);
  }
  if (sweep.empty()) sweep.push_back(train_tokens);  // train_tokens < 16 ... x4 < 16
  return sweep;
}

std::vector<int64_t> zipf_split(int64_t rows, int64_t groups, double exponent) {
  MXT_CHECK(rows >= 0 && groups >= 1, "zipf_split: need rows >= 0 and groups >= 1, got rows=",
            rows, " groups=", groups);
  MXT_CHECK(std::isfinite(exponent) && exponent >= 0,
            "zipf_split: exponent must be a finite number >= 0, got ", exponent);
  std::vector<double> w(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) w[size_t(g)] = std::pow(double(g + 1), -exponent);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<int64_t> counts(static_cast<size_t>(groups));
  std::vector<double> frac(static_cast<size_t>(groups));
  int64_t assigned = 0;
  for (size_t g = 0; g < w.size(); ++g) {
    const double share = double(rows) * w[g] / total;
    counts[g] = std::min(rows - assigned, int64_t(std::floor(share)));
    frac[g] = share - std::floor(share);
    assigned += counts[g];
  }
  std::vector<size_t> order(w.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t i = 0; assigned < rows; i = (i + 1) % order.size(), ++assigned)
    ++counts[order[i]];
  return counts;
}

Report run_bench_layers(const std::vector<BenchCase>& cases, const BenchLayersOptions& o,
                        const LayerTimer& timer, const BenchProgress& progress) {
  MXT_CHECK(bool(timer), "bench-layers: no timer given");
  MXT_CHECK(o.time_bf16 || o.time_fp8, "bench-layers: nothing to time (no precision chosen)");
  MXT_CHECK(get_recipe(o.recipe).quantized(), "bench-layers: --recipe must be an FP8 recipe, "
            "got ", o.recipe);
  MXT_CHECK(o.warmup >= 0 && o.iters >= 1 && o.micro_batches >= 1,
            "bench-layers: need warmup >= 0, iters >= 1, micro_batches >= 1, got warmup=",
            o.warmup, " iters=", o.iters, " micro_batches=", o.micro_batches);
  std::vector<int64_t> sweep = o.tokens.empty() ? default_token_sweep(o.train_tokens) : o.tokens;
  for (int64_t t : sweep) MXT_CHECK(t >= 1, "bench-layers: token counts must be >= 1, got ", t);
  std::sort(sweep.begin(), sweep.end());
  sweep.erase(std::unique(sweep.begin(), sweep.end()), sweep.end());

  Report r;
  r.machine = current_machine();
  r.recipe = o.recipe;
  r.tp = o.par.tp;
  r.ep = o.par.ep;
  r.etp = o.par.etp;
  r.model = o.model;
  r.warmup = o.warmup;
  r.iters = o.iters;
  std::vector<std::string> recipes;
  if (o.time_bf16) recipes.push_back("bf16");
  if (o.time_fp8) recipes.push_back(o.recipe);
  const size_t total = cases.size() * sweep.size();
  size_t done = 0;
  for (const BenchCase& c : cases) {
    for (int64_t tokens : sweep) {
      TimingRequest req;
      req.c = &c;
      req.recipes = recipes;
      req.rows = c.grouped() ? tokens * c.top_k : tokens;
      if (c.grouped()) req.group_rows = zipf_split(req.rows, c.num_gemms, o.zipf_exponent);
      req.warmup = o.warmup;
      req.iters = o.iters;
      req.micro_batches = o.micro_batches;
      std::vector<std::vector<double>> ms = timer(req);
      MXT_CHECK(ms.size() == recipes.size(), "bench-layers: timer returned ", ms.size(),
                " sample lists for ", recipes.size(), " recipes");
      Point p;
      p.kind = c.kind;
      p.name = c.name;
      p.tp = c.tp;
      p.etp = c.etp;
      p.num_gemms = c.num_gemms;
      p.top_k = c.top_k;
      p.in = c.in;
      p.out = c.out;
      p.tokens = req.rows;
      p.padded_tokens = req.rows;  // MX blocks handle partial rows: nothing is padded
      std::ostringstream what;
      what.precision(4);
      what << c.label() << " tokens=" << req.rows;
      for (size_t i = 0; i < recipes.size(); ++i) {
        MXT_CHECK(ms[i].size() == size_t(o.iters), "bench-layers: timer returned ",
                  ms[i].size(), " samples for ", o.iters, " iterations");
        const Timing t = timing_from_samples(std::move(ms[i]));
        (recipes[i] == "bf16" ? p.bf16 : p.fp8) = t;
        what << " " << recipes[i] << " " << t.ms << " ms";
      }
      if (p.paired()) what << ", speedup " << p.speedup() << " +- " << p.spread();
      r.points.push_back(p);
      if (progress) progress(++done, total, what.str());
    }
  }
  validate_report(r, "bench-layers report");
  return r;
}

}  // namespace mxtrain::policy
