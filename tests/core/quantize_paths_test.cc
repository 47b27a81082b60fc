// tests/core/quantize_paths_test.cc — every kernel path against the scalar reference.
//
// For each ISA in supported_isas() the public API (which dispatches on active_isa()) must
// give the same bytes as the scalar path for every layout, input type, element format and
// scale rounding, on awkward shapes (1, 31, 33, 2^n +- 1, ragged blocks) filled with zeros,
// huge/tiny values and NaN/Inf blocks. Also: 1 thread vs 2 threads, dual-axis vs separate
// rowwise + colwise, dequantize and the BF16 array helpers.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <utility>

#include "core/mx_test_data.h"
#include "core/quantize_compare.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using testdata::AllOutputs;
using testdata::compare_paths_all_settings;
using testdata::expect_same;
using testdata::PathGuard;
using testdata::run_all;

using Shape = std::pair<int64_t, int64_t>;

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{1, 1},   {1, 33},  {31, 31},  {33, 65},   {64, 64},
                                       {257, 1023}, {63, 127}, {65, 31}, {2, 1025}, {129, 17},
                                       {32, 2049}};
  return s;
}

TEST(QuantizePaths, EveryIsaMatchesScalarReference) {
  PathGuard guard;
  for (auto [M, K] : shapes()) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(M * 7919 + K));
    compare_paths_all_settings(x, M, K);
  }
}

// The reference dual kernel is rowwise + colwise by construction; this pins the fast ones.
TEST(QuantizePaths, DualEqualsSeparateRowwiseAndColwise) {
  PathGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (auto [M, K] : shapes()) {
      const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(M + 31 * K));
      const AllOutputs o = run_all(x, M, K, {});
      expect_same(o.dual_row, o.row, std::string(isa_name(isa)) + " dual rowwise");
      expect_same(o.dual_col, o.col, std::string(isa_name(isa)) + " dual colwise");
    }
  }
}

TEST(QuantizePaths, ThreadCountDoesNotChangeBytes) {
  PathGuard guard;
  const int saved = omp_get_max_threads();
  // Large enough to be split over threads: by row strips (257 rows), and by column ranges
  // within each strip (17 rows, fewer strips than threads).
  for (auto [M, K] : {Shape{257, 1023}, Shape{17, 8195}}) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(42 + M));
    const std::vector<uint16_t> xb = testdata::to_bf16(x);
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      omp_set_num_threads(1);
      const AllOutputs one = run_all(x, M, K, {}), one_b = run_all(xb, M, K, {});
      omp_set_num_threads(2);
      const AllOutputs two = run_all(x, M, K, {}), two_b = run_all(xb, M, K, {});
      omp_set_num_threads(3);
      const AllOutputs three = run_all(x, M, K, {});
      const std::string what = std::string(isa_name(isa)) + " " + std::to_string(M) + "x" +
                               std::to_string(K);
      expect_same(two, one, what + " 2 threads f32");
      expect_same(two_b, one_b, what + " 2 threads bf16");
      expect_same(three, one, what + " 3 threads f32");
    }
  }
  omp_set_num_threads(saved);
}

TEST(QuantizePaths, DequantizeMatchesScalarReference) {
  PathGuard guard;
  for (auto [M, K] : shapes()) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(3 * M + K));
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile}) {
        set_isa(Isa::scalar);
        ScaledTensor q = quantize(x.data(), M, K, l, {e, ScaleRounding::rceil});
        // Also decode arbitrary bytes (including NaN/Inf codes and any scale).
        for (size_t i = 0; i < q.data.size(); i += 7) q.data[i] = uint8_t(i * 13);
        for (size_t i = 0; i < q.scales.size(); i += 5) q.scales[i] = uint8_t(i * 29);
        std::vector<float> want(x.size()), got(x.size());
        std::vector<uint16_t> want_b(x.size()), got_b(x.size());
        dequantize(q, want.data());
        dequantize_bf16(q, want_b.data());
        for (Isa isa : supported_isas()) {
          set_isa(isa);
          dequantize(q, got.data());
          dequantize_bf16(q, got_b.data());
          if (got_b == want_b &&
              std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
            continue;  // identical bits; otherwise find the first difference
          for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i]))
                << isa_name(isa) << " " << layout_name(l) << " #" << i;
            ASSERT_EQ(got_b[i], want_b[i]) << isa_name(isa) << " bf16 #" << i;
          }
        }
      }
  }
}

TEST(QuantizePaths, ArrayHelpersMatchScalar) {
  PathGuard guard;
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(17), int64_t(1000),
                    int64_t(300001)}) {
    std::vector<float> x = testdata::awkward_matrix(1, std::max<int64_t>(n, 1), uint32_t(n + 1));
    x.resize(size_t(n));
    // Every NaN payload class and signs.
    for (size_t i = 0; i < x.size(); i += 97) x[i] = bits_f32(0x7F800001u + uint32_t(i));
    std::vector<uint16_t> want(x.size()), got(x.size());
    std::vector<float> back_want(x.size()), back_got(x.size());
    set_isa(Isa::scalar);
    f32_to_bf16_array(x.data(), want.data(), n);
    bf16_to_f32_array(want.data(), back_want.data(), n);
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      f32_to_bf16_array(x.data(), got.data(), n);
      bf16_to_f32_array(want.data(), back_got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[size_t(i)], want[size_t(i)]) << isa_name(isa) << " #" << i;
        ASSERT_EQ(f32_bits(back_got[size_t(i)]), f32_bits(back_want[size_t(i)]));
      }
      // has_nonfinite finds a single bad value wherever it sits, including the tail.
      std::vector<float> fin(size_t(n), 1.f);
      EXPECT_FALSE(has_nonfinite(fin.data(), n));
      for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
        if (n == 0) break;
        fin[size_t(pos)] = std::numeric_limits<float>::infinity();
        EXPECT_TRUE(has_nonfinite(fin.data(), n)) << isa_name(isa) << " n=" << n << " at " << pos;
        fin[size_t(pos)] = 1.f;
      }
    }
  }
}

}  // namespace
}  // namespace mxtrain
