// mxtrain/info.h — what `mxtrain info` and `mxtrain recipes` report, as library functions, so
// the command-line program and the Python module (python/) print the same thing.
//
// engine_info() reads isa.h (CPU features, supported and active ISA level) and the choice of
// every kernel dispatch table linked into the program (one per op family, src/core/dispatch.h),
// so what it lists is what runs. Implemented in src/nn/info.cc.
// The *_json() functions return the exact JSON text of `mxtrain info --json` and
// `mxtrain recipes --json`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mxtrain {

// One operation and the kernel path it takes on this CPU.
struct KernelPath {
  std::string op, path, kernel;
};

struct EngineInfo {
  std::string cpu;                                      // cpuid brand string (may be empty)
  std::string machine_class;                            // isa.h machine_class()
  std::vector<std::pair<std::string, bool>> features;   // fixed order: avx2 ... amx_bf16
  std::vector<std::string> supported_isas;              // scalar first
  std::string best_isa, active_isa;
  int omp_max_threads = 1;
  std::string gemm_path;                                // gemm.h gemm_mx_path(), isa.h path_name()
  std::vector<KernelPath> kernels;                      // per op family: its table's choice
};

EngineInfo engine_info();
// One JSON object: cpu, machine_class, features, supported_isas, best_isa, active_isa, omp_max_threads,
// kernels [{op, path, kernel}]; `indent` as nlohmann::json::dump.
std::string engine_info_json(int indent = 1);
// One JSON array with an object per registered recipe, in registration order.
std::string recipes_json(int indent = 1);

}  // namespace mxtrain
