// mxtrain/io/quantize_files.h — quantize a .npy matrix into a directory of .npy files and
// back: the logic behind `mxtrain quantize` / `mxtrain dequantize`.
//
// Input X.npy is a 2-D little-endian float32 array [M, K]. The output directory holds
// uint8 .npy files (FP8 codes and E8M0 scale bytes, layouts of docs/numerics.md) and meta.json:
//   mxfp8 (and other 1x32 recipes), dual-axis from one read of X:
//     rowwise.npy [M, K], rowwise_scale.npy [M, ceil(K/32)],
//     colwise.npy [M, K], colwise_scale.npy [ceil(M/32), K]
//   mxfp8-32x32:
//     data.npy [M, K], scale.npy [ceil(M/32), ceil(K/32)]
//   meta.json: {"format": "mxtrain-quantized", "version": 1, "recipe", "elem",
//               "scale_rounding", "layout", "shape": [M, K], "files": [...]}
// The element format defaults to the recipe's weight element (E4M3) and the rounding to the
// recipe's (rceil). `bf16` quantizes nothing and is refused. The directory is built under a
// temporary name and renamed into place, so a failure leaves no output; an existing output
// directory is replaced only if it is empty or was itself written by quantize.
// Dequantizing reads the rowwise copy (mxfp8) or the tile copy (mxfp8-32x32) and writes
// float32 [M, K] atomically, after checking every file against meta.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"

namespace mxtrain::io {

struct QuantizeFilesOptions {
  std::string recipe;                     // registered recipe name
  std::optional<Elem> elem;               // default: the recipe's weight element
  std::optional<ScaleRounding> rounding;  // default: the recipe's scale rounding
};

struct QuantizeFilesResult {
  int64_t rows = 0, cols = 0;
  QuantConfig cfg;
  std::vector<std::string> files;  // written, meta.json last
};

QuantizeFilesResult quantize_npy_to_dir(const std::string& input_npy, const std::string& out_dir,
                                        const QuantizeFilesOptions& opt);

struct DequantizeFilesOptions {
  std::string recipe;        // must match meta.json
  std::optional<Elem> elem;  // if given, must match meta.json
};

struct DequantizeFilesResult {
  int64_t rows = 0, cols = 0;
  Elem elem = Elem::e4m3;
  std::string source;  // the .npy file the values came from ("rowwise.npy" / "data.npy")
};

DequantizeFilesResult dequantize_dir_to_npy(const std::string& in_dir,
                                            const std::string& output_npy,
                                            const DequantizeFilesOptions& opt);

}  // namespace mxtrain::io
