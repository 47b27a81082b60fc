// bench/gemm_bench.cc — Google Benchmark micro-benchmarks of the GEMMs a Linear layer runs.
//
// The forward product y[T,out] = x[T,in] · W[out,in]^T in BF16 (oneDNN) and as an MX GEMM from
// pre-quantized operands (BF16 expansion + the same oneDNN call), so the ratio shows what the
// expansion costs at each size. `mxtrain bench linear` times whole layers (quantization,
// dgrad and wgrad included).
//   ./build/gemm_bench --benchmark_filter=512
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "mxtrain/formats.h"
#include "mxtrain/gemm.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

std::vector<float> random_input(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// args: T, in, out
void BM_GemmBf16(benchmark::State& state) {
  const int64_t T = state.range(0), in = state.range(1), out = state.range(2);
  std::vector<float> xf = random_input(T * in, 1), wf = random_input(out * in, 2);
  std::vector<uint16_t> x(xf.size()), w(wf.size());
  f32_to_bf16_array(xf.data(), x.data(), int64_t(x.size()));
  f32_to_bf16_array(wf.data(), w.data(), int64_t(w.size()));
  std::vector<float> y(T * out);
  for (auto _ : state) {
    gemm_bf16(false, true, T, out, in, x.data(), in, w.data(), in, y.data(), out, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * T * in * out * state.iterations(),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
}

void BM_GemmMx(benchmark::State& state) {
  const int64_t T = state.range(0), in = state.range(1), out = state.range(2);
  const QuantConfig cfg;
  const ScaledTensor x = quantize(random_input(T * in, 1).data(), T, in, MXLayout::rowwise, cfg);
  const ScaledTensor w =
      quantize(random_input(out * in, 2).data(), out, in, MXLayout::rowwise, cfg);
  std::vector<float> y(T * out);
  for (auto _ : state) {
    gemm_mx(false, x, true, w, y.data(), out, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * T * in * out * state.iterations(),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (auto [t, in, out] : {std::tuple{33, 65, 31}, {256, 1024, 1024}, {512, 2048, 2048}})
    b->Args({t, in, out});
}
BENCHMARK(BM_GemmBf16)->Apply(Shapes)->ArgNames({"T", "in", "out"})->UseRealTime();
BENCHMARK(BM_GemmMx)->Apply(Shapes)->ArgNames({"T", "in", "out"})->UseRealTime();

}  // namespace
}  // namespace mxtrain
