// Tests that tensor sizes are checked before anything is multiplied or allocated: a shape
// whose element count overflows int64 is an error, not a wrapped (or lucky zero) size.
#include <gtest/gtest.h>

#include <string>

#include "mxtrain/common.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

std::string error_of(int64_t rows, int64_t cols) {
  try {
    ScaledTensor::empty(rows, cols, MXLayout::rowwise, Elem::e4m3);
  } catch (const Error& e) {
    // The message without the " [file:line]" MXT_CHECK appends.
    std::string m = e.what();
    const size_t at = m.rfind(" [");
    return at != std::string::npos && m.back() == ']' ? m.substr(0, at) : m;
  }
  return "<no error>";
}

TEST(TensorSize, OverflowingShapeIsRefused) {
  const int64_t big = int64_t(1) << 40;
  EXPECT_EQ(error_of(big, big),
            "ScaledTensor shape 1099511627776x1099511627776 is too large (1099511627776 * "
            "1099511627776 elements exceed 2^48)");
  EXPECT_NE(error_of(INT64_MAX, 2).find("too large"), std::string::npos);
  EXPECT_NE(error_of(-1, 2).find("non-negative"), std::string::npos);
}

TEST(TensorSize, ValidShapesAllocateExactly) {
  ScaledTensor t = ScaledTensor::empty(33, 65, MXLayout::rowwise, Elem::e4m3);
  EXPECT_EQ(t.data.size(), 33u * 65u);
  EXPECT_EQ(t.scales.size(), 33u * 3u);
  ScaledTensor z = ScaledTensor::empty(0, 1 << 20, MXLayout::colwise, Elem::e5m2);
  EXPECT_EQ(z.data.size(), 0u);
}

}  // namespace
}  // namespace mxtrain
