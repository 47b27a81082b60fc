// nn/info.cc — the engine description behind `mxtrain info` / `mxtrain recipes` and the
// Python module's info() / recipes() (mxtrain/info.h).
//
// The kernels are the choices of every dispatch table (core/dispatch.h): quantize, dequantize,
// conversions and the non-finite scan (core), the MX product (gemm), the elementwise ops and
// AdamW, and attention (nn); BF16 products go through oneDNN, which picks its own ISA. It
// lives in nn, the highest module with a dispatch table, which the Python module links too.
#include "mxtrain/info.h"

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/quantize_kernels.h"
#include "gemm/fp4_gemm.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"
#include "nn/attention_kernels.h"
#include "nn/ops_kernels.h"

namespace mxtrain {
namespace {

// Every dispatch table's choice, and the BF16 products, whose kernels oneDNN chooses.
std::vector<KernelPath> op_paths() {
  std::vector<PathChoice> all = kern::quantize_path_choices();
  all.push_back(gemm_detail::mx_product_choice());
  all.push_back(gemm_detail::fp4_product_choice());
  all.push_back(opk::ops_choice());
  all.push_back(nn_detail::attention_choice());
  all.push_back(nn_detail::attention_cached_choice());
  std::vector<KernelPath> out;
  for (const PathChoice& c : all) out.push_back({c.op, path_name(c.path), c.kernel});
  const GemmShapes dense = gemm_shapes();  // outside a VaryingRowsScope
  out.push_back({"GEMM bf16 (bf16 recipe)", "oneDNN",
                 std::string("oneDNN matmul, ") + gemm_shapes_name(dense) + " shapes" +
                     (dense == GemmShapes::exact ? "; MoE experts' products: runtime" : "") +
                     " (MXTRAIN_GEMM_SHAPES=exact|runtime sets all); oneDNN picks its own "
                     "ISA (see ONEDNN_VERBOSE=1)"});
  return out;
}

// A recipe as `mxtrain recipes --json` prints it: per role its format and the copy each use
// reads.
nlohmann::json recipe_json(const Recipe& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["quantized"] = r.quantized();
  j["description"] = r.note;
  for (int i = 0; i < kNumRoles; ++i) {
    const Role role = Role(i);
    const TensorFormat& f = r.role(role);
    nlohmann::json rj;
    rj["elem"] = f.quantized() ? elem_name(f.elem) : "bf16";
    rj["scale"] = scale_type_name(f.scale);
    rj["block"] = block_name(f.block);
    if (f.quantized()) {
      rj["scale_rule"] = rounding_name(f.rule);
      rj["amax_epsilon"] = f.amax_epsilon;
      rj["scale_source"] = scale_source_name(f.source);
    }
    if (f.is_4bit()) {
      rj["tensor_scale"] = f.tensor_scale;
      if (f.tensor_scale) rj["order"] = nvfp4_order_name(f.order);
      rj["stochastic_rounding"] = f.stochastic;
      rj["rht"] = f.rht;
    }
    for (Use u : {Use::forward, Use::dgrad, Use::wgrad})
      rj["copies"][use_name(u)] = copies_needed(r, role, u).name();
    j["roles"][role_name(role)] = rj;
  }
  return j;
}

}  // namespace

EngineInfo engine_info() {
  const CpuFeatures& f = cpu_features();
  EngineInfo e;
  e.cpu = f.brand;
  e.machine_class = machine_class(f);
  e.features = {{"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
                {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl},
                {"avx512dq", f.avx512dq}, {"avx512vbmi", f.avx512vbmi},
                {"avx512_bf16", f.avx512_bf16}, {"amx_tile", f.amx_tile},
                {"amx_bf16", f.amx_bf16}};
  for (Isa i : supported_isas()) e.supported_isas.push_back(isa_name(i));
  e.best_isa = isa_name(best_isa());
  e.active_isa = isa_name(active_isa());
  e.omp_max_threads = omp_get_max_threads();
  e.gemm_path = path_name(gemm_mx_path());
  e.kernels = op_paths();
  return e;
}

std::string engine_info_json(int indent) {
  const EngineInfo e = engine_info();
  nlohmann::json j;
  j["cpu"] = e.cpu;
  j["machine_class"] = e.machine_class;
  for (const auto& [name, on] : e.features) j["features"][name] = on;
  j["supported_isas"] = e.supported_isas;
  j["best_isa"] = e.best_isa;
  j["active_isa"] = e.active_isa;
  j["omp_max_threads"] = e.omp_max_threads;
  j["gemm_path"] = e.gemm_path;
  for (const KernelPath& o : e.kernels)
    j["kernels"].push_back({{"op", o.op}, {"path", o.path}, {"kernel", o.kernel}});
  return j.dump(indent);
}

std::string recipes_json(int indent) {
  nlohmann::json all = nlohmann::json::array();
  for (const Recipe& r : registered_recipes()) all.push_back(recipe_json(r));
  return all.dump(indent);
}

}  // namespace mxtrain
