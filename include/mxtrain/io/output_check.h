// mxtrain/io/output_check.h — output paths checked before any work, and a line-oriented
// writer whose every write is checked.
//
// A long run must not discover at its end that its checkpoint directory or metrics file
// cannot be written. `check_output_file` / `check_output_dir` are called at start-up: they
// refuse a path under a regular file, a missing parent, a read-only directory or file, or a
// directory where a file is expected, with a one-line message naming the flag and the path.
// They create nothing that stays behind (writability is probed with a temporary file that
// is removed at once). A full disk can only be seen when writing: `LineWriter` checks every
// write and flush and its close, and throws with the path.
#pragma once

#include <cstdio>
#include <string>

namespace mxtrain::io {

// `path` will be written as a file (atomically, or appended to). Empty: nothing to check.
// An existing non-regular file (a device such as /dev/null) must be openable for writing.
void check_output_file(const std::string& path, const std::string& flag);

// `path` is a directory that will be created if missing (like mkdir -p) and written into.
// Every existing component must be a directory and the deepest existing one writable.
void check_output_dir(const std::string& path, const std::string& flag);

// Appends text to a file, flushing after each write; any failure throws
// "cannot write PATH: <reason>".
class LineWriter {
 public:
  LineWriter() = default;
  LineWriter(const std::string& path, bool append);
  ~LineWriter();  // closes without checking; call close() to see errors
  LineWriter(const LineWriter&) = delete;
  LineWriter& operator=(const LineWriter&) = delete;

  bool is_open() const { return f_ != nullptr; }
  void write(const std::string& text);
  void close();

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace mxtrain::io
