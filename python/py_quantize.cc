// python/py_quantize.cc — mxtrain.quantize / dequantize / matmul: MX quantization and the
// MX GEMM on NumPy arrays.
//
// quantize() returns the same arrays `mxtrain quantize` writes as .npy files (the options
// checked by the same io::quantize_setup; the same core calls: quantize_dual for 1x32
// recipes, quantize(tile32) for mxfp8-32x32, quantize_blocks_dual / quantize_blocks(tile) for
// blockwise inputs / weights, quantize_tensor_scaled for fp8-current), so the bytes are
// identical; the code arrays own the engine's buffers (no copy), FP32 scale_inv grids (and
// fp8-current's one scale_inv, float32 [1]) are float32 copies. dequantize() takes such a
// dict back. matmul() quantizes x and w as the quantized Linear's forward does and returns
// x·wᵀ from gemm_mx in FP32. The GIL is released while kernels run.
#include <cstring>

#include "mxtrain/gemm.h"
#include "mxtrain/io/quantize_files.h"
#include "py_util.h"

namespace mxtrain::py_detail {
namespace {

// x as FP32 or BF16 bits: exactly one of f32 / bf16 is set.
struct Input {
  py::array keep;
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  int64_t rows = 0, cols = 0;
};
Input input_arg(const py::handle& h, const char* name) {
  Input in;
  in.keep = matrix_arg(h, name);
  in.rows = in.keep.shape(0);
  in.cols = in.keep.shape(1);
  if (has_dtype<float>(in.keep))
    in.f32 = static_cast<const float*>(in.keep.data());
  else if (has_dtype<uint16_t>(in.keep))
    in.bf16 = static_cast<const uint16_t*>(in.keep.data());
  else
    throw py::type_error(std::string(name) + " must have dtype float32, or uint16 holding "
                         "BF16 bit patterns; got " + dtype_of(in.keep));
  return in;
}

ScaledTensor quantize_one(const Input& x, MXLayout layout, const QuantConfig& cfg) {
  py::gil_scoped_release nogil;
  return x.f32 ? quantize(x.f32, x.rows, x.cols, layout, cfg)
               : quantize(x.bf16, x.rows, x.cols, layout, cfg);
}

// Whether recipe r keeps a weight as one tile copy (else rowwise + colwise).
bool weight_tiled(const Recipe& r) { return copies_needed(r, Role::weight).has(Copy::tile); }

void put(py::dict& d, const char* data_key, const char* scale_key, ScaledTensor& t) {
  const int64_t sr = t.scale_rows(), sc = t.scale_cols();
  d[data_key] = owning_array(std::move(t.data), t.rows, t.row_bytes());
  d[scale_key] = owning_array(std::move(t.scales), sr, sc);
}

// 4-bit recipes: the role's copies as `mxtrain quantize` writes them (codes uint8
// [M, ceil(K/2)], scale bytes, and per copy its float32 [1] tensor scale when it has one).
py::dict quantize_fp4_recipe_py(const py::handle& x_obj, const io::QuantizeSetup& s) {
  py::array_t<float> x = f32_matrix_arg(x_obj, "x");
  QTensor q;
  {
    py::gil_scoped_release nogil;
    q = quantize_qtensor(x.data(), x.shape(0), x.shape(1), s.recipe, s.role, s.cfg);
  }
  py::dict out;
  struct Names {
    Copy c;
    const char *data, *scale, *ts;
  };
  for (const Names& n : {Names{Copy::rowwise, "rowwise", "rowwise_scale", "rowwise_tensor_scale"},
                         Names{Copy::colwise, "colwise", "colwise_scale", "colwise_tensor_scale"},
                         Names{Copy::tile, "data", "scale", "tensor_scale"}}) {
    if (!q.has(n.c)) continue;
    ScaledTensor& t = q.scaled(n.c);
    if (t.has_tensor_scale) {
      py::array_t<float> ts(1);
      ts.mutable_data()[0] = t.tensor_scale;
      out[n.ts] = ts;
    }
    put(out, n.data, n.scale, t);
  }
  return out;
}

// An FP32-scaled copy's codes (uint8, owned) and scale_inv grid (float32) into d.
void put_fp32(py::dict& d, const char* data_key, const char* scale_key, ScaledTensor& t) {
  const int64_t sr = t.scale_rows(), sc = t.scale_cols();
  std::vector<float> s(size_t(sr * sc));
  std::memcpy(s.data(), t.scales.data(), s.size() * sizeof(float));
  d[data_key] = owning_array(std::move(t.data), t.rows, t.cols);
  d[scale_key] = owning_array(std::move(s), sr, sc);
}

// blockwise: role input -> rowwise / colwise copies, weight -> one tile copy.
py::dict quantize_blocks_py(const Input& x, const io::QuantizeSetup& s) {
  const TensorFormat& f = s.format();
  const BlockQuantConfig cfg{f.elem, f.scale, f.amax_epsilon};
  py::dict out;
  ScaledTensor a, b;
  {
    py::gil_scoped_release nogil;
    if (s.role == Role::weight)
      a = x.f32 ? quantize_blocks(x.f32, x.rows, x.cols, MXLayout::tile, cfg)
                : quantize_blocks(x.bf16, x.rows, x.cols, MXLayout::tile, cfg);
    else if (x.f32)
      quantize_blocks_dual(x.f32, x.rows, x.cols, cfg, a, b);
    else
      quantize_blocks_dual(x.bf16, x.rows, x.cols, cfg, a, b);
  }
  if (s.role == Role::weight) {
    put_fp32(out, "data", "scale_inv", a);
  } else {
    put_fp32(out, "rowwise", "rowwise_scale_inv", a);
    put_fp32(out, "colwise", "colwise_scale_inv", b);
  }
  return out;
}

// fp8-current: one copy ("data") and its one scale_inv, float32 [1].
py::dict quantize_tensor_py(const Input& x, const io::QuantizeSetup& s) {
  const TensorQuantConfig cfg{s.format().elem, s.format().amax_epsilon};
  ScaledTensor t;
  {
    py::gil_scoped_release nogil;
    if (x.f32)
      quantize_tensor_scaled(x.f32, x.rows, x.cols, cfg, t);
    else
      quantize_tensor_scaled(x.bf16, x.rows, x.cols, cfg, t);
  }
  py::dict out;
  py::array_t<float> s_inv(1);
  std::memcpy(s_inv.mutable_data(), t.scales.data(), sizeof(float));
  out["data"] = owning_array(std::move(t.data), t.rows, t.cols);
  out["scale_inv"] = s_inv;
  return out;
}

py::dict quantize_py(const py::handle& x_obj, const std::string& recipe_name,
                     const std::optional<std::string>& elem,
                     const std::optional<std::string>& rounding,
                     const std::optional<std::string>& role,
                     const std::optional<float>& amax_epsilon, bool fp32_scales) {
  const Recipe r = quantized_recipe_arg(recipe_name, "quantize");
  io::QuantizeFilesOptions opt;
  opt.recipe = recipe_name;
  if (elem) opt.elem = elem_arg(elem, Elem::e4m3);
  if (rounding) opt.rounding = rounding_arg(rounding, ScaleRounding::rceil);
  if (role) opt.role = as_value_error([&] { return io::parse_quantize_role(*role); });
  opt.amax_epsilon = amax_epsilon;
  opt.fp32_scales = fp32_scales;
  const io::QuantizeSetup setup = as_value_error([&] { return io::quantize_setup(opt); });
  if (setup.format().is_4bit()) return quantize_fp4_recipe_py(x_obj, setup);
  const Input x = input_arg(x_obj, "x");
  if (setup.per_tensor()) return quantize_tensor_py(x, setup);
  if (setup.fp32_scaled()) return quantize_blocks_py(x, setup);
  const QuantConfig cfg = setup.cfg;
  py::dict out;
  if (weight_tiled(r)) {
    ScaledTensor t = quantize_one(x, MXLayout::tile, cfg);
    put(out, "data", "scale", t);
    return out;
  }
  ScaledTensor row, col;
  {
    py::gil_scoped_release nogil;
    if (x.f32)
      quantize_dual(x.f32, x.rows, x.cols, cfg, row, col);
    else
      quantize_dual(x.bf16, x.rows, x.cols, cfg, row, col);
  }
  put(out, "rowwise", "rowwise_scale", row);
  put(out, "colwise", "colwise_scale", col);
  return out;
}

// The error for a dict that lacks a key quantize() would have put there.
[[noreturn]] void missing_key(const py::dict& q, const char* k) {
  std::string keys;
  for (auto item : q) keys += (keys.empty() ? "" : ", ") + py::str(item.first).cast<std::string>();
  throw py::value_error(std::string("q has no '") + k + "' array (its keys: " + keys +
                        "); pass the dict quantize() returned for this recipe");
}

// A copy rebuilt from q[data_key] (uint8 codes) and q[scale_key], checked against each other:
// MX (uint8 E8M0 bytes), or with `fp32` FP32-scaled 128 blocks (float32 scale_inv values;
// dequantize reads code * scale_inv whether they were pow2 or not).
ScaledTensor tensor_from_dict(const py::dict& q, const char* data_key, const char* scale_key,
                              MXLayout layout, Elem elem, bool fp32 = false) {
  for (const char* k : {data_key, scale_key})
    if (!q.contains(k)) missing_key(q, k);
  const std::string dname = std::string("q['") + data_key + "']";
  const std::string sname = std::string("q['") + scale_key + "']";
  py::array d = matrix_arg(q[data_key], dname.c_str());
  py::array s = matrix_arg(q[scale_key], sname.c_str());
  if (!has_dtype<uint8_t>(d))
    throw py::type_error(dname + " must have dtype uint8, got " + dtype_of(d));
  if (fp32 ? !has_dtype<float>(s) : !has_dtype<uint8_t>(s))
    throw py::type_error(sname + " must have dtype " +
                         (fp32 ? "float32 (scale_inv values)" : "uint8") + ", got " +
                         dtype_of(s));
  ScaledTensor t = ScaledTensor::empty(d.shape(0), d.shape(1), layout, elem);
  if (fp32) {
    t.scale_type = ScaleType::fp32_pow2;
    t.block = kFp32ScaleBlock;
  }
  if (s.shape(0) != t.scale_rows() || s.shape(1) != t.scale_cols())
    throw py::value_error(sname + " has shape " + shape_of(s) + ", but a " +
                          std::to_string(t.rows) + "x" + std::to_string(t.cols) + " " +
                          layout_name(layout) + " tensor has a (" +
                          std::to_string(t.scale_rows()) + ", " +
                          std::to_string(t.scale_cols()) + ") " +
                          (fp32 ? "scale_inv grid" : "scale grid"));
  t.scales.resize(t.scale_bytes());
  std::memcpy(t.data.data(), d.data(), t.data.size());
  std::memcpy(t.scales.data(), s.data(), t.scales.size());
  return t;
}

// A per-tensor copy rebuilt from q["data"] (uint8 codes) and q["scale_inv"] (float32 [1]).
ScaledTensor tensor_from_scalar_dict(const py::dict& q, Elem elem) {
  for (const char* k : {"data", "scale_inv"})
    if (!q.contains(k)) missing_key(q, k);
  py::array d = matrix_arg(q["data"], "q['data']");
  if (!has_dtype<uint8_t>(d))
    throw py::type_error("q['data'] must have dtype uint8, got " + dtype_of(d));
  if (!py::isinstance<py::array>(q["scale_inv"]))
    throw py::type_error("q['scale_inv'] must be a numpy.ndarray of one float32");
  py::array s = py::reinterpret_borrow<py::array>(q["scale_inv"]);
  if (!has_dtype<float>(s))
    throw py::type_error("q['scale_inv'] must have dtype float32, got " + dtype_of(s));
  if (s.ndim() != 1 || s.shape(0) != 1)
    throw py::value_error("q['scale_inv'] has shape " + shape_of(s) +
                          ", but a per-tensor copy has one scale_inv, shape (1,)");
  ScaledTensor t;
  t.rows = d.shape(0);
  t.cols = d.shape(1);
  t.layout = MXLayout::tile;
  t.elem = elem;
  t.scale_type = ScaleType::fp32;
  t.block = 0;
  t.data.resize(size_t(t.rows * t.cols));
  t.scales.resize(t.scale_bytes());
  std::memcpy(t.scales.data(), s.data(), sizeof(float));  // one element
  std::memcpy(t.data.data(), d.data(), t.data.size());     // C-contiguous (matrix_arg)
  return t;
}

py::array dequantize_py(const py::handle& q_obj, const std::string& recipe_name,
                        const std::optional<std::string>& elem_obj,
                        const std::optional<std::string>& layout_obj) {
  const Recipe r = quantized_recipe_arg(recipe_name, "dequantize");
  const Elem elem = elem_arg(elem_obj, r.role(Role::weight).elem);
  const bool fp32 = r.role(Role::weight).scale != ScaleType::e8m0;
  if (!py::isinstance<py::dict>(q_obj))
    throw py::type_error("q must be a dict of arrays as returned by quantize(), got " +
                         py::str(py::type::of(q_obj).attr("__name__")).cast<std::string>());
  const py::dict q = py::reinterpret_borrow<py::dict>(q_obj);
  if (r.role(Role::weight).block == BlockShape::tensor) {
    if (layout_obj && *layout_obj != "tile")
      throw py::value_error("layout '" + *layout_obj + "' does not exist for recipe '" +
                            r.name + "'; valid: tile");
    ScaledTensor t = tensor_from_scalar_dict(q, elem);
    std::vector<float> y(size_t(t.rows * t.cols));
    {
      py::gil_scoped_release nogil;
      dequantize(t, y.data());
    }
    return owning_array(std::move(y), t.rows, t.cols);
  }
  // blockwise: a weight's dict holds the tile copy ("data"), an input's the two 1-D copies.
  const bool tiled = fp32 ? q.contains("data") : weight_tiled(r);
  const std::string layout = layout_obj.value_or(tiled ? "tile" : "rowwise");
  ScaledTensor t;
  if (fp32 && tiled && layout == "tile")
    t = tensor_from_dict(q, "data", "scale_inv", MXLayout::tile, elem, true);
  else if (fp32 && !tiled && (layout == "rowwise" || layout == "colwise"))
    t = layout == "rowwise"
            ? tensor_from_dict(q, "rowwise", "rowwise_scale_inv", MXLayout::rowwise, elem, true)
            : tensor_from_dict(q, "colwise", "colwise_scale_inv", MXLayout::colwise, elem, true);
  else if (tiled && layout == "tile")
    t = tensor_from_dict(q, "data", "scale", MXLayout::tile, elem);
  else if (!tiled && layout == "rowwise")
    t = tensor_from_dict(q, "rowwise", "rowwise_scale", MXLayout::rowwise, elem);
  else if (!tiled && layout == "colwise")
    t = tensor_from_dict(q, "colwise", "colwise_scale", MXLayout::colwise, elem);
  else
    throw py::value_error("layout '" + layout + "' does not exist for recipe '" + r.name +
                          "'; valid: " + (tiled ? "tile" : "rowwise, colwise"));
  std::vector<float> y(size_t(t.rows * t.cols));
  {
    py::gil_scoped_release nogil;
    dequantize(t, y.data());
  }
  return owning_array(std::move(y), t.rows, t.cols);
}

py::array matmul_py(const py::handle& x_obj, const py::handle& w_obj,
                    const std::string& recipe_name, const std::optional<std::string>& elem,
                    const std::optional<std::string>& rounding) {
  const Recipe r = recipe_arg(recipe_name);
  as_value_error([&] {
    check_products_built(r);
    check_no_amax_history(r, "matmul");
  });
  const py::array_t<float> x = f32_matrix_arg(x_obj, "x");
  const py::array_t<float> w = f32_matrix_arg(w_obj, "w");
  const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
  if (w.shape(1) != K)
    throw py::value_error("x is " + shape_of(x) + " and w is " + shape_of(w) +
                          ": w must be [N, K] with the K of x (the product is x·wᵀ)");
  std::vector<float> y(size_t(M * N));
  if (!r.quantized()) {
    if (elem || rounding)
      throw py::value_error("recipe '" + r.name + "' does not quantize: elem and "
                            "scale_rounding do not apply");
    py::gil_scoped_release nogil;
    std::vector<uint16_t> xb(size_t(M * K)), wb(size_t(N * K));
    f32_to_bf16_array(x.data(), xb.data(), M * K);
    f32_to_bf16_array(w.data(), wb.data(), N * K);
    gemm_bf16(false, true, M, N, K, xb.data(), K, wb.data(), K, y.data(), N, false);
    return owning_array(std::move(y), M, N);
  }
  if (rounding && has_fp32_scales(r))
    throw py::value_error("scale_rounding applies to MX recipes (E8M0 scales); recipe '" +
                          r.name + "' has FP32 scales");
  const TensorFormat &xf = r.role(Role::input), &wf = r.role(Role::weight);
  const QuantConfig xcfg{elem_arg(elem, xf.elem), rounding_arg(rounding, xf.rule)};
  const QuantConfig wcfg{elem_arg(elem, wf.elem), rounding_arg(rounding, wf.rule)};
  {
    py::gil_scoped_release nogil;
    // The copies the Linear's forward reads, in each role's format (MX or FP32-scaled).
    const QTensor xq = quantize_qtensor(x.data(), M, K, r, Role::input, xcfg);
    const QTensor wq = quantize_qtensor(w.data(), N, K, r, Role::weight, wcfg);
    gemm_mx(false, xq.scaled(copies_needed(r, Role::input, Use::forward).only()), true,
            wq.scaled(copies_needed(r, Role::weight, Use::forward).only()), y.data(), N, false);
  }
  return owning_array(std::move(y), M, N);
}

}  // namespace

void bind_quantize(py::module_& m) {
  m.def("quantize", &quantize_py, py::arg("x"), py::arg("recipe") = "mxfp8",
        py::arg("elem") = py::none(), py::arg("scale_rounding") = py::none(),
        py::arg("role") = py::none(), py::arg("amax_epsilon") = py::none(),
        py::arg("fp32_scales") = false,
        "Quantize a 2-D C-contiguous array [M, K] (float32, or uint16 holding BF16 bits).\n"
        "Returns a dict of arrays named like `mxtrain quantize`'s files: for 1x32 "
        "recipes rowwise [M,K], rowwise_scale [M,ceil(K/32)], colwise [M,K], colwise_scale "
        "[ceil(M/32),K]; for mxfp8-32x32 data [M,K], scale [ceil(M/32),ceil(K/32)] (all "
        "uint8); for blockwise role 'input' (default) rowwise, rowwise_scale_inv "
        "[M,ceil(K/128)], colwise, colwise_scale_inv [ceil(M/128),K], role 'weight' data, "
        "scale_inv [ceil(M/128),ceil(K/128)] (codes uint8, scale_inv float32).\n"
        "elem ('e4m3'|'e5m2') defaults to the role's (e4m3); scale_rounding ('rceil'|'floor', "
        "MX only) to rceil. blockwise only: amax_epsilon (finite, >= 0; default 0), "
        "fp32_scales (True: FP32 scales as computed, not truncated to powers of two).");
  m.def("dequantize", &dequantize_py, py::arg("q"), py::arg("recipe") = "mxfp8",
        py::arg("elem") = py::none(), py::arg("layout") = py::none(),
        "float32 [M, K] from a dict returned by quantize(): code * 2^(scale-127), NaN for a "
        "0xFF scale (MX); code * scale_inv (blockwise). layout: 'rowwise' (default) or "
        "'colwise' for 1x32 recipes and blockwise inputs, 'tile' for mxfp8-32x32 and "
        "blockwise weights. elem must be the one used to quantize (default the recipe's, "
        "e4m3).");
  m.def("matmul", &matmul_py, py::arg("x"), py::arg("w"), py::arg("recipe") = "mxfp8",
        py::arg("elem") = py::none(), py::arg("scale_rounding") = py::none(),
        "x·wᵀ in FP32 for float32 x [M, K] and w [N, K], with both operands in the recipe's "
        "precision as the quantized Linear's forward has them: x rowwise (input element), w "
        "rowwise or as 32x32 tiles (weight element), through gemm_mx; 'bf16' rounds both to "
        "BF16. elem / scale_rounding override both operands' settings.");
}

}  // namespace mxtrain::py_detail
