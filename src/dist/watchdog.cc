// dist/watchdog.cc — the collective watchdog of dist/watchdog.h: the slot a blocking call
// arms, the thread that watches it, and the bound (MXTRAIN_COLLECTIVE_TIMEOUT).
#include "dist/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "mxtrain/common.h"

namespace mxtrain::dist::watchdog {

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

// The one call being watched. `since_ns` is 0 when none is; the other fields are written
// before it (relaxed) and published by its release store, and the watcher reads them between
// two loads of `since_ns` and uses them only when both loads agree.
struct Slot {
  std::atomic<int64_t> since_ns{0};
  std::atomic<const char*> what{nullptr};
  std::atomic<const char*> role{nullptr};
  std::atomic<int> rank{0}, size{0};
};
Slot g_slot;

// < 0 until the environment was read.
std::atomic<double> g_bound{-1.0};
std::mutex g_bound_mutex;  // the first read of the environment

struct Watcher {
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  int world_rank = 0;
};
std::mutex g_watcher_mutex;  // start() / stop() / set_bound()
Watcher* g_watcher = nullptr;
// The thread runs and the bound is > 0: what a WaitScope checks before arming.
std::atomic<bool> g_armed{false};

std::string seconds_text(double s) {
  std::ostringstream os;
  os.precision(s < 10 ? 2 : 1);
  os << std::fixed << s;
  return os.str();
}

[[noreturn]] void fire(int world_rank, const Site& site, double waited_s, double bound_s) {
  std::ostringstream os;
  os << "collective watchdog: " << site.what << " on the " << site.role << " communicator (rank "
     << site.rank << " of " << site.size << ") has waited " << seconds_text(waited_s)
     << " s, over the bound of " << seconds_text(bound_s)
     << " s (MXTRAIN_COLLECTIVE_TIMEOUT): a rank of that communicator has not joined it "
        "(stopped, busy elsewhere, in another collective, or its host unreachable); ending "
        "the job";
  std::fprintf(stderr, "rank %d: error: %s\n", world_rank, os.str().c_str());
  std::fflush(stderr);
  // MPI_Abort asks the launcher to end every rank. Should the launcher be unreachable too
  // (this host cut off), end this process anyway: a rank that exits non-zero ends the job.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(1);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void watch(Watcher* w) {
  for (;;) {
    const double b = g_bound.load(std::memory_order_relaxed);
    const auto period = std::chrono::milliseconds(
        b > 0 ? std::clamp<int64_t>(int64_t(b * 100), 10, 1000) : 1000);  // bound / 10
    {
      std::unique_lock<std::mutex> lk(w->m);
      if (w->cv.wait_for(lk, period, [w] { return w->stop; })) return;
    }
    if (b <= 0) continue;
    const int64_t since = g_slot.since_ns.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double waited = double(now_ns() - since) * 1e-9;
    if (waited <= b) continue;
    const Site site{g_slot.what.load(std::memory_order_relaxed),
                    g_slot.role.load(std::memory_order_relaxed),
                    g_slot.rank.load(std::memory_order_relaxed),
                    g_slot.size.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_slot.since_ns.load(std::memory_order_relaxed) != since) continue;  // it completed
    fire(w->world_rank, site, waited, b);
  }
}

// A decimal number of seconds: digits, optionally '.' and digits. Nothing else (no sign,
// exponent, hex, spaces, units).
bool parse_seconds(const std::string& s, double* out) {
  size_t i = 0, digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t frac = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++frac;
    if (frac == 0) return false;
  }
  if (digits == 0 || i != s.size() || s.size() > 32) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return true;
}

std::string clipped(const std::string& s) {
  std::string o;
  for (char ch : s.substr(0, 40)) o += (ch >= 32 && ch < 127) ? ch : '?';
  return s.size() > 40 ? o + "..." : o;
}

}  // namespace

namespace {
void arm(const Site& site, int64_t since_ns) {
  g_slot.what.store(site.what, std::memory_order_relaxed);
  g_slot.role.store(site.role, std::memory_order_relaxed);
  g_slot.rank.store(site.rank, std::memory_order_relaxed);
  g_slot.size.store(site.size, std::memory_order_relaxed);
  g_slot.since_ns.store(since_ns | 1, std::memory_order_release);  // never 0 (= none)
}
}  // namespace

WaitScope::WaitScope(const Site& site) : armed_(g_armed.load(std::memory_order_relaxed)) {
  if (armed_) arm(site, now_ns());
}

WaitScope::WaitScope(const Site& site, SteadyClock::time_point since)
    : armed_(g_armed.load(std::memory_order_relaxed)) {
  if (armed_)
    arm(site,
        std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count());
}

WaitScope::~WaitScope() {
  if (armed_) g_slot.since_ns.store(0, std::memory_order_release);
}

double bound() {
  double b = g_bound.load(std::memory_order_relaxed);
  if (b >= 0) return b;
  std::lock_guard<std::mutex> lk(g_bound_mutex);
  b = g_bound.load(std::memory_order_relaxed);
  if (b >= 0) return b;
  b = kDefaultBound;
  if (const char* e = std::getenv("MXTRAIN_COLLECTIVE_TIMEOUT")) {
    const std::string v = e;
    double s = 0;
    MXT_CHECK(parse_seconds(v, &s) && s <= kMaxBound, "MXTRAIN_COLLECTIVE_TIMEOUT \"",
              clipped(v), "\" is not a number of seconds from 0 to ", int64_t(kMaxBound),
              ": give decimal digits (e.g. 600 or 2.5; 0 turns the collective watchdog off; "
              "default ",
              int64_t(kDefaultBound), ")");
    b = s;
  }
  g_bound.store(b, std::memory_order_relaxed);
  return b;
}

void set_bound(double seconds) {
  MXT_CHECK(seconds >= 0 && seconds <= kMaxBound, "collective timeout ", seconds,
            " s is out of range: give 0 (off) to ", int64_t(kMaxBound), " s");
  std::lock_guard<std::mutex> lk(g_watcher_mutex);
  g_bound.store(seconds, std::memory_order_relaxed);
  g_armed.store(g_watcher && seconds > 0, std::memory_order_relaxed);
}

void start(int world_rank) {
  if (bound() <= 0) return;
  std::lock_guard<std::mutex> lk(g_watcher_mutex);
  if (g_watcher) return;
  auto* w = new Watcher;
  w->world_rank = world_rank;
  w->thread = std::thread(watch, w);
  g_watcher = w;
  g_armed.store(true, std::memory_order_relaxed);
}

void stop() {
  std::lock_guard<std::mutex> lk(g_watcher_mutex);
  if (!g_watcher) return;
  g_armed.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> wl(g_watcher->m);
    g_watcher->stop = true;
  }
  g_watcher->cv.notify_all();
  g_watcher->thread.join();
  delete g_watcher;
  g_watcher = nullptr;
}

}  // namespace mxtrain::dist::watchdog
