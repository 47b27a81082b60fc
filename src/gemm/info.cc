// gemm/info.cc — the engine description behind `mxtrain info` / `mxtrain recipes` and the
// Python module's info() / recipes() (mxtrain/info.h).
//
// The kernel names follow the quantize dispatch table (core/quantize_kernels.h) and the MX
// product's path (gemm.h, gemm_path()); BF16 products go through oneDNN, which picks its own
// ISA. It lives in the gemm module because it reports the GEMM path.
#include "mxtrain/info.h"

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/quantize_kernels.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

// The MX product's kernels on the active path.
KernelPath mx_gemm_path() {
  const GemmPath p = gemm_path();
  std::string kernel;
  switch (p) {
    case GemmPath::scalar: kernel = "mx_gemm_ref"; break;
    case GemmPath::onednn: kernel = "dequantize_bf16 + oneDNN matmul (operands expanded)"; break;
    case GemmPath::avx512bf16:
      kernel = "mx_gemm_avx512bf16 (FP8 panels -> BF16, VDPBF16PS 6x64)";
      if (active_isa() == Isa::avx512vbmi)
        kernel += "; forward with m <= " + std::to_string(gemm_detail::kGemvMaxRows) +
                  ": mx_gemv_nt_avx512vbmi";
      break;
  }
  return {"GEMM MX (mxfp8 recipes)", gemm_path_name(p), kernel};
}

std::vector<KernelPath> op_paths() {
  const kern::QuantKernels& k = kern::quant_kernels(active_isa());
  // The avx512vbmi table has VBMI builds of the quantizers only; the rest are avx512's.
  const std::string isa = isa_name(k.isa);
  const std::string base = k.isa == Isa::avx512vbmi ? isa_name(Isa::avx512) : isa;
  const std::string sfx = k.isa == Isa::scalar ? "_ref" : "_" + isa;
  const std::string bsfx = k.isa == Isa::scalar ? "_ref" : "_" + base;
  return {
      {"quantize rowwise 1x32", isa, "quantize_mx_rowwise_{f32,bf16}" + sfx},
      {"quantize colwise 32x1", isa, "quantize_mx_colwise_{f32,bf16}" + sfx},
      {"quantize dual-axis (one read)", isa, "quantize_mx_dual_{f32,bf16}" + sfx},
      {"quantize 32x32 tiles", isa, "quantize_mx_tile32_{f32,bf16}" + sfx},
      {"dequantize (to fp32 / bf16)", base, "dequantize_mx_{f32,bf16}" + bsfx},
      {"fp32 <-> bf16 arrays", base, "convert_{f32_to_bf16,bf16_to_f32}" + bsfx},
      {"non-finite scan", base, "has_nonfinite_f32" + bsfx},
      {"GEMM bf16 (bf16 recipe)", "oneDNN", "oneDNN matmul; oneDNN picks its own ISA "
                                            "(see ONEDNN_VERBOSE=1)"},
      mx_gemm_path(),
  };
}

nlohmann::json recipe_json(const Recipe& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["quantized"] = r.quantized();
  j["scaling_type"] = r.quantized() ? "mx" : "none";
  j["block_size"] = r.granularity.block_size;
  if (r.quantized()) {
    j["strategy"] = r.strategy;
    j["weight_layout"] = r.weight_tiled() ? "tile32 (one copy)" : "rowwise + colwise 1x32";
    j["input_elem"] = elem_name(r.input_elem);
    j["weight_elem"] = elem_name(r.weight_elem);
    j["grad_elem"] = elem_name(r.grad_elem);
    j["scale_rounding"] = rounding_name(r.rounding);
  }
  j["description"] = r.describe();
  return j;
}

}  // namespace

EngineInfo engine_info() {
  const CpuFeatures& f = cpu_features();
  EngineInfo e;
  e.cpu = f.brand;
  e.features = {{"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
                {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl},
                {"avx512dq", f.avx512dq}, {"avx512vbmi", f.avx512vbmi},
                {"avx512_bf16", f.avx512_bf16}, {"amx_tile", f.amx_tile},
                {"amx_bf16", f.amx_bf16}};
  for (Isa i : supported_isas()) e.supported_isas.push_back(isa_name(i));
  e.best_isa = isa_name(best_isa());
  e.active_isa = isa_name(active_isa());
  e.omp_max_threads = omp_get_max_threads();
  e.gemm_path = gemm_path_name(gemm_path());
  e.kernels = op_paths();
  return e;
}

std::string engine_info_json(int indent) {
  const EngineInfo e = engine_info();
  nlohmann::json j;
  j["cpu"] = e.cpu;
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
  for (const std::string& n : recipe_names()) all.push_back(recipe_json(get_recipe(n)));
  return all.dump(indent);
}

}  // namespace mxtrain
