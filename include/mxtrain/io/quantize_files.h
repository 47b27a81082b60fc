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
//               "scale_rounding", "layout", "shape": [M, K], "block": 32, "files": [...]}
// 4-bit recipes (nvfp4, mxfp4) write one role's copies (--role weight by default, input or
// grad): uint8 codes [M, ceil(K/2)] (two E2M1 codes per byte, element 2i in the low nibble:
// torchao's pack_uint4), uint8 E4M3 (nvfp4) or E8M0 (mxfp4) scale grids, and for nvfp4 each
// copy's FP32 tensor scale [1] (rowwise_tensor_scale.npy, colwise_tensor_scale.npy,
// tensor_scale.npy); nvfp4's weight is one 16x16-tile copy (data.npy, scale.npy
// [ceil(M/16), ceil(K/16)]), its input and grad rowwise + colwise (the colwise copy of the
// random-Hadamard-transformed matrix). meta.json adds "role", "scale_type", "codes_per_byte": 2,
// "tensor_scale", "order", "stochastic_rounding" (keyed by SrKey{}: seed 0) and "colwise_rht".
// FP32-scaled recipes (blockwise) write FP32 scale_inv grids (float32 .npy) for one role:
//   role input (the default), rowwise and colwise from one read of X:
//     rowwise.npy [M, K], rowwise_scale_inv.npy [M, ceil(K/128)],
//     colwise.npy [M, K], colwise_scale_inv.npy [ceil(M/128), K]
//   role weight:
//     data.npy [M, K], scale_inv.npy [ceil(M/128), ceil(K/128)]
//   meta.json as above without "scale_rounding", with "role", "scale_type" (fp32_pow2, or
//   fp32 with fp32_scales), "amax_epsilon", "block": 128 and layout "rowwise+colwise" or
//   "tile128".
// fp8-current (one FP32 scale per tensor) writes, for either role, one copy:
//     data.npy [M, K], scale_inv.npy [1] float32
//   meta.json as for blockwise, with scale_type fp32, "block": 0 and layout "tensor";
//   --fp32-scales and --scale-rounding are refused. fp8-delayed is refused: its scale comes
//   from an amax history, a training state.
// The element format defaults to the role's (E4M3) and the MX rounding to the recipe's
// (rceil). MX recipes write the weight's copies and take no role, epsilon or fp32_scales;
// FP32-scaled recipes take no scale rounding. `bf16` quantizes nothing and is refused. The
// directory is built under a temporary name and renamed into place, so a failure leaves no
// output; an existing output directory is replaced only if it is empty or was itself written
// by quantize. Dequantizing reads the rowwise copy (mxfp8, blockwise inputs) or the tile copy
// (mxfp8-32x32, blockwise weights) and writes float32 [M, K] atomically, after checking every file against meta.json.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain::io {

struct QuantizeFilesOptions {
  std::string recipe;                     // registered recipe name
  std::optional<Elem> elem;               // default: the recipe's weight element
  std::optional<ScaleRounding> rounding;  // default: the recipe's scale rounding (MX only)
  std::optional<Role> role = {};          // FP32-scaled recipes: input (default) or weight
  std::optional<float> amax_epsilon = {}; // FP32-scaled recipes: finite, >= 0 (default: the
                                          // role's, 0)
  bool fp32_scales = false;               // FP32-scaled recipes: fp32 instead of fp32_pow2
  Nvfp4Order nvfp4_order = Nvfp4Order::torchao;  // nvfp4: the order of its two levels
};

// "input" | "weight" -> Role; anything else throws naming the choices (for --role).
Role parse_quantize_role(const std::string& name);

// What a quantization with these options uses: the recipe with the options applied to the
// role they select, that role, and its element format and MX rounding. Checks the options
// against the recipe's kind (the errors of `mxtrain quantize`); the Python module's
// quantize() asks it too, so both take the same options the same way.
struct QuantizeSetup {
  Recipe recipe;
  Role role = Role::weight;
  QuantConfig cfg;
  const TensorFormat& format() const { return recipe.role(role); }
  bool fp32_scaled() const;  // FP32 scale_inv grids (blockwise) rather than E8M0 bytes
  bool per_tensor() const;   // one FP32 scale_inv for the tensor (fp8-current)
};
QuantizeSetup quantize_setup(const QuantizeFilesOptions& opt);

struct QuantizeFilesResult {
  int64_t rows = 0, cols = 0;
  QuantConfig cfg;                 // the element format (and MX rounding) used
  Role role = Role::weight;        // the role whose copies were written
  ScaleType scale = ScaleType::e8m0;
  float amax_epsilon = 0.f;        // FP32-scaled recipes
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
