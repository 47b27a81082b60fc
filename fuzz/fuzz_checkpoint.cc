// fuzz/fuzz_checkpoint.cc — the checkpoint readers on arbitrary bytes: the safetensors
// decoder directly, and the first byte chooses whether the rest is used as a
// model.safetensors or as state.json of a step directory loaded with load_checkpoint.
// Every outcome is a loaded checkpoint or an mxtrain::Error; never a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checkpoint.h"
#include "mxtrain/io/safetensors.h"

namespace {

std::string scratch_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/mxt_fuzz_checkpoint_" +
                    std::to_string(::getpid());
    mxtrain::io::remove_tree_noexcept(d);
    std::string step = d + "/step_1";
    std::system(("mkdir -p '" + step + "'").c_str());
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain::io;
  try {
    safetensors_decode(data, size, "fuzz.safetensors");
  } catch (const mxtrain::Error&) {
  }
  if (size == 0) return 0;
  const std::string step = scratch_dir() + "/step_1";
  const bool as_state = data[0] & 1;
  write_file_atomic(step + (as_state ? "/state.json" : "/model.safetensors"), data + 1, size - 1);
  try {
    load_checkpoint(step);
  } catch (const mxtrain::Error&) {
  }
  return 0;
}
