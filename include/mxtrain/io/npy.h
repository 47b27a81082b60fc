// mxtrain/io/npy.h — NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// The exchange format for single tensors: inputs and outputs of `mxtrain quantize` /
// `dequantize`, reference activations in tests. Only little-endian, C-order arrays of
// plain numeric dtypes are supported; everything else is refused with a message that
// says what was found and what is accepted. Writing produces the same bytes as
// numpy.save (v1.0 header, 64-byte aligned, padded for in-place growth) and is atomic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxtrain::io {

struct NpyArray {
  std::string dtype;           // NumPy descr: "<f4", "<f8", "|u1", "<i4", "<u2", ...
  std::vector<int64_t> shape;  // () for a scalar
  std::vector<uint8_t> data;   // C order, little-endian, numel() * itemsize() bytes

  int64_t numel() const;
  size_t itemsize() const;
};

// Accepted dtypes: |b1 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 <f2 <f4 <f8 ('<' or '|' for the
// one-byte kinds). Returns the item size; throws for anything else (big-endian,
// structured, strings, objects) with the reason.
size_t npy_itemsize(const std::string& dtype);
// "float32" for "<f4", etc. (for messages).
std::string npy_dtype_name(const std::string& dtype);

// Encode/decode in memory. `what` names the source in error messages (usually the path).
std::vector<uint8_t> npy_encode(const NpyArray& a);
NpyArray npy_decode(const uint8_t* bytes, size_t size, const std::string& what = "npy data");

NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& a);  // atomic (write_file_atomic)

// Builds an array by copying `numel(shape)` items from `data`.
NpyArray npy_make(const std::string& dtype, const std::vector<int64_t>& shape, const void* data);
inline NpyArray npy_from_f32(const float* data, const std::vector<int64_t>& shape) {
  return npy_make("<f4", shape, data);
}
inline NpyArray npy_from_u8(const uint8_t* data, const std::vector<int64_t>& shape) {
  return npy_make("|u1", shape, data);
}

// Throws unless `a` has the given dtype and number of dimensions (ndim < 0: any), e.g.
// "x.npy: expected a 2-D array, got shape (3, 4, 5)" or
// "x.npy: expected dtype float32 ('<f4'), got float64 ('<f8')".
void npy_require(const NpyArray& a, const std::string& dtype, int ndim, const std::string& what);

// Typed copies of the values; the dtype must be '<f4' / '|u1' respectively (any shape).
std::vector<float> npy_to_f32(const NpyArray& a, const std::string& what = "npy data");
std::vector<uint8_t> npy_to_u8(const NpyArray& a, const std::string& what = "npy data");

// "(3, 4)" — the shape as NumPy prints it.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace mxtrain::io
