// fuzz/fuzz_policy.cc — the adaptive-FP8 policy parser on arbitrary text: a policy or an
// mxtrain::Error, never a crash. A parsed policy must serialize and parse back to the same
// text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain::policy;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Policy p;
  try {
    p = parse_policy(text, "fuzz.json");
  } catch (const mxtrain::Error&) {
    return 0;
  }
  const std::string once = policy_to_json(p);
  try {
    if (policy_to_json(parse_policy(once, "re-serialized")) != once) std::abort();
  } catch (const mxtrain::Error&) {
    std::abort();
  }
  return 0;
}
