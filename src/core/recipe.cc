// core/recipe.cc — the recipe types' names and descriptions, and the registry
// (mxtrain/recipe.h; docs/numerics.md, "Recipes").
//
// The registry is a fixed table of values built on first use. A new recipe is one more entry
// here; what its roles' formats need from the kernels (a block shape or scale type no kernel
// handles yet) is refused where a tensor is quantized, not here.
#include "mxtrain/recipe.h"

#include <cmath>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain {

const char* role_name(Role r) {
  switch (r) {
    case Role::input: return "input";
    case Role::weight: return "weight";
    case Role::grad: return "grad";
  }
  return "?";
}

const char* block_name(BlockShape b) {
  switch (b) {
    case BlockShape::none: return "none";
    case BlockShape::b1x32: return "1x32";
    case BlockShape::b32x32: return "32x32";
    case BlockShape::b1x128: return "1x128";
    case BlockShape::b128x128: return "128x128";
    case BlockShape::tensor: return "tensor";
    case BlockShape::b1x16: return "1x16";
    case BlockShape::b16x16: return "16x16";
  }
  return "?";
}

int block_edge(BlockShape b) {
  switch (b) {
    case BlockShape::b1x16:
    case BlockShape::b16x16: return 16;
    case BlockShape::b1x32:
    case BlockShape::b32x32: return 32;
    case BlockShape::b1x128:
    case BlockShape::b128x128: return 128;
    case BlockShape::none:
    case BlockShape::tensor: return 0;
  }
  return 0;
}

bool block_is_2d(BlockShape b) {
  return b == BlockShape::b32x32 || b == BlockShape::b128x128 || b == BlockShape::tensor ||
         b == BlockShape::b16x16;
}

const char* scale_source_name(ScaleSource s) {
  return s == ScaleSource::current ? "current" : "amax_history";
}

const char* amax_algo_name(AmaxAlgo a) { return a == AmaxAlgo::max ? "max" : "most_recent"; }

AmaxAlgo parse_amax_algo(const std::string& s) {
  if (s == "max") return AmaxAlgo::max;
  if (s == "most_recent") return AmaxAlgo::most_recent;
  MXT_FAIL("unknown amax_compute_algo '", s, "'; valid choices: max (default), most_recent");
}

std::string TensorFormat::describe() const {
  if (!quantized()) return "bf16 (no scale)";
  std::ostringstream os;
  os << elem_name(elem) << ", " << scale_type_name(scale) << " scales per "
     << block_name(block) << (block == BlockShape::tensor ? "" : " block");
  if (scale == ScaleType::e8m0) os << ", " << rounding_name(rule);  // FP32 scales: no rule
  if (tensor_scale) os << ", FP32 tensor scale (" << nvfp4_order_name(order) << " order)";
  if (is_4bit()) os << (stochastic ? ", stochastic rounding" : ", round to nearest even");
  if (rht) os << ", RHT on the wgrad copy";
  if (amax_epsilon > 0) os << ", amax epsilon " << amax_epsilon;
  os << ", " << scale_source_name(source) << " amax";
  if (source == ScaleSource::amax_history)
    os << " (" << history.length << " steps, " << amax_algo_name(history.algo) << ", margin "
       << history.margin << ")";
  return os.str();
}

bool Recipe::quantized() const {
  for (const TensorFormat& f : roles)
    if (f.quantized()) return true;
  return false;
}

void Recipe::set_rule(ScaleRounding rule) {
  for (TensorFormat& f : roles) f.rule = rule;
}

std::string Recipe::describe() const {
  std::ostringstream os;
  os << name << ": " << note;
  for (int i = 0; i < kNumRoles; ++i) {
    const std::string r = role_name(Role(i));
    os << "\n  " << r << std::string(8 - r.size(), ' ') << roles[size_t(i)].describe();
  }
  return os.str();
}

Fp4Config TensorFormat::fp4_config(MXLayout layout, const SrKey& sr) const {
  Fp4Config c;
  c.kind = scale == ScaleType::e4m3 ? Fp4Kind::nvfp4 : Fp4Kind::mxfp4;
  c.rounding = rule;
  c.tensor_scale = tensor_scale;
  c.order = order;
  c.stochastic = stochastic;
  c.sr = sr;
  c.rht = rht && layout == MXLayout::colwise;
  return c;
}

bool defer_backward_quant_applies(const Recipe& r) { return r.role(Role::input).quantized(); }

bool products_built(const Recipe& r) {
  for (const TensorFormat& f : r.roles) {
    if (!f.quantized()) continue;
    const bool mx = f.scale == ScaleType::e8m0 && block_edge(f.block) == 32;
    const bool fp32_blocks = (f.scale == ScaleType::fp32 || f.scale == ScaleType::fp32_pow2) &&
                             block_edge(f.block) == 128;
    // One scale per tensor, from its current amax (fp8-current) or an amax history
    // (fp8-delayed): the same products.
    const bool per_tensor = f.scale == ScaleType::fp32 && f.block == BlockShape::tensor;
    // 4-bit: NVFP4 (E4M3 scales per 1x16 / 16x16) or MXFP4 (E8M0 per 1x32 / 32x32).
    const bool fp4 = f.is_4bit() && ((f.scale == ScaleType::e4m3 && block_edge(f.block) == 16) ||
                                     (f.scale == ScaleType::e8m0 && block_edge(f.block) == 32));
    if (f.is_4bit() ? !fp4 : (!mx && !fp32_blocks && !per_tensor)) return false;
  }
  return true;
}

void check_products_built(const Recipe& r) {
  MXT_CHECK(products_built(r), r.name, ": no quantized products read its formats (they read "
            "E8M0 scales per 32, FP32 scales per 128-block, one FP32 scale per tensor, or 4-bit "
            "E2M1 codes with E4M3 scales per 16 (NVFP4) or E8M0 per 32 (MXFP4))");
}

void check_no_amax_history(const Recipe& r, const std::string& what) {
  MXT_CHECK(!uses_amax_history(r), r.name, " takes its scales from amax histories, which a "
            "training run keeps and updates after every optimizer step; ", what,
            " keeps none (train with `mxtrain train`, or use fp8-current)");
}

namespace {

// An MX role: E8M0 scales, amax of the current tensor, rceil.
TensorFormat mx(BlockShape block, Elem elem = Elem::e4m3) {
  TensorFormat f;
  f.scale = ScaleType::e8m0;
  f.elem = elem;
  f.block = block;
  return f;
}

// A blockwise role (TransformerEngine's Float8BlockScaling): FP32 scales truncated to powers
// of two, amax epsilon 0 (TransformerEngine's default), amax of the current tensor.
TensorFormat fp32_blocks(BlockShape block, Elem elem = Elem::e4m3) {
  TensorFormat f;
  f.scale = ScaleType::fp32_pow2;
  f.elem = elem;
  f.block = block;
  f.amax_epsilon = 0.f;
  return f;
}

// A per-tensor role (TransformerEngine's Float8CurrentScaling / DelayedScaling): one FP32
// scale for the tensor (not rounded to a power of two), amax epsilon 0, the amax from the
// tensor itself or from an amax history.
// Delayed scaling keeps TransformerEngine's defaults: 1024 steps, margin 0, the history's max.
TensorFormat fp32_tensor(Elem elem, ScaleSource source) {
  TensorFormat f;
  f.scale = ScaleType::fp32;
  f.elem = elem;
  f.block = BlockShape::tensor;
  f.amax_epsilon = 0.f;
  f.source = source;
  if (source == ScaleSource::amax_history) f.history = {1024, 0, AmaxAlgo::max};
  return f;
}

// An NVFP4 role (TransformerEngine's NVFP4BlockScaling): E2M1 codes, an E4M3 decode scale per
// 1x16 block or 16x16 tile, and one FP32 scale per tensor from its current amax, in torchao's
// order; stochastic rounding and the random Hadamard transform (on the wgrad copy) as given.
TensorFormat nvfp4(BlockShape block, bool stochastic, bool rht) {
  TensorFormat f;
  f.scale = ScaleType::e4m3;
  f.elem = Elem::e2m1;
  f.block = block;
  f.tensor_scale = true;
  f.stochastic = stochastic;
  f.rht = rht;
  return f;
}

Recipe make(std::string name, TensorFormat input, TensorFormat weight, TensorFormat grad,
            std::string note) {
  Recipe r;
  r.name = std::move(name);
  r.role(Role::input) = input;
  r.role(Role::weight) = weight;
  r.role(Role::grad) = grad;
  r.note = std::move(note);
  return r;
}

std::string names_list() {
  std::ostringstream os;
  bool first = true;
  for (const Recipe& r : registered_recipes()) {
    os << (first ? "" : ", ") << r.name;
    first = false;
  }
  return os.str();
}

}  // namespace

const std::vector<Recipe>& registered_recipes() {
  using B = BlockShape;
  static const std::vector<Recipe> r = {
      Recipe{},  // bf16
      make("mxfp8", mx(B::b1x32), mx(B::b1x32), mx(B::b1x32),
           "MXFP8, 1x32 blocks everywhere (the weight has a copy per axis)"),
      make("mxfp8-32x32", mx(B::b1x32), mx(B::b32x32), mx(B::b1x32),
           "MXFP8 with 32x32 weight tiles: one weight copy serves forward and dgrad"),
      // Published MXFP8 runs diverged with E5M2 gradients (wider range, one mantissa bit
      // less), so it is offered for experiments, not as a default.
      make("mxfp8-e5m2grad", mx(B::b1x32), mx(B::b1x32), mx(B::b1x32, Elem::e5m2),
           "mxfp8 with E5M2 gradients (for experiments)"),
      make("blockwise", fp32_blocks(B::b1x128), fp32_blocks(B::b128x128),
           fp32_blocks(B::b1x128),
           "FP8 with FP32 power-of-two scales: 1x128 blocks for inputs and grads, 128x128 "
           "weight tiles (TransformerEngine's Float8BlockScaling)"),
      make("blockwise-e5m2grad", fp32_blocks(B::b1x128), fp32_blocks(B::b128x128),
           fp32_blocks(B::b1x128, Elem::e5m2),
           "blockwise with E5M2 gradients"),
      // HYBRID, as TransformerEngine's per-tensor recipes: E4M3 forward, E5M2 gradients.
      make("fp8-current", fp32_tensor(Elem::e4m3, ScaleSource::current),
           fp32_tensor(Elem::e4m3, ScaleSource::current),
           fp32_tensor(Elem::e5m2, ScaleSource::current),
           "FP8 with one FP32 scale per tensor from its current amax; E4M3 inputs and "
           "weights, E5M2 grads (TransformerEngine's Float8CurrentScaling)"),
      make("fp8-delayed", fp32_tensor(Elem::e4m3, ScaleSource::amax_history),
           fp32_tensor(Elem::e4m3, ScaleSource::amax_history),
           fp32_tensor(Elem::e5m2, ScaleSource::amax_history),
           "fp8-current with each scale from an amax history of earlier steps, updated "
           "after every optimizer step (TransformerEngine's DelayedScaling)"),
      // NVIDIA's NVFP4 pre-training recipe, every switch on (precision.fp4_* turn them off).
      make("nvfp4", nvfp4(B::b1x16, false, true), nvfp4(B::b16x16, false, false),
           nvfp4(B::b1x16, true, true),
           "NVFP4 as NVIDIA's pre-training recipe (TransformerEngine's NVFP4BlockScaling): "
           "16x16 weight tiles, 1x16 inputs and grads, grads rounded stochastically, the "
           "random Hadamard transform on both wgrad operands"),
      make("mxfp4", mx(B::b1x32, Elem::e2m1), mx(B::b1x32, Elem::e2m1),
           mx(B::b1x32, Elem::e2m1),
           "MXFP4 (OCP MX v1.0): E2M1 with E8M0 scales per 1x32 block everywhere (the weight "
           "has a copy per axis)"),
  };
  return r;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out;
  for (const Recipe& r : registered_recipes()) out.push_back(r.name);
  return out;
}

Recipe get_recipe(const std::string& name) {
  for (const Recipe& r : registered_recipes())
    if (r.name == name) return r;
  MXT_FAIL("unknown recipe '", name, "'; registered recipes: ", names_list());
}

bool has_fp32_scales(const Recipe& r) {
  if (!r.quantized()) return false;
  for (const TensorFormat& f : r.roles)
    if (f.quantized() && f.scale != ScaleType::fp32 && f.scale != ScaleType::fp32_pow2)
      return false;
  return true;
}

void check_fp32_scale_setting(const Recipe& r, const std::string& setting) {
  MXT_CHECK(has_fp32_scales(r), setting, " applies to recipes with FP32 scales (blockwise, "
            "fp8-current); recipe '", r.name, "' has ",
            r.quantized() ? scale_type_name(r.role(Role::input).scale) : "no", " scales");
}

void set_fp32_scales(Recipe& r) {
  check_fp32_scale_setting(r, "fp32_scales");
  for (TensorFormat& f : r.roles)
    if (f.quantized()) f.scale = ScaleType::fp32;
}

void set_amax_epsilon(Recipe& r, Role role, float eps) {
  check_fp32_scale_setting(r, "an amax epsilon");
  MXT_CHECK(std::isfinite(eps) && eps >= 0.f, "the ", role_name(role),
            " amax epsilon must be a finite number >= 0, got ", eps);
  r.role(role).amax_epsilon = eps;
}

bool uses_amax_history(const Recipe& r) {
  for (const TensorFormat& f : r.roles)
    if (f.quantized() && f.source == ScaleSource::amax_history) return true;
  return false;
}

void check_amax_history_setting(const Recipe& r, const std::string& setting) {
  MXT_CHECK(uses_amax_history(r), setting, " applies to recipes with delayed scaling "
            "(fp8-delayed: scales from an amax history); recipe '", r.name, "' takes ",
            r.quantized() ? "each scale from the tensor it scales" : "no scales");
}

void set_amax_history(Recipe& r, const AmaxHistorySpec& spec) {
  check_amax_history_setting(r, "an amax history setting");
  MXT_CHECK(spec.length >= 1, "the amax history length must be >= 1, got ", spec.length);
  MXT_CHECK(spec.margin >= 0, "the amax margin must be >= 0, got ", spec.margin);
  for (TensorFormat& f : r.roles)
    if (f.quantized() && f.source == ScaleSource::amax_history) f.history = spec;
}

}  // namespace mxtrain

namespace mxtrain {

bool is_4bit(const Recipe& r) {
  for (const TensorFormat& f : r.roles)
    if (f.is_4bit()) return true;
  return false;
}

void check_fp4_setting(const Recipe& r, const std::string& setting) {
  MXT_CHECK(is_4bit(r), setting, " applies to 4-bit recipes (nvfp4, mxfp4); recipe '", r.name,
            "' has ", r.quantized() ? "8-bit elements" : "no quantized elements");
}

void set_fp4_switches(Recipe& r, const Fp4Switches& s) {
  for (int i = 0; i < kNumRoles; ++i) {
    TensorFormat& f = r.roles[size_t(i)];
    if (!f.is_4bit()) continue;
    const Role role = Role(i);
    if (s.stochastic_rounding && role == Role::grad) f.stochastic = *s.stochastic_rounding;
    if (s.rht && role != Role::weight) f.rht = *s.rht;
    if (s.weight_2d && role == Role::weight) {
      const bool nv = f.scale == ScaleType::e4m3;
      f.block = *s.weight_2d ? (nv ? BlockShape::b16x16 : BlockShape::b32x32)
                             : (nv ? BlockShape::b1x16 : BlockShape::b1x32);
    }
    if (s.order) {
      MXT_CHECK(f.tensor_scale, "nvfp4_order applies to recipes with per-tensor scales "
                "(nvfp4); recipe '", r.name, "' has none");
      f.order = *s.order;
    }
  }
}

}  // namespace mxtrain
