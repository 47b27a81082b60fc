// python/py_linear.cc — mxtrain.Linear (class _mxtrain.Linear): one engine Linear layer
// (nn/linear.h) driven from Python, the piece mxtrain.torch's mx_linear is built on.
//
// The object owns a Linear. set_weight() copies a float32 [out, in] array into
// weight.value and bumps weight.version only when the bytes changed, so the layer's
// quantized-weight cache is rebuilt exactly when needed. forward() returns y and a
// LinearState holding the layer's LinearSaved (plus a reference to x, which the layer reads
// again in backward when defer_backward_quant is on); backward() consumes it and returns
// (dx, dW, db) for that one call: dW and db are fresh arrays, not accumulated. Several
// forwards may be outstanding; backward refuses a state whose weight version is not the
// current one (set the forward's weight again first). A mutex serialises calls on one
// object; the GIL is released while the layer runs.
#include <cstring>
#include <mutex>

#include "mxtrain/nn/linear.h"
#include "py_util.h"

namespace mxtrain::py_detail {
namespace {

struct LinearState {
  LinearSaved saved;
  py::object x_ref;          // keeps x alive for a deferred backward quantization
  uint64_t weight_version = 0;
  bool pending = false;      // forward done, backward not yet
};

class PyLinear {
 public:
  PyLinear(int64_t in, int64_t out, bool has_bias, const std::string& recipe, bool defer) {
    LinearPrecision p;
    p.recipe = recipe_arg(recipe);
    p.defer_backward_quant = defer;
    // Bad arguments (a size below 1, a recipe the layer cannot run) are ValueError with the
    // engine's message; they throw before anything is allocated.
    as_value_error([&] {
      p.validate();
      check_no_amax_history(p.recipe, "the Python Linear");
    });
    if (in < 1 || out < 1) as_value_error([&] { Linear("python", in, out, has_bias, p); });
    // A size too large to count or to allocate is mxtrain.Error (Parameter::init).
    lin_ = Linear("python", in, out, has_bias, p);
  }

  int64_t in_features() const { return lin_.in_features(); }
  int64_t out_features() const { return lin_.out_features(); }
  bool has_bias() const { return !lin_.bias.shape.empty(); }
  std::string recipe() const { return lin_.precision().recipe.name; }
  bool defer() const { return lin_.precision().defer_backward_quant; }
  uint64_t weight_version() const { return lin_.weight.version; }
  int64_t weight_quantizations() const { return lin_.weight_quantizations(); }

  // Returns whether the weight changed (and the version was bumped).
  bool set_weight(const py::handle& w_obj) {
    const py::array_t<float> w = f32_matrix_arg(w_obj, "w");
    if (w.shape(0) != lin_.out_features() || w.shape(1) != lin_.in_features())
      throw py::value_error("w has shape " + shape_of(w) + ", the layer's weight is (" +
                            std::to_string(lin_.out_features()) + ", " +
                            std::to_string(lin_.in_features()) + ") [out, in]");
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    FloatBuffer& v = lin_.weight.value;
    const size_t bytes = v.size() * sizeof(float);
    if (std::memcmp(v.data(), w.data(), bytes) == 0) return false;
    std::memcpy(v.data(), w.data(), bytes);
    ++lin_.weight.version;
    return true;
  }

  void set_bias(const py::handle& b_obj) {
    if (!has_bias()) throw py::value_error("this Linear was made without a bias");
    if (!py::isinstance<py::array>(b_obj))
      throw py::type_error("b must be a numpy.ndarray");
    py::array b = py::reinterpret_borrow<py::array>(b_obj);
    if (!has_dtype<float>(b)) throw py::type_error("b must have dtype float32, got " + dtype_of(b));
    if (b.ndim() != 1 || b.shape(0) != lin_.out_features() || !(b.flags() & py::array::c_style))
      throw py::value_error("b must be a contiguous 1-D array of " +
                            std::to_string(lin_.out_features()) + " values, got shape " +
                            shape_of(b));
    std::lock_guard<std::mutex> lock(mu_);
    std::memcpy(lin_.bias.value.data(), b.data(), lin_.bias.value.size() * sizeof(float));
  }

  py::tuple forward(const py::handle& x_obj) {
    py::array_t<float> x = f32_matrix_arg(x_obj, "x");
    if (x.shape(1) != lin_.in_features())
      throw py::value_error("x has shape " + shape_of(x) + ", the layer takes [T, " +
                            std::to_string(lin_.in_features()) + "]");
    const int64_t T = x.shape(0);
    auto state = std::make_shared<LinearState>();
    std::vector<float> y(size_t(T * lin_.out_features()));
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      lin_.forward(x.data(), T, y.data(), state->saved);
      state->weight_version = lin_.weight.version;
    }
    state->x_ref = x;
    state->pending = true;
    return py::make_tuple(owning_array(std::move(y), T, lin_.out_features()), state);
  }

  py::tuple backward(LinearState& s, const py::handle& dy_obj, bool need_dx) {
    if (!s.pending)
      throw py::value_error("this LinearState was already used by backward (one backward per "
                            "forward)");
    const py::array_t<float> dy = f32_matrix_arg(dy_obj, "dy");
    const int64_t T = s.saved.tokens, out = lin_.out_features(), in = lin_.in_features();
    if (dy.shape(0) != T || dy.shape(1) != out)
      throw py::value_error("dy has shape " + shape_of(dy) + ", forward produced (" +
                            std::to_string(T) + ", " + std::to_string(out) + ")");
    std::vector<float> dx(need_dx ? size_t(T * in) : 0);
    FloatBuffer dw, db;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      if (s.weight_version != lin_.weight.version)
        throw Error("the layer's weight changed between forward and backward (version " +
                    std::to_string(s.weight_version) + " -> " +
                    std::to_string(lin_.weight.version) +
                    "); set the forward's weight again before backward");
      lin_.weight.grad.assign(size_t(out * in), 0.f);
      if (has_bias()) lin_.bias.grad.assign(size_t(out), 0.f);
      lin_.backward(s.saved, dy.data(), need_dx ? dx.data() : nullptr);
      dw.swap(lin_.weight.grad);
      db.swap(lin_.bias.grad);
    }
    s.pending = false;
    s.x_ref = py::none();
    py::object dx_arr = need_dx ? py::object(owning_array(std::move(dx), T, in)) : py::none();
    py::object db_arr = py::none();
    if (has_bias()) {
      auto* owned = new FloatBuffer(std::move(db));
      py::capsule free_it(owned, [](void* p) { delete static_cast<FloatBuffer*>(p); });
      db_arr = py::array_t<float>(py::ssize_t(out), owned->data(), free_it);
    }
    return py::make_tuple(dx_arr, owning_array(std::move(dw), out, in), db_arr);
  }

 private:
  std::mutex mu_;
  Linear lin_;
};

}  // namespace

void bind_linear(py::module_& m) {
  py::class_<LinearState, std::shared_ptr<LinearState>>(
      m, "LinearState", "What Linear.forward keeps for its backward (opaque).")
      .def_property_readonly("pending", [](const LinearState& s) { return s.pending; })
      .def_property_readonly("held_bytes", [](const LinearState& s) { return s.saved.held_bytes(); });
  py::class_<PyLinear>(m, "Linear",
                       "One engine Linear layer y = x·Wᵀ + b in a recipe's precision "
                       "(forward, dgrad, wgrad as in `mxtrain train`).")
      .def(py::init<int64_t, int64_t, bool, const std::string&, bool>(), py::arg("in_features"),
           py::arg("out_features"), py::arg("bias") = false, py::arg("recipe") = "mxfp8",
           py::arg("defer_backward_quant") = false)
      .def_property_readonly("in_features", &PyLinear::in_features)
      .def_property_readonly("out_features", &PyLinear::out_features)
      .def_property_readonly("has_bias", &PyLinear::has_bias)
      .def_property_readonly("recipe", &PyLinear::recipe)
      .def_property_readonly("defer_backward_quant", &PyLinear::defer)
      .def_property_readonly("weight_version", &PyLinear::weight_version)
      .def_property_readonly("weight_quantizations", &PyLinear::weight_quantizations,
                             "How often the layer (re)built its quantized weight copies")
      .def("set_weight", &PyLinear::set_weight, py::arg("w"),
           "Copy float32 [out, in] into the layer; bumps the weight version (and so rebuilds "
           "the quantized copies) only if the values changed. Returns whether they did.")
      .def("set_bias", &PyLinear::set_bias, py::arg("b"), "Copy float32 [out] into the bias.")
      .def("forward", &PyLinear::forward, py::arg("x"),
           "x float32 [T, in] -> (y float32 [T, out], LinearState)")
      .def("backward", &PyLinear::backward, py::arg("state"), py::arg("dy"),
           py::arg("need_dx") = true,
           "dy float32 [T, out] -> (dx [T, in] or None, dW [out, in], db [out] or None) for "
           "this call alone");
}

}  // namespace mxtrain::py_detail
