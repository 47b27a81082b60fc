// fuzz/fuzz_config.cc — the YAML training-config parser on arbitrary text: a config or an
// mxtrain::Error, never a crash or another exception. A parsed config's canonical YAML must
// parse back to the same canonical YAML.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxtrain/common.h"
#include "mxtrain/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  TrainConfig c;
  try {
    c = parse_config(text, "fuzz.yaml");
  } catch (const Error&) {
    return 0;
  }
  const std::string once = config_to_yaml(c);
  try {
    if (config_to_yaml(parse_config(once, "canonical")) != once) std::abort();
  } catch (const Error&) {
    std::abort();
  }
  return 0;
}
