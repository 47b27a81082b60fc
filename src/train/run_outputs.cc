// train/run_outputs.cc — output locks, leftovers of interrupted runs, metrics trimmed at
// resume (train/run_outputs.h).
#include "train/run_outputs.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/json_input.h"

namespace mxtrain {
namespace fs = std::filesystem;

namespace {

bool is_regular_or_missing(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode);
}

void say_removed(const std::vector<std::string>& names, const std::string& where) {
  if (names.empty()) return;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  std::fprintf(stderr, "note: removed %zu temporary file(s) an interrupted run left in %s: %s\n",
               names.size(), where.c_str(), list.c_str());
}

io::RunLock take(const std::string& lock_path, const std::string& what) {
  std::string note;
  io::RunLock lock = io::RunLock::acquire(lock_path, what, &note);
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  return lock;
}

}  // namespace

OutputLocks lock_outputs(const std::string& checkpoint_dir, const std::string& metrics_out) {
  OutputLocks locks;
  if (!checkpoint_dir.empty()) {
    std::error_code ec;
    fs::create_directories(checkpoint_dir, ec);
    MXT_CHECK(!ec, "--checkpoint-dir ", checkpoint_dir, ": cannot create it: ", ec.message());
    locks.checkpoint = take(checkpoint_dir + "/.lock", "--checkpoint-dir " + checkpoint_dir);
    say_removed(io::remove_temporaries(checkpoint_dir), checkpoint_dir);
  }
  if (!metrics_out.empty() && is_regular_or_missing(metrics_out)) {
    locks.metrics = take(metrics_out + ".lock", "--metrics-out " + metrics_out);
    const fs::path p(metrics_out);
    const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
    say_removed(io::remove_temporaries(dir, p.filename().string()), dir);
  }
  return locks;
}

int64_t trim_metrics(const std::string& path, int64_t step, bool validation_due) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const std::string text = io::read_text_file(path);
  std::string kept;
  int64_t dropped = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {  // the last line, cut short
      ++dropped;
      break;
    }
    const std::string line = text.substr(pos, nl - pos + 1);
    pos = nl + 1;
    nlohmann::json row;  // a line that is no row of ours is kept as it is
    try {
      io::check_json_depth(line, path);
      row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    } catch (const Error&) {
    }
    int64_t at = 0;
    if (row.is_object()) {
      if (row.contains("step") && row["step"].is_number_integer()) at = row["step"].get<int64_t>();
      else if (row.contains("steps") && row["steps"].is_number_integer())
        at = row["steps"].get<int64_t>();
    }
    if (at > step || (validation_due && at == step && row.contains("val_loss"))) {
      ++dropped;
      continue;
    }
    kept += line;
  }
  if (dropped > 0) io::write_file_atomic(path, kept);
  return dropped;
}

}  // namespace mxtrain
