// mxtrain/io/output_check.h — output paths checked before any work, and a line-oriented
// writer whose every write is checked.
//
// Outputs are also kept apart from inputs (check_outputs_apart): no command writes over, or
// into, what it or the run reads.
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
#include <vector>

namespace mxtrain::io {

// `path` will be written as a file (atomically, or appended to). Empty: nothing to check.
// An existing non-regular file (a device such as /dev/null) must be openable for writing.
void check_output_file(const std::string& path, const std::string& flag);

// `path` is a directory that will be created if missing (like mkdir -p) and written into.
// Every existing component must be a directory and the deepest existing one writable.
void check_output_dir(const std::string& path, const std::string& flag);

// A path a command reads or writes, with the option or key that named it ("--out",
// "data.path"), for the messages. `replaced`: an output directory the command replaces as a
// whole (quantize --out-dir, prepare-data --out, export --out, import --out), so nothing it
// holds may be an input either.
struct NamedPath {
  std::string name, path;
  bool replaced = false;
};

// Throws unless every output is apart from every input: not the same file or directory (real
// paths compared, symbolic and hard links followed), not inside an input directory (which
// the command, or a later run, reads whole), and no input inside an output it replaces —
// "--metrics-out ok.yaml: is --config ok.yaml; an output may not be written over an input".
// Empty paths (an option not given) and inputs that do not exist are skipped.
void check_outputs_apart(const std::vector<NamedPath>& outputs,
                         const std::vector<NamedPath>& inputs);

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
