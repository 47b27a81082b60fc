// tests/core/isa_test.cc — CPU probing and kernel-path selection (isa.h).
#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace mxtrain
