// cli/cmd_info.cc — `mxtrain info`: what the CPU offers and which kernel path each op family's
// dispatch table takes on it.
//
// The facts come from engine_info() (mxtrain/info.h), which the Python module's info() also
// uses; the global --isa flag or MXTRAIN_ISA change the active path. This file only prints.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "mxtrain/info.h"
#include "mxtrain/isa.h"

namespace {

using namespace mxtrain;

int run_info(bool json) {
  if (json) {
    std::cout << engine_info_json(1) << std::endl;
    return 0;
  }
  const EngineInfo e = engine_info();
  // One line with the class, which benchmark scripts record beside their rows (`info | head -1`).
  std::cout << "CPU: " << (e.cpu.empty() ? "(unknown)" : e.cpu) << "; " << e.machine_class
            << "\n";
  std::cout << "features (cpuid + OS register state):";
  for (auto& [name, on] : e.features) std::cout << " " << name << (on ? "+" : "-");
  std::cout << "\nkernel paths supported:";
  for (const std::string& s : e.supported_isas) std::cout << " " << s;
  std::cout << "\nactive path: " << e.active_isa << " (best " << e.best_isa
            << "; override with --isa or MXTRAIN_ISA=scalar|avx2|avx512|avx512vbmi)\n";
  std::cout << "OpenMP threads: " << e.omp_max_threads << "\n";
  std::cout << "scaled FP8 GEMM path: " << e.gemm_path << "\n\n";
  size_t wop = 0, wpath = 0;
  for (const KernelPath& o : e.kernels) {
    wop = std::max(wop, o.op.size());
    wpath = std::max(wpath, o.path.size());
  }
  for (const KernelPath& o : e.kernels)
    std::cout << "  " << o.op << std::string(wop + 2 - o.op.size(), ' ') << o.path
              << std::string(wpath + 2 - o.path.size(), ' ') << o.kernel << "\n";
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
