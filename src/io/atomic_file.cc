// io/atomic_file.cc — file reading and crash-safe writing (see mxtrain/io/atomic_file.h).
//
// POSIX calls directly (open/write/fsync/rename) because std::filesystem cannot fsync.
// Every failure path removes what it created before throwing.
#include "mxtrain/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mxtrain/common.h"

namespace fs = std::filesystem;

namespace mxtrain::io {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string parent_of(const std::string& path) {
  fs::path p(path);
  fs::path parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Writes all parts to fd, retrying on EINTR and short writes. Returns 0 or an errno.
int write_all(int fd, const std::vector<std::span<const uint8_t>>& parts) {
  for (const auto& part : parts) {
    const uint8_t* p = part.data();
    size_t left = part.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      p += n;
      left -= size_t(n);
    }
  }
  return 0;
}

// Creates `path` exclusively, writes, fsyncs, closes. Throws after removing the file.
void create_write_sync(const std::string& path, const std::vector<std::span<const uint8_t>>& parts,
                       const std::string& shown_path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    MXT_FAIL("cannot write ", shown_path, ": ", errno_text(err),
             err == ENOENT ? " (the directory does not exist)" : "");
  }
  int err = write_all(fd, parts);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(path.c_str());
    MXT_FAIL("cannot write ", shown_path, ": ", errno_text(err));
  }
}

}  // namespace

const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a file";
}

std::vector<uint8_t> read_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer must not wait; regular files ignore it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) MXT_FAIL("file not found: ", path);
    MXT_FAIL("cannot read ", path, ": ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    MXT_FAIL("cannot read ", path, ": ", errno_text(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    MXT_FAIL(path, " is a directory, expected a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    MXT_FAIL(path, " is not a regular file but ", file_kind(st.st_mode),
             "; inputs are read whole, so they must be regular files");
  }
  std::vector<uint8_t> out;
  out.reserve(size_t(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      MXT_FAIL("cannot read ", path, ": ", errno_text(err));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

std::string read_text_file(const std::string& path) {
  std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}

std::string temp_sibling(const std::string& target, const char* tag) {
  static std::atomic<uint64_t> counter{0};
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();  // "dir/" -> "dir"
  std::string base = fs::path(t).filename().string();
  return parent_of(t) + "/." + base + "." + tag + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

namespace {
// The pid in a temp_sibling() name ".<base>.<tag>-<pid>-<n>" of `base` (any base when
// empty), or -1 when `name` is not one.
long temp_owner(const std::string& name, const std::string& base) {
  if (name.size() < 2 || name[0] != '.') return -1;
  const size_t dash2 = name.rfind('-');
  if (dash2 == std::string::npos || dash2 == 0) return -1;
  const size_t dash1 = name.rfind('-', dash2 - 1);
  if (dash1 == std::string::npos) return -1;
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.size() <= 18 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!digits(name.substr(dash1 + 1, dash2 - dash1 - 1)) || !digits(name.substr(dash2 + 1)))
    return -1;
  const size_t dot = name.rfind('.', dash1);
  if (dot == std::string::npos || dot == 0) return -1;
  const std::string tag = name.substr(dot + 1, dash1 - dot - 1);
  if (tag != "tmp" && tag != "old" && tag != "probe") return -1;
  if (!base.empty() && name.substr(1, dot - 1) != base) return -1;
  return std::stol(name.substr(dash1 + 1, dash2 - dash1 - 1));
}
}  // namespace

std::vector<std::string> remove_temporaries(const std::string& dir, const std::string& base) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const long pid = temp_owner(name, base);
    if (pid < 0 || pid == long(::getpid())) continue;
    if (remove_tree_noexcept(e.path().string())) removed.push_back(name);
  }
  return removed;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) MXT_FAIL("cannot open directory ", dir, " to sync it: ", errno_text(errno));
  int err = 0;
  if (::fsync(fd) != 0) err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories; that is not a write failure.
  if (err != 0 && err != EINVAL && err != ENOTSUP)
    MXT_FAIL("cannot sync directory ", dir, ": ", errno_text(err));
}

bool remove_tree_noexcept(const std::string& path) noexcept {
  std::error_code ec;
  fs::remove_all(path, ec);
  return !ec;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void write_file_atomic(const std::string& path,
                       const std::vector<std::span<const uint8_t>>& parts) {
  MXT_CHECK(!path.empty(), "cannot write a file with an empty path");
  MXT_CHECK(!is_directory(path), "cannot write ", path, ": it is a directory");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device or pipe (/dev/stdout, /dev/full): renaming over it would replace the device,
    // so it is written in place; every write and the close are still checked.
    int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) MXT_FAIL("cannot write ", path, ": ", errno_text(errno));
    int err = write_all(fd, parts);
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) MXT_FAIL("cannot write ", path, ": ", errno_text(err));
    return;
  }
  std::string tmp = temp_sibling(path);
  create_write_sync(tmp, parts, path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    MXT_FAIL("cannot write ", path, ": rename failed: ", errno_text(err));
  }
  fsync_dir(parent_of(path));
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  write_file_atomic(path, {std::span<const uint8_t>(static_cast<const uint8_t*>(data), size)});
}
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}
void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

void write_file_synced(const std::string& path,
                       const std::vector<std::span<const uint8_t>>& parts) {
  create_write_sync(path, parts, path);
}

// ---- AtomicDir ------------------------------------------------------------------------------

AtomicDir::AtomicDir(std::string target) : target_(std::move(target)) {
  MXT_CHECK(!target_.empty(), "output directory path is empty");
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  std::string parent = parent_of(target_);
  MXT_CHECK(is_directory(parent), "cannot create ", target_, ": parent directory ", parent,
            " does not exist");
  if (path_exists(target_))
    MXT_CHECK(is_directory(target_), "cannot create directory ", target_,
              ": a file with that name exists");
  tmp_ = temp_sibling(target_);
  if (::mkdir(tmp_.c_str(), 0755) != 0)
    MXT_FAIL("cannot create a directory next to ", target_, ": ", errno_text(errno));
}

AtomicDir::~AtomicDir() {
  if (!committed_) remove_tree_noexcept(tmp_);
}

std::string AtomicDir::file(const std::string& name) const { return tmp_ + "/" + name; }

void AtomicDir::write(const std::string& name, const std::vector<std::span<const uint8_t>>& parts) {
  MXT_CHECK(!committed_, "AtomicDir ", target_, " is already committed");
  MXT_CHECK(!name.empty() && name.find('/') == std::string::npos, "invalid file name '", name,
            "' (must be a plain name)");
  create_write_sync(file(name), parts, target_ + "/" + name);
}
void AtomicDir::write(const std::string& name, const void* data, size_t size) {
  write(name, {std::span<const uint8_t>(static_cast<const uint8_t*>(data), size)});
}
void AtomicDir::write(const std::string& name, const std::vector<uint8_t>& bytes) {
  write(name, bytes.data(), bytes.size());
}
void AtomicDir::write(const std::string& name, const std::string& text) {
  write(name, text.data(), text.size());
}

void AtomicDir::commit() {
  MXT_CHECK(!committed_, "AtomicDir ", target_, " is already committed");
  // Files written through write() are synced already; anything written by other means
  // under path() is synced here.
  for (const auto& entry : fs::recursive_directory_iterator(tmp_)) {
    if (!entry.is_regular_file()) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      MXT_FAIL("cannot sync ", entry.path().string(), ": ", errno_text(err));
    }
    ::close(fd);
  }
  fsync_dir(tmp_);
  const std::string parent = parent_of(target_);
  std::string old;
  if (path_exists(target_)) {
    MXT_CHECK(is_directory(target_), "cannot replace ", target_, ": it is not a directory");
    old = temp_sibling(target_, "old");
    if (::rename(target_.c_str(), old.c_str()) != 0)
      MXT_FAIL("cannot replace ", target_,
               ": moving the old directory aside failed: ", errno_text(errno));
  }
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
    int err = errno;
    if (!old.empty()) ::rename(old.c_str(), target_.c_str());  // put the old one back
    MXT_FAIL("cannot create ", target_, ": rename failed: ", errno_text(err));
  }
  committed_ = true;
  fsync_dir(parent);
  if (!old.empty()) remove_tree_noexcept(old);
}

}  // namespace mxtrain::io
