// fuzz/fuzz_report.cc — both layer-benchmark report formats on arbitrary text: mxtrain's own
// report parser and LoongForge's record lists (with their conversion to paired points), each
// giving a result or an mxtrain::Error, never a crash. A parsed mxtrain report must serialize
// and parse back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxtrain/common.h"
#include "mxtrain/policy/loongforge.h"
#include "mxtrain/policy/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain::policy;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)loongforge_to_report(parse_loongforge_report(text, "fuzz.json"));
  } catch (const mxtrain::Error&) {
  }
  Report r;
  try {
    r = parse_report(text, "fuzz.json");
  } catch (const mxtrain::Error&) {
    return 0;
  }
  const std::string once = report_to_json(r);
  try {
    if (report_to_json(parse_report(once, "re-serialized")) != once) std::abort();
  } catch (const mxtrain::Error&) {
    std::abort();
  }
  return 0;
}
