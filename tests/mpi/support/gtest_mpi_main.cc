// tests/mpi/support/gtest_mpi_main.cc — main() for the GoogleTest executables run under mpirun.
//
// Initialises MPI (MpiSession; one rank without mpirun), runs the tests on every rank in the
// same order (tests call collectives, so every rank must run every test), prints the usual
// report on rank 0 and every failure from every rank prefixed with its rank, and exits
// non-zero on every rank if any rank failed. Tests avoid ASSERT_* before a collective: a rank
// leaving a test early would leave the others waiting (the CTest TIMEOUT is the backstop).
#include <gtest/gtest.h>

#include <cstdio>

#include "mxtrain/dist/comm.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    std::fflush(stderr);
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  mxtrain::dist::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  auto& comm = mxtrain::dist::Comm::world();
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (comm.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(comm.rank()));
  }
  int64_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  comm.allreduce_max(&failed, 1);
  if (comm.rank() == 0)
    std::printf("%s on %d rank(s)\n", failed ? "FAILED" : "PASSED", comm.size());
  return failed ? 1 : 0;
}
