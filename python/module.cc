// python/module.cc — the compiled module `mxtrain._mxtrain` (pybind11); the package
// python/mxtrain/__init__.py re-exports it.
//
// Errors: mxtrain::Error becomes mxtrain.Error (a RuntimeError) with the engine's message
// unchanged, and so does std::bad_alloc; bad arguments are TypeError / ValueError (py_util.h). The JSON texts of
// `mxtrain info --json` and `mxtrain recipes --json` come from the same library functions the
// CLI prints (mxtrain/info.h).
#include "mxtrain/info.h"
#include "mxtrain/isa.h"
#include "py_util.h"

namespace mxtrain::py_detail {
void bind_quantize(py::module_& m);
void bind_linear(py::module_& m);
void bind_formats(py::module_& m);
}  // namespace mxtrain::py_detail

PYBIND11_MODULE(_mxtrain, m) {
  namespace py = pybind11;
  using namespace mxtrain;
  using namespace mxtrain::py_detail;
  m.doc() = "mxtrain: MX (OCP microscaling) quantization, MX GEMM and the quantized Linear";
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  // Memory the engine could not get is mxtrain.Error too, never a bare MemoryError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    } catch (const std::bad_alloc&) {
      error("out of memory: an engine buffer could not be allocated (std::bad_alloc)");
    }
  });

  m.def("_info_json", [] { return engine_info_json(1); },
        "The JSON text `mxtrain info --json` prints");
  m.def("_recipes_json", [] { return recipes_json(1); },
        "The JSON text `mxtrain recipes --json` prints");
  m.def("set_isa",
        [](const std::optional<std::string>& name) {
          if (!name) {
            clear_isa_override();
            return;
          }
          const Isa isa = as_value_error([&] { return parse_isa(*name); });
          set_isa(isa);  // mxtrain.Error if the CPU lacks it
        },
        py::arg("name"),
        "Force a kernel path (scalar, avx2, avx512, avx512vbmi) for this process, like "
        "--isa / MXTRAIN_ISA; None goes back to the default.");
  m.def("active_isa", [] { return std::string(isa_name(active_isa())); },
        "The kernel path in use");
  bind_quantize(m);
  bind_linear(m);
  bind_formats(m);
}
