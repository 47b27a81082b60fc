// train/run_outputs.h — what a training run writes besides the checkpoints' contents, and
// the guards around it (docs/reliability.md, "One run per output"):
//   * the metrics file, one JSON object per line, flushed as written;
//   * the locks that keep a second run off the same checkpoint directory and metrics file
//     (io/run_lock.h), and, once they are held, the removal of what an interrupted run left
//     there (temporary checkpoint directories, a half-written `latest`, a metrics rewrite);
//   * on resume, the metrics rows after the checkpoint's step dropped, so that every step
//     appears once however often the run was interrupted.
// Under FSDP only rank 0 calls these (it alone writes files).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "mxtrain/io/output_check.h"
#include "mxtrain/io/run_lock.h"

namespace mxtrain {

// Appends one JSON object per line and flushes, so a crash keeps what was written; a failed
// write (full disk) stops the run with the path. Without open() (no --metrics-out, or not
// the writing rank) every write is dropped. The file is opened (a fresh run's truncated) at
// the first row, not at open(): a run that fails before its first step leaves an earlier
// file as it was.
class MetricsWriter {
 public:
  void open(const std::string& path, bool append) {
    path_ = path;
    append_ = append;
  }
  void write(const nlohmann::json& j) {
    if (path_.empty()) return;
    if (!out_) out_ = std::make_unique<io::LineWriter>(path_, append_);
    out_->write(j.dump() + "\n");
  }
  void close() {
    if (out_) out_->close();
  }

 private:
  std::string path_;
  bool append_ = false;
  std::unique_ptr<io::LineWriter> out_;
};

struct OutputLocks {
  io::RunLock checkpoint, metrics;
};

// Takes `<checkpoint_dir>/.lock` (creating the directory) and `<metrics_out>.lock` (when the
// metrics go to a file, not a device or pipe), empty paths skipped; then removes the
// leftovers of interrupted runs in the checkpoint directory and beside the metrics file.
// Every takeover of a stale lock and every removal is said on stderr.
OutputLocks lock_outputs(const std::string& checkpoint_dir, const std::string& metrics_out);

// Rewrites the metrics file `path` (atomically) without the rows of steps after `step`, and
// without a last line cut short by a kill. With `validation_due` (the checkpoint's validation
// is still to run: TrainerState::validation_due) a validation row of `step` itself goes too,
// one that a resume wrote before it was killed. Rows without a step (none today) are kept; a
// summary row counts as its `steps`. Returns the number of lines dropped; a missing file or
// a device drops nothing.
int64_t trim_metrics(const std::string& path, int64_t step, bool validation_due = false);

}  // namespace mxtrain
