// mxtrain/io/atomic_file.h — reading files and writing them so that a crash or an error
// never leaves a half-written result.
//
// Every file mxtrain produces that matters (checkpoints, quantized tensors, policies,
// reports) goes through this layer. A single file is written to a temporary file in the
// same directory, fsync'ed, renamed over the target and the directory fsync'ed. A group of
// files (a checkpoint step, a quantize output directory) is built inside a temporary
// directory next to the target by AtomicDir and renamed into place only on commit(); if
// the target already exists it is moved aside first and removed after the new one is in,
// so at every moment the target path is either the complete old or the complete new set.
// Errors are mxtrain::Error messages naming the path and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mxtrain::io {

// Whole file contents. Throws "file not found: PATH", "cannot read PATH: <reason>", or
// "PATH is a directory, expected a file", or "PATH is not a regular file but a FIFO (named
// pipe)" (or a character device, ...): inputs are regular files, so a device such as
// /dev/zero is refused instead of read forever, and a FIFO is never waited on.
std::vector<uint8_t> read_file(const std::string& path);
std::string read_text_file(const std::string& path);
// What a stat() mode is, for messages: "a FIFO (named pipe)", "a character device", ...
const char* file_kind(unsigned mode);

// Atomically replaces `path` with the given bytes (temp file in the same directory, fsync,
// rename, fsync of the directory). The directory must exist. On failure the target is
// untouched and no temporary file remains. An existing device or pipe (/dev/stdout) is
// written in place, every write checked.
void write_file_atomic(const std::string& path, const void* data, size_t size);
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes);
void write_file_atomic(const std::string& path, const std::string& text);
// Gather form: the file is the concatenation of `parts` (no intermediate copy).
void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& parts);

// Writes a file that is not yet visible to anyone (inside an AtomicDir): plain create,
// write, fsync. Fails if the file exists.
void write_file_synced(const std::string& path, const std::vector<std::span<const uint8_t>>& parts);

// fsync of a directory, so a rename inside it is durable.
void fsync_dir(const std::string& dir);
// Recursive delete that never throws (used for cleanup); returns false if something
// could not be removed.
bool remove_tree_noexcept(const std::string& path) noexcept;

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);

// Builds a directory of files under a temporary name and renames it into place.
//
//   AtomicDir out("/data/q");              // parent "/data" must exist
//   out.write("a.npy", bytes);             // or write anything under out.path()
//   out.commit();                          // "/data/q" now holds exactly these files
//
// Destroying an AtomicDir that was not committed removes the temporary directory, so an
// exception thrown while building leaves nothing behind. The target, if it exists, must
// be a directory; it is replaced as a whole.
class AtomicDir {
 public:
  explicit AtomicDir(std::string target);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::string& target() const { return target_; }
  // The temporary directory files go into before commit().
  const std::string& path() const { return tmp_; }
  // path() + "/" + name.
  std::string file(const std::string& name) const;

  // Writes (and fsyncs) one file inside the temporary directory.
  void write(const std::string& name, const void* data, size_t size);
  void write(const std::string& name, const std::vector<uint8_t>& bytes);
  void write(const std::string& name, const std::string& text);
  void write(const std::string& name, const std::vector<std::span<const uint8_t>>& parts);

  // fsyncs every file and the directory, then moves it to target(). Call once.
  void commit();
  bool committed() const { return committed_; }

 private:
  std::string target_, tmp_;
  bool committed_ = false;
};

// A unique temporary name next to `target`: "<dir>/.<base>.tmp-<pid>-<n>".
std::string temp_sibling(const std::string& target, const char* tag = "tmp");

// Removes from `dir` what temp_sibling() named and a process other than this one left there
// (".<base>.tmp-<pid>-<n>", and the "old" and "probe" tags; only those of `base` when it is
// given): the leftovers of a writer killed before it renamed or removed them. For a caller
// that owns `dir` (holds its run lock), so no other writer can be at work there. Returns
// the names removed.
std::vector<std::string> remove_temporaries(const std::string& dir, const std::string& base = "");

}  // namespace mxtrain::io
