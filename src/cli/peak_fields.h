// cli/peak_fields.h — what `bench gemm` and `bench linear` share to report their rows as a
// percentage of the machine's peak (mxtrain/peak.h): the --peak option and the row fields
// saying which peak that is.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/values.h"
#include "mxtrain/peak.h"

namespace mxtrain::cli {

inline void add_peak_option(CLI::App* sub, double& gflops) {
  sub->add_option("--peak", gflops,
                  "Peak in GFLOP/s that pct_of_peak is relative to (default: measured at the "
                  "start of the run: the reference loop of `mxtrain bench peak` at all threads)")
      ->check(number_at_least(0, /*exclusive=*/true));
}

// peak_gflops, peak_source ("measured" or "given"), and peak_kind / peak_threads when measured.
inline void add_peak_fields(nlohmann::json& row, const ReferencePeak& p) {
  row["peak_gflops"] = p.gflops;
  row["peak_source"] = p.measured ? "measured" : "given";
  if (p.measured) {
    row["peak_kind"] = peak_kind_name(p.kind);
    row["peak_threads"] = p.threads;
  }
}

}  // namespace mxtrain::cli
