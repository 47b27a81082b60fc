// mxtrain/recipe.h — recipes as data: how a quantized layer stores each of its tensors, and
// the named registry (docs/numerics.md, "Recipes").
//
// A recipe gives each role of a linear layer — its input x, its weight W and the gradient dy
// of its output — a TensorFormat: the element format, the scale type, the block a scale
// covers, the rule that turns a block's amax into its scale (with an amax epsilon), and where
// the amax comes from. The registry's entries are values of these types, parsed once from a
// name (get_recipe: configs, CLI options, the Python module); everything after that reads the
// types. Which copies of a role's matrix the products read follows from its format alone
// (copies_needed in mxtrain/qtensor.h). `bf16` stores every role in BF16, unscaled.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"

namespace mxtrain {

// The tensors a linear layer y = x · W^T quantizes.
enum class Role : uint8_t { input, weight, grad };
constexpr int kNumRoles = 3;
const char* role_name(Role r);  // "input" | "weight" | "grad"

// The block one scale covers, as [rows, cols] of the role's matrix ([tokens, features] for
// inputs and grads, [out, in] for weights). 1-D blocks run along the axis a product reduces
// over, so a matrix reduced along both axes (by different products) gets a copy per axis;
// a 2-D block or one scale for the whole tensor serves both axes with one copy.
enum class BlockShape : uint8_t { none, b1x32, b32x32, b1x128, b128x128, tensor, b1x16, b16x16 };
// "none" | "1x32" | "32x32" | "1x128" | "128x128" | "tensor" | "1x16" | "16x16"
const char* block_name(BlockShape b);
// Elements along one edge of the block (1x32: 32, 32x32: 32, 1x16: 16, ...; tensor and none: 0).
int block_edge(BlockShape b);
// Whether one block spans both axes (16x16, 32x32, 128x128, tensor).
bool block_is_2d(BlockShape b);

// Where a block's amax comes from: the tensor being quantized, or a history of earlier amaxes
// (delayed scaling).
enum class ScaleSource : uint8_t { current, amax_history };
const char* scale_source_name(ScaleSource s);  // "current" | "amax_history"

// Which amax of an amax history a delayed scale is computed from (TransformerEngine's
// amax_compute_algo): the largest in the history, or the latest step's.
enum class AmaxAlgo : uint8_t { max, most_recent };
const char* amax_algo_name(AmaxAlgo a);          // "max" | "most_recent"
AmaxAlgo parse_amax_algo(const std::string& s);  // throws listing the valid names

// The amax history of a format whose scale source is amax_history (mxtrain/scale_history.h):
// how many steps it holds, the margin (scale = fp8_max / amax / 2^margin) and the algorithm.
// All zero for every other format.
struct AmaxHistorySpec {
  int32_t length = 0;  // >= 1 for amax_history formats
  int32_t margin = 0;  // >= 0
  AmaxAlgo algo = AmaxAlgo::max;
  bool operator==(const AmaxHistorySpec&) const = default;
};

// How one role is stored for the products.
struct TensorFormat {
  ScaleType scale = ScaleType::none;  // none: the role is kept in BF16 (no scale, no block)
  Elem elem = Elem::e4m3;             // the element format when scaled
  BlockShape block = BlockShape::none;
  ScaleRounding rule = ScaleRounding::rceil;  // amax -> scale (E8M0: rceil or floor)
  float amax_epsilon = 0.f;                   // a block's amax below it counts as it (0: none)
  ScaleSource source = ScaleSource::current;
  AmaxHistorySpec history;  // source amax_history only
  // 4-bit formats (E2M1 elements: NVFP4, MXFP4; docs/numerics.md, "4-bit formats"):
  bool tensor_scale = false;               // NVFP4's second-level FP32 scale per tensor
  Nvfp4Order order = Nvfp4Order::torchao;  // how NVFP4's two levels round
  bool stochastic = false;                 // stochastic element rounding (Philox-keyed)
  bool rht = false;  // the wgrad (colwise) copy is of the random-Hadamard-transformed matrix

  bool quantized() const { return scale != ScaleType::none; }
  bool is_4bit() const { return quantized() && elem_is_4bit(elem); }
  // The settings of the MX quantize kernels (quantize.h) for this format.
  QuantConfig quant_config() const { return {elem, rule}; }
  // The settings of the 4-bit kernels (quantize_fp4) for this format's copy `layout`, its
  // stochastic rounding drawing from `sr` (RHT applies to the colwise copy only).
  Fp4Config fp4_config(MXLayout layout, const SrKey& sr = {}) const;
  // e.g. "e4m3, e8m0 scales per 1x32 block, rceil, current amax"; "bf16 (no scale)".
  std::string describe() const;
  bool operator==(const TensorFormat&) const = default;
};

// A default-constructed Recipe is the registry's bf16 entry.
struct Recipe {
  std::string name = "bf16";  // the registry key: "bf16" | "mxfp8" | "mxfp8-32x32" | ...
  std::array<TensorFormat, kNumRoles> roles;
  std::string note = "no quantization: BF16 products";  // one line for `mxtrain recipes`

  const TensorFormat& role(Role r) const { return roles[size_t(r)]; }
  TensorFormat& role(Role r) { return roles[size_t(r)]; }
  // Whether any role is scaled (every registered recipe scales all roles or none).
  bool quantized() const;
  // Every role with the given scale rule (precision.scale_rounding).
  void set_rule(ScaleRounding rule);
  // Several lines: the name and note, then one line per role.
  std::string describe() const;
  bool operator==(const Recipe&) const = default;
};

// Whether defer_backward_quant can apply under recipe r: it defers the backward copy of the
// layer's input, so the recipe must quantize inputs. The one statement of this rule (asked by
// LinearPrecision::validate and the config parser, each naming its own context).
bool defer_backward_quant_applies(const Recipe& r);

// Whether the quantized products (mxtrain/gemm.h) read recipe r's copies: every scaled role is
// an MX format (E8M0 scales per 32), FP32-scaled 128-blocks (blockwise) or one FP32 scale per
// tensor (fp8-current, fp8-delayed).
bool products_built(const Recipe& r);
// Throws "<name>: no quantized products read its formats (...)" unless products_built(r)
// (every registered recipe has them; a hand-made Recipe may not). Layers
// (LinearPrecision::validate), the config parser, the benchmarks and the Python module ask it
// before running a product.
void check_products_built(const Recipe& r);

// ---- the scale settings a run may change on an FP32-scaled recipe --------------------------
// (precision.fp32_scales, precision.<role>_amax_epsilon; docs/config.md)

// Whether every scaled role of r has FP32 scales (fp32 or fp32_pow2): the recipes the two
// settings below apply to.
bool has_fp32_scales(const Recipe& r);
// Throws "<setting> applies to recipes with FP32 scales (...); recipe '<name>' has ... scales"
// unless has_fp32_scales(r): the one statement of the rule for the two settings below (the
// config parser names its keys with it).
void check_fp32_scale_setting(const Recipe& r, const std::string& setting);
// Keeps r's FP32 scales as computed (ScaleType::fp32) instead of truncating them to powers of
// two; check_fp32_scale_setting(r, "fp32_scales") first.
void set_fp32_scales(Recipe& r);
// Sets role's amax epsilon: a block's amax below eps counts as eps. eps must be finite and
// >= 0; the same refusal as set_fp32_scales for other recipes.
void set_amax_epsilon(Recipe& r, Role role, float eps);

// ---- the delayed-scaling settings (precision.amax_history_len, .amax_margin,
// .amax_compute_algo; docs/config.md) ---------------------------------------------------------

// Whether some role of r takes its scale from an amax history (fp8-delayed).
bool uses_amax_history(const Recipe& r);
// Throws "<name> takes its scales from amax histories, which a training run keeps ...; <what>
// keeps none (...)" when uses_amax_history(r): for what runs products outside training (the
// Python module's matmul and Linear).
void check_no_amax_history(const Recipe& r, const std::string& what);
// Throws "<setting> applies to recipes with delayed scaling (...); recipe '<name>' ..." unless
// uses_amax_history(r).
void check_amax_history_setting(const Recipe& r, const std::string& setting);
// Sets every amax_history role's spec: length >= 1, margin >= 0 (each refused in one line).
void set_amax_history(Recipe& r, const AmaxHistorySpec& spec);

// ---- the switches of the 4-bit recipes (precision.fp4_*, precision.nvfp4_order;
// docs/config.md), TransformerEngine's NVFP4BlockScaling switches -----------------------------

// Whether some scaled role of r has 4-bit codes (nvfp4, mxfp4).
bool is_4bit(const Recipe& r);
// Throws "<setting> applies to 4-bit recipes (nvfp4, mxfp4); recipe '<name>' ..." unless
// is_4bit(r).
void check_fp4_setting(const Recipe& r, const std::string& setting);
struct Fp4Switches {
  std::optional<bool> stochastic_rounding;  // the grad role's (both of its copies)
  std::optional<bool> rht;                  // the input's and grad's wgrad (colwise) copies
  std::optional<bool> weight_2d;            // weight tiles (16x16 / 32x32) or 1-D blocks
  std::optional<Nvfp4Order> order;          // NVFP4's two levels (recipes with tensor scales)
};
// Applies the given switches to r's 4-bit roles; check_fp4_setting first, and an order only on
// a recipe with tensor scales (nvfp4).
void set_fp4_switches(Recipe& r, const Fp4Switches& s);

// The registry, in a fixed order.
const std::vector<Recipe>& registered_recipes();
std::vector<std::string> recipe_names();
// The registered recipe of that name; throws listing the registered names. This is the one
// place a recipe name becomes a Recipe.
Recipe get_recipe(const std::string& name);

}  // namespace mxtrain
