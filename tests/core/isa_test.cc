// tests/core/isa_test.cc — CPU probing, the ISA level, which kernel paths it enables (isa.h),
// and the dispatch tables' choice (core/dispatch.h).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/dispatch.h"
#include "core/env_override.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"

namespace mxtrain {
namespace {

TEST(Isa, NamesRoundTrip) {
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512vbmi})
    EXPECT_EQ(parse_isa(isa_name(i)), i);
  try {
    parse_isa("sse");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scalar, avx2, avx512, avx512vbmi"), std::string::npos)
        << e.what();
  }
}

TEST(Isa, SupportedListIsConsistent) {
  const std::vector<Isa> s = supported_isas();
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front(), Isa::scalar);
  EXPECT_EQ(s.back(), best_isa());
  for (Isa i : s) EXPECT_TRUE(isa_supported(i));
  const CpuFeatures& f = cpu_features();
  // AVX-512 needs the foundation plus BW/VL/DQ (the kernels use all four) and the OS ZMM
  // state, which cpu_features() folds into avx512f.
  EXPECT_EQ(isa_supported(Isa::avx512),
            f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(isa_supported(Isa::avx512vbmi), isa_supported(Isa::avx512) && f.avx512vbmi);
  EXPECT_EQ(isa_supported(Isa::avx2), f.avx2 && f.fma && f.f16c);
  if (f.avx512bw || f.avx512vl || f.avx512dq || f.avx512vbmi || f.avx512_bf16) {
    EXPECT_TRUE(f.avx512f);
  }
}

TEST(Isa, OverrideAndClear) {
  const Isa before = active_isa();
  set_isa(Isa::scalar);
  EXPECT_EQ(active_isa(), Isa::scalar);
  for (Isa i : supported_isas()) {
    set_isa(i);
    EXPECT_EQ(active_isa(), i);
  }
  clear_isa_override();
  EXPECT_EQ(active_isa(), before);
  for (Isa i : {Isa::avx2, Isa::avx512, Isa::avx512vbmi}) {
    if (isa_supported(i)) continue;
    try {
      set_isa(i);
      FAIL() << "expected an error for " << isa_name(i);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("supported: scalar"), std::string::npos) << e.what();
    }
    EXPECT_EQ(active_isa(), before) << "a failed set_isa leaves the choice alone";
  }
}

TEST(Isa, EnvironmentChoiceIsHonoured) {
  // MXTRAIN_ISA is read once per process; when the test runs under it, it must win.
  const char* env = std::getenv("MXTRAIN_ISA");
  clear_isa_override();
  if (env && *env) {
    EXPECT_EQ(active_isa(), parse_isa(env));
  } else {
    EXPECT_EQ(active_isa(), best_isa());
  }
}

// The choice behind each of these overrides (core/env_override.h): the setter's value wins,
// clear() gives the variable's back, the variable is parsed on first use only (a later change
// of it is not seen), and a value its parser refuses throws on every read until one is set.
int parses = 0;
int64_t count_from(const char* e) {
  ++parses;
  MXT_CHECK(std::string(e) != "bad", "MXTRAIN_TEST_OVERRIDE=", e, " is refused");
  return std::atoll(e);
}
TEST(EnvOverride, SetterThenVariableParsedOnce) {
  ::setenv("MXTRAIN_TEST_OVERRIDE", "7", 1);
  EnvOverride<int64_t> choice{"MXTRAIN_TEST_OVERRIDE", count_from};
  choice.set(3);
  EXPECT_EQ(choice.get(), 3);
  EXPECT_EQ(parses, 0);  // not read while a value is set
  choice.clear();
  EXPECT_EQ(choice.get(), 7);
  ::setenv("MXTRAIN_TEST_OVERRIDE", "9", 1);
  EXPECT_EQ(choice.get(), 7);
  EXPECT_EQ(parses, 1);

  EnvOverride<int64_t> unset{"MXTRAIN_TEST_OVERRIDE_UNSET", count_from};
  EXPECT_FALSE(unset.get().has_value());
  unset.set(0);
  EXPECT_EQ(unset.get(), 0);

  ::setenv("MXTRAIN_TEST_OVERRIDE", "bad", 1);
  EnvOverride<int64_t> refused{"MXTRAIN_TEST_OVERRIDE", count_from};
  EXPECT_THROW(refused.get(), Error);
  EXPECT_THROW(refused.get(), Error);
  refused.set(1);
  EXPECT_EQ(refused.get(), 1);
  ::unsetenv("MXTRAIN_TEST_OVERRIDE");
}

// Each level enables exactly the paths its extensions allow; BF16 paths also need the CPU
// feature.
TEST(Isa, LevelsEnableTheirPaths) {
  const bool bf16 = cpu_features().avx512_bf16;
  for (Isa i : supported_isas()) {
    set_isa(i);
    SCOPED_TRACE(isa_name(i));
    EXPECT_TRUE(path_enabled(Path::scalar));
    EXPECT_EQ(path_enabled(Path::avx2), i >= Isa::avx2);
    EXPECT_EQ(path_enabled(Path::avx512), i >= Isa::avx512);
    EXPECT_EQ(path_enabled(Path::avx512vbmi), i >= Isa::avx512vbmi);
    EXPECT_EQ(path_enabled(Path::avx512bf16), i >= Isa::avx512 && bf16);
    EXPECT_EQ(path_enabled(Path::avx512vbmi_bf16), i >= Isa::avx512vbmi && bf16);
  }
  clear_isa_override();
  for (Path p : {Path::scalar, Path::avx2, Path::avx512, Path::avx512vbmi, Path::avx512bf16,
                 Path::avx512vbmi_bf16})
    EXPECT_NE(std::string(path_name(p)), "?");
}

// A table runs its last enabled entry; the scalar entry when nothing else is enabled.
TEST(Isa, DispatchTablePicksTheLastEnabledEntry) {
  const PathTable<int> t("test op", {{Path::scalar, "k_ref", 0},
                                      {Path::avx2, "k_avx2", 1},
                                      {Path::avx512bf16, "k_avx512bf16", 2},
                                      {Path::avx512vbmi, "k_avx512vbmi", 3}});
  for (Isa i : supported_isas()) {
    set_isa(i);
    int want = 0;
    if (path_enabled(Path::avx2)) want = 1;
    if (path_enabled(Path::avx512bf16)) want = 2;
    if (path_enabled(Path::avx512vbmi)) want = 3;
    EXPECT_EQ(t.get(), want) << isa_name(i);
    const PathChoice c = t.choice();
    EXPECT_EQ(c.op, "test op");
    EXPECT_EQ(c.path, t.path());
    EXPECT_EQ(c.kernel, std::string(want == 0   ? "k_ref"
                                    : want == 1 ? "k_avx2"
                                    : want == 2 ? "k_avx512bf16"
                                                : "k_avx512vbmi"));
  }
  set_isa(Isa::scalar);
  EXPECT_EQ(t.get(), 0);
  EXPECT_EQ(t.path(), Path::scalar);
  clear_isa_override();
  EXPECT_THROW(PathTable<int>("no scalar", {{Path::avx2, "k", 1}}), Error);
}

}  // namespace
}  // namespace mxtrain

namespace mxtrain {
namespace {

// The class every figure names: vendor and family first, then what the products can use.
TEST(Isa, MachineClassNamesTheFamily) {
  CpuFeatures f;
  f.vendor = "AuthenticAMD";
  f.family = 0x1A;
  f.avx512f = f.avx512_bf16 = true;
  EXPECT_EQ(machine_class(f), "Zen 5 class (AMD family 26; AVX512-BF16, no AMX)");
  f.family = 0x19;
  EXPECT_EQ(machine_class(f), "Zen 4 class (AMD family 25; AVX512-BF16, no AMX)");
  f.avx512f = f.avx512_bf16 = false;
  EXPECT_EQ(machine_class(f), "Zen 3 class (AMD family 25; no AVX512-BF16, no AMX)");
  f = CpuFeatures{};
  f.vendor = "GenuineIntel";
  f.family = 6;
  f.model = 143;
  f.avx512f = f.avx512_bf16 = f.amx_bf16 = true;
  EXPECT_EQ(machine_class(f),
            "Xeon with AMX-BF16 class (Intel family 6 model 143; AVX512-BF16, AMX-BF16)");
  f = CpuFeatures{};
  EXPECT_EQ(machine_class(f), "x86-64 class (unknown vendor; no AVX512-BF16, no AMX)");
}

}  // namespace
}  // namespace mxtrain
