// core/isa.cc — CPU feature probing, the ISA level and which kernel paths it enables
// (include/mxtrain/isa.h).
//
// cpuid says what the processor implements; xgetbv (XCR0) says whether the operating system
// saves the wider register state (YMM for AVX2, ZMM/opmask for AVX-512, tile data for AMX).
// A path is usable only when both agree. The chosen path is the best usable one, unless
// MXTRAIN_ISA names another or set_isa() overrides it (tests, the CLI's --isa). The dispatch
// tables (core/dispatch.h) ask path_enabled() on each call.
#include "mxtrain/isa.h"

#include <cstring>
#include <sstream>

#include "core/env_override.h"
#include "core/peak_kernels.h"
#include "mxtrain/common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MXT_X86 1
#endif

namespace mxtrain {

namespace {

#ifdef MXT_X86
struct Regs { unsigned a = 0, b = 0, c = 0, d = 0; };

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

uint64_t xgetbv0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures probe() {
  CpuFeatures f;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const Regs l0 = cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &l0.b, 4);
  std::memcpy(vendor + 4, &l0.d, 4);
  std::memcpy(vendor + 8, &l0.c, 4);
  f.vendor = vendor;
  const Regs l1 = cpuid(1, 0);
  const int base_family = int((l1.a >> 8) & 0xF), base_model = int((l1.a >> 4) & 0xF);
  f.family = base_family == 0xF ? base_family + int((l1.a >> 20) & 0xFF) : base_family;
  f.model = base_family == 0xF || base_family == 0x6 ? (int((l1.a >> 16) & 0xF) << 4) | base_model
                                                     : base_model;
  const bool osxsave = (l1.c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;               // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xE0) == 0xE0;   // opmask + ZMM_Hi256 + Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;       // XTILECFG + XTILEDATA
  const bool avx = ((l1.c >> 28) & 1) && os_ymm;
  f.fma = avx && ((l1.c >> 12) & 1);
  f.f16c = avx && ((l1.c >> 29) & 1);
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = avx && ((l7.b >> 5) & 1);
    f.avx512f = os_zmm && ((l7.b >> 16) & 1);
    f.avx512dq = f.avx512f && ((l7.b >> 17) & 1);
    f.avx512bw = f.avx512f && ((l7.b >> 30) & 1);
    f.avx512vl = f.avx512f && ((l7.b >> 31) & 1);
    f.avx512vbmi = f.avx512f && ((l7.c >> 1) & 1);
    f.amx_bf16 = os_amx && ((l7.d >> 22) & 1);
    f.amx_tile = os_amx && ((l7.d >> 24) & 1);
    if (l7.a >= 1) f.avx512_bf16 = f.avx512f && ((cpuid(7, 1).a >> 5) & 1);
  }
  // Brand string: extended leaves 0x80000002..4, 16 bytes each.
  if (unsigned(__get_cpuid_max(0x80000000u, nullptr)) >= 0x80000004u) {  // int in clang's cpuid.h
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
    std::string s(brand);
    const auto b = s.find_first_not_of(' ');
    const auto e = s.find_last_not_of(' ');
    f.brand = b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  return f;
}
#else
CpuFeatures probe() { return CpuFeatures{}; }
#endif

std::string supported_list() {
  std::ostringstream os;
  bool first = true;
  for (Isa i : supported_isas()) {
    os << (first ? "" : ", ") << isa_name(i);
    first = false;
  }
  return os.str();
}

// The path MXTRAIN_ISA names.
Isa isa_from_env(const char* e) {
  const Isa isa = parse_isa(e);
  MXT_CHECK(isa_supported(isa), "MXTRAIN_ISA=", e, " is not supported by this CPU (",
            cpu_features().brand, "); supported: ", supported_list());
  return isa;
}

// set_isa()'s path, else MXTRAIN_ISA's.
constinit EnvOverride<Isa> isa_choice{"MXTRAIN_ISA", isa_from_env};

}  // namespace

std::string machine_class(const CpuFeatures& f) {
  std::string name;
  if (f.vendor == "AuthenticAMD") {
    if (f.family == 0x1A) name = "Zen 5";
    else if (f.family == 0x19) name = f.avx512f ? "Zen 4" : "Zen 3";
    else if (f.family == 0x17) name = "Zen 1/2";
    else name = "AMD";
    name += " class (AMD family " + std::to_string(f.family);
  } else if (f.vendor == "GenuineIntel") {
    name = f.amx_bf16 ? "Xeon with AMX-BF16" : f.avx512_bf16 ? "Intel with AVX512-BF16" : "Intel";
    name += " class (Intel family " + std::to_string(f.family) + " model " +
            std::to_string(f.model);
  } else {
    name = "x86-64 class (" + (f.vendor.empty() ? std::string("unknown vendor") : f.vendor);
  }
  name += f.avx512_bf16 ? "; AVX512-BF16" : "; no AVX512-BF16";
  name += f.amx_bf16 ? ", AMX-BF16)" : ", no AMX)";
  return name;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::avx512:
      return f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    case Isa::avx512vbmi: return isa_supported(Isa::avx512) && f.avx512vbmi;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512vbmi})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

Isa best_isa() {
  static const Isa best = [] {
    if (isa_supported(Isa::avx512vbmi)) return Isa::avx512vbmi;
    if (isa_supported(Isa::avx512)) return Isa::avx512;
    if (isa_supported(Isa::avx2)) return Isa::avx2;
    return Isa::scalar;
  }();
  return best;
}

// Precedence: set_isa() (tests, --isa), then MXTRAIN_ISA, then the best the CPU has.
Isa active_isa() { return isa_choice.get().value_or(best_isa()); }

void set_isa(Isa isa) {
  MXT_CHECK(isa_supported(isa), "kernel path '", isa_name(isa),
            "' is not supported by this CPU (", cpu_features().brand,
            "); supported: ", supported_list());
  isa_choice.set(isa);
}

// Back to MXTRAIN_ISA if set, else the best path.
void clear_isa_override() { isa_choice.clear(); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512vbmi: return "avx512vbmi";
  }
  return "?";
}

const char* path_name(Path p) {
  switch (p) {
    case Path::scalar: return "scalar";
    case Path::avx2: return "avx2";
    case Path::avx512: return "avx512";
    case Path::avx512vbmi: return "avx512vbmi";
    case Path::avx512bf16: return "avx512bf16";
    case Path::avx512vbmi_bf16: return "avx512vbmi_bf16";
    case Path::amx_bf16: return "amx_bf16";
  }
  return "?";
}

// set_isa() and MXTRAIN_ISA accept only levels the CPU supports, so a level implies the CPU
// has its extensions; BF16 is a CPU feature beside the levels.
bool path_enabled(Path p) {
  const Isa isa = active_isa();
  switch (p) {
    case Path::scalar: return true;
    case Path::avx2: return isa >= Isa::avx2;
    case Path::avx512: return isa >= Isa::avx512;
    case Path::avx512vbmi: return isa >= Isa::avx512vbmi;
    case Path::avx512bf16: return isa >= Isa::avx512 && cpu_features().avx512_bf16;
    case Path::avx512vbmi_bf16: return isa >= Isa::avx512vbmi && cpu_features().avx512_bf16;
    case Path::amx_bf16: return isa >= Isa::avx512vbmi && amx_on();
  }
  return false;
}

bool amx_available() {
  static const bool v = [] {
    const CpuFeatures& f = cpu_features();
    return isa_supported(Isa::avx512vbmi) && f.avx512_bf16 && f.amx_tile && f.amx_bf16 &&
           kern::amx_permission();
  }();
  return v;
}

namespace {
// set_amx()'s choice, else MXTRAIN_AMX's: on unless "0".
bool amx_from_env(const char* e) { return std::strcmp(e, "0") != 0; }
constinit EnvOverride<bool> amx_choice{"MXTRAIN_AMX", amx_from_env};
}  // namespace

void set_amx(bool on) {
  MXT_CHECK(!on || amx_available(), "AMX tiles are not available on this CPU (",
            cpu_features().brand, "): they need AMX-BF16, AVX512-BF16 and VBMI, and Linux's "
            "permission for the tile state");
  amx_choice.set(on);
}

void clear_amx_override() { amx_choice.clear(); }

bool amx_on() {
  return amx_available() && amx_choice.get().value_or(true);
}

Isa parse_isa(const std::string& name) {
  if (name == "scalar") return Isa::scalar;
  if (name == "avx2") return Isa::avx2;
  if (name == "avx512") return Isa::avx512;
  if (name == "avx512vbmi") return Isa::avx512vbmi;
  MXT_FAIL("unknown kernel path '", name, "'; valid names: scalar, avx2, avx512, avx512vbmi");
}

}  // namespace mxtrain
