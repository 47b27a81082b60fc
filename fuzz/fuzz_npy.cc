// fuzz/fuzz_npy.cc — the .npy decoder on arbitrary bytes: it either returns an array whose
// data size matches its shape and dtype, or throws mxtrain::Error; never crashes. A decoded
// array must encode and decode back to the same shape, dtype and data.
#include <cstdint>
#include <cstdlib>

#include "mxtrain/common.h"
#include "mxtrain/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain::io;
  NpyArray a;
  try {
    a = npy_decode(data, size, "fuzz.npy");
  } catch (const mxtrain::Error&) {
    return 0;
  }
  if (a.data.size() != size_t(a.numel()) * a.itemsize()) std::abort();
  NpyArray b;
  try {
    b = npy_decode(npy_encode(a).data(), npy_encode(a).size(), "re-encoded");
  } catch (const mxtrain::Error&) {
    std::abort();  // what we decoded we must be able to write and read back
  }
  if (b.shape != a.shape || b.data != a.data) std::abort();
  return 0;
}
