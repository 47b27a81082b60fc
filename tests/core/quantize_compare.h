// tests/core/quantize_compare.h — comparing a quantization on the fast paths with the scalar
// reference: all five copies one setting produces, byte comparison that names the first
// differing scale or element, and the ISA override reset at the end of a test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/mx_test_data.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain::testdata {

// Everything one quantization setting produces on the current path.
struct AllOutputs {
  ScaledTensor row, col, tile, dual_row, dual_col;
};

template <class T>
AllOutputs run_all(const std::vector<T>& x, int64_t M, int64_t K, QuantConfig cfg) {
  AllOutputs o;
  o.row = quantize(x.data(), M, K, MXLayout::rowwise, cfg);
  o.col = quantize(x.data(), M, K, MXLayout::colwise, cfg);
  o.tile = quantize(x.data(), M, K, MXLayout::tile, cfg);
  quantize_dual(x.data(), M, K, cfg, o.dual_row, o.dual_col);
  return o;
}

inline void expect_same(const ScaledTensor& got, const ScaledTensor& want,
                        const std::string& what) {
  ASSERT_EQ(got.scales.size(), want.scales.size()) << what;
  ASSERT_EQ(got.data.size(), want.data.size()) << what;
  if (got.scales == want.scales && got.data == want.data) return;  // fast path; else locate
  for (size_t i = 0; i < want.scales.size(); ++i)
    ASSERT_EQ(int(got.scales[i]), int(want.scales[i])) << what << " scale #" << i;
  for (size_t i = 0; i < want.data.size(); ++i)
    ASSERT_EQ(int(got.data[i]), int(want.data[i]))
        << what << " element (" << i / size_t(want.cols) << ", " << i % size_t(want.cols) << ")";
}

inline void expect_same(const AllOutputs& got, const AllOutputs& want, const std::string& what) {
  expect_same(got.row, want.row, what + " rowwise");
  expect_same(got.col, want.col, what + " colwise");
  expect_same(got.tile, want.tile, what + " tile32");
  expect_same(got.dual_row, want.dual_row, what + " dual(rowwise)");
  expect_same(got.dual_col, want.dual_col, what + " dual(colwise)");
}

// Restores the run-time ISA choice when a test that forced paths ends.
struct PathGuard {
  ~PathGuard() { clear_isa_override(); }
};

// x [M,K] and its BF16 rounding quantized with cfg on every non-scalar path, compared byte for
// byte with the scalar path.
inline void compare_paths(const std::vector<float>& x, int64_t M, int64_t K, QuantConfig cfg,
                          const std::string& what) {
  const std::vector<uint16_t> xb = to_bf16(x);
  set_isa(Isa::scalar);
  const AllOutputs ref = run_all(x, M, K, cfg), ref_b = run_all(xb, M, K, cfg);
  for (Isa isa : supported_isas()) {
    if (isa == Isa::scalar) continue;
    set_isa(isa);
    const std::string w = std::string(isa_name(isa)) + " " + what;
    expect_same(run_all(x, M, K, cfg), ref, w + " f32");
    expect_same(run_all(xb, M, K, cfg), ref_b, w + " bf16");
  }
}

// compare_paths for every element format and scale rounding; `what` prefixes the case names.
inline void compare_paths_all_settings(const std::vector<float>& x, int64_t M, int64_t K,
                                       const std::string& what = "") {
  for (Elem e : {Elem::e4m3, Elem::e5m2})
    for (ScaleRounding r : {ScaleRounding::rceil, ScaleRounding::floor})
      compare_paths(x, M, K, {e, r},
                    what + std::to_string(M) + "x" + std::to_string(K) + " " + elem_name(e) +
                        " " + rounding_name(r));
}

}  // namespace mxtrain::testdata
