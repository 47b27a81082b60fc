// tests/core/aligned_test.cc — AlignedAllocator (mxtrain/aligned.h): 64-byte alignment for
// every block, 2 MiB alignment and the transparent-huge-page advice for large ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"

namespace mxtrain {
namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// VmFlags of the mapping that holds address a (Linux /proc/self/smaps), or "" if not found.
std::string vm_flags_of(uintptr_t a) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(AlignedAllocator, SmallBlocksOnCacheLinesLargeOnesOnHugePages) {
  for (size_t n : {size_t(1), size_t(63), size_t(4096), kHugeMin - 1}) {
    std::vector<uint8_t, AlignedAllocator<uint8_t>> v(n, 7);
    EXPECT_EQ(addr(v.data()) % 64, 0u) << n;
    EXPECT_EQ(v[n - 1], 7) << n;
  }
  for (size_t n : {kHugeMin, kHugeMin + 1, 3 * kHugeMin + 12345}) {
    std::vector<uint8_t, AlignedAllocator<uint8_t>> v(n, 9);
    EXPECT_EQ(addr(v.data()) % kHugeMin, 0u) << n;
    EXPECT_EQ(v.front(), 9);
    EXPECT_EQ(v.back(), 9);
  }
  // Element types wider than a byte: the threshold is on bytes.
  std::vector<float, AlignedAllocator<float>> f(kHugeMin / sizeof(float), 1.5f);
  EXPECT_EQ(addr(f.data()) % kHugeMin, 0u);
  EXPECT_EQ(f.back(), 1.5f);
}

TEST(AlignedAllocator, LargeBlocksCarryTheHugePageAdvice) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "kernel without transparent huge pages";
  if (!huge_page_advice()) GTEST_SKIP() << "MXTRAIN_HUGE_PAGES=0";
  std::vector<uint8_t, AlignedAllocator<uint8_t>> big(4 * kHugeMin + 100, 1);
  const std::string flags = vm_flags_of(addr(big.data()));
  ASSERT_FALSE(flags.empty()) << "mapping not found in /proc/self/smaps";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;  // VM_HUGEPAGE
  // (No check that small blocks lack the flag: malloc may place them where a freed large
  // block was advised before, which is harmless.)
#else
  GTEST_SKIP() << "no madvise(MADV_HUGEPAGE) on this platform";
#endif
}

}  // namespace
}  // namespace mxtrain
