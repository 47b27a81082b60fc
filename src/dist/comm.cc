// dist/comm.cc — the MPI wrapper of dist/comm.h: start-up, collectives, counters, requests.
//
// Every MPI call goes through mpi_ok(), which turns a non-success code into mxtrain::Error
// (the communicator uses MPI_ERRORS_RETURN). Without MPI (MXTRAIN_NO_MPI=1 or Comm::local())
// the collectives are local copies on one rank. Every call that waits on other ranks runs
// under a watchdog::WaitScope (dist/watchdog.h).
#include "mxtrain/dist/comm.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iomanip>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "dist/watchdog.h"
#include "mxtrain/common.h"
#include "mxtrain/profile.h"

namespace mxtrain::dist {

namespace {

bool g_we_initialised = false;
int g_thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided

// The progress thread (Comm::start_progress_thread): one per process. While any non-blocking
// collective is in flight it enters MPI every interval (MPI_Iprobe on a private communicator),
// which runs MPI's progress engine: the transfers advance while the main thread computes.
std::atomic<int> g_inflight{0};
struct ProgressThread {
  std::thread thread;
  std::atomic<bool> stop{false};
  MPI_Comm comm = MPI_COMM_NULL;
};
ProgressThread* g_progress = nullptr;

void stop_progress() {
  if (!g_progress) return;
  g_progress->stop = true;
  g_progress->thread.join();
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free(&g_progress->comm);
  delete g_progress;
  g_progress = nullptr;
}

void mpi_ok(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  MXT_FAIL("MPI call ", call, " failed: ", std::string(msg, size_t(len)));
}

int to_count(size_t n, const char* call) {
  MXT_CHECK(n <= size_t(INT_MAX), call, ": message of ", n,
            " elements exceeds MPI's int count limit (", INT_MAX, "); split the buffer");
  return int(n);
}

bool no_mpi_requested() {
  const char* e = std::getenv("MXTRAIN_NO_MPI");
  return e && e[0] && std::string(e) != "0";
}

MPI_Comm* comm_of(void* h) { return static_cast<MPI_Comm*>(h); }

void finalize_if_ours() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (g_we_initialised && !fin) {
    stop_progress();
    // World's duplicated communicator is freed by MPI_Finalize itself. Finalising waits for
    // the other ranks: watched like a collective.
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
      watchdog::WaitScope w({"finalize", "world", rank, size});
      MPI_Finalize();
    }
  }
  watchdog::stop();
  g_we_initialised = false;
}

// Initialises MPI if neither the program nor we did yet. Returns false when MPI is off.
bool ensure_mpi() {
  if (no_mpi_requested()) return false;
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  MXT_CHECK(!fin, "MPI was already finalised; create communicators before MPI_Finalize");
  if (!inited) {
    int provided = 0;
    mpi_ok(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_thread_level = provided;
    g_we_initialised = true;
    static bool registered = false;
    if (!registered) {
      std::atexit(finalize_if_ours);
      registered = true;
    }
  }
  return true;
}

}  // namespace

double collective_timeout_s() { return watchdog::bound(); }

void set_collective_timeout(double seconds) {
  watchdog::set_bound(seconds);
  int size = 1, rank = 0;
  if (!mpi_active() || MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size <= 1) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  watchdog::start(rank);
}

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::allgather: return "allgather";
    case Coll::reduce_scatter: return "reduce_scatter";
    case Coll::allreduce: return "allreduce";
    case Coll::broadcast: return "broadcast";
    case Coll::gather: return "gather";
    case Coll::barrier: return "barrier";
    case Coll::alltoall: return "alltoall";
  }
  return "?";
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// ---- MpiSession ---------------------------------------------------------------------------

MpiSession::MpiSession(int* argc, char*** argv) {
  if (no_mpi_requested()) return;
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return;
  int provided = 0;
  mpi_ok(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  g_thread_level = provided;
  g_we_initialised = true;
  owner_ = true;
}

MpiSession::~MpiSession() {
  // MPI_Finalize synchronises with the other ranks: not while an exception unwinds.
  if (owner_ && std::uncaught_exceptions() == 0) finalize_if_ours();
}

bool launched_by_mpi() {
  if (no_mpi_requested()) return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

bool mpi_active() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  return inited && !fin;
}

void abort_world_if_distributed(const std::string& message) {
  if (!mpi_active()) return;
  int size = 1, rank = 0;
  if (MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size <= 1) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; should it, still never reach MPI_Finalize
}

// ---- Request ------------------------------------------------------------------------------

struct Request::State {
  // What completes the operation: one request for MPI's own collectives, one per message for
  // the point-to-point reduce-scatter; `finish` then runs once (its sums).
  std::vector<MPI_Request> reqs{MPI_REQUEST_NULL};
  std::function<void()> finish;
  Comm* comm = nullptr;
  Coll kind = Coll::allgather;
  uint64_t bytes = 0;
  double ms = 0;
  Clock::time_point started{};
  double span_ms = 0;  // start to observed completion
  bool active = false;
};

Request::Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    if (active() && std::uncaught_exceptions() == 0) {
      try {
        wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mxtrain: collective failed while being replaced: %s\n", e.what());
      }
    }
    s_ = std::move(o.s_);
  }
  return *this;
}
Request::~Request() {
  // While an exception unwinds, the peers may never join this collective: waiting could block
  // forever, before the error reaches the handler that ends every rank. Abandon it.
  if (!active() || std::uncaught_exceptions() > 0) return;
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxtrain: collective failed in a discarded request: %s\n", e.what());
  }
}

bool Request::active() const { return s_ && s_->active; }
double Request::ms() const { return s_ ? s_->ms : 0.0; }
double Request::span_ms() const { return s_ ? s_->span_ms : 0.0; }

bool Request::test() {
  if (!active()) return true;
  MXT_PROFILE(communication, none);
  const auto t0 = Clock::now();
  int done = 1;
  const int rc = MPI_Testall(int(s_->reqs.size()), s_->reqs.data(), &done, MPI_STATUSES_IGNORE);
  if (done && rc == MPI_SUCCESS && s_->finish) s_->finish();
  const double dt = ms_since(t0);  // the poll itself is time not spent computing
  s_->ms += dt;
  s_->comm->stats_[s_->kind].ms += dt;
  mpi_ok(rc, "MPI_Testall");
  if (done) {
    g_inflight.fetch_sub(1);
    s_->active = false;
    s_->span_ms = ms_since(s_->started);
  }
  return done != 0;
}
uint64_t Request::bytes() const { return s_ ? s_->bytes : 0; }

namespace {
// What a Request::wait() waits for, for the watchdog's message.
const char* wait_name(Coll c) {
  switch (c) {
    case Coll::allgather: return "wait for a non-blocking allgather";
    case Coll::reduce_scatter: return "wait for a non-blocking reduce_scatter";
    case Coll::allreduce: return "wait for a non-blocking allreduce";
    case Coll::broadcast: return "wait for a non-blocking broadcast";
    case Coll::gather: return "wait for a non-blocking gather";
    case Coll::barrier: return "wait for a non-blocking barrier";
    case Coll::alltoall: return "wait for a non-blocking alltoall";
  }
  return "wait";
}
}  // namespace

void Request::wait() {
  if (!active()) return;
  MXT_PROFILE(wait, none);
  const auto t0 = Clock::now();
  const Comm& c = *s_->comm;
  int rc = MPI_SUCCESS;
  {
    watchdog::WaitScope w({wait_name(s_->kind), c.role(), c.rank(), c.size()}, t0);
    rc = MPI_Waitall(int(s_->reqs.size()), s_->reqs.data(), MPI_STATUSES_IGNORE);
  }
  if (rc == MPI_SUCCESS && s_->finish) s_->finish();
  const double dt = ms_since(t0);
  s_->ms += dt;
  s_->active = false;
  g_inflight.fetch_sub(1);
  s_->span_ms = ms_since(s_->started);
  s_->comm->stats_[s_->kind].ms += dt;
  mpi_ok(rc, "MPI_Waitall");
}

// ---- Comm ---------------------------------------------------------------------------------

Comm& Comm::world() {
  static Comm* w = [] {
    auto* c = new Comm;
    if (ensure_mpi()) {
      int wrank = 0, wsize = 1;
      mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &wrank), "MPI_Comm_rank");
      mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &wsize), "MPI_Comm_size");
      const double bound = watchdog::bound();  // a bad MXTRAIN_COLLECTIVE_TIMEOUT throws here
      if (wsize > 1 && bound > 0) watchdog::start(wrank);
      auto* h = new MPI_Comm;
      {
        watchdog::WaitScope w({"duplicate (MPI_Comm_dup)", "world", wrank, wsize});
        mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, h), "MPI_Comm_dup");
      }
      mpi_ok(MPI_Comm_set_errhandler(*h, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      mpi_ok(MPI_Comm_rank(*h, &c->rank_), "MPI_Comm_rank");
      mpi_ok(MPI_Comm_size(*h, &c->size_), "MPI_Comm_size");
      c->handle_ = h;
    }
    return c;
  }();
  return *w;
}

Comm& Comm::local() {
  static Comm* l = [] {
    auto* c = new Comm;
    c->role_ = "local";
    return c;
  }();
  return *l;
}

Comm::~Comm() {
  if (MPI_Comm* c = comm_of(handle_)) {
    if (mpi_active()) MPI_Comm_free(c);  // a split (the world is never destroyed)
    delete c;
  }
}

std::unique_ptr<Comm> Comm::split(int color, int key, const char* role) {
  MXT_CHECK(color >= 0, "split: color must be >= 0, got ", color);
  std::unique_ptr<Comm> c(new Comm);
  c->role_ = role;
  if (!handle_) return c;
  auto* h = new MPI_Comm;
  int rc = MPI_SUCCESS;
  {
    watchdog::WaitScope w({"split (MPI_Comm_split)", role_, rank_, size_});
    rc = MPI_Comm_split(*comm_of(handle_), color, key, h);
  }
  if (rc != MPI_SUCCESS) delete h;
  mpi_ok(rc, "MPI_Comm_split");
  c->handle_ = h;
  mpi_ok(MPI_Comm_set_errhandler(*h, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_ok(MPI_Comm_rank(*h, &c->rank_), "MPI_Comm_rank");
  mpi_ok(MPI_Comm_size(*h, &c->size_), "MPI_Comm_size");
  return c;
}

namespace {
// Starts timing and counting one blocking collective; the destructor adds the elapsed time.
// The collective is the profiler's `communication` while it runs (mxtrain/profile.h), and the
// watchdog watches it.
struct CallTimer {
  CollCounter& c;
  Clock::time_point t0 = Clock::now();
  prof::Scope scope{prof::Region::communication, prof::Pass::none};
  watchdog::WaitScope watch;
  CallTimer(Comm& comm, Coll kind, uint64_t bytes)
      : c(comm.stats()[kind]),
        watch({coll_name(kind), comm.role(), comm.rank(), comm.size()}, t0) {
    c.bytes += bytes;
    c.calls += 1;
  }
  ~CallTimer() { c.ms += ms_since(t0); }
};
}  // namespace

void Comm::allgather(const void* send, void* recv, size_t n) {
  CallTimer t(*this, Coll::allgather, uint64_t(size_ - 1) * n);
  if (!handle_) {
    if (n && send != recv) std::memmove(recv, send, n);
    return;
  }
  const int cnt = to_count(n, "allgather");
  mpi_ok(MPI_Allgather(send, cnt, MPI_BYTE, recv, cnt, MPI_BYTE, *comm_of(handle_)),
         "MPI_Allgather");
}

void Comm::allgatherv(const void* send, size_t n, void* recv, const size_t* recv_bytes) {
  CallTimer t(*this, Coll::allgather, uint64_t(size_ - 1) * n);
  MXT_CHECK(recv_bytes[rank_] == n, "allgatherv: sends ", n, " bytes but expects ",
            recv_bytes[rank_], " of its own");
  if (!handle_) {
    if (n && send != recv) std::memmove(recv, send, n);
    return;
  }
  const size_t W = size_t(size_);
  std::vector<int> rc(W), rd(W);
  size_t off = 0;
  for (size_t r = 0; r < W; ++r) {
    rc[r] = to_count(recv_bytes[r], "allgatherv");
    rd[r] = to_count(off, "allgatherv offset");
    off += recv_bytes[r];
  }
  mpi_ok(MPI_Allgatherv(send, to_count(n, "allgatherv"), MPI_BYTE, recv, rc.data(), rd.data(),
                        MPI_BYTE, *comm_of(handle_)),
         "MPI_Allgatherv");
}

Request Comm::start_request(Coll kind, uint64_t bytes,
                            const std::function<void(void*)>& start) {
  MXT_PROFILE(communication, none);
  const auto t0 = Clock::now();
  Request r;
  r.s_ = std::make_unique<Request::State>();
  r.s_->comm = this;
  r.s_->kind = kind;
  r.s_->bytes = bytes;
  r.s_->started = t0;
  stats_[kind].bytes += bytes;
  stats_[kind].calls += 1;
  start(handle_ ? &r.s_->reqs : nullptr);  // a std::vector<MPI_Request> of one null request
  r.s_->active = handle_ != nullptr;
  if (r.s_->active) g_inflight.fetch_add(1);
  r.s_->ms = ms_since(t0);
  stats_[kind].ms += r.s_->ms;
  return r;
}

bool Comm::start_progress_thread(int interval_us) {
  MXT_CHECK(interval_us >= 1, "progress thread: interval must be >= 1 us, got ", interval_us);
  if (!handle_ || size_ == 1) return false;
  const int ok = g_thread_level >= MPI_THREAD_MULTIPLE ? 1 : 0;
  int all = ok;  // every rank agrees, so the dup below is collective on all or none
  {
    watchdog::WaitScope w({"allreduce", role_, rank_, size_});
    mpi_ok(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, *comm_of(handle_)), "MPI_Allreduce");
  }
  if (!all) return false;
  if (g_progress) return true;
  auto* p = new ProgressThread;
  int rc = MPI_SUCCESS;
  {
    watchdog::WaitScope w({"duplicate (MPI_Comm_dup)", role_, rank_, size_});
    rc = MPI_Comm_dup(*comm_of(handle_), &p->comm);
  }
  if (rc != MPI_SUCCESS) delete p;
  mpi_ok(rc, "MPI_Comm_dup");
  p->thread = std::thread([p, interval_us] {
    while (!p->stop.load(std::memory_order_relaxed)) {
      if (g_inflight.load(std::memory_order_relaxed) > 0) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p->comm, &flag, MPI_STATUS_IGNORE);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
  });
  g_progress = p;
  return true;
}

void Comm::stop_progress_thread() { stop_progress(); }

bool progress_thread_running() { return g_progress != nullptr; }

Request Comm::iallgather(const void* send, void* recv, size_t n) {
  return start_request(Coll::allgather, uint64_t(size_ - 1) * n, [&](void* req) {
    if (!req) {
      if (n && send != recv) std::memmove(recv, send, n);
      return;
    }
    const int cnt = to_count(n, "iallgather");
    mpi_ok(MPI_Iallgather(send, cnt, MPI_BYTE, recv, cnt, MPI_BYTE, *comm_of(handle_),
                          &static_cast<std::vector<MPI_Request>*>(req)->front()),
           "MPI_Iallgather");
  });
}

void Comm::reduce_scatter_sum(const float* send, float* recv, size_t chunk) {
  CallTimer t(*this, Coll::reduce_scatter, uint64_t(size_ - 1) * chunk * sizeof(float));
  if (!handle_) {
    if (chunk && send != recv) std::memmove(recv, send, chunk * sizeof(float));
    return;
  }
  mpi_ok(MPI_Reduce_scatter_block(send, recv, to_count(chunk, "reduce_scatter"), MPI_FLOAT,
                                  MPI_SUM, *comm_of(handle_)),
         "MPI_Reduce_scatter_block");
}

// Point to point, not MPI_Ireduce_scatter_block: Open MPI's non-blocking reduce-scatter
// held a temporary of twice the send buffer's size for as long as it ran (heaptrack on an FSDP
// rank: 46 MB for a 23 MB gradient, the largest single block of its peak; docs/results/
// fsdp.md). Here every peer's chunk of `send` goes to it directly; of the
// chunks of this rank the peers send, the lowest-ranked peer's lands in recv itself and the
// others in a buffer of (W - 2) chunks (none at 2 ranks). Completion adds them in a fixed
// order: recv = own + peer_1 (as received), then + peer_2, ... in rank order — at 2 ranks the
// one sum MPI's reduction makes, so the same bits. send must stay untouched until then.
Request Comm::ireduce_scatter_sum(const float* send, float* recv, size_t chunk) {
  constexpr int kTag = 7301;  // FIFO per peer and tag: successive calls match in order
  const int W = size_, me = rank_;
  auto tmp = std::make_shared<std::vector<float>>();
  Request r = start_request(
      Coll::reduce_scatter, uint64_t(W - 1) * chunk * sizeof(float), [&](void* req) {
        if (!req || W == 1) {
          if (chunk && send != recv) std::memmove(recv, send, chunk * sizeof(float));
          return;
        }
        const int cnt = to_count(chunk, "ireduce_scatter");
        const MPI_Comm c = *comm_of(handle_);
        tmp->resize(size_t(W - 2) * chunk);
        std::vector<MPI_Request>& reqs = *static_cast<std::vector<MPI_Request>*>(req);
        reqs.clear();
        reqs.reserve(size_t(2 * (W - 1)));
        int k = 0;  // peers so far, in rank order
        for (int p = 0; p < W; ++p) {
          if (p == me) continue;
          float* into = k == 0 ? recv : tmp->data() + size_t(k - 1) * chunk;
          reqs.emplace_back();
          mpi_ok(MPI_Irecv(into, cnt, MPI_FLOAT, p, kTag, c, &reqs.back()), "MPI_Irecv");
          ++k;
        }
        for (int p = 0; p < W; ++p) {
          if (p == me) continue;
          reqs.emplace_back();
          mpi_ok(MPI_Isend(send + size_t(p) * chunk, cnt, MPI_FLOAT, p, kTag, c, &reqs.back()),
                 "MPI_Isend");
        }
      });
  if (r.active() && W > 1) {
    const float* own = send + size_t(me) * chunk;
    r.s_->finish = [own, recv, chunk, W, tmp] {
      for (size_t i = 0; i < chunk; ++i) recv[i] = own[i] + recv[i];
      for (int k = 1; k < W - 1; ++k) {
        const float* t = tmp->data() + size_t(k - 1) * chunk;
        for (size_t i = 0; i < chunk; ++i) recv[i] += t[i];
      }
    };
  }
  return r;
}

namespace {
uint64_t allreduce_sent(int size, size_t bytes) {
  return size <= 1 ? 0 : uint64_t(2) * uint64_t(size - 1) * bytes / uint64_t(size);
}
}  // namespace

void Comm::allreduce(void* data, size_t n, ReduceType type, ReduceOp op) {
  const size_t elem = type == ReduceType::f32 ? sizeof(float) : 8;
  CallTimer t(*this, Coll::allreduce, allreduce_sent(size_, n * elem));
  if (!handle_ || n == 0) return;
  const MPI_Datatype dt = type == ReduceType::f32   ? MPI_FLOAT
                          : type == ReduceType::f64 ? MPI_DOUBLE
                                                    : MPI_INT64_T;
  mpi_ok(MPI_Allreduce(MPI_IN_PLACE, data, to_count(n, "allreduce"), dt,
                       op == ReduceOp::sum ? MPI_SUM : MPI_MAX, *comm_of(handle_)),
         "MPI_Allreduce");
}

void Comm::allreduce_sum(float* data, size_t n) {
  allreduce(data, n, ReduceType::f32, ReduceOp::sum);
}
void Comm::allreduce_sum(double* data, size_t n) {
  allreduce(data, n, ReduceType::f64, ReduceOp::sum);
}
void Comm::allreduce_sum(int64_t* data, size_t n) {
  allreduce(data, n, ReduceType::i64, ReduceOp::sum);
}
void Comm::allreduce_max(int64_t* data, size_t n) {
  allreduce(data, n, ReduceType::i64, ReduceOp::max);
}
void Comm::allreduce_max(float* data, size_t n) {
  allreduce(data, n, ReduceType::f32, ReduceOp::max);
}

void Comm::alltoall(const void* send, void* recv, size_t n) {
  CallTimer t(*this, Coll::alltoall, uint64_t(size_ - 1) * n);
  if (!handle_) {
    if (n && send != recv) std::memmove(recv, send, n);
    return;
  }
  const int cnt = to_count(n, "alltoall");
  mpi_ok(MPI_Alltoall(send, cnt, MPI_BYTE, recv, cnt, MPI_BYTE, *comm_of(handle_)),
         "MPI_Alltoall");
}

void Comm::alltoallv(const void* send, const size_t* send_bytes, void* recv,
                     const size_t* recv_bytes) {
  uint64_t sent = 0;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) sent += send_bytes[r];
  CallTimer t(*this, Coll::alltoall, sent);
  if (!handle_) {
    MXT_CHECK(send_bytes[0] == recv_bytes[0], "alltoallv: sends ", send_bytes[0],
              " bytes to itself but expects ", recv_bytes[0]);
    if (send_bytes[0] && send != recv) std::memmove(recv, send, send_bytes[0]);
    return;
  }
  const size_t W = size_t(size_);
  std::vector<int> sc(W), sd(W), rc(W), rd(W);
  size_t so = 0, ro = 0;
  for (int r = 0; r < size_; ++r) {
    sc[size_t(r)] = to_count(send_bytes[r], "alltoallv");
    rc[size_t(r)] = to_count(recv_bytes[r], "alltoallv");
    sd[size_t(r)] = to_count(so, "alltoallv offset");
    rd[size_t(r)] = to_count(ro, "alltoallv offset");
    so += send_bytes[r];
    ro += recv_bytes[r];
  }
  mpi_ok(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                       MPI_BYTE, *comm_of(handle_)),
         "MPI_Alltoallv");
}

void Comm::broadcast(void* data, size_t bytes, int root) {
  MXT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of a world of ",
            size_);
  CallTimer t(*this, Coll::broadcast, rank_ == root ? uint64_t(size_ - 1) * bytes : 0);
  if (!handle_ || bytes == 0) return;
  mpi_ok(MPI_Bcast(data, to_count(bytes, "broadcast"), MPI_BYTE, root, *comm_of(handle_)),
         "MPI_Bcast");
}

void Comm::gather(const void* send, void* recv, size_t n, int root) {
  MXT_CHECK(root >= 0 && root < size_, "gather: root ", root, " is not a rank of a world of ",
            size_);
  CallTimer t(*this, Coll::gather, rank_ == root ? 0 : uint64_t(n));
  if (!handle_) {
    if (n && send != recv) std::memmove(recv, send, n);
    return;
  }
  const int cnt = to_count(n, "gather");
  mpi_ok(MPI_Gather(send, cnt, MPI_BYTE, recv, cnt, MPI_BYTE, root, *comm_of(handle_)),
         "MPI_Gather");
}

void Comm::barrier() {
  CallTimer t(*this, Coll::barrier, 0);
  if (!handle_) return;
  mpi_ok(MPI_Barrier(*comm_of(handle_)), "MPI_Barrier");
}

// ---- consistency check --------------------------------------------------------------------

namespace {
struct ConsistencyRecord {
  uint64_t hash = 0;
  uint64_t length = 0;
  char head[48] = {0};
};
static_assert(sizeof(ConsistencyRecord) == 64);

std::string printable_head(const ConsistencyRecord& r) {
  std::string s;
  const size_t n = std::min<size_t>(r.length, sizeof(r.head));
  for (size_t i = 0; i < n; ++i) {
    const char ch = r.head[i];
    s += (ch >= 32 && ch < 127) ? ch : '.';
  }
  if (r.length > sizeof(r.head)) s += "...";
  return s;
}

std::string describe(const ConsistencyRecord& r) {
  std::ostringstream os;
  os << "\"" << printable_head(r) << "\" (" << r.length << " bytes, hash 0x" << std::hex
     << std::setw(16) << std::setfill('0') << r.hash << ")";
  return os.str();
}
}  // namespace

namespace {
// Splits into lines (no terminators).
std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

std::string clip(const std::string& s) {
  std::string o;
  for (char ch : s.substr(0, 80)) o += (ch >= 32 && ch < 127) ? ch : '.';
  return s.size() > 80 ? o + "..." : o;
}

// "line 4: `lr: 0.001` here, `lr: 0.002` there" for the first line where a and b differ.
std::string first_difference(const std::string& a, const std::string& b, int rank) {
  const auto la = lines_of(a), lb = lines_of(b);
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "<end>", y = i < lb.size() ? lb[i] : "<end>";
    if (x != y)
      return "line " + std::to_string(i + 1) + ": rank 0 `" + clip(x) + "`, rank " +
             std::to_string(rank) + " `" + clip(y) + "`";
  }
  return "same lines, different line endings or trailing bytes";
}
}  // namespace

void Comm::check_consistent(const std::string& what, const std::string& value) {
  ConsistencyRecord mine;
  mine.hash = fnv1a64(value.data(), value.size());
  mine.length = value.size();
  std::memcpy(mine.head, value.data(), std::min(value.size(), sizeof(mine.head)));
  std::vector<ConsistencyRecord> all(static_cast<size_t>(size_));
  allgather(&mine, all.data(), sizeof(ConsistencyRecord));
  std::vector<int> differ;
  uint64_t max_len = 0;
  for (int r = 0; r < size_; ++r) {
    max_len = std::max(max_len, all[r].length);
    if (r > 0 && (all[r].hash != all[0].hash || all[r].length != all[0].length))
      differ.push_back(r);
  }
  if (differ.empty()) return;
  // Every rank knows every length now, so a second, equal-size gather of the values is safe:
  // it lets the message show the first differing line.
  std::vector<std::string> values;
  constexpr uint64_t kMaxDetail = 1 << 20;
  if (max_len <= kMaxDetail) {
    std::string padded = value;
    padded.resize(max_len, '\0');
    std::string gathered(max_len * uint64_t(size_), '\0');
    allgather(padded.data(), gathered.data(), max_len);
    for (int r = 0; r < size_; ++r)
      values.push_back(gathered.substr(max_len * uint64_t(r), all[r].length));
  }
  std::ostringstream os;
  os << what << " differs across ranks: rank 0 has " << describe(all[0]);
  for (int r : differ) {
    os << "; rank " << r << " has " << describe(all[r]);
    if (!values.empty()) os << " — first difference at " << first_difference(values[0], values[r], r);
  }
  os << ". Every rank must run with the same " << what << " (" << differ.size() << " of "
     << size_ << " ranks differ from rank 0; this is rank " << rank_ << ")";
  throw CollectiveError(os.str());
}

void Comm::check_same_settings(
    const std::vector<std::pair<std::string, std::string>>& settings) {
  const size_t n = settings.size();
  std::vector<ConsistencyRecord> mine(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& v = settings[i].second;
    mine[i].hash = fnv1a64(v.data(), v.size());
    mine[i].length = v.size();
    std::memcpy(mine[i].head, v.data(), std::min(v.size(), sizeof(mine[i].head)));
  }
  std::vector<ConsistencyRecord> all(n * size_t(size_));
  allgather(mine.data(), all.data(), n * sizeof(ConsistencyRecord));
  for (size_t i = 0; i < n; ++i) {
    const ConsistencyRecord& first = all[i];
    std::vector<int> differ;
    for (int r = 1; r < size_; ++r) {
      const ConsistencyRecord& x = all[size_t(r) * n + i];
      if (x.hash != first.hash || x.length != first.length) differ.push_back(r);
    }
    if (differ.empty()) continue;
    std::ostringstream os;
    os << "the ranks were started with different " << settings[i].first << ": rank 0 has `"
       << printable_head(first) << "`, rank " << differ[0] << " has `"
       << printable_head(all[size_t(differ[0]) * n + i]) << "` (" << differ.size() << " of "
       << size_ << " ranks differ from rank 0; this is rank " << rank_
       << "). Give every rank the same " << settings[i].first;
    throw CollectiveError(os.str());
  }
}

}  // namespace mxtrain::dist
