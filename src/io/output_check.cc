// io/output_check.cc — start-up checks of output paths and the checked line writer
// (see mxtrain/io/output_check.h).
#include "mxtrain/io/output_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"

namespace fs = std::filesystem;

namespace mxtrain::io {
namespace {

std::string strip_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Creates and removes a file in `dir`; returns 0 or the errno of the failure.
int probe_dir_writable(const std::string& dir) {
  const std::string probe = temp_sibling(dir + "/x", "probe");
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

}  // namespace

void check_output_file(const std::string& raw, const std::string& flag) {
  if (raw.empty()) return;
  const std::string path = strip_slashes(raw);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    MXT_CHECK(!S_ISDIR(st.st_mode), flag, " ", raw, ": is a directory, expected a file path");
    if (!S_ISREG(st.st_mode)) {  // a device or pipe: written in place
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      MXT_CHECK(fd >= 0, flag, " ", raw, ": cannot open for writing: ", std::strerror(errno));
      ::close(fd);
      return;
    }
    MXT_CHECK(::access(path.c_str(), W_OK) == 0, flag, " ", raw,
              ": cannot write: ", std::strerror(errno));
  }
  const std::string parent = parent_dir(path);
  struct stat pst {};
  if (::stat(parent.c_str(), &pst) != 0) {
    const int err = errno;
    MXT_FAIL(flag, " ", raw, ": directory ", parent,
             err == ENOTDIR ? " is under a file, not a directory" : " does not exist");
  }
  MXT_CHECK(S_ISDIR(pst.st_mode), flag, " ", raw, ": ", parent, " is a file, not a directory");
  const int err = probe_dir_writable(parent);
  MXT_CHECK(err == 0, flag, " ", raw, ": cannot create files in ", parent, ": ",
            std::strerror(err));
}

void check_output_dir(const std::string& raw, const std::string& flag) {
  MXT_CHECK(!raw.empty(), flag, ": the directory path is empty");
  // Walk up to the deepest component that exists; it must be a directory we can write to
  // (everything below it will be created).
  std::string p = strip_slashes(raw);
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      MXT_CHECK(S_ISDIR(st.st_mode), flag, " ", raw, ": ", p,
                p == strip_slashes(raw) ? " exists and is not a directory"
                                        : " is a file, not a directory");
      const int err = probe_dir_writable(p);
      MXT_CHECK(err == 0, flag, " ", raw, ": cannot create files in ", p, ": ",
                std::strerror(err));
      return;
    }
    const int err = errno;
    MXT_CHECK(err == ENOENT || err == ENOTDIR, flag, " ", raw, ": cannot access ", p, ": ",
              std::strerror(err));
    const std::string up = parent_dir(p);
    if (up == p) MXT_FAIL(flag, " ", raw, ": no existing parent directory");
    p = up;
  }
}

namespace {

// What a path denotes: its canonical form (symbolic links resolved as far as the path
// exists) and, when it exists, its device and inode (hard links, bind mounts).
struct RealPath {
  fs::path canonical;
  bool exists = false, dir = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

RealPath real_path(const std::string& p) {
  RealPath r;
  std::error_code ec;
  r.canonical = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r.canonical = fs::absolute(p).lexically_normal();
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) {
    r.exists = true;
    r.dir = S_ISDIR(st.st_mode);
    r.dev = st.st_dev;
    r.ino = st.st_ino;
  }
  return r;
}

bool same(const RealPath& a, const RealPath& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return a.canonical == b.canonical;
}

// Whether `inner` lies strictly below directory `outer` (component-wise).
bool inside(const RealPath& inner, const RealPath& outer) {
  auto o = outer.canonical.begin(), i = inner.canonical.begin();
  for (; o != outer.canonical.end(); ++o, ++i)
    if (i == inner.canonical.end() || *o != *i) return false;
  return i != inner.canonical.end();
}

}  // namespace

void check_outputs_apart(const std::vector<NamedPath>& outputs,
                         const std::vector<NamedPath>& inputs) {
  for (const NamedPath& out : outputs) {
    if (out.path.empty()) continue;
    const RealPath o = real_path(out.path);
    for (const NamedPath& in : inputs) {
      if (in.path.empty()) continue;
      const RealPath i = real_path(in.path);
      if (!i.exists) continue;
      const std::string said = out.name + " " + shown(out.path) + ": ";
      MXT_CHECK(!same(o, i), said, "is ", in.name, " ", shown(in.path),
                "; an output may not be written over an input: choose another path");
      MXT_CHECK(!(i.dir && inside(o, i)), said, "lies inside ", in.name, " ", shown(in.path),
                ", a directory that is read as input: choose a path outside it");
      MXT_CHECK(!(out.replaced && inside(i, o)), said, in.name, " ", shown(in.path),
                " lies inside it, and the command replaces that directory: choose an output "
                "directory apart from the inputs");
    }
  }
}

LineWriter::LineWriter(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  MXT_CHECK(f_, "cannot open ", path, " for writing: ", std::strerror(errno));
}

LineWriter::~LineWriter() {
  if (f_) std::fclose(f_);
}

void LineWriter::write(const std::string& text) {
  if (!f_) return;
  errno = 0;
  const size_t n = std::fwrite(text.data(), 1, text.size(), f_);
  int err = n == text.size() ? 0 : (errno ? errno : EIO);
  if (err == 0 && std::fflush(f_) != 0) err = errno ? errno : EIO;
  if (err != 0) {
    std::fclose(f_);
    f_ = nullptr;
    MXT_FAIL("cannot write ", path_, ": ", std::strerror(err));
  }
}

void LineWriter::close() {
  if (!f_) return;
  std::FILE* f = f_;
  f_ = nullptr;
  errno = 0;
  // fsync is refused by devices and pipes (EINVAL, EROFS); that is not a lost write.
  int err = 0;
  if (std::fflush(f) != 0) err = errno ? errno : EIO;
  if (err == 0 && ::fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS &&
      errno != ENOTSUP)
    err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno ? errno : EIO;
  MXT_CHECK(err == 0, "cannot write ", path_, ": ", std::strerror(err));
}

}  // namespace mxtrain::io
