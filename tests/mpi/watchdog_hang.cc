// tests/mpi/watchdog_hang.cc — a rank that never joins a collective, for the collective
// watchdog (dist/comm.h, docs/distributed.md "Collective watchdog"); run by watchdog_mpi.sh
// on 2 ranks with a short MXTRAIN_COLLECTIVE_TIMEOUT. The ranks first split the world into a
// communicator named "tp" and check it works; then rank 1 sleeps (MODE never, not in MPI, as a
// stopped or busy rank) or joins after LATE_S seconds (MODE late) while rank 0 makes the call:
//   allreduce        a blocking all-reduce on the tp communicator
//   wait_allgather   a non-blocking all-gather, then Request::wait()
//   wait_rs          the point-to-point reduce-scatter, then Request::wait()
//   barrier          a barrier on the world
// MODE never must end the job (the watchdog), MODE late must end normally with status 0.
// Usage: watchdog_hang CALL never|late [LATE_S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"

using namespace mxtrain::dist;

namespace {

void call(Comm& tp, Comm& world, const std::string& what) {
  if (what == "allreduce") {
    float x = 1.f;
    tp.allreduce_sum(&x, 1);
    MXT_CHECK(x == float(tp.size()), "allreduce gave ", x);
  } else if (what == "wait_allgather") {
    std::vector<char> send(64, char(tp.rank())), recv(64 * size_t(tp.size()));
    Request r = tp.iallgather(send.data(), recv.data(), send.size());
    r.wait();
  } else if (what == "wait_rs") {
    std::vector<float> send(8 * size_t(tp.size()), 1.f), recv(8);
    Request r = tp.ireduce_scatter_sum(send.data(), recv.data(), 8);
    r.wait();
    MXT_CHECK(recv[0] == float(tp.size()), "reduce-scatter gave ", recv[0]);
  } else if (what == "barrier") {
    world.barrier();
  } else {
    MXT_FAIL("unknown call ", what);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  try {
    MXT_CHECK(argc >= 3, "usage: watchdog_hang CALL never|late [LATE_S]");
    const std::string what = argv[1], mode = argv[2];
    const double late_s = argc > 3 ? std::atof(argv[3]) : 1.0;
    Comm& world = Comm::world();
    MXT_CHECK(world.size() == 2, "run on 2 ranks, not ", world.size());
    std::unique_ptr<Comm> tp = world.split(0, world.rank(), "tp");
    call(*tp, world, what);  // both ranks: the communicator works
    if (world.rank() == 1) {
      if (mode == "never") std::this_thread::sleep_for(std::chrono::hours(1));
      std::this_thread::sleep_for(std::chrono::duration<double>(late_s));
    }
    call(*tp, world, what);
    std::printf("rank %d: %s completed\n", world.rank(), what.c_str());
  } catch (const std::exception& e) {
    abort_world_if_distributed(e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
