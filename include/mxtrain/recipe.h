// mxtrain/recipe.h — scaling granularity, recipes and the named registry (docs/numerics.md,
// "Recipes").
//
// A recipe says how a quantized layer treats each tensor role: the element format of
// inputs, weight and grads, the scale rounding rule, and the weight layout (two 1x32
// copies for `mxfp8`, one 32x32 tile copy for `mxfp8-32x32`). `bf16` means no quantization.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/quantize.h"

namespace mxtrain {

enum class ScalingType : uint8_t { none, mx };

// block_size = [token_dim, input_dim, output_dim]. For type mx only [1,1,32] and
// [1,32,32] are valid.
struct ScalingGranularity {
  ScalingType type = ScalingType::none;
  std::array<int, 3> block_size{0, 0, 0};
  void validate() const;  // throws listing the valid block sizes
};

struct Recipe {
  std::string name;                 // "bf16" | "mxfp8" | "mxfp8-32x32" | ...
  ScalingGranularity granularity;
  std::string strategy = "dynamic"; // scales computed from the current tensor
  Elem input_elem = Elem::e4m3;
  Elem weight_elem = Elem::e4m3;
  Elem grad_elem = Elem::e4m3;
  ScaleRounding rounding = ScaleRounding::rceil;

  bool quantized() const { return granularity.type == ScalingType::mx; }
  bool weight_tiled() const { return quantized() && granularity.block_size[1] == 32; }
  QuantConfig input_cfg() const { return {input_elem, rounding}; }
  QuantConfig weight_cfg() const { return {weight_elem, rounding}; }
  QuantConfig grad_cfg() const { return {grad_elem, rounding}; }
  std::string describe() const;     // one line: name, granularity, elems, rounding
};

// Registered names, in a fixed order.
std::vector<std::string> recipe_names();
// Look up a recipe by name; throws listing the registered names.
Recipe get_recipe(const std::string& name);
// Build from a granularity (validated) — used by configs that spell the block size.
Recipe recipe_from_granularity(const ScalingGranularity& g);

}  // namespace mxtrain
