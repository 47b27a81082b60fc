// cli/cmd_info.cc — `mxtrain info`: what the CPU offers and which kernel path each operation
// takes on it.
//
// Reads isa.h (features, supported and active path — the global --isa flag or MXTRAIN_ISA
// change the latter) and the quantize kernel table the dispatch in core/quantize.cc would
// use, so what is printed is what runs. GEMMs go through oneDNN, which picks its own ISA.
#include <omp.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/gemm.h"
#include "core/quantize_kernels.h"
#include "mxtrain/isa.h"

namespace {

using namespace mxtrain;

struct OpPath {
  std::string op, path, kernel;
};

// The MX product's kernels on the active path (gemm.h, gemm_path()).
OpPath mx_gemm_path() {
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

std::vector<OpPath> op_paths() {
  const kern::QuantKernels& k = kern::quant_kernels(active_isa());
  // The avx512vbmi table has VBMI builds of the quantizers only; the rest are avx512's.
  const std::string isa = isa_name(k.isa);
  const std::string base = k.isa == Isa::avx512vbmi ? isa_name(Isa::avx512) : isa;
  const std::string sfx = k.isa == Isa::scalar ? "__ref" : "__" + isa;
  const std::string bsfx = k.isa == Isa::scalar ? "__ref" : "__" + base;
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

int run_info(bool json) {
  const CpuFeatures& f = cpu_features();
  const std::vector<std::pair<const char*, bool>> feats = {
      {"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
      {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl},
      {"avx512dq", f.avx512dq}, {"avx512vbmi", f.avx512vbmi}, {"avx512_bf16", f.avx512_bf16},
      {"amx_tile", f.amx_tile}, {"amx_bf16", f.amx_bf16}};
  std::vector<std::string> supported;
  for (Isa i : supported_isas()) supported.push_back(isa_name(i));
  const std::vector<OpPath> ops = op_paths();
  if (json) {
    nlohmann::json j;
    j["cpu"] = f.brand;
    for (auto& [name, on] : feats) j["features"][name] = on;
    j["supported_isas"] = supported;
    j["best_isa"] = isa_name(best_isa());
    j["active_isa"] = isa_name(active_isa());
    j["omp_max_threads"] = omp_get_max_threads();
    j["gemm_path"] = gemm_path_name(gemm_path());
    for (const OpPath& o : ops) j["kernels"].push_back({{"op", o.op}, {"path", o.path},
                                                        {"kernel", o.kernel}});
    std::cout << j.dump(1) << std::endl;
    return 0;
  }
  std::cout << "CPU: " << (f.brand.empty() ? "(unknown)" : f.brand) << "\n";
  std::cout << "features (cpuid + OS register state):";
  for (auto& [name, on] : feats) std::cout << " " << name << (on ? "+" : "-");
  std::cout << "\nkernel paths supported:";
  for (const std::string& s : supported) std::cout << " " << s;
  std::cout << "\nactive path: " << isa_name(active_isa()) << " (best " << isa_name(best_isa())
            << "; override with --isa or MXTRAIN_ISA=scalar|avx2|avx512|avx512vbmi)\n";
  std::cout << "OpenMP threads: " << omp_get_max_threads() << "\n";
  std::cout << "MX GEMM path: " << gemm_path_name(gemm_path()) << "\n\n";
  for (const OpPath& o : ops)
    std::cout << "  " << o.op << std::string(o.op.size() < 32 ? 32 - o.op.size() : 1, ' ')
              << o.path << std::string(o.path.size() < 12 ? 12 - o.path.size() : 1, ' ')
              << o.kernel << "\n";
  if (active_isa() == Isa::avx2)
    std::cout << "  (quantization has no AVX2 kernels: the avx2 path uses the scalar ones)\n";
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("info", [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "info", "CPU features found and the kernel path chosen for each operation");
  sub->add_flag("--json", *json, "Print one JSON object instead of text");
  sub->callback([json] { mxtrain::cli::exit_code() = run_info(*json); });
});
