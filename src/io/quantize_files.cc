// io/quantize_files.cc — .npy in, directory of quantized .npy files out, and back (see
// mxtrain/io/quantize_files.h). All numerics are core's quantize()/quantize_dual()/
// dequantize(); this file only checks inputs, arranges files and writes them atomically.
#include "mxtrain/io/quantize_files.h"

#include <cfloat>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/io/json_input.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/npy.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/io/output_dir.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"

using json = nlohmann::json;

namespace mxtrain::io {
namespace {

constexpr const char* kMetaFile = "meta.json";
constexpr const char* kFormat = "mxtrain-quantized";
constexpr int kVersion = 1;

std::string quantized_recipe_list() {
  std::string s;
  for (const Recipe& r : registered_recipes())
    if (r.role(Role::weight).quantized()) s += (s.empty() ? "" : ", ") + r.name;
  return s;
}

}  // namespace

Role parse_quantize_role(const std::string& name) {
  if (name == "input") return Role::input;
  if (name == "weight") return Role::weight;
  if (name == "grad") return Role::grad;
  MXT_FAIL("unknown role '", name, "'; valid choices: input (default), weight, grad (4-bit "
           "recipes)");
}

namespace {

Recipe quantized_recipe(const std::string& name) {
  Recipe r = get_recipe(name);  // throws listing the registered names
  MXT_CHECK(r.role(Role::weight).quantized(), "recipe '", name,
            "' does not quantize (BF16 values have no scales), so there is nothing to "
            "write; use one of: ",
            quantized_recipe_list());
  return r;
}

// Whether the recipe keeps one FP32 scale per tensor (fp8-current, fp8-delayed).
bool per_tensor(const Recipe& r) { return r.role(Role::weight).block == BlockShape::tensor; }
// Whether it stores 4-bit codes (nvfp4, mxfp4).
bool four_bit(const Recipe& r) { return r.role(Role::weight).is_4bit(); }

// One stored copy: its kind and file names (tensor_file: a 4-bit copy's FP32 tensor scale).
struct CopyFiles {
  Copy copy;
  const char* data_file;
  const char* scale_file;
  const char* tensor_file;
};
// The files of the copies a recipe keeps of a matrix in that role (copies_needed), in Copy
// order; FP32 scale grids are named *scale_inv.npy.
std::vector<CopyFiles> copies_for(const Recipe& r, Role role) {
  const CopySet c = copies_needed(r, role);
  const bool f = has_fp32_scales(r);
  std::vector<CopyFiles> out;
  if (c.has(Copy::rowwise))
    out.push_back({Copy::rowwise, "rowwise.npy",
                   f ? "rowwise_scale_inv.npy" : "rowwise_scale.npy", "rowwise_tensor_scale.npy"});
  if (c.has(Copy::colwise))
    out.push_back({Copy::colwise, "colwise.npy",
                   f ? "colwise_scale_inv.npy" : "colwise_scale.npy", "colwise_tensor_scale.npy"});
  if (c.has(Copy::tile))
    out.push_back({Copy::tile, "data.npy", f ? "scale_inv.npy" : "scale.npy", "tensor_scale.npy"});
  return out;
}
// meta.json's "layout": "rowwise+colwise", "tile16" / "tile32" / "tile128" (the tile's edge),
// or "tensor" (one scale for the tensor).
std::string layout_label(const Recipe& r, Role role) {
  const CopySet c = copies_needed(r, role);
  if (!c.has(Copy::tile)) return c.name();
  if (per_tensor(r)) return "tensor";
  return "tile" + std::to_string(block_edge(r.role(role).block));
}

NpyArray u8_array(const ByteBuffer& bytes, int64_t rows, int64_t cols) {
  return npy_from_u8(bytes.data(), {rows, cols});
}

// meta.json's "block": the scale block's edge, 0 for one scale per tensor.
int64_t block_label(const Recipe& r, Role role = Role::weight) {
  return per_tensor(r) ? 0 : block_edge(r.role(role).block);
}

// A copy's scale grid as .npy: uint8 E8M0 / E4M3 bytes, float32 scale_inv values, or one
// float32 scale_inv [1] for a per-tensor copy.
NpyArray scale_array(const ScaledTensor& t) {
  if (t.is_mx() || t.is_fp4()) return u8_array(t.scales, t.scale_rows(), t.scale_cols());
  if (t.is_fp32_tensor()) return npy_from_f32(reinterpret_cast<const float*>(t.scales.data()), {1});
  return npy_from_f32(reinterpret_cast<const float*>(t.scales.data()),
                      {t.scale_rows(), t.scale_cols()});
}

// The options that apply to the recipe's kind, checked before anything is read.
void check_options(const Recipe& r, const QuantizeFilesOptions& opt) {
  if (!four_bit(r)) {
    MXT_CHECK(!opt.role || *opt.role != Role::grad, "--role grad applies to 4-bit recipes "
              "(nvfp4, mxfp4); valid choices: input (default), weight");
    MXT_CHECK(!opt.elem || *opt.elem != Elem::e2m1, "--elem e2m1 applies to 4-bit recipes "
              "(nvfp4, mxfp4); recipe '", r.name, "' has 8-bit elements (e4m3, e5m2)");
  }
  MXT_CHECK(r.role(Role::weight).source == ScaleSource::current, "recipe '", r.name,
            "' scales by an amax history of earlier steps: delayed scaling needs an amax "
            "history (a training state), which one quantize call does not have; use "
            "fp8-current for the scale of this tensor's own amax");
  if (per_tensor(r)) {
    MXT_CHECK(!opt.fp32_scales, "--fp32-scales applies to blockwise; recipe '", r.name,
              "' has FP32 scales already (one per tensor, not rounded to powers of two)");
    MXT_CHECK(!opt.rounding, "--scale-rounding applies to MX recipes (E8M0 scales); recipe '",
              r.name, "' has one FP32 scale per tensor");
  }
  if (has_fp32_scales(r)) {
    MXT_CHECK(!opt.rounding, "--scale-rounding applies to MX recipes (E8M0 scales); recipe '",
              r.name, "' has FP32 scales (use --fp32-scales for unrounded ones)");
    MXT_CHECK(!opt.amax_epsilon || (*opt.amax_epsilon >= 0.f && *opt.amax_epsilon <= FLT_MAX),
              "--amax-epsilon must be a finite number >= 0, got ",
              opt.amax_epsilon.value_or(0.f));
    return;
  }
  if (four_bit(r)) {
    MXT_CHECK(!opt.rounding || r.role(Role::weight).scale == ScaleType::e8m0,
              "--scale-rounding applies to E8M0 scales (MX, mxfp4); recipe '", r.name,
              "' has E4M3 block scales");
    MXT_CHECK(!opt.elem || *opt.elem == Elem::e2m1, "--elem: recipe '", r.name,
              "' stores E2M1 codes, not ", elem_name(*opt.elem));
  }
  for (const auto& [given, flag] :
       {std::pair{opt.role.has_value() && !four_bit(r), "--role"},
        std::pair{opt.amax_epsilon.has_value(), "--amax-epsilon"},
        std::pair{opt.fp32_scales, "--fp32-scales"}})
    MXT_CHECK(!given, flag, " applies to FP32-scaled recipes (blockwise); recipe '", r.name,
              "' is MX (E8M0 scales, the weight's copies)");
}

}  // namespace

bool QuantizeSetup::fp32_scaled() const { return has_fp32_scales(recipe); }
bool QuantizeSetup::per_tensor() const { return io::per_tensor(recipe); }

QuantizeSetup quantize_setup(const QuantizeFilesOptions& opt) {
  QuantizeSetup s;
  s.recipe = quantized_recipe(opt.recipe);
  check_options(s.recipe, opt);
  s.role = opt.role.value_or(has_fp32_scales(s.recipe) ? Role::input : Role::weight);
  if (four_bit(s.recipe)) s.recipe.role(s.role).order = opt.nvfp4_order;
  TensorFormat& f = s.recipe.role(s.role);
  if (opt.amax_epsilon) f.amax_epsilon = *opt.amax_epsilon;
  if (opt.fp32_scales) f.scale = ScaleType::fp32;
  if (opt.elem) f.elem = *opt.elem;
  if (opt.rounding) f.rule = *opt.rounding;
  s.cfg = f.quant_config();
  return s;
}

QuantizeFilesResult quantize_npy_to_dir(const std::string& input_npy, const std::string& out_dir,
                                        const QuantizeFilesOptions& opt) {
  check_outputs_apart({{"--out-dir", out_dir, /*replaced=*/true}}, {{"--input", input_npy}});
  const QuantizeSetup setup = quantize_setup(opt);
  const Recipe& recipe = setup.recipe;
  const bool fp32 = setup.fp32_scaled();
  QuantizeFilesResult res;
  res.role = setup.role;
  res.cfg = setup.cfg;
  res.scale = setup.format().scale;
  res.amax_epsilon = setup.format().amax_epsilon;

  const NpyArray x = read_npy(input_npy);
  npy_require(x, "<f4", 2, input_npy);
  res.rows = x.shape[0];
  res.cols = x.shape[1];
  MXT_CHECK(res.rows > 0 && res.cols > 0, input_npy, ": the array is empty (shape ",
            shape_str(x.shape), "); nothing to quantize");
  std::vector<float> values(size_t(x.numel()));
  std::memcpy(values.data(), x.data.data(), x.data.size());

  check_replaceable_dir(out_dir, "--out-dir");
  AtomicDir out(out_dir);
  const int64_t M = res.rows, K = res.cols;
  // The recipe's copies of X in the role, as the layers make them (1-D blocks: both axes
  // from one read; 2-D blocks: the tile copy).
  const QTensor q = quantize_qtensor(values.data(), M, K, recipe, res.role, res.cfg);
  const std::vector<CopyFiles> copies = copies_for(recipe, res.role);
  json meta = {{"format", kFormat},
               {"version", kVersion},
               {"recipe", recipe.name},
               {"elem", elem_name(res.cfg.elem)}};
  const TensorFormat& fmt = setup.format();
  if (fp32) {
    meta["role"] = role_name(res.role);
    meta["scale_type"] = scale_type_name(res.scale);
    meta["amax_epsilon"] = res.amax_epsilon;
  } else if (fmt.is_4bit()) {
    meta["role"] = role_name(res.role);
    meta["scale_type"] = scale_type_name(res.scale);
    if (res.scale == ScaleType::e8m0) meta["scale_rounding"] = rounding_name(res.cfg.rounding);
    meta["codes_per_byte"] = 2;  // element 2i in the low nibble (torchao's pack_uint4)
    meta["tensor_scale"] = fmt.tensor_scale;
    if (fmt.tensor_scale) meta["order"] = nvfp4_order_name(fmt.order);
    meta["stochastic_rounding"] = fmt.stochastic;
    meta["colwise_rht"] = fmt.rht && copies_needed(recipe, res.role).has(Copy::colwise);
  } else {
    meta["scale_rounding"] = rounding_name(res.cfg.rounding);
  }
  meta["layout"] = layout_label(recipe, res.role);
  meta["shape"] = {M, K};
  meta["block"] = block_label(recipe, res.role);
  for (size_t i = 0; i < copies.size(); ++i) {
    const Copy c = copies[i].copy;
    MXT_CHECK(q.has(c), "internal error: the recipe made no ", copy_name(c), " copy");
    const ScaledTensor& t = q.scaled(c);
    MXT_CHECK(t.rows == M && t.cols == K,
              "internal error: quantize returned a ", layout_name(t.layout), " ", t.rows, "x",
              t.cols, " tensor");
    out.write(copies[i].data_file, npy_encode(u8_array(t.data, M, t.row_bytes())));
    out.write(copies[i].scale_file, npy_encode(scale_array(t)));
    res.files.push_back(copies[i].data_file);
    res.files.push_back(copies[i].scale_file);
    meta["files"].push_back(copies[i].data_file);
    meta["files"].push_back(copies[i].scale_file);
    if (t.has_tensor_scale) {
      out.write(copies[i].tensor_file, npy_encode(npy_from_f32(&t.tensor_scale, {1})));
      res.files.push_back(copies[i].tensor_file);
      meta["files"].push_back(copies[i].tensor_file);
    }
  }
  out.write(kMetaFile, meta.dump(2) + "\n");
  res.files.push_back(kMetaFile);
  commit_output_dir(out, "--out-dir", "mxtrain quantize");
  return res;
}

DequantizeFilesResult dequantize_dir_to_npy(const std::string& in_dir,
                                            const std::string& output_npy,
                                            const DequantizeFilesOptions& opt) {
  const Recipe recipe = quantized_recipe(opt.recipe);
  MXT_CHECK(path_exists(in_dir), "--in-dir ", in_dir, " does not exist");
  MXT_CHECK(is_directory(in_dir), "--in-dir ", in_dir, " is not a directory");
  const std::string meta_path = in_dir + "/" + kMetaFile;
  MXT_CHECK(path_exists(meta_path), meta_path, ": file not found (", in_dir,
            " was not written by `mxtrain quantize`)");
  check_outputs_apart({{"--output", output_npy}}, {{"--in-dir", in_dir}});
  const json meta = parse_json_strict(read_text_file(meta_path), meta_path);
  DequantizeFilesResult res;
  const bool fp32 = has_fp32_scales(recipe);
  Role role = Role::weight;
  ScaleType scale = ScaleType::e8m0;
  try {
    MXT_CHECK(meta.is_object() && meta.value("format", "") == kFormat, meta_path,
              ": not written by `mxtrain quantize`");
    MXT_CHECK(meta.at("version").get<int>() == kVersion, meta_path, ": unsupported version ",
              json_summary(meta.at("version")));
    const std::string rec = meta.at("recipe").get<std::string>();
    MXT_CHECK(rec == recipe.name, in_dir, " was quantized with recipe '", rec,
              "', but --recipe is '", recipe.name, "'");
    res.elem = parse_elem(meta.at("elem").get<std::string>().c_str());
    MXT_CHECK(!opt.elem || *opt.elem == res.elem, in_dir, " holds ", elem_name(res.elem),
              " data, but --elem is ", elem_name(opt.elem.value_or(res.elem)));
    if (four_bit(recipe)) {
      role = parse_quantize_role(meta.at("role").get<std::string>());
      MXT_CHECK(res.elem == Elem::e2m1, meta_path, ": elem '", elem_name(res.elem),
                "' is not e2m1 (recipe '", recipe.name, "' stores 4-bit codes)");
    }
    if (fp32) {
      const std::string rn = meta.at("role").get<std::string>();
      MXT_CHECK(rn == "input" || rn == "weight", meta_path, ": role '", rn,
                "' is not input or weight");
      role = parse_quantize_role(rn);
      const std::string st = meta.at("scale_type").get<std::string>();
      MXT_CHECK(st == "fp32" || (st == "fp32_pow2" && !per_tensor(recipe)), meta_path,
                ": scale_type '", st, "' is not ",
                per_tensor(recipe) ? "fp32 (one scale per tensor)" : "fp32 or fp32_pow2");
      scale = st == "fp32" ? ScaleType::fp32 : ScaleType::fp32_pow2;
    }
    MXT_CHECK(meta.at("layout").get<std::string>() == layout_label(recipe, role), meta_path,
              ": layout '",
              meta.at("layout").get<std::string>(), "' does not match recipe '", recipe.name, "'");
    // Every other key is what `mxtrain quantize` writes, with a value it can write: checked
    // like the command line's, not taken on trust.
    MXT_CHECK(meta.at("block").is_number_integer() &&
                  meta.at("block").get<int64_t>() == block_label(recipe, role),
              meta_path, ": `block` must be ", block_label(recipe, role), " for recipe '",
              recipe.name, "', got ", json_summary(meta.at("block")));
    const TensorFormat& fmt = recipe.role(role);
    if (!fp32 && fmt.scale == ScaleType::e8m0) {
      try {
        parse_rounding(meta.at("scale_rounding").get<std::string>().c_str());
      } catch (const Error& e) {
        rethrow_prefixed(meta_path + ": `scale_rounding`: ", e);
      }
    }
    if (fmt.is_4bit()) {  // the keys of 4-bit copies, as quantize writes them
      MXT_CHECK(meta.at("scale_type").get<std::string>() == scale_type_name(fmt.scale),
                meta_path, ": `scale_type` must be ", scale_type_name(fmt.scale),
                " for recipe '", recipe.name, "'");
      MXT_CHECK(meta.at("codes_per_byte").is_number_integer() &&
                    meta.at("codes_per_byte").get<int>() == 2,
                meta_path, ": `codes_per_byte` must be 2 (E2M1 codes), got ",
                json_summary(meta.at("codes_per_byte")));
      MXT_CHECK(meta.at("tensor_scale").get<bool>() == fmt.tensor_scale, meta_path,
                ": `tensor_scale` must be ", fmt.tensor_scale ? "true" : "false",
                " for recipe '", recipe.name, "'");
      if (fmt.tensor_scale) {
        try {
          parse_nvfp4_order(meta.at("order").get<std::string>());
        } catch (const Error& e) {
          rethrow_prefixed(meta_path + ": `order`: ", e);
        }
      }
      meta.at("stochastic_rounding").get<bool>();
      meta.at("colwise_rht").get<bool>();
    }
    static const std::set<std::string> known = {
        "format",       "version",        "recipe", "elem",  "role",  "scale_type",
        "amax_epsilon", "scale_rounding", "layout", "shape", "block", "files",
        "codes_per_byte", "tensor_scale", "order", "stochastic_rounding", "colwise_rht"};
    for (const auto& [k, v] : meta.items())
      MXT_CHECK(known.count(k), meta_path, ": unknown key `", shown(k, 40),
                "` (not one `mxtrain quantize` writes)");
    const json& shape = meta.at("shape");
    MXT_CHECK(shape.is_array() && shape.size() == 2 && shape[0].is_number_integer() &&
                  shape[1].is_number_integer() && shape[0].get<int64_t>() > 0 &&
                  shape[1].get<int64_t>() > 0,
              meta_path, ": 'shape' must be [M, K] with M, K > 0, got ", json_summary(shape));
    res.rows = shape[0].get<int64_t>();
    res.cols = shape[1].get<int64_t>();
  } catch (const json::exception& e) {
    MXT_FAIL(meta_path, ": malformed: ", e.what());
  }

  // Every file must be present with the shape meta.json implies (mismatched files are an
  // error even for the copy that is not used).
  std::vector<ScaledTensor> copies;
  const char* scale_dtype = fp32 ? "<f4" : "|u1";
  for (const CopyFiles& c : copies_for(recipe, role)) {
    // The data files are read (their size is what they hold) and checked against meta.json
    // before the tensor meta.json describes is allocated.
    const std::string data_path = in_dir + "/" + c.data_file;
    const std::string scale_path = in_dir + "/" + c.scale_file;
    const NpyArray d = read_npy(data_path);
    const NpyArray s = read_npy(scale_path);
    npy_require(d, "|u1", 2, data_path);
    npy_require(s, scale_dtype, per_tensor(recipe) ? 1 : 2, scale_path);
    const std::vector<int64_t> want_d = {res.rows, elem_row_bytes(res.elem, res.cols)};
    MXT_CHECK(d.shape == want_d, data_path, ": shape ", shape_str(d.shape), " does not match ",
              shape_str(want_d), " recorded in ", kMetaFile);
    const MXLayout layout = c.copy == Copy::rowwise   ? MXLayout::rowwise
                            : c.copy == Copy::colwise ? MXLayout::colwise
                                                      : MXLayout::tile;
    ScaledTensor t = ScaledTensor::empty(res.rows, res.cols, layout, res.elem);
    if (fp32) {
      t.scale_type = scale;
      t.block = block_label(recipe);
    }
    const TensorFormat& fmt = recipe.role(role);
    if (fmt.is_4bit()) {
      t.scale_type = fmt.scale;
      t.block = block_edge(fmt.block);
      t.rht = c.copy == Copy::colwise && fmt.rht;
      if (fmt.tensor_scale) {
        const std::string ts_path = in_dir + "/" + c.tensor_file;
        const NpyArray ts = read_npy(ts_path);
        npy_require(ts, "<f4", 1, ts_path);
        MXT_CHECK(ts.shape == std::vector<int64_t>{1}, ts_path, ": shape ", shape_str(ts.shape),
                  " is not [1] (one FP32 tensor scale)");
        t.has_tensor_scale = true;
        std::memcpy(&t.tensor_scale, ts.data.data(), sizeof(float));
      }
    }
    const std::vector<int64_t> want_s =
        t.is_fp32_tensor() ? std::vector<int64_t>{1}
                           : std::vector<int64_t>{t.scale_rows(), t.scale_cols()};
    MXT_CHECK(s.shape == want_s, scale_path, ": shape ", shape_str(s.shape), " does not match ",
              shape_str(want_s), " expected for a ", res.rows, "x", res.cols, " ",
              layout_name(layout), " scale grid");
    t.data.assign(d.data.begin(), d.data.end());
    t.scales.assign(s.data.begin(), s.data.end());
    copies.push_back(std::move(t));
  }
  res.source = copies_for(recipe, role)[0].data_file;
  std::vector<float> y(size_t(res.rows * res.cols));
  dequantize(copies[0], y.data());
  write_npy(output_npy, npy_from_f32(y.data(), {res.rows, res.cols}));
  return res;
}

}  // namespace mxtrain::io
