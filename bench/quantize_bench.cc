// bench/quantize_bench.cc — Google Benchmark micro-benchmarks of MX quantization.
//
// Every layout (rowwise, colwise, dual-axis, 32x32) from FP32 input, on each ISA path the CPU
// supports, at the awkward shapes the tests use plus one out-of-cache shape. Bytes processed
// count input read + data and scales written, as `mxtrain bench quantize` does; that command
// adds the same-run memcpy comparison and JSON output the docs use.
//   ./build/quantize_bench --benchmark_filter=dual
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

std::vector<float> random_input(int64_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// args: rows, cols, layout (0 row, 1 col, 2 dual, 3 tile32), isa
void BM_Quantize(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1);
  const int layout = int(state.range(2));
  const Isa isa = Isa(state.range(3));
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  set_isa(isa);
  const std::vector<float> x = random_input(M * K);
  const QuantConfig cfg;
  ScaledTensor a = ScaledTensor::empty(M, K,
                                       layout == 1   ? MXLayout::colwise
                                       : layout == 3 ? MXLayout::tile
                                                     : MXLayout::rowwise,
                                       cfg.elem);
  ScaledTensor b = ScaledTensor::empty(M, K, MXLayout::colwise, cfg.elem);
  for (auto _ : state) {
    if (layout == 2) quantize_dual(x.data(), M, K, cfg, a, b);
    else quantize_into(x.data(), M, K, cfg, a);
    benchmark::DoNotOptimize(a.data.data());
    benchmark::ClobberMemory();
  }
  const int64_t written = layout == 2 ? int64_t(a.bytes() + b.bytes()) : int64_t(a.bytes());
  state.SetBytesProcessed(state.iterations() * (M * K * int64_t(sizeof(float)) + written));
  state.SetLabel(std::string(isa_name(isa)));
  clear_isa_override();
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {int(Isa::scalar), int(Isa::avx512)})
    for (int layout = 0; layout < 4; ++layout)
      for (auto [m, k] : {std::pair{1, 33}, {33, 65}, {257, 1023}, {4096, 4096}})
        b->Args({m, k, layout, isa});
}
BENCHMARK(BM_Quantize)->Apply(Shapes)->ArgNames({"M", "K", "layout", "isa"})->UseRealTime();

}  // namespace
}  // namespace mxtrain
