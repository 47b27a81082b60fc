// dist/watchdog.h — private to src/dist: the collective watchdog behind comm.h's
// collective_timeout_s() (docs/distributed.md, "Collective watchdog").
//
// Every call in comm.cc that blocks on other ranks (a blocking collective, Request::wait(),
// a communicator split or duplicate, MPI_Finalize) holds a WaitScope while it runs: it records
// what the call is, on which communicator, and when it began, in one process-wide slot
// (atomics: a handful of stores, no lock, no system call). A thread started with the world
// (one per process with more than one rank) looks at the slot every bound/10 (at most every
// second, at least every 10 ms); when a call has been blocked longer than the bound it prints
// one line naming it and ends the job with MPI_Abort (exit status 1). Calls from one thread
// at a time are watched: the slot holds one call.
#pragma once

#include <chrono>

namespace mxtrain::dist::watchdog {

// What the slot describes; every pointer is a string with static lifetime (a literal).
struct Site {
  const char* what;  // "allreduce", "wait for reduce_scatter", "split", "finalize", ...
  const char* role;  // the communicator's role: "world", "tp", "dp", "ep", ...
  int rank, size;    // this process's rank in that communicator, and its size
};

// Arms the watchdog for one blocking call, disarms it on destruction. Nothing when the
// watchdog is not running. The call began now, or at `since` (a clock reading the caller
// already took: the armed path then reads no clock).
class WaitScope {
 public:
  explicit WaitScope(const Site& site);
  WaitScope(const Site& site, std::chrono::steady_clock::time_point since);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  bool armed_;
};

// The bound in seconds (0: off): MXTRAIN_COLLECTIVE_TIMEOUT when set (parsed on first use;
// throws mxtrain::Error naming it for a value that is not a decimal number of seconds), else
// the default, or what set_bound() set last.
double bound();
// Throws mxtrain::Error naming the value unless 0 <= seconds <= kMaxBound.
void set_bound(double seconds);
constexpr double kDefaultBound = 600;
constexpr double kMaxBound = 1e7;

// Starts the thread (once; when the bound is > 0). world_rank prefixes the message.
void start(int world_rank);
// Stops and joins the thread (when running).
void stop();

}  // namespace mxtrain::dist::watchdog
