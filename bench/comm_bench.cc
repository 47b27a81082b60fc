// bench/comm_bench.cc — what the collective watchdog (dist/comm.h, docs/distributed.md
// "Collective watchdog") costs a blocking collective.
//
// BM_wait_scope: arming and disarming the watchdog around one call (what every blocking call
// and Request::wait() adds to the clock reading it already takes), with the watchdog thread
// running; no MPI.
//   ./build/comm_bench --benchmark_filter=wait_scope --benchmark_repetitions=5
// BM_allreduce: an all-reduce of 2 floats (the size of the trainer's flag and loss
// reductions) and of 16384 floats (64 KiB, a tensor-parallel activation), watched and
// unwatched, alternating round by round in one run:
//   OMP_NUM_THREADS=1 mpirun -np 2 ./build/comm_bench --benchmark_filter=allreduce
// (every rank runs the same fixed number of iterations, so their calls pair up; each rank
// prints its own table). args: round, watched (1) or not (0: set_collective_timeout(0), so no
// call arms the watchdog), floats.
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "dist/watchdog.h"
#include "mxtrain/dist/comm.h"

namespace mxtrain::dist {
namespace {

void BM_allreduce(benchmark::State& state) {
  const bool watched = state.range(1) != 0;
  const size_t n = size_t(state.range(2));
  Comm& w = Comm::world();
  set_collective_timeout(watched ? 600 : 0);
  std::vector<float> buf(n, 1.f);
  w.barrier();
  for (auto _ : state) {
    w.allreduce_sum(buf.data(), n);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["ranks"] = w.size();
  set_collective_timeout(600);
}

void args(benchmark::internal::Benchmark* b) {
  for (int n : {2, 16384})
    for (int round = 0; round < 5; ++round)
      for (int watched : {1, 0}) b->Args({round, watched, n});
}

BENCHMARK(BM_allreduce)->Apply(args)->Iterations(20000)->Unit(benchmark::kMicrosecond);

void BM_wait_scope(benchmark::State& state) {
  watchdog::set_bound(600);
  watchdog::start(0);
  const watchdog::Site site{"allreduce", "tp", 0, 2};
  const auto t0 = std::chrono::steady_clock::now();  // the call's own clock reading
  for (auto _ : state) {
    watchdog::WaitScope w(site, t0);
    benchmark::ClobberMemory();
  }
  watchdog::stop();
}
BENCHMARK(BM_wait_scope);

}  // namespace
}  // namespace mxtrain::dist
