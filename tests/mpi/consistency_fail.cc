// tests/mpi/consistency_fail.cc — a program that must fail cleanly: ranks start with different
// configs (rank 1 has another learning rate). Comm::check_consistent must make every rank
// exit non-zero with a message naming the differing ranks, in bounded time (no hang).
// Run by expect_failure.cmake, which checks the exit code and every rank's message.
#include <cstdio>
#include <string>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"

int main(int argc, char** argv) {
  mxtrain::dist::MpiSession session(&argc, &argv);
  auto& comm = mxtrain::dist::Comm::world();
  const std::string config = std::string("model:\n  d_model: 64\ntraining:\n  lr: ") +
                             (comm.rank() == 1 ? "0.002" : "0.001") + "\n";
  try {
    comm.check_consistent("training config", config);
  } catch (const mxtrain::Error& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
    return 1;
  }
  std::printf("rank %d: configs agree\n", comm.rank());
  return 0;
}
