// train/progress.h — the one-line progress display (step, loss, tokens/s, ETA) on stderr.
//
// On a terminal the line is redrawn in place; otherwise (logs, CI) a line is printed about
// every 5% of the run so the log stays short.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace mxtrain {

inline std::string format_duration(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

class ProgressLine {
 public:
  ProgressLine(int64_t first_step, int64_t total, bool enabled)
      : first_(first_step), total_(total), enabled_(enabled), tty_(isatty(2)) {}

  void update(int64_t step, double loss, double tokens_per_s, double step_s, double elapsed_s,
              const std::string& extra = "") {
    if (!enabled_) return;
    const int64_t done = step + 1 - first_;
    const int64_t every = std::max<int64_t>(1, (total_ - first_) / 20);
    const bool last = step + 1 == total_;
    if (!tty_ && !last && done % every != 0 && done != 1) return;
    const double eta = done > 0 ? elapsed_s / double(done) * double(total_ - step - 1) : 0;
    std::fprintf(stderr, "%sstep %lld/%lld | loss %.4f | %.0f tok/s | %.0f ms/step | ETA %s%s%s",
                 tty_ ? "\r\033[K" : "", (long long)(step + 1), (long long)total_, loss,
                 tokens_per_s, step_s * 1e3, format_duration(eta).c_str(), extra.c_str(),
                 tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }
  // Print a message on its own line without breaking the progress line.
  void message(const std::string& s) {
    if (!enabled_) return;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", s.c_str());
  }

 private:
  int64_t first_, total_;
  bool enabled_, tty_;
};

}  // namespace mxtrain
