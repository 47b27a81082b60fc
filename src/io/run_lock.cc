// io/run_lock.cc — flock(2)-based run locks (mxtrain/io/run_lock.h).
//
// Taking a lock: open (create) the file, flock(LOCK_EX | LOCK_NB), then make sure the path
// still names the file locked: the previous holder removes the file as it lets go, so a run
// that opened the old file just before may hold a lock on a file no longer there; it starts
// again. Letting go: unlink, then close (which drops the flock).
#include "mxtrain/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain::io {
namespace {

std::string read_fd(int fd) {
  std::string s;
  char buf[256];
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0 || s.size() > 4096) break;
    s.append(buf, size_t(n));
    off += n;
  }
  return s;
}

// "PID 123 on host h" from the file's "123 h\n" (whatever it holds, shown plainly).
std::string holder_of(const std::string& text) {
  std::istringstream in(text);
  std::string pid, host;
  in >> pid >> host;
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos)
    return "an unknown process";
  return "PID " + pid + (host.empty() ? "" : " on host " + host);
}

std::string this_process() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::to_string(::getpid()) + " " + (host[0] ? host : "unknown") + "\n";
}

}  // namespace

RunLock RunLock::acquire(const std::string& lock_path, const std::string& what,
                         std::string* note) {
  if (note) note->clear();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      MXT_FAIL(what, ": cannot create the lock file ", lock_path, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = holder_of(read_fd(fd));
      ::close(fd);
      MXT_CHECK(err != EWOULDBLOCK, what, " is in use by another mxtrain run (", holder,
                "; lock file ", lock_path, "): wait for it to end or choose another path");
      MXT_FAIL(what, ": cannot lock ", lock_path, ": ", std::strerror(err));
    }
    struct stat mine {}, named {};
    if (::fstat(fd, &mine) != 0 || ::stat(lock_path.c_str(), &named) != 0 ||
        mine.st_ino != named.st_ino || mine.st_dev != named.st_dev) {
      ::close(fd);  // its holder removed it as we opened it: take the new one
      continue;
    }
    const std::string old = read_fd(fd);
    if (!old.empty() && note)
      *note = "took over the lock of " + what + " from a run that ended without releasing it (" +
              holder_of(old) + ")";
    const std::string me = this_process();
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
      const int err = errno;
      ::unlink(lock_path.c_str());
      ::close(fd);
      MXT_FAIL(what, ": cannot write the lock file ", lock_path, ": ", std::strerror(err));
    }
    return RunLock(lock_path, fd);
  }
  MXT_FAIL(what, ": cannot lock ", lock_path, ": the lock file keeps being replaced");
}

void RunLock::release() noexcept {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

RunLock::~RunLock() { release(); }

RunLock::RunLock(RunLock&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace mxtrain::io
