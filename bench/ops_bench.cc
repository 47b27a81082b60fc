// bench/ops_bench.cc — the element-wise kernels of nn/ops.h (AdamW among them), serial against
// parallel.
//
// Each benchmark runs one op's kernel (scalar reference or AVX-512, nn/ops_kernels.h) over the
// whole [N, W] operand, alternately on the calling thread and split over a parallel region of
// 2 threads the way ops.cc splits it, so the pair shows when a region saves more than it costs.
// The thresholds kPar* in ops.cc were chosen from these figures (docs/results/trainer.md,
// "Elementwise kernels").
//   ./build/ops_bench --benchmark_filter='swiglu_fwd/isa:1/' --benchmark_min_time=0.3
// args: isa (0 scalar, 1 avx512), N, W.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/isa.h"
#include "nn/ops_kernels.h"

namespace mxtrain {
namespace {

std::vector<float> randv(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Part t of T of [0, n), bounds multiples of grain (as in ops.cc).
std::pair<int64_t, int64_t> share(int64_t n, int64_t grain, int64_t T, int64_t t) {
  const int64_t units = (n + grain - 1) / grain;
  return {std::min(n, units * t / T * grain), std::min(n, units * (t + 1) / T * grain)};
}

using Body = std::function<void(int64_t T, int64_t t)>;

// Builds the op's buffers for (N, W) and returns its body.
using Make = Body (*)(const opk::Kernels& k, bool avx512, int64_t N, int64_t W);

struct Buffers {
  std::vector<float> a, b, c, d, e;
  std::vector<int32_t> tok;
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

// Wall time of one call of body on 1 thread (no region) or in a region of `threads`, in us.
double time_call(const Body& body, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    body(omp_get_num_threads(), omp_get_thread_num());
  } else {
    body(1, 0);
  }
  benchmark::ClobberMemory();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double pct(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}

// Each iteration times one serial call and one call in a region of 2 threads, alternately, so
// load changes on a shared machine hit both alike. Counters, in us: the 10th percentile (the
// op on idle cores) and the median (what it met) of each; a region of 2 threads sometimes
// waits a scheduler time slice for its second thread.
void run_op(benchmark::State& state, Make make) {
  const bool avx512 = state.range(0) == 1;
  const int64_t N = state.range(1), W = state.range(2);
  if (avx512 && !isa_supported(Isa::avx512)) {
    state.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  const opk::Kernels& k = avx512 ? opk::kernels_avx512() : opk::kernels_ref();
  const Body body = make(k, avx512, N, W);
  std::vector<double> serial, par;
  for (auto _ : state) {
    serial.push_back(time_call(body, 1));
    par.push_back(time_call(body, 2));
  }
  state.SetItemsProcessed(state.iterations() * N * W * 2);
  state.counters["1t_p10"] = pct(serial, 0.1);
  state.counters["1t_med"] = pct(serial, 0.5);
  state.counters["2t_p10"] = pct(par, 0.1);
  state.counters["2t_med"] = pct(par, 0.5);
}

// A parallel region of 2 threads with no work: the fixed cost a threshold must beat.
void BM_empty_region(benchmark::State& state) {
  const Body nothing = [](int64_t, int64_t) {};
  std::vector<double> us;
  for (auto _ : state) us.push_back(time_call(nothing, 2));
  state.counters["2t_p10"] = pct(us, 0.1);
  state.counters["2t_med"] = pct(us, 0.5);
}
BENCHMARK(BM_empty_region)->UseRealTime();

Body make_rms_fwd(const opk::Kernels& k, bool, int64_t N, int64_t D) {
  Buffers& B = buffers();
  B.a = randv(N * D, 1), B.b = randv(D, 2), B.c.assign(N * D, 0.f), B.d.assign(N, 0.f);
  return [&k, &B, N, D](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.rms_fwd(B.c.data(), B.d.data(), B.a.data(), B.b.data(), D, 1e-5f, n0, n1);
  };
}

Body make_rms_bwd(const opk::Kernels& k, bool, int64_t N, int64_t D) {
  Buffers& B = buffers();
  B.a = randv(N * D, 1), B.b = randv(D, 2), B.c.assign(N * D, 0.f), B.d = randv(N, 3, 0.5f, 2.f);
  B.e = randv(N * D, 4);
  static std::vector<float> dgain;
  dgain.assign(D, 0.f);
  return [&k, &B, N, D](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1)
      k.rms_bwd_dx(B.c.data(), B.e.data(), B.a.data(), B.b.data(), B.d.data(), D, n0, n1,
                   false);
    const auto [d0, d1] = share(D, 16, T, t);
    if (d0 < d1)
      k.rms_bwd_dgain(dgain.data(), B.e.data(), B.a.data(), B.d.data(), N, D, d0, d1, false);
  };
}

Body make_swiglu_fwd(const opk::Kernels& k, bool, int64_t N, int64_t F) {
  Buffers& B = buffers();
  B.a = randv(N * 2 * F, 1, -6.f, 6.f), B.c.assign(N * F, 0.f);
  return [&k, &B, N, F](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.swiglu_fwd(B.c.data(), B.a.data(), F, n0, n1);
  };
}

Body make_swiglu_bwd(const opk::Kernels& k, bool, int64_t N, int64_t F) {
  Buffers& B = buffers();
  B.a = randv(N * 2 * F, 1, -6.f, 6.f), B.b = randv(N * F, 2), B.c.assign(N * 2 * F, 0.f);
  return [&k, &B, N, F](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.swiglu_bwd(B.c.data(), B.b.data(), B.a.data(), F, n0, n1, true);  // as the model
  };
}

Body make_ce_fwd(const opk::Kernels& k, bool, int64_t N, int64_t V) {
  Buffers& B = buffers();
  B.a = randv(N * V, 1, -5.f, 5.f), B.c.assign(N * V, 0.f), B.d.assign(N, 0.f);
  B.tok.resize(N);
  for (int64_t n = 0; n < N; ++n) B.tok[n] = int32_t((n * 31) % V);
  return [&k, &B, N, V](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.ce_fwd(B.c.data(), B.d.data(), B.a.data(), B.tok.data(), V, n0, n1);
  };
}

Body make_ce_bwd(const opk::Kernels& k, bool, int64_t N, int64_t V) {
  Buffers& B = buffers();
  B.a = randv(N * V, 1, 0.f, 0.01f), B.c.assign(N * V, 0.f);
  B.tok.resize(N);
  for (int64_t n = 0; n < N; ++n) B.tok[n] = int32_t((n * 31) % V);
  return [&k, &B, N, V](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.ce_bwd(B.c.data(), B.a.data(), B.tok.data(), V, 1e-3f, n0, n1);
  };
}

Body make_embed_fwd(const opk::Kernels& k, bool, int64_t N, int64_t D) {
  Buffers& B = buffers();
  B.a = randv(256 * D, 1), B.c.assign(N * D, 0.f);
  B.tok.resize(N);
  for (int64_t n = 0; n < N; ++n) B.tok[n] = int32_t((n * 31) % 256);
  return [&k, &B, N, D](int64_t T, int64_t t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.embed_fwd(B.c.data(), B.tok.data(), B.a.data(), D, n0, n1);
  };
}

Body make_embed_bwd(const opk::Kernels& k, bool, int64_t N, int64_t D) {
  Buffers& B = buffers();
  B.a = randv(N * D, 1), B.c.assign(256 * D, 0.f);
  B.tok.resize(N);
  for (int64_t n = 0; n < N; ++n) B.tok[n] = int32_t((n * 31) % 256);
  return [&k, &B, N, D](int64_t T, int64_t t) {
    const auto [d0, d1] = share(D, 16, T, t);
    if (d0 < d1) k.embed_bwd(B.c.data(), B.a.data(), B.tok.data(), N, D, d0, d1);
  };
}

Body make_residual(const opk::Kernels& k, bool, int64_t N, int64_t D) {
  Buffers& B = buffers();
  B.a = randv(N * D, 1), B.b = randv(N * D, 2), B.c.assign(N * D, 0.f);
  return [&k, &B, n = N * D](int64_t T, int64_t t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1) k.add(B.c.data(), B.a.data(), B.b.data(), i0, i1);
  };
}

// AdamW over N*W elements (W = 1: N is the parameter size).
Body make_adamw(const opk::Kernels& k, bool, int64_t N, int64_t W) {
  Buffers& B = buffers();
  const int64_t n = N * W;
  B.a = randv(n, 1), B.b = randv(n, 2), B.c.assign(n, 0.f), B.d.assign(n, 0.f);
  static AdamWStep s{0.9f, 0.95f, 0.1f, 0.05f, 1e-3f, 1.2f, 1e-8f, 1e-4f};
  return [&k, &B, n](int64_t T, int64_t t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1) k.adamw(B.a.data(), B.b.data(), B.c.data(), B.d.data(), s, i0, i1);
  };
}

void rows_args(benchmark::internal::Benchmark* b, std::vector<int64_t> widths) {
  for (int64_t isa : {0, 1})
    for (int64_t N : {64, 256, 1024, 2048, 4096})
      for (int64_t W : widths) b->Args({isa, N, W});
  b->ArgNames({"isa", "N", "W"})->UseRealTime();
}

#define MXT_OP_BENCH(name, widths)                                                  \
  void BM_##name(benchmark::State& s) { run_op(s, make_##name); }                   \
  BENCHMARK(BM_##name)->Apply([](benchmark::internal::Benchmark* b) { rows_args(b, widths); })

MXT_OP_BENCH(rms_fwd, (std::vector<int64_t>{256, 512}));
MXT_OP_BENCH(rms_bwd, (std::vector<int64_t>{256, 512}));
MXT_OP_BENCH(swiglu_fwd, (std::vector<int64_t>{672, 1344}));
MXT_OP_BENCH(swiglu_bwd, (std::vector<int64_t>{672, 1344}));
MXT_OP_BENCH(ce_fwd, (std::vector<int64_t>{256}));
MXT_OP_BENCH(ce_bwd, (std::vector<int64_t>{256}));
MXT_OP_BENCH(embed_fwd, (std::vector<int64_t>{256, 512}));
MXT_OP_BENCH(embed_bwd, (std::vector<int64_t>{256, 512}));
MXT_OP_BENCH(residual, (std::vector<int64_t>{256, 512}));
MXT_OP_BENCH(adamw, (std::vector<int64_t>{256}));

}  // namespace
}  // namespace mxtrain
