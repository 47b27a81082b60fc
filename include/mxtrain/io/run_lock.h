// mxtrain/io/run_lock.h — one run per output: an exclusive lock held while a run writes there.
//
// A lock is flock(2) on a lock file (`<checkpoint dir>/.lock`, `<metrics file>.lock`) that
// holds the owner's PID and host. A second run finds the flock taken and is refused with one
// line naming the holder. The kernel drops a flock when its process dies, however it dies, so
// a lock file whose flock is free is left over from a run that was killed: it is taken over,
// and the caller is told so. The owner removes the file when it lets go (destructor).
#pragma once

#include <string>

namespace mxtrain::io {

class RunLock {
 public:
  RunLock() = default;
  // Locks `lock_path` (created if missing; its directory must exist) for the output `what`
  // (`--checkpoint-dir runs/ck`). Throws "<what> is in use by another mxtrain run (PID 123 on
  // host h; lock file ...)" when another process holds it. When the file was left by a run
  // that died, *note (if given) gets a sentence saying it was taken over, else stays empty.
  static RunLock acquire(const std::string& lock_path, const std::string& what,
                         std::string* note = nullptr);
  ~RunLock();
  RunLock(RunLock&& o) noexcept;
  RunLock& operator=(RunLock&& o) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  RunLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void release() noexcept;
  std::string path_;
  int fd_ = -1;
};

}  // namespace mxtrain::io
