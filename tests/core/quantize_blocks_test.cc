// tests/core/quantize_blocks_test.cc — FP32-scaled block quantization (1x128, 128x1,
// 128x128): hand-computed blocks for every rule of docs/numerics.md "Blockwise FP32
// scaling", block boundaries and grid shapes, dequantize, the API's errors, and every fast
// kernel byte-equal to the scalar reference on awkward shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/mx_test_data.h"
#include "core/quantize_compare.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using testdata::expect_same;
using testdata::PathGuard;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float scale_inv(const ScaledTensor& t, int64_t i) {
  float v;
  std::memcpy(&v, t.scales.data() + 4 * i, 4);
  return v;
}

// One rowwise block of the given values (K = x.size() <= 128): its codes and scale_inv.
struct Block {
  std::vector<uint8_t> codes;
  float scale_inv;
};
Block row_block(const std::vector<float>& x, BlockQuantConfig cfg = {}) {
  const ScaledTensor t = quantize_blocks(x.data(), 1, int64_t(x.size()), MXLayout::rowwise, cfg);
  EXPECT_EQ(t.scale_type, cfg.scale);
  EXPECT_EQ(t.block, 128);
  EXPECT_EQ(t.scales.size(), 4u);
  return {std::vector<uint8_t>(t.data.begin(), t.data.end()), scale_inv(t, 0)};
}

TEST(QuantizeBlocks, ScaleRule) {
  const BlockQuantConfig pow2{Elem::e4m3, ScaleType::fp32_pow2, 0.f};
  const BlockQuantConfig fp32{Elem::e4m3, ScaleType::fp32, 0.f};
  // 448 / 3 = 149.33333 (0x43155555); pow2 truncates it to 128.
  EXPECT_EQ(f32_bits(block_scale(3.f, fp32)), 0x43155555u);
  EXPECT_EQ(block_scale(3.f, pow2), 128.f);
  EXPECT_EQ(block_scale(3.5f, pow2), 128.f);  // 448 / 3.5 = 128 exactly
  EXPECT_EQ(block_scale(448.f, pow2), 1.f);
  EXPECT_EQ(block_scale(500.f, pow2), 0.5f);  // 0.896 -> 0.5
  EXPECT_EQ(block_scale(1.f, {Elem::e5m2, ScaleType::fp32_pow2, 0.f}), 32768.f);  // 57344
  // Zero and Inf amax: scale 1, whatever the epsilon (eps 0) and the type.
  EXPECT_EQ(block_scale(0.f, pow2), 1.f);
  EXPECT_EQ(block_scale(0.f, fp32), 1.f);
  EXPECT_EQ(block_scale(kInf, fp32), 1.f);
  // Epsilon: an amax below it counts as it (a zero block too).
  const BlockQuantConfig eps{Elem::e4m3, ScaleType::fp32, 1e-6f};
  EXPECT_EQ(f32_bits(block_scale(1e-10f, eps)), 0x4dd59f80u);  // 448 / 1e-6 = 4.48e8
  EXPECT_EQ(f32_bits(block_scale(0.f, eps)), 0x4dd59f80u);
  EXPECT_EQ(block_scale(0.f, {Elem::e4m3, ScaleType::fp32_pow2, 1e-6f}), 268435456.f);  // 2^28
  EXPECT_EQ(block_scale(2.f, eps), 224.f);  // above epsilon: unchanged
  // The division overflows: 448 / 2^-149 is Inf in FP32 -> FLT_MAX (pow2: 2^127).
  const float tiny = std::ldexp(1.f, -149);
  EXPECT_EQ(block_scale(tiny, fp32), FLT_MAX);
  EXPECT_EQ(block_scale(tiny, pow2), std::ldexp(1.f, 127));
  EXPECT_THROW(block_scale(1.f, {Elem::e4m3, ScaleType::e8m0, 0.f}), Error);
}

TEST(QuantizeBlocks, HandComputedBlocks) {
  // amax 3.5 -> scale 128, scale_inv 1/128: 1 -> 128 (0x70), -3.5 -> -448 (0xFE),
  // 0.25 -> 32 (0x60), 0.0078125 -> 1 (0x38), 3 -> 384 (0x7C).
  {
    const Block b = row_block({1.f, -3.5f, 0.25f, 0.0078125f, 3.f});
    EXPECT_EQ(b.scale_inv, 1.f / 128.f);
    EXPECT_EQ(b.codes, (std::vector<uint8_t>{0x70, 0xFE, 0x60, 0x38, 0x7C}));
  }
  // pow2 vs fp32: amax 3 -> 128 vs 149.33333; 3 * 149.33333 = 448 (0x7E), 2 * 149.33333 =
  // 298.66666 -> 288 (0x79; E4M3 steps by 32 there, 298.67 is nearer 288 than 320).
  {
    const Block p = row_block({3.f, 2.f});
    EXPECT_EQ(p.scale_inv, 1.f / 128.f);
    EXPECT_EQ(p.codes, (std::vector<uint8_t>{0x7C, 0x78}));  // 384, 256
    const Block f = row_block({3.f, 2.f}, {Elem::e4m3, ScaleType::fp32, 0.f});
    EXPECT_EQ(f32_bits(f.scale_inv), 0x3bdb6db7u);  // fl32(1 / 149.33333)
    EXPECT_EQ(f.codes, (std::vector<uint8_t>{0x7E, 0x79}));
  }
  // Zero block: scale 1, codes 0 (signed zero keeps its sign).
  {
    const Block b = row_block({0.f, -0.f, 0.f});
    EXPECT_EQ(b.scale_inv, 1.f);
    EXPECT_EQ(b.codes, (std::vector<uint8_t>{0x00, 0x80, 0x00}));
  }
  // Epsilon 1e-6 (pow2): amax 1e-10 -> scale 2^28; 1e-10 * 2^28 = 0.026844 lies in E4M3's
  // first binade [2^-6, 2^-5) (step 2^-9): 2^-6 + 5.74 steps -> 6 steps, code 0x0E.
  {
    const Block b = row_block({1e-10f, 0.f}, {Elem::e4m3, ScaleType::fp32_pow2, 1e-6f});
    EXPECT_EQ(b.scale_inv, std::ldexp(1.f, -28));
    EXPECT_EQ(b.codes, (std::vector<uint8_t>{0x0E, 0x00}));
  }
  // Inf in a block: amax Inf -> scale 1; +-Inf and out-of-range values saturate to +-448.
  {
    const Block b = row_block({kInf, 1000.f, -1e30f, 1.f, -kInf});
    EXPECT_EQ(b.scale_inv, 1.f);
    EXPECT_EQ(b.codes, (std::vector<uint8_t>{0x7E, 0x7E, 0xFE, 0x38, 0xFE}));
    const Block e = row_block({kInf, -kInf, 1.f}, {Elem::e5m2, ScaleType::fp32_pow2, 0.f});
    EXPECT_EQ(e.codes, (std::vector<uint8_t>{0x7B, 0xFB, 0x3C}));  // +-57344, 1
  }
  // NaN is ignored by the amax and stays NaN (with its sign).
  {
    const Block b = row_block({kNaN, 3.5f, -kNaN, 1.f});
    EXPECT_EQ(b.scale_inv, 1.f / 128.f);
    EXPECT_EQ(b.codes, (std::vector<uint8_t>{0x7F, 0x7E, 0xFF, 0x70}));
    const Block all = row_block({kNaN, kNaN});  // amax 0 -> scale 1
    EXPECT_EQ(all.scale_inv, 1.f);
    EXPECT_EQ(all.codes, (std::vector<uint8_t>{0x7F, 0x7F}));
    const Block e = row_block({kNaN, 1.f}, {Elem::e5m2, ScaleType::fp32_pow2, 0.f});
    EXPECT_EQ(e.codes, (std::vector<uint8_t>{0x7E, 0x78}));  // NaN, 32768
  }
  // The division overflows: amax 2^-149 -> FLT_MAX (fp32; scale_inv 2^-128 rounded: 0x00200000)
  // or 2^127 (pow2; scale_inv 2^-127); the element 2^-149 * scale is far below E4M3's range.
  {
    const float tiny = std::ldexp(1.f, -149);
    const Block f = row_block({tiny}, {Elem::e4m3, ScaleType::fp32, 0.f});
    EXPECT_EQ(f32_bits(f.scale_inv), 0x00200000u);
    EXPECT_EQ(f.codes, (std::vector<uint8_t>{0x00}));
    const Block p = row_block({tiny, 0.f});
    EXPECT_EQ(p.scale_inv, std::ldexp(1.f, -127));
    EXPECT_EQ(p.codes, (std::vector<uint8_t>{0x00, 0x00}));
  }
}

// A 130 x 130 matrix of ones with 4 at (127, 127) and 8 at (128, 0): where each layout's
// block boundaries fall, its grid shapes, and that every block got its own scale.
TEST(QuantizeBlocks, BlockBoundariesAndGrids) {
  const int64_t M = 130, K = 130;
  std::vector<float> x(size_t(M * K), 1.f);
  x[127 * K + 127] = 4.f;
  x[128 * K + 0] = 8.f;
  const float s1 = 1.f / 256, s4 = 1.f / 64, s8 = 1.f / 32;  // amax 1, 4, 8 (pow2)
  const ScaledTensor row = quantize_blocks(x.data(), M, K, MXLayout::rowwise, {});
  const ScaledTensor col = quantize_blocks(x.data(), M, K, MXLayout::colwise, {});
  const ScaledTensor tile = quantize_blocks(x.data(), M, K, MXLayout::tile, {});
  EXPECT_EQ(row.scale_rows(), 130);
  EXPECT_EQ(row.scale_cols(), 2);
  EXPECT_EQ(col.scale_rows(), 2);
  EXPECT_EQ(col.scale_cols(), 130);
  EXPECT_EQ(tile.scale_rows(), 2);
  EXPECT_EQ(tile.scale_cols(), 2);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t b = 0; b < 2; ++b) {
      const float want = r == 127 && b == 0 ? s4 : r == 128 && b == 0 ? s8 : s1;
      ASSERT_EQ(scale_inv(row, r * 2 + b), want) << "rowwise " << r << "," << b;
    }
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < K; ++c) {
      const float want = b == 0 && c == 127 ? s4 : b == 1 && c == 0 ? s8 : s1;
      ASSERT_EQ(scale_inv(col, b * K + c), want) << "colwise " << b << "," << c;
    }
  EXPECT_EQ(scale_inv(tile, 0), s4);
  EXPECT_EQ(scale_inv(tile, 1), s1);
  EXPECT_EQ(scale_inv(tile, 2), s8);
  EXPECT_EQ(scale_inv(tile, 3), s1);
  // Every value here is exact in E4M3 after scaling: dequantize gives x back.
  for (const ScaledTensor* t : {&row, &col, &tile}) {
    std::vector<float> y(x.size());
    dequantize(*t, y.data());
    EXPECT_EQ(y, x) << layout_name(t->layout);
  }
  // A one in tile (0, 0) (scale 64) is 64 (0x68); in tile (0, 1) (scale 256) 256 (0x78).
  EXPECT_EQ(tile.data[0], 0x68);
  EXPECT_EQ(tile.data[128], 0x78);
}

TEST(QuantizeBlocks, DequantizeIsCodeTimesScaleInv) {
  const int64_t M = 3, K = 200;
  std::vector<float> x(size_t(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * float(i % 17);
  x[5] = kNaN;
  for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile})
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (ScaleType st : {ScaleType::fp32, ScaleType::fp32_pow2}) {
        const ScaledTensor t = quantize_blocks(x.data(), M, K, l, {e, st, 0.f});
        std::vector<float> y(x.size());
        dequantize(t, y.data());
        for (int64_t r = 0; r < M; ++r)
          for (int64_t c = 0; c < K; ++c) {
            const int64_t si = l == MXLayout::rowwise   ? r * t.scale_cols() + c / 128
                               : l == MXLayout::colwise ? (r / 128) * K + c
                                                        : (r / 128) * t.scale_cols() + c / 128;
            const float want = fp8_to_f32(t.data[size_t(r * K + c)], e) * scale_inv(t, si);
            if (std::isnan(want))
              ASSERT_EQ(f32_bits(y[size_t(r * K + c)]), 0x7FC00000u);
            else
              ASSERT_EQ(f32_bits(y[size_t(r * K + c)]), f32_bits(want)) << r << "," << c;
          }
      }
  // FP32-scaled copies have no BF16 dequantize.
  const ScaledTensor t = quantize_blocks(x.data(), M, K, MXLayout::rowwise, {});
  std::vector<uint16_t> yb(x.size());
  EXPECT_THROW(dequantize_bf16(t, yb.data()), Error);
}

TEST(QuantizeBlocks, ApiErrors) {
  const std::vector<float> x(4, 1.f);
  auto msg = [&](BlockQuantConfig cfg) {
    try {
      quantize_blocks(x.data(), 2, 2, MXLayout::rowwise, cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({Elem::e4m3, ScaleType::fp32, -1.f}).find("amax epsilon"), std::string::npos);
  EXPECT_NE(msg({Elem::e4m3, ScaleType::fp32, kNaN}).find("amax epsilon"), std::string::npos);
  EXPECT_NE(msg({Elem::e4m3, ScaleType::fp32, kInf}).find("amax epsilon"), std::string::npos);
  EXPECT_NE(msg({Elem::e4m3, ScaleType::e8m0, 0.f}).find("fp32"), std::string::npos);
  EXPECT_THROW(quantize_blocks(static_cast<const float*>(nullptr), 2, 2, MXLayout::rowwise, {}),
               Error);
  ScaledTensor a;
  EXPECT_THROW(quantize_blocks_dual(x.data(), 2, 2, {}, a, a), Error);
  // The MX kernels refuse an FP32-scaled copy, naming what it holds.
  ScaledTensor t = quantize_blocks(x.data(), 2, 2, MXLayout::rowwise, {});
  try {
    quantize_into(x.data(), 2, 2, {}, t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32_pow2"), std::string::npos) << e.what();
  }
}

// ---- every path against the scalar reference ----------------------------------------------

struct Outputs {
  ScaledTensor row, col, tile, dual_row, dual_col;
};

template <class T>
Outputs run_blocks(const std::vector<T>& x, int64_t M, int64_t K, const BlockQuantConfig& cfg) {
  Outputs o;
  o.row = quantize_blocks(x.data(), M, K, MXLayout::rowwise, cfg);
  o.col = quantize_blocks(x.data(), M, K, MXLayout::colwise, cfg);
  o.tile = quantize_blocks(x.data(), M, K, MXLayout::tile, cfg);
  quantize_blocks_dual(x.data(), M, K, cfg, o.dual_row, o.dual_col);
  return o;
}

void expect_same_all(const Outputs& got, const Outputs& want, const std::string& what) {
  expect_same(got.row, want.row, what + " rowwise");
  expect_same(got.col, want.col, what + " colwise");
  expect_same(got.tile, want.tile, what + " tile");
  expect_same(got.dual_row, want.dual_row, what + " dual(rowwise)");
  expect_same(got.dual_col, want.dual_col, what + " dual(colwise)");
}

using Shape = std::pair<int64_t, int64_t>;
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{1, 1},     {1, 257},   {31, 129},  {33, 127},
                                       {127, 255}, {128, 128}, {129, 33},  {255, 257},
                                       {257, 31},  {2, 1},     {300, 129}};
  return s;
}

std::vector<BlockQuantConfig> configs() {
  std::vector<BlockQuantConfig> c;
  for (Elem e : {Elem::e4m3, Elem::e5m2})
    for (ScaleType st : {ScaleType::fp32_pow2, ScaleType::fp32})
      for (float eps : {0.f, 1e-3f}) c.push_back({e, st, eps});
  return c;
}

std::string name(const BlockQuantConfig& c, int64_t M, int64_t K) {
  return std::to_string(M) + "x" + std::to_string(K) + " " + elem_name(c.elem) + " " +
         scale_type_name(c.scale) + " eps " + std::to_string(c.amax_epsilon);
}

TEST(QuantizeBlocksPaths, EveryIsaMatchesScalarReference) {
  PathGuard guard;
  for (auto [M, K] : shapes()) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(M * 131 + K));
    const std::vector<uint16_t> xb = testdata::to_bf16(x);
    for (const BlockQuantConfig& cfg : configs()) {
      set_isa(Isa::scalar);
      const Outputs ref = run_blocks(x, M, K, cfg), ref_b = run_blocks(xb, M, K, cfg);
      // The reference dual kernel is rowwise + colwise by construction; check the sizes once.
      ASSERT_EQ(ref.row.scales.size(), size_t(M * ceil_div(K, 128) * 4));
      ASSERT_EQ(ref.col.scales.size(), size_t(ceil_div(M, 128) * K * 4));
      ASSERT_EQ(ref.tile.scales.size(), size_t(ceil_div(M, 128) * ceil_div(K, 128) * 4));
      for (Isa isa : supported_isas()) {
        if (isa == Isa::scalar) continue;
        set_isa(isa);
        const std::string w = std::string(isa_name(isa)) + " " + name(cfg, M, K);
        expect_same_all(run_blocks(x, M, K, cfg), ref, w + " f32");
        expect_same_all(run_blocks(xb, M, K, cfg), ref_b, w + " bf16");
      }
    }
  }
}

// The fast kernels take 128-row strips and 1x128 blocks without a NaN on a shorter path than
// those with one (awkward_matrix puts a NaN or Inf in nearly every strip): finite data, then a
// NaN in the first strip, a -NaN in a middle one and an Inf in the last.
TEST(QuantizeBlocksPaths, PiecesWithAndWithoutNaNMatchScalarReference) {
  PathGuard guard;
  for (auto [M, K] : {Shape{256, 384}, Shape{129, 257}, Shape{384, 128}, Shape{128, 2048}}) {
    std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(M + 3 * K), false);
    for (int poke = 0; poke < 2; ++poke) {
      if (poke == 1) {
        x[size_t(5 * K + 7)] = std::numeric_limits<float>::quiet_NaN();
        x[size_t((M - 1) * K + K - 1)] = kInf;
        x[size_t((M / 2) * K + K / 2)] = -std::numeric_limits<float>::quiet_NaN();
      }
      const std::vector<uint16_t> xb = testdata::to_bf16(x);
      for (const BlockQuantConfig& cfg : configs()) {
        set_isa(Isa::scalar);
        const Outputs ref = run_blocks(x, M, K, cfg), ref_b = run_blocks(xb, M, K, cfg);
        for (Isa isa : supported_isas()) {
          if (isa == Isa::scalar) continue;
          set_isa(isa);
          const std::string w = std::string(isa_name(isa)) + " " + name(cfg, M, K) +
                                (poke ? " with NaN" : " finite");
          expect_same_all(run_blocks(x, M, K, cfg), ref, w + " f32");
          expect_same_all(run_blocks(xb, M, K, cfg), ref_b, w + " bf16");
        }
      }
    }
  }
}

// BF16 input gives the bytes of its FP32 widening (the same rules on the same values).
TEST(QuantizeBlocksPaths, Bf16InputEqualsItsFp32Value) {
  PathGuard guard;
  const int64_t M = 129, K = 257;
  const std::vector<uint16_t> xb = testdata::to_bf16(testdata::awkward_matrix(M, K, 5));
  std::vector<float> xw(xb.size());
  for (size_t i = 0; i < xb.size(); ++i) xw[i] = bf16_to_f32(xb[i]);
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    expect_same_all(run_blocks(xb, M, K, {}), run_blocks(xw, M, K, {}), isa_name(isa));
  }
}

TEST(QuantizeBlocksPaths, DualEqualsSeparateAndThreadsDoNotMatter) {
  PathGuard guard;
  const int saved = omp_get_max_threads();
  // Split by 128-row strips (513 rows) and by column ranges within a strip (20 rows).
  for (auto [M, K] : {Shape{513, 300}, Shape{20, 4000}}) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(7 + M));
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      omp_set_num_threads(1);
      const Outputs one = run_blocks(x, M, K, {});
      expect_same(one.dual_row, one.row, std::string(isa_name(isa)) + " dual rowwise");
      expect_same(one.dual_col, one.col, std::string(isa_name(isa)) + " dual colwise");
      for (int nt : {2, 3}) {
        omp_set_num_threads(nt);
        expect_same_all(run_blocks(x, M, K, {}), one,
                        std::string(isa_name(isa)) + " " + std::to_string(nt) + " threads");
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace mxtrain
