// mxtrain/train/policy_oracle.h — the adaptive-FP8 policy as seen by the precision resolver.
//
// Loads a policy file (policy/policy.h) and answers, per module, whether FP8 pays off at the
// module's token count. Dense modules are looked up by (kind, name, tp=1); experts are
// promoted to the grouped kind and looked up by (etp=1, num_gemms = experts), with tokens ×
// top-k. (mxtrain runs without tensor or expert parallelism, so tp = etp = 1.)
#pragma once

#include <string>

#include "mxtrain/train/config.h"
#include "mxtrain/train/precision.h"

namespace mxtrain {

PolicyOracle load_policy_oracle(const std::string& path, const TrainConfig& cfg);

}  // namespace mxtrain
