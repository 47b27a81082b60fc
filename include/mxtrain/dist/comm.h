// mxtrain/dist/comm.h — the communication layer under FSDP: a thin wrapper over MPI.
//
// One Comm per process group (Comm::world() is every rank). Blocking and non-blocking
// collectives on plain buffers; each call adds the bytes this rank sent and the wall time it
// spent in the call (including wait() for non-blocking ones) to per-kind counters that the
// trainer resets every step. MPI runs with MPI_ERRORS_RETURN: a failing call throws
// mxtrain::Error with MPI's message instead of aborting.
//
// Start-up: the first Comm::world() initialises MPI (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE so the optional progress thread may probe while the main thread makes
// every other call). Without mpirun this is OpenMPI's singleton init (one rank). MXTRAIN_NO_MPI=1 skips MPI entirely:
// the world is then one rank and every collective is a local copy. An MpiSession in main()
// finalises MPI on exit; without one, MPI is finalised by an atexit handler.
//
// Errors: an exception on one rank leaves the others waiting in their next collective, so a
// program must end every rank when one fails: its top-level handler calls
// abort_world_if_distributed(), which prints "rank R: error: ..." and calls MPI_Abort when
// more than one rank runs. For the same reason nothing here waits on MPI while an exception
// unwinds the stack: a Request destroyed during unwinding is abandoned, not completed (its
// peers may never join), and the process must not go on using MPI after such an error.
//
// Hangs: a rank blocked in a call that waits on other ranks (a blocking collective,
// Request::wait(), a split, MPI_Finalize) for longer than collective_timeout_s() ends the job:
// the collective watchdog prints "rank R: error: collective watchdog: <collective> on the
// <role> communicator (rank r of n) has waited T s, ..." and calls MPI_Abort (exit status 1).
// The bound is MXTRAIN_COLLECTIVE_TIMEOUT seconds (default 600; 0 turns it off);
// docs/distributed.md, "Collective watchdog", says why that default.
//
// "Bytes this rank sent" is counted for the bandwidth-optimal algorithm independent of what
// MPI picks internally, with W ranks:
//   all-gather of n bytes per rank ........ (W-1)·n     (its block reaches every peer)
//   reduce-scatter of W chunks of c bytes .. (W-1)·c     (every peer's chunk leaves once)
//   all-reduce of n bytes .................. 2·(W-1)·n/W (ring: reduce-scatter + all-gather)
//   broadcast of n bytes ................... (W-1)·n on the root, 0 elsewhere
//   gather of n bytes per rank to a root ... n on every rank but the root
//   all-to-all(v) .......................... the bytes addressed to the other ranks
// With one rank every count is 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/common.h"

namespace mxtrain::dist {

// Kinds of collective, for the counters.
enum class Coll : uint8_t { allgather, reduce_scatter, allreduce, broadcast, gather, barrier,
                           alltoall };
constexpr int kNumColl = 7;
const char* coll_name(Coll c);

struct CollCounter {
  uint64_t bytes = 0;  // bytes this rank sent (see the table above)
  double ms = 0;       // wall time in the calls, including wait()
  uint64_t calls = 0;
};

struct CommStats {
  std::array<CollCounter, kNumColl> kind{};
  CollCounter& operator[](Coll c) { return kind[size_t(c)]; }
  const CollCounter& operator[](Coll c) const { return kind[size_t(c)]; }
  void reset() { kind = {}; }
};

// Initialises MPI (if not yet) on construction and finalises it on destruction if it was the
// one that initialised it. Put one at the top of main() of programs run under mpirun.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owner_ = false;
};

// An error every rank raises at the same point (a failed agreement check): there is no rank
// left waiting in a collective, so the program can end normally on every rank — each printing
// its message — instead of aborting the job (abort_world_if_distributed).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// True when MPI was initialised (and not yet finalised) by this library or the program.
bool mpi_active();

// True when this process was started by an MPI launcher (mpirun/mpiexec, srun, hydra: their
// environment variables OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK are set) and
// MXTRAIN_NO_MPI is not: then Comm::world() joins that job instead of a one-rank singleton.
bool launched_by_mpi();

// For a program's top-level error handler. When MPI is active with more than one rank in
// MPI_COMM_WORLD: prints "rank R: error: <message>" on stderr and ends every rank with
// MPI_Abort (exit status 1); it does not return. Otherwise it returns and the caller reports
// the error as usual.
void abort_world_if_distributed(const std::string& message);

// The collective watchdog's bound in seconds (0: off): MXTRAIN_COLLECTIVE_TIMEOUT (decimal
// digits, e.g. 600 or 2.5; anything else throws mxtrain::Error naming it), default 600, or
// what set_collective_timeout() set. The watchdog runs in every process whose MPI world has
// more than one rank, from the first Comm::world() until MPI is finalised.
double collective_timeout_s();
// Sets the bound (0 to 1e7 s; 0 turns the watchdog off) for the calls that follow, and
// starts the watchdog if MPI runs with more than one rank and it is not running yet.
void set_collective_timeout(double seconds);

class Comm;

// A non-blocking collective in flight. wait() completes it (throws mxtrain::Error on an MPI
// failure); the destructor waits too (and reports a failure on stderr, since it cannot throw),
// except while an exception unwinds the stack: then it returns at once and the request is
// abandoned (see "Errors" above).
class Request {
 public:
  Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();

  void wait();
  // Drives progress (MPI_Test); true when the collective has completed (then as after wait()).
  bool test();
  bool active() const;
  double ms() const;       // time spent in the starting call, test() and wait() so far:
                           // the exposed time, when the caller had nothing else to do
  double span_ms() const;  // from the start to the completion wait() or test() observed
  uint64_t bytes() const;  // bytes this rank sent (counted when the request was started)

  struct State;

 private:
  friend class Comm;
  std::unique_ptr<State> s_;
};

class Comm {
 public:
  // Every rank (MPI_COMM_WORLD, duplicated). Initialises MPI on first use.
  static Comm& world();
  // A one-rank communicator that never touches MPI (tests, tools).
  static Comm& local();
  // Collective over this communicator: the ranks with the same `color` form a new one, ranked
  // by `key` (ties by rank here). Without MPI (or with one rank) the result is a one-rank
  // communicator. Process meshes (dist/mesh.h) are built from these. `role` names the new
  // communicator in the watchdog's messages ("tp", "dp", ...): a string literal (it is kept
  // by pointer).
  std::unique_ptr<Comm> split(int color, int key, const char* role = "split");

  // "world" for Comm::world(), "local" for Comm::local(), else what split() was given.
  const char* role() const { return role_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool uses_mpi() const { return handle_ != nullptr; }

  // send: [bytes_per_rank]; recv: [size() * bytes_per_rank], rank r's block at r*bytes_per_rank.
  void allgather(const void* send, void* recv, size_t bytes_per_rank);
  // Variable blocks: send [send_bytes]; recv: every rank's block in rank order, recv_bytes[r]
  // from rank r (size() entries; recv_bytes[rank()] == send_bytes).
  void allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes);
  Request iallgather(const void* send, void* recv, size_t bytes_per_rank);

  // FP32 sum. send: [size() * chunk]; recv: [chunk] = Σ_ranks send[rank()*chunk ...]. The
  // non-blocking form (point to point, no buffer of send's size; comm.cc) adds in a fixed
  // order; send and recv must not overlap and send stays untouched until it completes.
  void reduce_scatter_sum(const float* send, float* recv, size_t chunk);
  Request ireduce_scatter_sum(const float* send, float* recv, size_t chunk);

  // In-place sums over all ranks. data: [n].
  void allreduce_sum(float* data, size_t n);
  void allreduce_sum(double* data, size_t n);
  void allreduce_sum(int64_t* data, size_t n);
  // In-place maximum over all ranks (used for "any rank failed" flags). data: [n].
  void allreduce_max(int64_t* data, size_t n);
  void allreduce_max(float* data, size_t n);

  // Every rank sends bytes_per_rank bytes to every rank: send [size() * bytes_per_rank] with
  // rank r's block at r*bytes_per_rank; recv likewise, rank r's block from rank r.
  void alltoall(const void* send, void* recv, size_t bytes_per_rank);
  // Variable blocks: send_bytes[r] bytes to rank r, from send in rank order (contiguous);
  // recv_bytes[r] from rank r into recv in rank order. Both count arrays have size() entries
  // and must match what the peers send (exchange them first with alltoall).
  void alltoallv(const void* send, const size_t* send_bytes, void* recv,
                 const size_t* recv_bytes);

  // data: [bytes] on every rank; root's contents are copied to all.
  void broadcast(void* data, size_t bytes, int root);
  // send: [bytes_per_rank]; recv: [size() * bytes_per_rank] on root (ignored elsewhere).
  void gather(const void* send, void* recv, size_t bytes_per_rank, int root);
  void barrier();

  // Collective. Starts this process's progress thread: while any non-blocking collective is
  // in flight it enters MPI every interval_us (MPI_Iprobe on a private communicator), which
  // runs MPI's progress engine, so transfers advance while the main thread computes instead
  // of only inside test()/wait(). Needs MPI_THREAD_MULTIPLE on every rank; returns false (and
  // starts nothing) without it, with one rank or without MPI. One per process; stopped by
  // stop_progress_thread() or before MPI is finalised.
  bool start_progress_thread(int interval_us = 100);
  void stop_progress_thread();

  // Collective: every rank passes its own `value` (config text, expected world size, ...).
  // A fixed-size record (64-bit hash, length, first bytes) is all-gathered, so ranks never
  // block on each other's sizes. If any rank's value differs from rank 0's, every rank
  // throws CollectiveError naming `what` and the differing ranks.
  void check_consistent(const std::string& what, const std::string& value);
  // Collective: every rank passes the same names, in the same order, with its own values
  // (run-mode flags, say). One fixed-size record per setting is all-gathered; when any rank's
  // value of a setting differs from rank 0's, every rank throws CollectiveError naming the
  // first such setting, rank 0's value and the first differing rank's.
  void check_same_settings(const std::vector<std::pair<std::string, std::string>>& settings);

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_.reset(); }

  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

 private:
  Comm() = default;
  friend class Request;
  enum class ReduceType : uint8_t { f32, f64, i64 };
  enum class ReduceOp : uint8_t { sum, max };
  // Starts a non-blocking collective: counts it, then calls start(&requests) — a
  // std::vector<MPI_Request> holding one null request, which the call fills (or replaces by
  // several: every one of them must complete) — or start(nullptr) without MPI (the one-rank
  // local copy).
  Request start_request(Coll kind, uint64_t bytes, const std::function<void(void*)>& start);
  // The in-place all-reduce behind the typed public ones.
  void allreduce(void* data, size_t n, ReduceType type, ReduceOp op);
  void* handle_ = nullptr;  // MPI_Comm (heap-held) when MPI is used
  const char* role_ = "world";
  int rank_ = 0, size_ = 1;
  CommStats stats_;
};

// Whether the progress thread (Comm::start_progress_thread) runs in this process.
bool progress_thread_running();

// 64-bit FNV-1a of a byte string (what check_consistent compares).
uint64_t fnv1a64(const void* data, size_t n);

}  // namespace mxtrain::dist
