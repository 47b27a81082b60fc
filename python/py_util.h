// python/py_util.h — helpers shared by the binding files of the `_mxtrain` module: checks
// that turn bad Python input into a clear TypeError / ValueError, name parsing that turns
// the engine's "unknown ..." errors into ValueError, and NumPy arrays that own engine buffers
// (no copy on the way out).
//
// Inputs are never converted silently: a float64 array or a strided view is refused with a
// message that says what to pass instead, so no hidden copy or rounding happens.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain::py_detail {

namespace py = pybind11;

// Runs f(); an mxtrain::Error it throws becomes ValueError with the same message (for names
// and arguments the caller chose).
template <class F>
auto as_value_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

inline Recipe recipe_arg(const std::string& name) {
  return as_value_error([&] { return get_recipe(name); });
}
inline Recipe quantized_recipe_arg(const std::string& name, const char* what) {
  Recipe r = recipe_arg(name);
  if (!r.quantized()) {
    std::string q;
    for (const Recipe& e : registered_recipes())
      if (e.quantized()) q += (q.empty() ? "" : ", ") + e.name;
    throw py::value_error("recipe '" + name + "' does not quantize (BF16 values have no " +
                          "scales), so " + what + " has nothing to do; use one of: " + q);
  }
  return r;
}
// None -> fallback; otherwise parsed (ValueError listing the choices). Optional names are
// std::optional<std::string> parameters, so pybind11 itself refuses a non-str with TypeError.
inline Elem elem_arg(const std::optional<std::string>& o, Elem fallback) {
  if (!o) return fallback;
  return as_value_error([&] { return parse_elem(o->c_str()); });
}
inline ScaleRounding rounding_arg(const std::optional<std::string>& o, ScaleRounding fallback) {
  if (!o) return fallback;
  return as_value_error([&] { return parse_rounding(o->c_str()); });
}

inline std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}
inline std::string dtype_of(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// A numpy.ndarray argument, checked: TypeError if it is not one, ValueError if it is not
// 2-D, C-contiguous and non-empty.
inline py::array matrix_arg(const py::handle& h, const char* name) {
  if (!py::isinstance<py::array>(h))
    throw py::type_error(std::string(name) + " must be a numpy.ndarray, got " +
                         py::str(py::type::of(h).attr("__name__")).cast<std::string>());
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (a.ndim() != 2)
    throw py::value_error(std::string(name) + " must be 2-D [rows, cols], got shape " +
                          shape_of(a));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + " must be C-contiguous (row-major); pass "
                          "numpy.ascontiguousarray(" + name + ")");
  if (a.shape(0) < 1 || a.shape(1) < 1)
    throw py::value_error(std::string(name) + " is empty (shape " + shape_of(a) + ")");
  return a;
}
template <class T>
bool has_dtype(const py::array& a) {
  return a.dtype().equal(py::dtype::of<T>());
}
// matrix_arg + dtype float32 (TypeError otherwise).
inline py::array_t<float> f32_matrix_arg(const py::handle& h, const char* name) {
  py::array a = matrix_arg(h, name);
  if (!has_dtype<float>(a))
    throw py::type_error(std::string(name) + " must have dtype float32, got " + dtype_of(a) +
                         "; convert with " + name + ".astype(numpy.float32)");
  return py::array_t<float>(a);
}

// A NumPy array [rows, cols] that views `buf` and keeps it alive (the array owns it).
template <class Buf>
py::array owning_array(Buf&& buf, int64_t rows, int64_t cols) {
  using T = typename std::decay_t<Buf>::value_type;
  auto* owned = new std::decay_t<Buf>(std::forward<Buf>(buf));
  py::capsule free_it(owned, [](void* p) { delete static_cast<std::decay_t<Buf>*>(p); });
  return py::array_t<T>({py::ssize_t(rows), py::ssize_t(cols)}, owned->data(), free_it);
}

}  // namespace mxtrain::py_detail
