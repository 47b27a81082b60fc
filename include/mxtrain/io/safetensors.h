// mxtrain/io/safetensors.h — the safetensors tensor-collection format.
//
// Checkpoints (model weights, optimizer state) are safetensors files so standard tools
// (the `safetensors` Python/Rust packages, PyTorch, Hugging Face) can read them. Layout,
// exactly as the official writer produces it:
//   8 bytes   N, little-endian u64
//   N bytes   JSON header {"__metadata__": {str: str}, name: {"dtype", "shape",
//             "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   data      tensors back to back; offsets relative to the start of this section
// Tensors are stored largest dtype first (then by name) so each one is aligned to its
// item size. Reading validates the whole structure and refuses anything the official
// reader would refuse, with a message naming the file and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace mxtrain::io {

// Accepted dtype names: BOOL U8 I8 F8_E4M3 F8_E5M2 F8_E8M0 U16 I16 F16 BF16 U32 I32 F32
// U64 I64 F64. Returns the item size in bytes; throws listing them for anything else.
size_t st_dtype_size(const std::string& dtype);

// A tensor to write: its bytes are referenced, not copied.
struct StTensorView {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // numel * item size bytes, little-endian, C order
};

// A tensor read from a file (owns its bytes).
struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  int64_t numel() const;
};

struct Safetensors {
  std::vector<StTensor> tensors;                        // in file (data offset) order
  std::map<std::string, std::string> metadata;          // "__metadata__"
  const StTensor* find(const std::string& name) const;  // nullptr if absent
};

// The file as a list of byte ranges: parts[0] is the 8-byte length plus padded header
// (owned by `header`), the rest reference the tensors' data in file order. Writing the
// parts back to back gives the file without copying tensor data.
struct StSerialized {
  std::vector<uint8_t> header;
  std::vector<std::span<const uint8_t>> parts;
  uint64_t total_size = 0;
};
// Checks names (non-empty, unique, not "__metadata__"), dtypes and data sizes.
StSerialized safetensors_serialize(const std::vector<StTensorView>& tensors,
                                   const std::map<std::string, std::string>& metadata = {});
std::vector<uint8_t> safetensors_encode(const std::vector<StTensorView>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});
// Atomic write (write_file_atomic).
void write_safetensors(const std::string& path, const std::vector<StTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// `what` names the source in error messages (usually the path).
Safetensors safetensors_decode(const uint8_t* bytes, size_t size,
                               const std::string& what = "safetensors data");
Safetensors read_safetensors(const std::string& path);

// View of a float buffer as F32 tensor bytes (for StTensorView::data).
inline std::span<const uint8_t> f32_span(const float* p, size_t n) {
  return {reinterpret_cast<const uint8_t*>(p), n * sizeof(float)};
}

}  // namespace mxtrain::io
