// tests/mpi/comm_mpi_test.cc — the MPI communication layer (dist/comm.h) on 1, 2 and 4 ranks
// and without mpirun: results of every collective, blocking and non-blocking, the per-kind
// byte counters (exact formulas of comm.h), and check_consistent's clean failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/dist/mesh.h"

namespace mxtrain::dist {
namespace {

Comm& W() { return Comm::world(); }

TEST(Comm, RankAndSize) {
  EXPECT_GE(W().size(), 1);
  EXPECT_GE(W().rank(), 0);
  EXPECT_LT(W().rank(), W().size());
  int64_t sum = W().rank();
  W().allreduce_sum(&sum, 1);
  EXPECT_EQ(sum, int64_t(W().size()) * (W().size() - 1) / 2) << "ranks must be 0..size-1";
}

TEST(Comm, AllgatherBlockingAndNonBlocking) {
  const int n = W().size(), r = W().rank();
  for (size_t bytes : {size_t(1), size_t(7), size_t(4096)}) {
    std::vector<uint8_t> send(bytes), recv(bytes * size_t(n)), irecv(bytes * size_t(n));
    for (size_t i = 0; i < bytes; ++i) send[i] = uint8_t(r * 31 + i);
    W().reset_stats();
    W().allgather(send.data(), recv.data(), bytes);
    Request q = W().iallgather(send.data(), irecv.data(), bytes);
    EXPECT_EQ(q.bytes(), uint64_t(n - 1) * bytes);
    q.wait();
    EXPECT_FALSE(q.active());
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < bytes; ++i) {
        EXPECT_EQ(recv[size_t(k) * bytes + i], uint8_t(k * 31 + i));
        EXPECT_EQ(irecv[size_t(k) * bytes + i], uint8_t(k * 31 + i));
      }
    EXPECT_EQ(W().stats()[Coll::allgather].bytes, 2 * uint64_t(n - 1) * bytes);
    EXPECT_EQ(W().stats()[Coll::allgather].calls, 2u);
    EXPECT_GE(W().stats()[Coll::allgather].ms, 0.0);
  }
}

TEST(Comm, ReduceScatterSumsChunks) {
  const int n = W().size(), r = W().rank();
  const size_t chunk = 5;
  // Small integers: every order of summation gives the same exact FP32 result.
  std::vector<float> send(chunk * size_t(n));
  for (size_t i = 0; i < send.size(); ++i) send[i] = float(r + 1) * float(i + 1);
  std::vector<float> out(chunk), iout(chunk);
  W().reset_stats();
  W().reduce_scatter_sum(send.data(), out.data(), chunk);
  Request q = W().ireduce_scatter_sum(send.data(), iout.data(), chunk);
  q.wait();
  const float ranks_sum = float(n * (n + 1) / 2);
  for (size_t j = 0; j < chunk; ++j) {
    const float want = ranks_sum * float(size_t(r) * chunk + j + 1);
    EXPECT_EQ(out[j], want);
    EXPECT_EQ(iout[j], want);
  }
  EXPECT_EQ(W().stats()[Coll::reduce_scatter].bytes, 2 * uint64_t(n - 1) * chunk * 4);
}

TEST(Comm, AllreduceVariants) {
  const int n = W().size(), r = W().rank();
  std::vector<float> f = {float(r), 1.f, -2.f};
  std::vector<double> d = {double(r) * 0.5, 1.0};
  std::vector<int64_t> i = {int64_t(r), int64_t(1) << 40};
  int64_t mx = r * 10;
  W().reset_stats();
  W().allreduce_sum(f.data(), f.size());
  W().allreduce_sum(d.data(), d.size());
  W().allreduce_sum(i.data(), i.size());
  W().allreduce_max(&mx, 1);
  const double rs = double(n) * (n - 1) / 2;
  EXPECT_EQ(f[0], float(rs));
  EXPECT_EQ(f[1], float(n));
  EXPECT_EQ(f[2], -2.f * float(n));
  EXPECT_EQ(d[0], rs * 0.5);
  EXPECT_EQ(d[1], double(n));
  EXPECT_EQ(i[0], int64_t(rs));
  EXPECT_EQ(i[1], int64_t(n) << 40);
  EXPECT_EQ(mx, int64_t(n - 1) * 10);
  // Ring all-reduce: 2(W-1)/W of the buffer, per call: 12, 16, 16, 8 bytes.
  const uint64_t want = (2 * uint64_t(n - 1) * 12) / uint64_t(n) +
                        2 * ((2 * uint64_t(n - 1) * 16) / uint64_t(n)) +
                        (2 * uint64_t(n - 1) * 8) / uint64_t(n);
  EXPECT_EQ(W().stats()[Coll::allreduce].bytes, want);
  EXPECT_EQ(W().stats()[Coll::allreduce].calls, 4u);
}

TEST(Comm, BroadcastGatherBarrier) {
  const int n = W().size(), r = W().rank();
  const int root = n - 1;
  std::string msg = r == root ? "from the root" : "?????????????";
  W().reset_stats();
  W().broadcast(msg.data(), msg.size(), root);
  EXPECT_EQ(msg, "from the root");
  EXPECT_EQ(W().stats()[Coll::broadcast].bytes, r == root ? uint64_t(n - 1) * msg.size() : 0u);
  int32_t mine = 100 + r;
  std::vector<int32_t> all(size_t(n), -1);
  W().gather(&mine, all.data(), sizeof(mine), 0);
  if (r == 0) {
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[size_t(k)], 100 + k);
  }
  EXPECT_EQ(W().stats()[Coll::gather].bytes, r == 0 ? 0u : sizeof(mine));
  W().barrier();
  EXPECT_EQ(W().stats()[Coll::barrier].calls, 1u);
  EXPECT_THROW(W().broadcast(msg.data(), 1, n), Error);  // same on every rank: no collective
}

TEST(Comm, CheckConsistentPassesWhenEqual) {
  EXPECT_NO_THROW(W().check_consistent("config", std::string(1000, 'x') + "tail"));
  EXPECT_NO_THROW(W().check_consistent("empty value", ""));
}

TEST(Comm, CheckConsistentThrowsOnEveryRankNamingTheRanks) {
  const int n = W().size(), r = W().rank();
  // Odd ranks see a different value; values of different lengths must not matter.
  const std::string value = r % 2 ? "lr: 0.002 and a longer tail" : "lr: 0.001";
  if (n == 1) {
    EXPECT_NO_THROW(W().check_consistent("training config", value));
    return;
  }
  std::string what;
  try {
    W().check_consistent("training config", value);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("training config differs across ranks"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1 has \"lr: 0.002"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 has \"lr: 0.001\""), std::string::npos) << what;
  EXPECT_NE(what.find("first difference at line 1: rank 0 `lr: 0.001`, rank 1 "
                      "`lr: 0.002 and a longer tail`"),
            std::string::npos)
      << what;
  if (n >= 4) {
    EXPECT_NE(what.find("rank 3 has"), std::string::npos) << what;
  }
  EXPECT_EQ(what.find("rank 2 has"), std::string::npos) << what;
}

TEST(Comm, LocalCommNeedsNoMpi) {
  Comm& l = Comm::local();
  EXPECT_EQ(l.size(), 1);
  EXPECT_FALSE(l.uses_mpi());
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  l.allgather(x, y, sizeof(x));
  EXPECT_EQ(y[2], 3.f);
  l.reduce_scatter_sum(x, y, 3);
  EXPECT_EQ(y[1], 2.f);
  EXPECT_EQ(l.stats()[Coll::allgather].bytes, 0u);
  EXPECT_NO_THROW(l.check_consistent("anything", "value"));
}

// The watchdog's names: the role each communicator carries into its messages.
TEST(Comm, CommunicatorsCarryTheirRole) {
  EXPECT_STREQ(W().role(), "world");
  EXPECT_STREQ(Comm::local().role(), "local");
  std::unique_ptr<Comm> tp = W().split(0, W().rank(), "tp");
  EXPECT_STREQ(tp->role(), "tp");
  EXPECT_EQ(tp->size(), W().size());
  EXPECT_STREQ(W().split(0, W().rank())->role(), "split");
  Mesh mesh(W(), MeshShape{});
  EXPECT_STREQ(mesh.tp().role(), "tp");
  EXPECT_STREQ(mesh.dp().role(), "dp");
  EXPECT_STREQ(mesh.ep().role(), "ep");
  EXPECT_STREQ(mesh.etp().role(), "etp");
  EXPECT_STREQ(mesh.edp().role(), "edp");
  EXPECT_STREQ(mesh.emp().role(), "emp");
}

// The bound: 600 s unless MXTRAIN_COLLECTIVE_TIMEOUT says otherwise; set_collective_timeout
// takes 0 (off) to 1e7 s and refuses the rest naming the value. (That a blocked call ends the
// job is tested by tests/mpi/watchdog_mpi.sh: it cannot be observed from inside the job.)
TEST(Comm, CollectiveTimeoutDefaultAndRange) {
  if (!std::getenv("MXTRAIN_COLLECTIVE_TIMEOUT")) {
    EXPECT_EQ(collective_timeout_s(), 600.0);
  }
  const double before = collective_timeout_s();
  set_collective_timeout(2.5);
  EXPECT_EQ(collective_timeout_s(), 2.5);
  float x = 1.f;  // a collective that completes at once under the short bound
  W().allreduce_sum(&x, 1);
  EXPECT_EQ(x, float(W().size()));
  set_collective_timeout(0);
  EXPECT_EQ(collective_timeout_s(), 0.0);
  for (double bad : {-1.0, 1e7 + 1, std::nan("")}) {
    try {
      set_collective_timeout(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range: give 0 (off) to 10000000 s"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(collective_timeout_s(), 0.0);
  set_collective_timeout(before);
}

}  // namespace
}  // namespace mxtrain::dist
