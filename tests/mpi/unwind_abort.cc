// tests/mpi/unwind_abort.cc — a program that must end every rank although one fails with a
// collective in flight: rank 0 starts a non-blocking all-gather that rank 1 never joins and
// throws. The Request's destructor runs while the exception unwinds and must not wait for it
// (it would wait forever); the handler then ends every rank with
// dist::abort_world_if_distributed. Rank 1 meanwhile waits for a message that never comes,
// as a rank waiting for a failed peer does. Run by expect_failure.cmake (rank 0's message,
// non-zero exit, no hang).
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"

int main(int argc, char** argv) {
  mxtrain::dist::MpiSession session(&argc, &argv);
  auto& comm = mxtrain::dist::Comm::world();
  try {
    if (comm.rank() == 0) {
      std::vector<char> send(64, 1), recv(64 * size_t(comm.size()));
      mxtrain::dist::Request r = comm.iallgather(send.data(), recv.data(), send.size());
      MXT_FAIL("failed with an all-gather in flight");
    }
    int never = 0;
    MPI_Recv(&never, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } catch (const std::exception& e) {
    mxtrain::dist::abort_world_if_distributed(e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
