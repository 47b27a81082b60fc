// cli/progress_bar.h — a progress bar on stderr for work counted in bytes (prepare-data, eval).
//
// On a terminal the bar is redrawn in place at most five times a second; otherwise (logs, CI)
// a line is printed at every tenth of the work, so a log stays short. It shows the fraction
// done, the amount, the rate and the time left.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mxtrain::cli {

class ProgressBar {
 public:
  // unit: what `done` counts ("MB" divides bytes by 1e6; anything else is shown as counted).
  ProgressBar(std::string label, std::string unit, bool enabled)
      : label_(std::move(label)), unit_(std::move(unit)), enabled_(enabled), tty_(isatty(2)),
        t0_(std::chrono::steady_clock::now()) {}

  void update(uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    const double s = seconds();
    const int tenth = int(10 * done / total);
    if (tty_ ? (s - last_s_ < 0.2 && done < total) : (tenth <= last_tenth_ && done < total)) return;
    last_s_ = s;
    last_tenth_ = tenth;
    const double scale = unit_ == "MB" ? 1e-6 : 1.0;
    const double rate = s > 0 ? double(done) * scale / s : 0;
    const double eta = done > 0 ? s / double(done) * double(total - done) : 0;
    char bar[21];
    const int fill = int(20 * done / total);
    for (int i = 0; i < 20; ++i) bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
    const int digits = unit_ == "MB" ? 1 : 0;  // MB with a decimal, counts whole
    std::fprintf(stderr, "%s%s [%s] %3d%% %.*f/%.*f %s | %.*f %s/s | ETA %.0fs%s",
                 tty_ ? "\r\033[K" : "", label_.c_str(), bar, int(100 * done / total), digits,
                 double(done) * scale, digits, double(total) * scale, unit_.c_str(), digits,
                 rate, unit_.c_str(), eta, tty_ ? "" : "\n");
    std::fflush(stderr);
    drawn_ = true;
  }
  // Ends the bar's line on a terminal.
  void finish() {
    if (enabled_ && tty_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::string label_, unit_;
  bool enabled_, tty_, drawn_ = false;
  std::chrono::steady_clock::time_point t0_;
  double last_s_ = -1;
  int last_tenth_ = -1;
};

}  // namespace mxtrain::cli
