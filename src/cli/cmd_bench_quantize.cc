// cli/cmd_bench_quantize.cc — `mxtrain bench quantize`: quantization throughput.
//
// Two sets of quantizers, each on FP32 and BF16 inputs, timed at 1 and 2 OpenMP threads on
// the active kernel path and on the scalar path:
//   --formats mx (default): the MX rowwise (1x32), dual-axis (rowwise + colwise from one read)
//     and 32x32-tile quantizers, and the blockwise ones (FP32 power-of-two scales:
//     b128_rowwise 1x128, b128_dual, b128_tile 128x128);
//   --formats fp4: the passes of the 4-bit recipes, one by one — the tensor amax
//     (nvfp4_amax), that of the transformed matrix (nvfp4_rht_amax, FP32 input only) and both
//     from one read (nvfp4_amaxes, FP32 only: an input or gradient with both copies), the
//     NVFP4 quantizers with that amax given (rowwise 1x16 in torchao's and TE's order,
//     rowwise with stochastic rounding, colwise with the random Hadamard transform with and
//     without it, 16x16 tiles) and MXFP4's rowwise and colwise (1x32) ones.
// Throughput counts bytes read + bytes written (input, codes and scales); ns_per_elem is the
// time per input element. Each row also carries memcpy_gb_per_s: a memcpy moving the same
// traffic — it copies (read + written) / 2 bytes, i.e. reads and writes that many — timed in
// the same run, alternating with the quantizer, with the same thread count, as the bandwidth
// yardstick. Before every timed run the caches are settled (see CacheSettler), so that
// neither contender pays for the other's dirty lines. Inputs, outputs and the memcpy buffers
// all come from AlignedAllocator (huge-page advice for large blocks, aligned.h), so both
// work on the same kind of memory. Figures use the best of the timed runs (the median is
// reported too). --json prints one JSON array of row objects (name, input, op, elem, scales,
// threads, isa, rows, cols, ms, median_ms, ns_per_elem, median_ns_per_elem, bytes_read,
// bytes_written, gb_per_s, memcpy_gb_per_s, fraction_of_memcpy, cache_settle_bytes (0 with
// --no-settle) and, on fast-path rows, speedup_vs_scalar).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/aligned.h"
#include "mxtrain/common.h"
#include "mxtrain/stats.h"
#include "mxtrain/isa.h"
#include "mxtrain/peak.h"
#include "mxtrain/quantize.h"

namespace {

using namespace mxtrain;

struct BenchQuantOptions {
  bool json = false;
  std::string formats = "mx";
  int64_t rows = 4096, cols = 4096;
  int iters = 10;
  int scalar_iters = 3;
  bool scalar = true;
  bool settle = true;
};

// Brings the caches to the same state before every timed run: it reads, untimed and
// split over the current OpenMP threads, a buffer twice the size of the last-level cache.
// Without it the yardstick biases the comparison: a 32 MiB memcpy leaves up to an L3 of
// dirty destination lines (glibc copies through the cache below its non-temporal
// threshold), and the quantizer that runs next pays for writing them back; the quantizer's
// own large outputs are streamed and leave nothing behind for the copy. After a settle,
// both start with caches full of clean lines that hold none of their data.
class CacheSettler {
 public:
  CacheSettler() : buf_(bytes(), 1) {}
  void settle() const {
    const size_t n = buf_.size();
    uint64_t acc = 0;
#pragma omp parallel reduction(+ : acc)
    {
      const size_t nt = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
      for (size_t i = n * t / nt; i < n * (t + 1) / nt; i += 64) acc += buf_[i];
    }
    sink_ = acc;
  }
  size_t size() const { return buf_.size(); }

 private:
  // 2x the last-level cache (mxtrain/peak.h reads sysfs, which reports the cache a core
  // really shares; some VMs report the host's in sysconf), within [64, 512] MiB.
  static size_t bytes() {
    return std::clamp<size_t>(2 * size_t(last_level_cache_bytes()), size_t(64) << 20,
                              size_t(512) << 20);
  }
  std::vector<uint8_t> buf_;
  mutable volatile uint64_t sink_ = 0;
};

struct Timing {
  double best, median;  // seconds
};

template <class Fn>
double seconds(Fn&& fn) {
  const auto a = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

Timing summarize(const std::vector<double>& t) {
  return {*std::min_element(t.begin(), t.end()), median_of(t)};
}

// Wall-clock times of fn() and of the yardstick copy(), alternating, over `iters` runs
// after one warm-up run of each (page faults, caches, OpenMP team), each timed run after a
// cache settle (when `settler` is given). Alternating exposes both to the same
// disturbances; the best run of each is the figure reported (on a shared machine it is the
// least disturbed one), the median is kept beside it.
template <class Fn, class Copy>
std::pair<Timing, Timing> time_pair(int iters, const CacheSettler* settler, Fn&& fn,
                                    Copy&& copy) {
  fn();
  copy();
  std::vector<double> tf, tc;
  for (int i = 0; i < iters; ++i) {
    if (settler) settler->settle();
    tc.push_back(seconds(copy));
    if (settler) settler->settle();
    tf.push_back(seconds(fn));
  }
  return {summarize(tf), summarize(tc)};
}

// memcpy of n bytes split evenly over the current OpenMP threads.
void parallel_memcpy(uint8_t* dst, const uint8_t* src, size_t n) {
#pragma omp parallel
  {
    const size_t nt = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
    std::memcpy(dst + lo, src + lo, hi - lo);
  }
}

struct Inputs {
  std::vector<float, AlignedAllocator<float>> f32;
  std::vector<uint16_t, AlignedAllocator<uint16_t>> bf16;
};

// One quantizer the bench times: its op name, the format of what it writes and how many bytes,
// and the call on each input (an empty one: that input is not timed). observe() reads a byte
// of its outputs, so that the work cannot be optimised away.
struct QuantOp {
  std::string op;
  const char* elem;
  const char* scales;
  size_t written;
  std::function<void()> f32, bf16;
  std::function<uint8_t()> observe;
};

uint8_t first_byte(const ScaledTensor& t) { return t.data.empty() ? 0 : t.data[0]; }

// The MX and blockwise quantizers (E4M3 codes; E8M0 rceil and FP32 power-of-two scales).
std::vector<QuantOp> mx_ops(const Inputs& in, int64_t M, int64_t K) {
  const QuantConfig cfg;       // E4M3, rceil
  const BlockQuantConfig bcfg;  // E4M3, fp32_pow2, epsilon 0 (the blockwise recipe's)
  const float* x = in.f32.data();
  const uint16_t* xb = in.bf16.data();
  auto row = std::make_shared<ScaledTensor>(ScaledTensor::empty(M, K, MXLayout::rowwise, cfg.elem));
  auto col = std::make_shared<ScaledTensor>(ScaledTensor::empty(M, K, MXLayout::colwise, cfg.elem));
  auto tile = std::make_shared<ScaledTensor>(ScaledTensor::empty(M, K, MXLayout::tile, cfg.elem));
  auto brow = std::make_shared<ScaledTensor>(quantize_blocks(x, M, K, MXLayout::rowwise, bcfg));
  auto bcol = std::make_shared<ScaledTensor>(quantize_blocks(x, M, K, MXLayout::colwise, bcfg));
  auto btile = std::make_shared<ScaledTensor>(quantize_blocks(x, M, K, MXLayout::tile, bcfg));
  const auto one = [](const std::shared_ptr<ScaledTensor>& t) {
    return [t] { return first_byte(*t); };
  };
  std::vector<QuantOp> ops;
  ops.push_back({"rowwise", "e4m3", "e8m0", row->bytes(),
                 [=] { quantize_into(x, M, K, cfg, *row); },
                 [=] { quantize_into(xb, M, K, cfg, *row); }, one(row)});
  ops.push_back({"dual", "e4m3", "e8m0", row->bytes() + col->bytes(),
                 [=] { quantize_dual(x, M, K, cfg, *row, *col); },
                 [=] { quantize_dual(xb, M, K, cfg, *row, *col); }, one(col)});
  ops.push_back({"tile32", "e4m3", "e8m0", tile->bytes(),
                 [=] { quantize_into(x, M, K, cfg, *tile); },
                 [=] { quantize_into(xb, M, K, cfg, *tile); }, one(tile)});
  ops.push_back({"b128_rowwise", "e4m3", "fp32_pow2", brow->bytes(),
                 [=] { quantize_blocks_into(x, M, K, MXLayout::rowwise, bcfg, *brow); },
                 [=] { quantize_blocks_into(xb, M, K, MXLayout::rowwise, bcfg, *brow); },
                 one(brow)});
  ops.push_back({"b128_dual", "e4m3", "fp32_pow2", brow->bytes() + bcol->bytes(),
                 [=] { quantize_blocks_dual(x, M, K, bcfg, *brow, *bcol); },
                 [=] { quantize_blocks_dual(xb, M, K, bcfg, *brow, *bcol); }, one(bcol)});
  ops.push_back({"b128_tile", "e4m3", "fp32_pow2", btile->bytes(),
                 [=] { quantize_blocks_into(x, M, K, MXLayout::tile, bcfg, *btile); },
                 [=] { quantize_blocks_into(xb, M, K, MXLayout::tile, bcfg, *btile); },
                 one(btile)});
  return ops;
}

// The 4-bit recipes' passes: the two tensor amaxes, then each quantizer with its amax given
// (what quantize_fp4 takes from the layers, which agree it over ranks), so each row is one
// pass over x. Stochastic rounding draws with a fixed key.
std::vector<QuantOp> fp4_ops(const Inputs& in, int64_t M, int64_t K) {
  const float* x = in.f32.data();
  const uint16_t* xb = in.bf16.data();
  const float amax = fp4_amax(x, M * K), amax_b = fp4_amax(xb, M * K);
  const float rht_amax = fp4_rht_amax(x, M, K);
  std::vector<QuantOp> ops;
  auto sink = std::make_shared<float>(0.f);
  ops.push_back({"nvfp4_amax", "none", "none", 0,
                 [=] { *sink = fp4_amax(x, M * K); }, [=] { *sink = fp4_amax(xb, M * K); },
                 [=] { return uint8_t(*sink != 0.f); }});
  ops.push_back({"nvfp4_rht_amax", "none", "none", 0,
                 [=] { *sink = fp4_rht_amax(x, M, K); }, nullptr,
                 [=] { return uint8_t(*sink != 0.f); }});
  ops.push_back({"nvfp4_amaxes", "none", "none", 0,
                 [=] { *sink = fp4_amaxes(x, M, K).plain; }, nullptr,
                 [=] { return uint8_t(*sink != 0.f); }});
  struct Case {
    const char* op;
    MXLayout layout;
    Fp4Config cfg;
  };
  Fp4Config nv, nv_sr, nv_te, nv_rht, nv_rht_sr, mx;
  nv_sr.stochastic = nv_rht_sr.stochastic = true;
  nv_sr.sr = nv_rht_sr.sr = {1234, 1, 7};
  nv_te.order = Nvfp4Order::te;
  nv_rht.rht = nv_rht_sr.rht = true;
  mx.kind = Fp4Kind::mxfp4;
  for (const Case& c : {Case{"nvfp4_rowwise", MXLayout::rowwise, nv},
                        Case{"nvfp4_rowwise_te", MXLayout::rowwise, nv_te},
                        Case{"nvfp4_rowwise_sr", MXLayout::rowwise, nv_sr},
                        Case{"nvfp4_colwise_rht", MXLayout::colwise, nv_rht},
                        Case{"nvfp4_colwise_rht_sr", MXLayout::colwise, nv_rht_sr},
                        Case{"nvfp4_tile16", MXLayout::tile, nv},
                        Case{"mxfp4_rowwise", MXLayout::rowwise, mx},
                        Case{"mxfp4_colwise", MXLayout::colwise, mx}}) {
    const bool nvfp4 = c.cfg.kind == Fp4Kind::nvfp4;
    // The transformed copies' tensor amax is T x's; BF16 input takes the one quantize_fp4
    // computes for it.
    const std::optional<float> a = !nvfp4 ? std::optional<float>() : c.cfg.rht ? rht_amax : amax;
    std::optional<float> ab = !nvfp4 ? std::optional<float>() : amax_b;
    auto out = std::make_shared<ScaledTensor>();
    if (c.cfg.rht) ab = quantize_fp4(xb, M, K, c.layout, c.cfg, *out);
    quantize_fp4(x, M, K, c.layout, c.cfg, *out, a);
    const Case cc = c;
    ops.push_back({c.op, "e2m1", nvfp4 ? "e4m3+fp32" : "e8m0", out->bytes(),
                   [=] { quantize_fp4(x, M, K, cc.layout, cc.cfg, *out, a); },
                   [=] { quantize_fp4(xb, M, K, cc.layout, cc.cfg, *out, ab); },
                   [=] { return first_byte(*out); }});
  }
  return ops;
}

int run_bench_quantize(const BenchQuantOptions& o) {
  MXT_CHECK(o.rows > 0 && o.cols > 0 && o.iters > 0 && o.scalar_iters > 0,
            "bench quantize: --rows, --cols, --iters and --scalar-iters must be positive");
  const int64_t M = o.rows, K = o.cols;
  Inputs in;
  in.f32.resize(size_t(M * K));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : in.f32) v = normal(rng);
  in.bf16.resize(in.f32.size());
  f32_to_bf16_array(in.f32.data(), in.bf16.data(), M * K);

  const std::vector<QuantOp> ops = o.formats == "fp4" ? fp4_ops(in, M, K) : mx_ops(in, M, K);
  const Isa fast = active_isa();
  std::vector<Isa> isas = {fast};
  if (o.scalar && fast != Isa::scalar) isas.push_back(Isa::scalar);

  std::unique_ptr<CacheSettler> settler;
  if (o.settle) settler = std::make_unique<CacheSettler>();
  const int saved_threads = omp_get_max_threads();
  nlohmann::json rows = nlohmann::json::array();
  ByteBuffer msrc, mdst;
  for (const char* input : {"f32", "bf16"}) {
    const bool is_f32 = std::string(input) == "f32";
    const size_t in_bytes = size_t(M * K) * (is_f32 ? 4 : 2);
    for (const QuantOp& q : ops) {
      const std::function<void()>& run = is_f32 ? q.f32 : q.bf16;
      if (!run) continue;
      const size_t traffic = in_bytes + q.written;
      const size_t copy_n = traffic / 2;
      msrc.assign(copy_n, 1);
      mdst.assign(copy_n, 0);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        auto copy = [&] { parallel_memcpy(mdst.data(), msrc.data(), copy_n); };
        double fast_seconds = 0;
        for (Isa isa : isas) {
          set_isa(isa);
          const auto [tm, t_copy] =
              time_pair(isa == Isa::scalar ? o.scalar_iters : o.iters, settler.get(), run, copy);
          clear_isa_override();
          const double memcpy_gbs = double(2 * copy_n) / t_copy.best / 1e9;
          const double t = tm.best;
          const double gbs = double(traffic) / t / 1e9;
          nlohmann::json r = {{"name", "quantize_" + q.op + "_" + input},
                              {"input", input},
                              {"op", q.op},
                              {"elem", q.elem},
                              {"scales", q.scales},
                              {"threads", threads},
                              {"isa", isa_name(isa)},
                              {"rows", M},
                              {"cols", K},
                              {"ms", t * 1e3},
                              {"median_ms", tm.median * 1e3},
                              {"ns_per_elem", t * 1e9 / double(M * K)},
                              {"median_ns_per_elem", tm.median * 1e9 / double(M * K)},
                              {"bytes_read", in_bytes},
                              {"bytes_written", q.written},
                              {"gb_per_s", gbs},
                              {"memcpy_gb_per_s", memcpy_gbs},
                              {"fraction_of_memcpy", gbs / memcpy_gbs},
                              {"cache_settle_bytes", settler ? settler->size() : 0}};
          if (isa == fast) fast_seconds = t;
          else if (!rows.empty()) rows.back()["speedup_vs_scalar"] = t / fast_seconds;
          rows.push_back(r);
        }
      }
    }
  }
  omp_set_num_threads(saved_threads);
  // Keep the results observable so the work cannot be optimised away.
  volatile uint8_t sink = mdst.empty() ? 0 : mdst[0];
  for (const QuantOp& q : ops) sink = sink ^ q.observe();

  if (o.json) {
    std::cout << rows.dump(1) << std::endl;
    return 0;
  }
  if (o.formats == "fp4")
    std::printf("quantize %lldx%lld, E2M1 (NVFP4: E4M3 scales per 16, FP32 tensor scale, the "
                "tensor amax given; MXFP4: E8M0 rceil per 32); GB/s = (bytes read + written) / "
                "best time\n",
                (long long)M, (long long)K);
  else
    std::printf("quantize %lldx%lld, E4M3 (MX: E8M0 rceil; b128: blockwise, FP32 pow2 scales); "
                "GB/s = (bytes read + written) / best time\n",
                (long long)M, (long long)K);
  std::printf("%-34s %7s %-10s %9s %9s %11s %9s %9s\n", "name", "threads", "isa", "ms", "GB/s",
              "memcpyGB/s", "of memcpy", "vs scalar");
  for (const auto& r : rows) {
    char speed[32] = "";
    if (r.contains("speedup_vs_scalar"))
      std::snprintf(speed, sizeof speed, "%.1fx", r["speedup_vs_scalar"].get<double>());
    std::printf("%-34s %7d %-10s %9.3f %9.2f %11.2f %8.0f%% %9s\n",
                r["name"].get<std::string>().c_str(), r["threads"].get<int>(),
                r["isa"].get<std::string>().c_str(), r["ms"].get<double>(),
                r["gb_per_s"].get<double>(), r["memcpy_gb_per_s"].get<double>(),
                100 * r["fraction_of_memcpy"].get<double>(), speed);
  }
  return 0;
}


}  // namespace

MXT_REGISTER_COMMAND("bench quantize", [](CLI::App& app) {
  auto opts = std::make_shared<BenchQuantOptions>();
  CLI::App* sub = mxtrain::cli::group(app, "bench", "Benchmarks")->add_subcommand(
      "quantize",
      "Quantization throughput (MX rowwise, dual-axis, 32x32; blockwise 1x128, dual-axis, "
      "128x128; or with --formats fp4 the 4-bit passes; FP32 and BF16 inputs; 1 and 2 threads) "
      "against a same-run memcpy of equal traffic and against the scalar path");
  sub->add_flag("--json", opts->json, "Print one JSON array of rows instead of a table");
  sub->add_option("--formats", opts->formats,
                  "mx: the MX and blockwise quantizers (default); fp4: the 4-bit recipes' passes "
                  "(tensor amaxes, NVFP4 and MXFP4 quantizers)")
      ->check(CLI::IsMember({"mx", "fp4"}));
  sub->add_option("--rows", opts->rows, "Rows M of the input X[M,K] (default 4096)")
      ->check(mxtrain::cli::whole_number(1));
  sub->add_option("--cols", opts->cols, "Columns K of the input X[M,K] (default 4096)")
      ->check(mxtrain::cli::whole_number(1));
  sub->add_option("--iters", opts->iters, "Timed iterations; the best is reported (default 10)")
      ->check(mxtrain::cli::whole_number(1));
  sub->add_option("--scalar-iters", opts->scalar_iters,
                  "Timed iterations of the (slow) scalar path (default 3)")
      ->check(mxtrain::cli::whole_number(1));
  sub->add_flag("!--no-scalar", opts->scalar, "Skip the scalar-path comparison rows");
  sub->add_flag("!--no-settle", opts->settle,
                "Do not settle the caches (read 2x the L3, untimed) before each timed run");
  sub->callback([opts] { mxtrain::cli::exit_code() = run_bench_quantize(*opts); });
});
