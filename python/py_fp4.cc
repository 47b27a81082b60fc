// python/py_fp4.cc — mxtrain.quantize_fp4 / dequantize_fp4 / rht_rows: the 4-bit quantizers (NVFP4, MXFP4; docs/numerics.md, "4-bit formats") with each
// of their settings on NumPy arrays, for cross-checks against torchao and TransformerEngine's
// formulas (E2M1 alone: mxtrain.encode / decode with "e2m1", py_formats.cc).
//
// quantize_fp4 returns {"data": uint8 [M, ceil(K/2)] (two E2M1 codes per byte, torchao's
// pack_uint4 order), "scale": uint8 scale grid (E4M3 bytes for NVFP4, E8M0 for MXFP4),
// "tensor_scale": float32 [1] (NVFP4 with a second level), "amax": float32 [1]}; the arrays own
// the engine's buffers. The recipe-driven mxtrain.quantize() covers the 4-bit recipes too.
#include <cstring>

#include "mxtrain/quantize.h"
#include "py_util.h"

namespace mxtrain::py_detail {
namespace {

MXLayout layout_arg(const std::string& s) {
  if (s == "rowwise") return MXLayout::rowwise;
  if (s == "colwise") return MXLayout::colwise;
  if (s == "tile") return MXLayout::tile;
  throw py::value_error("unknown layout '" + s + "'; valid: rowwise, colwise, tile");
}

Fp4Kind kind_arg(const std::string& s) {
  if (s == "nvfp4") return Fp4Kind::nvfp4;
  if (s == "mxfp4") return Fp4Kind::mxfp4;
  throw py::value_error("unknown 4-bit format '" + s + "'; valid: nvfp4, mxfp4");
}

py::array_t<float> scalar(float v) {
  py::array_t<float> a(1);
  a.mutable_data()[0] = v;
  return a;
}

// tensor_scale: "amax" (from the tensor's amax: NVFP4's default), "none", or a float (torchao's
// per_tensor_scale taken as given).
py::dict quantize_fp4_py(const py::handle& x_obj, const std::string& kind,
                         const std::string& layout, const std::optional<std::string>& rounding,
                         const py::object& tensor_scale, const std::string& order,
                         const std::optional<float>& amax, bool stochastic, uint64_t seed,
                         uint32_t step, uint32_t tensor, bool rht) {
  Fp4Config cfg;
  cfg.kind = kind_arg(kind);
  cfg.rounding = rounding_arg(rounding, ScaleRounding::rceil);
  cfg.order = as_value_error([&] { return parse_nvfp4_order(order); });
  cfg.stochastic = stochastic;
  cfg.sr = {seed, step, tensor};
  cfg.rht = rht;
  const MXLayout l = layout_arg(layout);
  std::optional<float> given;
  if (py::isinstance<py::str>(tensor_scale)) {
    const std::string s = tensor_scale.cast<std::string>();
    if (s == "none")
      cfg.tensor_scale = false;
    else if (s != "amax")
      throw py::value_error("tensor_scale must be 'amax', 'none' or a float, got '" + s + "'");
  } else {
    given = tensor_scale.cast<float>();
  }
  py::array xa = matrix_arg(x_obj, "x");
  const int64_t M = xa.shape(0), K = xa.shape(1);
  ScaledTensor q;
  float used = 0.f;
  {
    if (!has_dtype<float>(xa) && !has_dtype<uint16_t>(xa))
      throw py::type_error("x must have dtype float32, or uint16 holding BF16 bit patterns; "
                           "got " + dtype_of(xa));
    const bool f32 = has_dtype<float>(xa);
    py::gil_scoped_release nogil;
    as_value_error([&] {
      if (given) {
        MXT_CHECK(f32, "quantize_fp4: a given tensor_scale takes float32 x");
        quantize_nvfp4_given_scale(static_cast<const float*>(xa.data()), M, K, l, cfg, *given,
                                   q);
        used = 0.f;
      } else if (f32) {
        used = quantize_fp4(static_cast<const float*>(xa.data()), M, K, l, cfg, q, amax);
      } else {
        used = quantize_fp4(static_cast<const uint16_t*>(xa.data()), M, K, l, cfg, q, amax);
      }
      return 0;
    });
  }
  py::dict out;
  const int64_t sr = q.scale_rows(), sc = q.scale_cols(), rb = q.row_bytes();
  if (q.has_tensor_scale) out["tensor_scale"] = scalar(q.tensor_scale);
  out["amax"] = scalar(used);
  out["rht"] = q.rht;
  out["data"] = owning_array(std::move(q.data), M, rb);
  out["scale"] = owning_array(std::move(q.scales), sr, sc);
  return out;
}

py::array dequantize_fp4_py(const py::dict& q, int64_t cols, const std::string& kind,
                            const std::string& layout) {
  for (const char* k : {"data", "scale"})
    if (!q.contains(k)) throw py::value_error(std::string("q has no '") + k + "' array");
  py::array d = matrix_arg(q["data"], "q['data']");
  py::array s = matrix_arg(q["scale"], "q['scale']");
  if (!has_dtype<uint8_t>(d) || !has_dtype<uint8_t>(s))
    throw py::type_error("q['data'] and q['scale'] must have dtype uint8");
  ScaledTensor t;
  t.rows = d.shape(0);
  t.cols = cols;
  t.layout = layout_arg(layout);
  t.elem = Elem::e2m1;
  t.scale_type = kind_arg(kind) == Fp4Kind::nvfp4 ? ScaleType::e4m3 : ScaleType::e8m0;
  t.block = fp4_block(kind_arg(kind));
  if (d.shape(1) != t.row_bytes())
    throw py::value_error("q['data'] has shape " + shape_of(d) + "; " + std::to_string(cols) +
                          " columns of 4-bit codes take " + std::to_string(t.row_bytes()) +
                          " bytes a row");
  if (s.shape(0) != t.scale_rows() || s.shape(1) != t.scale_cols())
    throw py::value_error("q['scale'] has shape " + shape_of(s) + ", expected (" +
                          std::to_string(t.scale_rows()) + ", " +
                          std::to_string(t.scale_cols()) + ")");
  if (q.contains("tensor_scale")) {
    t.has_tensor_scale = true;
    t.tensor_scale = py::array_t<float>(q["tensor_scale"]).at(0);
  }
  t.data.resize(t.data_bytes());
  t.scales.resize(t.scale_bytes());
  std::memcpy(t.data.data(), d.data(), t.data.size());
  std::memcpy(t.scales.data(), s.data(), t.scales.size());
  std::vector<float> y(size_t(t.rows * cols));
  {
    py::gil_scoped_release nogil;
    dequantize(t, y.data());
  }
  return owning_array(std::move(y), t.rows, cols);
}

py::array rht_rows_py(const py::handle& x_obj) {
  const py::array_t<float> x = f32_matrix_arg(x_obj, "x");
  const int64_t M = x.shape(0), K = x.shape(1);
  std::vector<float> y(size_t(M * K));
  {
    py::gil_scoped_release nogil;
    rht_rows(x.data(), M, K, y.data());
  }
  return owning_array(std::move(y), M, K);
}

}  // namespace

void bind_fp4(py::module_& m) {
  m.def("quantize_fp4", &quantize_fp4_py, py::arg("x"), py::arg("kind") = "nvfp4",
        py::arg("layout") = "rowwise", py::arg("scale_rounding") = py::none(),
        py::arg("tensor_scale") = py::str("amax"), py::arg("order") = "torchao",
        py::arg("amax") = py::none(), py::arg("stochastic") = false, py::arg("seed") = 0,
        py::arg("step") = 0, py::arg("tensor") = 0, py::arg("rht") = false,
        "4-bit quantization of a 2-D C-contiguous array [M, K] (float32 or BF16 bits as "
        "uint16). kind 'nvfp4' (E4M3 scales per 16; tensor_scale 'amax' (default: from the "
        "tensor's amax, or `amax` when given), 'none' (one level), or a float (torchao's "
        "per_tensor_scale taken as given); order 'torchao' or 'te') or 'mxfp4' (E8M0 per 32, "
        "scale_rounding 'rceil' | 'floor'). layout 'rowwise' (1xB), 'colwise' (Bx1), 'tile' "
        "(BxB). stochastic rounding keyed by (seed, step, tensor); rht: colwise copy of the "
        "random-Hadamard-transformed x. Returns {'data': uint8 [M, ceil(K/2)], 'scale': uint8, "
        "'tensor_scale': float32 [1] (NVFP4 two-level), 'amax': float32 [1], 'rht': bool}.");
  m.def("dequantize_fp4", &dequantize_fp4_py, py::arg("q"), py::arg("cols"),
        py::arg("kind") = "nvfp4", py::arg("layout") = "rowwise",
        "float32 [M, cols] from quantize_fp4's dict: code * e4m3(scale) * tensor_scale "
        "(NVFP4) or code * 2^(scale - 127) (MXFP4).");
  m.def("rht_rows", &rht_rows_py, py::arg("x"),
        "The random Hadamard transform of float32 x [M, K] along its rows (groups of 16).");
}

}  // namespace mxtrain::py_detail
