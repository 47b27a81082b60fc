// bench/attention_bench.cc — Google Benchmark timings of the causal attention core (nn/ops.h):
// forward and backward separately, B = 8 sequences, H = 4 heads, for each sequence length T
// and head width hd, in three settings (the third argument):
//   0  bf16 through the dispatch (the AVX512-BF16 kernel where the CPU has it)
//   1  bf16 on the portable reference (as MXTRAIN_ISA=scalar)
//   2  fp32 (always the reference; the model's FP32 reference mode)
//   ./build/attention_bench --benchmark_filter='/256/64/0'
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "mxtrain/isa.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {
namespace {

constexpr int64_t kB = 8, kH = 4;

struct Case {
  int64_t T, D;
  AttnPrecision p;
  std::vector<float> qkv, dout, out, lse, dqkv;
  explicit Case(const benchmark::State& state)
      : T(state.range(0)), D(kH * state.range(1)),
        p(state.range(2) == 2 ? AttnPrecision::fp32 : AttnPrecision::bf16) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    qkv.resize(kB * T * 3 * D), dout.resize(kB * T * D);
    for (float& x : qkv) x = u(rng);
    for (float& x : dout) x = u(rng);
    out.resize(kB * T * D), lse.resize(kB * kH * T), dqkv.resize(qkv.size());
    if (state.range(2) == 1) set_isa(Isa::scalar);
  }
  ~Case() { clear_isa_override(); }
  void forward() {
    attention_forward(out.data(), lse.data(), qkv.data(), kB, T, D, kH, p);
  }
  void backward() {
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), kB, T, D,
                       kH, p);
  }
};

// Causal block products: 2 (forward) or 5 (backward) GEMM-shaped products of T²/2 · hd MACs.
void count_flops(benchmark::State& state, const Case& c, double products) {
  const double macs = products * kB * kH * 0.5 * double(c.T) * double(c.T) * double(c.D / kH);
  state.counters["GFLOPS"] = benchmark::Counter(2 * macs * double(state.iterations()),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
}

void BM_AttentionForward(benchmark::State& state) {
  Case c(state);
  for (auto _ : state) {
    c.forward();
    benchmark::DoNotOptimize(c.out.data());
  }
  count_flops(state, c, 2);
}

void BM_AttentionBackward(benchmark::State& state) {
  Case c(state);
  c.forward();
  for (auto _ : state) {
    c.backward();
    benchmark::DoNotOptimize(c.dqkv.data());
  }
  count_flops(state, c, 5);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "hd", "mode"});
  for (int64_t mode : {0, 1, 2}) b->Args({256, 64, mode});
  for (int64_t T : {128, 512, 1024}) b->Args({T, 64, 0});
  b->Args({256, 128, 0});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_AttentionForward)->Apply(shapes);
BENCHMARK(BM_AttentionBackward)->Apply(shapes);

}  // namespace
}  // namespace mxtrain
