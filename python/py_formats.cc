// python/py_formats.cc — mxtrain.encode / decode: the element and scale format conversions of
// mxtrain/formats.h, one value at a time, on NumPy arrays of any shape (docs/python.md,
// "Format conversions"; docs/numerics.md, "Formats").
//
// They exist so that the conversions can be compared value by value with another library's
// (tests/python/test_xcheck_formats.py checks them against ml_dtypes):
//   encode(x, "e4m3" | "e5m2")  f32_to_e4m3 / f32_to_e5m2, the scalar reference conversions
//                               (RNE, satfinite; NaN keeps its sign) -> uint8 codes
//   encode(x, "bf16")           f32_to_bf16_array, the dispatched kernel (set_isa chooses the
//                               path; "scalar" runs f32_to_bf16) -> uint16 BF16 bits
//   decode(c, "e4m3" | "e5m2" | "e8m0")  e4m3_to_f32 / e5m2_to_f32 / e8m0_to_f32 -> float32
//   decode(c, "bf16")           bf16_to_f32_array (dispatched) -> float32
// E8M0 has no encode: a scale byte comes from a block's amax by the MX scale rule
// (quantize), not by rounding one value. The output has the input's shape; the GIL is
// released while the loop runs.
#include <cstring>

#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"
#include "py_util.h"

namespace mxtrain::py_detail {
namespace {

enum class Fmt { e4m3, e5m2, e8m0, bf16 };

Fmt fmt_arg(const std::string& name) {
  if (name == "e4m3") return Fmt::e4m3;
  if (name == "e5m2") return Fmt::e5m2;
  if (name == "e8m0") return Fmt::e8m0;
  if (name == "bf16") return Fmt::bf16;
  throw py::value_error("unknown format '" + name + "'; valid choices: e4m3, e5m2, e8m0, bf16");
}

// A C-contiguous ndarray of dtype T (any shape, may be empty); TypeError / ValueError
// otherwise, naming what to pass.
template <class T>
py::array_t<T> elements_arg(const py::handle& h, const char* name, const char* want) {
  if (!py::isinstance<py::array>(h))
    throw py::type_error(std::string(name) + " must be a numpy.ndarray, got " +
                         py::str(py::type::of(h).attr("__name__")).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (!has_dtype<T>(a))
    throw py::type_error(std::string(name) + " must have dtype " + want + ", got " +
                         dtype_of(a));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + " must be C-contiguous; pass "
                          "numpy.ascontiguousarray(" + name + ")");
  return py::array_t<T>(a);
}

template <class T>
std::vector<py::ssize_t> shape_vec(const py::array_t<T>& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

py::array encode_py(const py::handle& x_obj, const std::string& format) {
  const Fmt f = fmt_arg(format);
  if (f == Fmt::e8m0)
    throw py::value_error("format 'e8m0' has no encode: an E8M0 scale comes from a block's "
                          "amax by the MX scale rule (use quantize); valid choices: e4m3, "
                          "e5m2, bf16");
  const py::array_t<float> x = elements_arg<float>(x_obj, "x", "float32");
  const int64_t n = x.size();
  const float* in = x.data();
  if (f == Fmt::bf16) {
    py::array_t<uint16_t> out(shape_vec(x));
    uint16_t* o = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      f32_to_bf16_array(in, o, n);
    }
    return out;
  }
  py::array_t<uint8_t> out(shape_vec(x));
  uint8_t* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    if (f == Fmt::e4m3)
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_e4m3(in[i]);
    else
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_e5m2(in[i]);
  }
  return out;
}

py::array decode_py(const py::handle& c_obj, const std::string& format) {
  const Fmt f = fmt_arg(format);
  if (f == Fmt::bf16) {
    const py::array_t<uint16_t> c =
        elements_arg<uint16_t>(c_obj, "codes", "uint16 (BF16 bit patterns)");
    py::array_t<float> out(shape_vec(c));
    float* o = out.mutable_data();
    const uint16_t* in = c.data();
    const int64_t n = c.size();
    {
      py::gil_scoped_release nogil;
      bf16_to_f32_array(in, o, n);
    }
    return out;
  }
  const py::array_t<uint8_t> c = elements_arg<uint8_t>(c_obj, "codes", "uint8");
  py::array_t<float> out(shape_vec(c));
  float* o = out.mutable_data();
  const uint8_t* in = c.data();
  const int64_t n = c.size();
  {
    py::gil_scoped_release nogil;
    for (int64_t i = 0; i < n; ++i)
      o[i] = f == Fmt::e4m3 ? e4m3_to_f32(in[i])
                            : f == Fmt::e5m2 ? e5m2_to_f32(in[i]) : e8m0_to_f32(in[i]);
  }
  return out;
}

}  // namespace

void bind_formats(py::module_& m) {
  m.def("encode", &encode_py, py::arg("x"), py::arg("format"),
        "Convert each float32 value of x (any shape, C-contiguous) to a format's bits: 'e4m3' "
        "or 'e5m2' -> uint8 codes (round to nearest even, satfinite, NaN keeps its sign; the "
        "scalar reference f32_to_e4m3 / f32_to_e5m2), 'bf16' -> uint16 BF16 bits (the "
        "dispatched f32_to_bf16_array). 'e8m0' has no encode (scales come from quantize).");
  m.def("decode", &decode_py, py::arg("codes"), py::arg("format"),
        "float32 values of codes (any shape, C-contiguous): uint8 for 'e4m3', 'e5m2', 'e8m0' "
        "(2^(b-127), 0xFF NaN), uint16 for 'bf16'.");
}

}  // namespace mxtrain::py_detail
