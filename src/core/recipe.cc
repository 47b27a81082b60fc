// core/recipe.cc — scaling granularity validation and the named recipe registry
// (docs/numerics.md, "Recipes").
//
// The registry is a fixed table built on first use. Layers (nn/), FSDP (dist/) and the
// trainer look recipes up by name; a config that spells the block size instead goes through
// recipe_from_granularity(). Every error lists what would have been accepted.
#include "mxtrain/recipe.h"

#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain {

namespace {

std::string block_str(const std::array<int, 3>& b) {
  std::ostringstream os;
  os << "[" << b[0] << "," << b[1] << "," << b[2] << "]";
  return os.str();
}

constexpr std::array<int, 3> kRowBlock{1, 1, 32};
constexpr std::array<int, 3> kTileBlock{1, 32, 32};

Recipe make(const std::string& name, ScalingType type, std::array<int, 3> block,
            Elem grad_elem = Elem::e4m3) {
  Recipe r;
  r.name = name;
  r.granularity.type = type;
  r.granularity.block_size = block;
  r.grad_elem = grad_elem;
  return r;
}

const std::vector<Recipe>& registry() {
  static const std::vector<Recipe> r = {
      make("bf16", ScalingType::none, {0, 0, 0}),
      make("mxfp8", ScalingType::mx, kRowBlock),
      make("mxfp8-32x32", ScalingType::mx, kTileBlock),
      // Gradients in E5M2 (wider range, one less mantissa bit). Published MXFP8 runs
      // diverged with it, so it is offered for experiments, not as a default.
      make("mxfp8-e5m2grad", ScalingType::mx, kRowBlock, Elem::e5m2),
  };
  return r;
}

std::string names_list() {
  std::ostringstream os;
  bool first = true;
  for (const Recipe& r : registry()) {
    os << (first ? "" : ", ") << r.name;
    first = false;
  }
  return os.str();
}

}  // namespace

void ScalingGranularity::validate() const {
  if (type == ScalingType::none) return;
  MXT_CHECK(block_size == kRowBlock || block_size == kTileBlock,
            "invalid MX block size ", block_str(block_size),
            " (block_size = [token_dim, input_dim, output_dim]); valid choices: ",
            block_str(kRowBlock), " (1x32 blocks, mxfp8) or ", block_str(kTileBlock),
            " (32x32 weight tiles, mxfp8-32x32)");
}

std::string Recipe::describe() const {
  std::ostringstream os;
  os << name << ": ";
  if (!quantized()) {
    os << "no quantization (BF16 GEMMs)";
    return os.str();
  }
  os << "mx " << block_str(granularity.block_size) << " ("
     << (weight_tiled() ? "weight 32x32 tiles, one copy" : "weight 1x32, rowwise + colwise")
     << "), strategy " << strategy << ", inputs " << elem_name(input_elem) << ", weight "
     << elem_name(weight_elem) << ", grads " << elem_name(grad_elem) << ", scale rounding "
     << rounding_name(rounding);
  return os.str();
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out;
  for (const Recipe& r : registry()) out.push_back(r.name);
  return out;
}

Recipe get_recipe(const std::string& name) {
  for (const Recipe& r : registry())
    if (r.name == name) return r;
  MXT_FAIL("unknown recipe '", name, "'; registered recipes: ", names_list());
}

Recipe recipe_from_granularity(const ScalingGranularity& g) {
  g.validate();
  if (g.type == ScalingType::none) return get_recipe("bf16");
  return get_recipe(g.block_size == kTileBlock ? "mxfp8-32x32" : "mxfp8");
}

}  // namespace mxtrain
