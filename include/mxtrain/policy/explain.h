// mxtrain/policy/explain.h — `mxtrain policy explain`: why a policy has the rules it has
// (docs/adaptive.md "Explain").
//
// For every key the reports measured: each paired measurement (tokens, padded rows,
// milliseconds, speedup, win or not, report and LoongForge model/case), the rule — merged
// from the reports, or taken from a given policy file — and why its range starts and ends
// where it does. When LoongForge-format reports are among the inputs, LoongForge's own
// merge is run over them too (policy/loongforge.h) and every measured size where it would
// decide differently is listed with what that choice costs in time.
#pragma once

#include <string>
#include <vector>

#include "mxtrain/policy/loongforge.h"
#include "mxtrain/policy/policy.h"

namespace mxtrain::policy {

// `given` (with `given_source`, its file name) replaces the merged rules when not null.
std::string explain_reports(const std::vector<LoadedReport>& reports, double speedup_threshold,
                            const Policy* given = nullptr, const std::string& given_source = "");

}  // namespace mxtrain::policy
