// mxtrain/isa.h — which instruction sets the kernels may use, and the kernel paths.
//
// The CPU is probed once (cpuid + OS support for the wider registers). The ISA level is the
// best the CPU supports unless overridden by MXTRAIN_ISA=scalar|avx2|avx512|avx512vbmi in the
// environment, by the CLI's --isa flag, or by tests via set_isa(). Asking for a level the
// CPU lacks is an error naming what it has.
//
// A Path names what one kernel is built for: an ISA level, and for some kernels the
// AVX512-BF16 dot product besides. path_enabled() says whether a path may run now (the CPU
// has it and the level allows it); every op family picks its kernel from a table keyed by
// Path with it, on each call, so tests can run every compiled path in one process (the
// tables: src/core/dispatch.h).
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
  std::string vendor;    // cpuid leaf 0: "AuthenticAMD", "GenuineIntel", ...
  int family = 0;        // display family (base + extended, as the vendors define it)
  int model = 0;         // display model
};

const CpuFeatures& cpu_features();
// The machine class every figure names (README, docs/results): "Zen 4", "Zen 5", "Xeon with
// AMX-BF16", ... from the vendor, family and features, then what the products can use, e.g.
// "Zen 5 class (AMD family 26; AVX512-BF16, no AMX)". A CPU it does not know is named by its
// vendor and family.
std::string machine_class(const CpuFeatures& f);
Isa best_isa();                       // the best path this CPU supports
Isa active_isa();                     // override if set, else best_isa()
void set_isa(Isa isa);                // throws if the CPU lacks it
void clear_isa_override();
bool isa_supported(Isa isa);
std::vector<Isa> supported_isas();    // scalar first
const char* isa_name(Isa isa);
Isa parse_isa(const std::string& name);  // throws listing valid names

// Kernel paths, in no order of preference (each table orders its own entries):
//   scalar           the portable reference (`_ref` kernels), always enabled;
//   avx2             level avx2 or above;
//   avx512           level avx512 or above (F, BW, VL, DQ);
//   avx512vbmi       level avx512vbmi;
//   avx512bf16       level avx512 or above on a CPU with AVX512-BF16;
//   avx512vbmi_bf16  level avx512vbmi on a CPU with AVX512-BF16;
//   amx_bf16         level avx512vbmi on a CPU with AMX-BF16 too, with AMX on (below).
// A kernel built for path P is named <op>_<P> (<op>_ref for scalar).
enum class Path : uint8_t {
  scalar, avx2, avx512, avx512vbmi, avx512bf16, avx512vbmi_bf16, amx_bf16
};
const char* path_name(Path p);
bool path_enabled(Path p);

// AMX tiles for the scaled products (path amx_bf16). Available where the CPU has AVX512-BF16,
// VBMI and AMX-BF16 and Linux grants the process the tile state; then on unless
// MXTRAIN_AMX=0 is in the environment or set_amx(false) (tests) turns it off. Their sums
// agree with the VDPBF16PS kernels' within the FP32 summation bound, not byte for byte
// (docs/numerics.md, "MX products").
bool amx_available();
void set_amx(bool on);  // on: throws where AMX is not available
void clear_amx_override();  // back to MXTRAIN_AMX's choice
bool amx_on();

}  // namespace mxtrain
