// mxtrain/isa.h — which instruction-set path the kernels use.
//
// The CPU is probed once (cpuid + OS support for the wider registers). The chosen path is
// the best the CPU supports unless overridden by MXTRAIN_ISA=scalar|avx2|avx512|avx512vbmi
// in the environment, by the CLI's --isa flag, or by tests via set_isa(). Asking for a path the
// CPU lacks is an error naming what it has. Dispatch code reads active_isa() each call so
// tests can run every compiled path in one process.
#pragma once

#include <string>
#include <vector>

namespace mxtrain {

// avx512: F, BW, VL, DQ (Skylake-SP and later); avx512vbmi: those plus VBMI (Ice Lake,
// Sapphire Rapids, Zen 4 and later), whose byte permutes the MX quantizers use.
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512vbmi = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vbmi = false, avx512_bf16 = false, amx_tile = false, amx_bf16 = false;
  std::string brand;
};

const CpuFeatures& cpu_features();
Isa best_isa();                       // the best path this CPU supports
Isa active_isa();                     // override if set, else best_isa()
void set_isa(Isa isa);                // throws if the CPU lacks it
void clear_isa_override();
bool isa_supported(Isa isa);
std::vector<Isa> supported_isas();    // scalar first
const char* isa_name(Isa isa);
Isa parse_isa(const std::string& name);  // throws listing valid names

}  // namespace mxtrain
