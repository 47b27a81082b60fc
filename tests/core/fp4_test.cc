// tests/core/fp4_test.cc — the 4-bit formats (E2M1, NVFP4, MXFP4): scalar encode/decode,
// packing, the quantizers against a transcription of their definition, every kernel path
// against the scalar reference on awkward shapes, stochastic rounding (Philox known answers,
// determinism, unbiasedness) and the random Hadamard transform (docs/numerics.md, "4-bit
// formats").
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/mx_test_data.h"
#include "core/quantize_compare.h"
#include "mxtrain/common.h"
#include "mxtrain/formats.h"
#include "mxtrain/isa.h"
#include "mxtrain/philox.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using testdata::PathGuard;

Fp4Config mxfp4(ScaleRounding rule = ScaleRounding::rceil) {
  Fp4Config c;
  c.kind = Fp4Kind::mxfp4;
  c.rounding = rule;
  return c;
}

constexpr double kGrid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// The nearest grid point, ties to the even code, found by exact comparison in double.
uint8_t ref_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const double a = std::fabs(double(x));
  if (a >= 6) return sign | 7;
  int hi = 1;
  while (kGrid[hi] <= a) ++hi;
  const int lo = hi - 1;
  const double twice = 2 * a, mid2 = kGrid[lo] + kGrid[hi];
  const int code = twice < mid2 ? lo : twice > mid2 ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | uint8_t(code);
}

TEST(E2m1, EveryCodeDecodesToItsValue) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_f32(uint8_t(c));
    EXPECT_EQ(double(std::fabs(v)), kGrid[c & 7]) << c;
    EXPECT_EQ(std::signbit(v), (c & 8) != 0) << c;
    EXPECT_EQ(f32_to_e2m1(v), uint8_t(c)) << "decode then encode of code " << c;
  }
  EXPECT_EQ(e2m1_to_f32(0xF3), 1.5f) << "only the low nibble is read";
}

TEST(E2m1, EncodeIsNearestEvenOnEveryBf16AndRandomFp32) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_to_f32(uint16_t(b));
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_e2m1(x), ref_e2m1(x)) << "bf16 bits " << b;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float x = bits_f32(rng());
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_e2m1(x), ref_e2m1(x)) << x;
  }
  // Midpoints and their neighbours.
  for (int lo = 0; lo < 7; ++lo) {
    const float m = float((kGrid[lo] + kGrid[lo + 1]) / 2);
    for (float v : {m, std::nextafter(m, 0.f), std::nextafter(m, 10.f)})
      for (float s : {1.f, -1.f}) EXPECT_EQ(f32_to_e2m1(s * v), ref_e2m1(s * v)) << s * v;
  }
}

TEST(E2m1, SpecialValues) {
  EXPECT_EQ(f32_to_e2m1(INFINITY), 0x7);
  EXPECT_EQ(f32_to_e2m1(-INFINITY), 0xF);
  EXPECT_EQ(f32_to_e2m1(FLT_MAX), 0x7);
  EXPECT_EQ(f32_to_e2m1(NAN), 0x0);
  EXPECT_EQ(f32_to_e2m1(-0.f), 0x8);
  EXPECT_EQ(f32_to_e2m1(-1e-40f), 0x8);
  EXPECT_EQ(f32_to_e2m1(0.25f), 0x0);   // tie: even code 0
  EXPECT_EQ(f32_to_e2m1(0.75f), 0x2);   // tie between 0.5 (1) and 1 (2)
  EXPECT_EQ(f32_to_e2m1(5.f), 0x6);     // tie between 4 (6) and 6 (7)
  EXPECT_EQ(f32_to_e2m1(-2.5f), 0xC);   // tie between -2 (C) and -3 (D)
  EXPECT_EQ(elem_info(Elem::e2m1).max_value, 6.f);
  EXPECT_EQ(elem_bits(Elem::e2m1), 4);
  EXPECT_EQ(parse_elem("e2m1"), Elem::e2m1);
}

// torchao's pack_uint4: byte i = code[2i] | code[2i + 1] << 4.
TEST(Packing, NibbleOrderIsTorchaosPackUint4) {
  EXPECT_EQ(elem_row_bytes(Elem::e2m1, 1), 1);
  EXPECT_EQ(elem_row_bytes(Elem::e2m1, 16), 8);
  EXPECT_EQ(elem_row_bytes(Elem::e2m1, 17), 9);
  EXPECT_EQ(elem_row_bytes(Elem::e4m3, 17), 17);
  uint8_t row[2] = {0xAA, 0xAA};
  nibble_put(row, 0, 0x1);
  nibble_put(row, 1, 0x2);
  nibble_put(row, 2, 0x3);
  EXPECT_EQ(row[0], 0x21);
  EXPECT_EQ(row[1], 0xA3);
  EXPECT_EQ(nibble_get(row, 1), 0x2);
  // A quantized odd-length row ends in a byte whose high nibble is 0.
  const std::vector<float> x = {6.f, -1.f, 0.5f};
  ScaledTensor q;
  quantize_fp4(x.data(), 1, 3, MXLayout::rowwise, mxfp4(), q);
  ASSERT_EQ(q.data.size(), 2u);
  EXPECT_EQ(q.data[0], 0xA7);  // 6 -> 7, -1 -> 0xA
  EXPECT_EQ(q.data[1], 0x01);  // 0.5 -> 1, pad 0
  EXPECT_EQ(q.scales[0], 127);
}

// Random123's known-answer vectors for Philox4x32-10.
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// ---- the quantizers against a transcription of their definition ------------------------------

// Block edge and grid position of element (r, c).
struct Blk {
  int64_t B;
  MXLayout l;
  int64_t br(int64_t r) const { return l == MXLayout::rowwise ? r : r / B; }
  int64_t bc(int64_t c) const { return l == MXLayout::colwise ? c : c / B; }
};

// Element by element: its block's amax (torch.amax: NaN wins), the block scale and multiplier
// by the formulas of docs/numerics.md, then the code. Returns packed bytes and scale bytes.
struct Def {
  std::vector<uint8_t> data, scales;
  float tensor_scale = 1.f;
};

Def definition(const std::vector<float>& x, int64_t M, int64_t K, MXLayout l, Fp4Kind kind,
               ScaleRounding rule, Nvfp4Order order, bool two_level) {
  const Blk g{kind == Fp4Kind::nvfp4 ? 16 : 32, l};
  const int64_t sr = l == MXLayout::rowwise ? M : ceil_div(M, g.B);
  const int64_t sc = l == MXLayout::colwise ? K : ceil_div(K, g.B);
  Def d;
  d.scales.assign(size_t(sr * sc), 0);
  d.data.assign(size_t(M * ((K + 1) / 2)), 0);
  float amax_t = 0.f;
  bool nan_t = false;
  for (float v : x) {
    nan_t |= std::isnan(v);
    amax_t = std::max(amax_t, std::fabs(v));
  }
  if (nan_t) amax_t = NAN;
  float p = 1.f, s_enc = 1.f;
  if (kind == Fp4Kind::nvfp4 && two_level) {
    if (order == Nvfp4Order::torchao) {
      p = amax_t / 2688.f;
      if (!std::isnan(p) && !std::isnormal(p)) p = 1.f;
    } else {
      s_enc = 2688.f / amax_t;
      if (s_enc > FLT_MAX) s_enc = FLT_MAX;
      if (amax_t == 0.f || s_enc == 0.f) s_enc = 1.f;
      p = 1.f / s_enc;
    }
  }
  d.tensor_scale = p;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < K; ++c) {
      float amax = 0.f;
      bool nan = false;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < K; ++j)
          if (g.br(i) == g.br(r) && g.bc(j) == g.bc(c)) {
            const float v = x[size_t(i * K + j)];
            nan |= std::isnan(v);
            amax = std::max(amax, std::fabs(v));
          }
      const float v = x[size_t(r * K + c)];
      uint8_t scale, code;
      if (kind == Fp4Kind::nvfp4) {
        float b;
        if (two_level && order == Nvfp4Order::te) {
          b = std::min((nan ? NAN : amax) * (s_enc * (1.f / 6.f)), FLT_MAX);
          if (nan) b = NAN;
          b = b > 448.f ? 448.f : b;
        } else {
          b = (nan ? NAN : amax) / 6.f;
          if (two_level) b = b / p;
          if (!std::isnan(b)) b = std::clamp(b, 0x1p-6f, 448.f);
        }
        scale = f32_to_e4m3(b);
        if (std::isnan(b)) {
          code = two_level && order == Nvfp4Order::te ? 0 : (std::isnan(p) ? 3 : 4);
        } else {
          const float s = e4m3_to_f32(scale);
          float mult;
          if (two_level && order == Nvfp4Order::te)
            mult = std::min(1.f / (s * p), FLT_MAX);
          else
            mult = two_level ? (1.f / p) / s : 1.f / s;
          code = f32_to_e2m1(std::clamp(v * mult, -6.f, 6.f));
        }
      } else if (nan) {
        scale = 0xFF;
        if (rule == ScaleRounding::rceil) {
          code = 3;
        } else if (std::isinf(v)) {
          code = 0xB;
        } else {
          code = uint8_t((std::signbit(v) ? 8 : 0) | (std::isnan(v) ? 3 : 0));
        }
      } else if (rule == ScaleRounding::floor) {
        // floor(log2(amax)) - 2 from the exponent field (Inf: field 255 -> 126), >= -127.
        const int ex = std::isinf(amax)    ? 126
                       : amax < FLT_MIN    ? -127
                                           : std::max(-127, std::ilogb(amax) - 2);
        scale = uint8_t(ex + 127);
        const float div = std::max(std::ldexp(1.f, ex), FLT_MIN);
        code = f32_to_e2m1(v / div);
      } else if (std::isinf(amax)) {
        scale = 254;
        code = f32_to_e2m1(std::clamp(v * 0x1p-127f, -6.f, 6.f));
      } else {
        // Smallest e with amax <= 6 * 2^e, by search in double (exact).
        int e = -127;
        while (e < 127 && double(amax) > 6.0 * std::ldexp(1.0, e)) ++e;
        scale = uint8_t(e + 127);
        const float mult = scale == 0 ? 1.f : std::ldexp(1.f, -e);
        code = f32_to_e2m1(std::clamp(v * mult, -6.f, 6.f));
      }
      d.scales[size_t(g.br(r) * sc + g.bc(c))] = scale;
      d.data[size_t(r * ((K + 1) / 2) + c / 2)] |= uint8_t(code << (4 * (c & 1)));
    }
  return d;
}

std::vector<float> small_awkward(int64_t M, int64_t K, uint32_t seed) {
  std::vector<float> x = testdata::awkward_matrix(M, K, seed);
  std::mt19937 rng(seed);
  // E2M1 grid points, midpoints and the 1.5 * 2^k rceil boundaries, scaled.
  for (size_t i = 0; i < x.size(); i += 5) {
    const int k = int(rng() % 20) - 10;
    const float g = float(kGrid[rng() % 8]) * (rng() % 2 ? 1.f : 1.25f);
    x[i] = std::ldexp(rng() % 3 == 0 ? std::nextafter(1.5f, 2.f) : g, k) * (rng() % 2 ? 1 : -1);
  }
  return x;
}

TEST(Fp4Quantize, MatchesTheDefinitionElementByElement) {
  PathGuard guard;
  set_isa(Isa::scalar);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 17}, {17, 33}, {33, 16},
                                                           {16, 35}};
  for (auto [M, K] : shapes)
    for (bool with_nan : {false, true}) {
      std::vector<float> x = small_awkward(M, K, uint32_t(M * 131 + K));
      if (!with_nan)
        for (float& v : x)
          if (std::isnan(v)) v = 1.f;
      for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile}) {
        for (ScaleRounding rule : {ScaleRounding::rceil, ScaleRounding::floor}) {
          Fp4Config cfg = mxfp4(rule);
          ScaledTensor q;
          quantize_fp4(x.data(), M, K, l, cfg, q);
          const Def d = definition(x, M, K, l, Fp4Kind::mxfp4, rule, Nvfp4Order::torchao, false);
          const std::string what = "mxfp4 " + std::string(rounding_name(rule)) + " " +
                                   layout_name(l) + " " + std::to_string(M) + "x" +
                                   std::to_string(K);
          EXPECT_EQ(std::vector<uint8_t>(q.scales.begin(), q.scales.end()), d.scales) << what;
          EXPECT_EQ(std::vector<uint8_t>(q.data.begin(), q.data.end()), d.data) << what;
          EXPECT_FALSE(q.has_tensor_scale);
        }
        for (int mode = 0; mode < 3; ++mode) {
          Fp4Config cfg;
          cfg.tensor_scale = mode > 0;
          cfg.order = mode == 2 ? Nvfp4Order::te : Nvfp4Order::torchao;
          ScaledTensor q;
          quantize_fp4(x.data(), M, K, l, cfg, q);
          const Def d = definition(x, M, K, l, Fp4Kind::nvfp4, ScaleRounding::rceil, cfg.order,
                                   cfg.tensor_scale);
          const std::string what = "nvfp4 mode " + std::to_string(mode) + " " + layout_name(l) +
                                   " " + std::to_string(M) + "x" + std::to_string(K);
          EXPECT_EQ(std::vector<uint8_t>(q.scales.begin(), q.scales.end()), d.scales) << what;
          EXPECT_EQ(std::vector<uint8_t>(q.data.begin(), q.data.end()), d.data) << what;
          EXPECT_EQ(q.has_tensor_scale, cfg.tensor_scale) << what;
          if (cfg.tensor_scale) {
            EXPECT_EQ(f32_bits(q.tensor_scale), f32_bits(d.tensor_scale)) << what;
          }
        }
      }
    }
}

TEST(Fp4Quantize, TensorScaleRule) {
  EXPECT_EQ(nvfp4_tensor_scale(2688.f), 1.f);
  EXPECT_EQ(nvfp4_tensor_scale(0.f), 1.f);
  EXPECT_EQ(nvfp4_tensor_scale(INFINITY), 1.f);
  EXPECT_EQ(nvfp4_tensor_scale(1e-36f), 1.f);  // / 2688 would be subnormal
  EXPECT_EQ(nvfp4_tensor_scale(1e-33f), 1e-33f / 2688.f);
  EXPECT_TRUE(std::isnan(nvfp4_tensor_scale(NAN)));
  EXPECT_EQ(nvfp4_tensor_scale(3.f), 3.f / 2688.f);
  const std::vector<float> x = {1.f, NAN, -3.f, 2.f};
  EXPECT_TRUE(std::isnan(fp4_amax(x.data(), 4)));
  EXPECT_EQ(fp4_amax(x.data() + 2, 2), 3.f);
}

// A block of 16 with amax 6 * 448 * p: the block scale is 448 exactly, codes are values / p /
// 448 rounded; dequantize gives code * (p * 448).
TEST(Fp4Quantize, DequantizeIsCodeTimesScales) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i % 8) * (i % 3 ? 1.f : -1.f);
  ScaledTensor q;
  const float amax = quantize_fp4(x.data(), 2, 16, MXLayout::rowwise, {}, q);
  EXPECT_EQ(amax, 7.f);
  EXPECT_EQ(q.tensor_scale, 7.f / 2688.f);
  std::vector<float> y(32);
  dequantize(q, y.data());
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 16; ++c) {
      const float s = e4m3_to_f32(q.scales[size_t(r)]);
      const float want = e2m1_to_f32(nibble_get(q.data.data() + r * 8, c)) * (q.tensor_scale * s);
      EXPECT_EQ(y[size_t(r * 16 + c)], want);
    }
}

// ---- every path against the scalar reference ---------------------------------------------------

struct Setting {
  std::string name;
  MXLayout layout;
  Fp4Config cfg;
};

std::vector<Setting> settings() {
  std::vector<Setting> out;
  for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile})
    for (bool sr : {false, true}) {
      const std::string tail = std::string(" ") + layout_name(l) + (sr ? " sr" : "");
      for (ScaleRounding rule : {ScaleRounding::rceil, ScaleRounding::floor}) {
        Fp4Config c = mxfp4(rule);
        c.stochastic = sr;
        c.sr = {0x123456789ull, 7, 3};
        out.push_back({std::string("mxfp4 ") + rounding_name(rule) + tail, l, c});
      }
      for (int mode = 0; mode < 3; ++mode) {
        Fp4Config c;
        c.tensor_scale = mode > 0;
        c.order = mode == 2 ? Nvfp4Order::te : Nvfp4Order::torchao;
        c.stochastic = sr;
        c.sr = {99, 1, 2};
        out.push_back({"nvfp4 mode " + std::to_string(mode) + tail, l, c});
        if (l == MXLayout::colwise) {
          c.rht = true;
          out.push_back({"nvfp4 rht mode " + std::to_string(mode) + tail, l, c});
        }
      }
    }
  return out;
}

void expect_same_copy(const ScaledTensor& a, const ScaledTensor& b, const std::string& what) {
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  EXPECT_TRUE(std::equal(a.data.begin(), a.data.end(), b.data.begin())) << what << " data";
  EXPECT_TRUE(std::equal(a.scales.begin(), a.scales.end(), b.scales.begin()))
      << what << " scales";
  EXPECT_EQ(a.has_tensor_scale, b.has_tensor_scale) << what;
  EXPECT_EQ(f32_bits(a.tensor_scale), f32_bits(b.tensor_scale)) << what;
  EXPECT_EQ(a.rht, b.rht) << what;
}

const std::vector<std::pair<int64_t, int64_t>>& path_shapes() {
  static const std::vector<std::pair<int64_t, int64_t>> s = {
      {1, 1},   {1, 15},  {15, 17}, {17, 31},  {31, 33},  {33, 65},
      {16, 16}, {32, 32}, {63, 127}, {65, 257}, {129, 17}, {2, 1025},
      // Rows of whole 16-block runs (the AVX-512 rule on sixteen blocks at once, random words
      // 64 elements per generator run when a row starts at a multiple of 4) and ragged ones.
      {19, 1024}, {33, 520}, {4, 2052}};
  return s;
}

// The paths' input of shape [M, K]: small_awkward's, or with its NaNs made -3 (then the
// tensor scales are finite, so every block takes the rules, not a fill).
std::vector<float> path_input(int64_t M, int64_t K, bool with_nan) {
  std::vector<float> x = small_awkward(M, K, uint32_t(M * 7919 + K));
  if (!with_nan)
    for (float& v : x)
      if (std::isnan(v)) v = -3.f;
  return x;
}

TEST(Fp4Paths, EveryIsaMatchesScalarReference) {
  PathGuard guard;
  for (auto [M, K] : path_shapes())
    for (bool with_nan : {true, false}) {
      const std::vector<float> x = path_input(M, K, with_nan);
      const std::vector<uint16_t> xb = testdata::to_bf16(x);
      for (const Setting& s : settings()) {
        set_isa(Isa::scalar);
        ScaledTensor ref, ref_b;
        quantize_fp4(x.data(), M, K, s.layout, s.cfg, ref);
        quantize_fp4(xb.data(), M, K, s.layout, s.cfg, ref_b);
        for (Isa isa : supported_isas()) {
          if (isa == Isa::scalar) continue;
          set_isa(isa);
          ScaledTensor got, got_b;
          quantize_fp4(x.data(), M, K, s.layout, s.cfg, got);
          quantize_fp4(xb.data(), M, K, s.layout, s.cfg, got_b);
          const std::string what = s.name + " " + std::to_string(M) + "x" + std::to_string(K) +
                                   " on " + isa_name(isa) + (with_nan ? "" : " no NaN");
          expect_same_copy(got, ref, what + " f32");
          expect_same_copy(got_b, ref_b, what + " bf16");
        }
      }
    }
}

// TransformerEngine's order on every path at the E4M3 scale's rounding points. With the tensor
// amax 448 the encode multiplier 2688 / 448 · (1/6) rounds to exactly 1, so a block's scale is
// its amax coded to E4M3: blocks whose amax is each E4M3 value, each midpoint between two
// (ties, both parities), one FP32 step either side of it, the subnormal scales and below (2^-10
// ties to 0, FP32 subnormals, 0), coded rowwise (sixteen blocks per run: the vector rule),
// colwise (the same blocks down columns) and as 16x16 tiles, with and without stochastic
// rounding.
TEST(Fp4Paths, TeOrderScalesAtE4m3RoundingPointsOnEveryPath) {
  PathGuard guard;
  std::vector<float> amaxes = {448.f, 0.f, 0x1p-149f, 0x1p-127f, 0x1p-11f, 0x1p-10f,
                               std::nextafter(0x1p-10f, 1.f), 0x1p-6f * 0.999f};
  for (int code = 0; code < 0x7E; ++code) {
    const float v = e4m3_to_f32(uint8_t(code)), next = e4m3_to_f32(uint8_t(code + 1));
    const float mid = (v + next) / 2;  // exact: both are multiples of the step
    for (float a : {v, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)})
      amaxes.push_back(a);
  }
  amaxes.push_back(448.f);
  const int64_t kBlocks = 16;  // blocks per row
  const int64_t M = int64_t(amaxes.size() + kBlocks - 1) / kBlocks, K = 16 * kBlocks;
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> frac(-1.f, 1.f);
  std::vector<float> x(size_t(M * K), 0.f), xt(size_t(M * K));
  for (size_t b = 0; b < amaxes.size(); ++b)
    for (int64_t i = 0; i < 16; ++i)
      x[b * 16 + size_t(i)] = i == int64_t(b % 16) ? (b % 3 ? amaxes[b] : -amaxes[b])
                                                    : amaxes[b] * frac(rng);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < K; ++c) xt[size_t(c * M + r)] = x[size_t(r * K + c)];
  for (bool sr : {false, true}) {
    Fp4Config cfg;
    cfg.tensor_scale = true;
    cfg.order = Nvfp4Order::te;
    cfg.stochastic = sr;
    cfg.sr = {5, 2, 1};
    for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile}) {
      const std::vector<float>& in = l == MXLayout::colwise ? xt : x;
      const int64_t rows = l == MXLayout::colwise ? K : M, cols = l == MXLayout::colwise ? M : K;
      set_isa(Isa::scalar);
      ScaledTensor ref;
      quantize_fp4(in.data(), rows, cols, l, cfg, ref);
      if (l == MXLayout::rowwise) {
        // The construction holds: every rounding point's block took its E4M3 code.
        for (size_t b = 0; b < amaxes.size(); ++b)
          ASSERT_EQ(ref.scales[(b / 16) * size_t(ref.scale_cols()) + b % 16],
                    f32_to_e4m3(amaxes[b]))
              << "block " << b;
      }
      for (Isa isa : supported_isas()) {
        if (isa == Isa::scalar) continue;
        set_isa(isa);
        ScaledTensor got;
        quantize_fp4(in.data(), rows, cols, l, cfg, got);
        expect_same_copy(got, ref, std::string("te ") + layout_name(l) + (sr ? " sr" : "") +
                                       " on " + isa_name(isa));
      }
    }
  }
}

// fp4_rht_amax (the transformed matrix's amax without holding it) is fp4_amax of rht_rows on
// every path, NaN winning, over the awkward shapes (a last partial group of rows included);
// fp4_amaxes gives x's own amax beside it, from the same read.
TEST(Fp4Paths, RhtAmaxIsTheTransformedMatrixsAmaxOnEveryPath) {
  PathGuard guard;
  const auto same = [](float got, float want, const std::string& what) {
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << what;
    else
      EXPECT_EQ(f32_bits(got), f32_bits(want)) << what;
  };
  for (auto [M, K] : path_shapes())
    for (int input = 0; input < 3; ++input) {
      std::vector<float> x = path_input(M, K, input == 0);
      if (input == 2 && M * K > 0) {
        // One large |x| in the first row, the rest far below it: where that row is in a whole
        // group of 16 rows, x's amax is 4x its transform's, so a kernel that gave one maximum
        // for the other would fail (the awkward inputs' Inf and FLT_MAX make them equal).
        for (float& v : x)
          if (!(std::fabs(v) < 1e20f)) v = 1.f;
        x[0] = -1e30f;
      }
      std::vector<float> t(x.size());
      set_isa(Isa::scalar);
      rht_rows(x.data(), M, K, t.data());
      const float want = fp4_amax(t.data(), M * K), want_plain = fp4_amax(x.data(), M * K);
      for (Isa isa : supported_isas()) {
        set_isa(isa);
        const std::string what = std::to_string(M) + "x" + std::to_string(K) + " on " +
                                 isa_name(isa) + " input " + std::to_string(input);
        same(fp4_rht_amax(x.data(), M, K), want, what);
        const Fp4Amaxes both = fp4_amaxes(x.data(), M, K);
        same(both.rht, want, what + " (fp4_amaxes)");
        same(both.plain, want_plain, what + " (fp4_amaxes, plain)");
      }
    }
}

TEST(Fp4Paths, ThreadCountDoesNotChangeBytes) {
  PathGuard guard;
  const int saved = omp_get_max_threads();
  for (auto [M, K] : {std::pair<int64_t, int64_t>{257, 1023}, {17, 8195}}) {
    const std::vector<float> x = small_awkward(M, K, uint32_t(M + K));
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      for (const Setting& s : settings()) {
        ScaledTensor one, three;
        omp_set_num_threads(1);
        quantize_fp4(x.data(), M, K, s.layout, s.cfg, one);
        omp_set_num_threads(3);
        quantize_fp4(x.data(), M, K, s.layout, s.cfg, three);
        expect_same_copy(three, one, s.name + " " + isa_name(isa) + " 3 threads");
      }
    }
  }
  omp_set_num_threads(saved);
}

// ---- stochastic rounding -------------------------------------------------------------------

TEST(StochasticRounding, KeyedAndDeterministic) {
  const int64_t M = 33, K = 48;
  const std::vector<float> x = small_awkward(M, K, 5);
  Fp4Config c;
  c.stochastic = true;
  c.sr = {11, 2, 3};
  ScaledTensor a, b, other_step, other_tensor, other_seed;
  quantize_fp4(x.data(), M, K, MXLayout::rowwise, c, a);
  quantize_fp4(x.data(), M, K, MXLayout::rowwise, c, b);
  EXPECT_TRUE(std::equal(a.data.begin(), a.data.end(), b.data.begin()));
  auto differs = [&](Fp4Config cc, ScaledTensor& t) {
    quantize_fp4(x.data(), M, K, MXLayout::rowwise, cc, t);
    return !std::equal(a.data.begin(), a.data.end(), t.data.begin());
  };
  Fp4Config s = c;
  s.sr.step = 3;
  EXPECT_TRUE(differs(s, other_step));
  s = c;
  s.sr.tensor = 4;
  EXPECT_TRUE(differs(s, other_tensor));
  s = c;
  s.sr.seed = 12;
  EXPECT_TRUE(differs(s, other_seed));
  // The scales do not depend on the rounding.
  EXPECT_TRUE(std::equal(a.scales.begin(), a.scales.end(), other_step.scales.begin()));
}

// Unbiasedness. Between grid points lo <= |y| < hi (step q = hi - lo), P(round up) =
// ceil(f * 2^24) / 2^24 for f = (|y| - lo) / q (24 random bits), so the bias E[Q] - y lies in
// [0, q * 2^-24). Q takes two values q apart: its standard deviation is at most q / 2, so the
// mean of n independent draws lies within q * 2^-24 + 6 * (q / 2) / sqrt(n) of y except with
// probability below 2e-9 (six sigma; the draws are fixed by their keys, so the test is
// deterministic). Here MXFP4 rceil with a 6 in every block keeps the scale 2^0 (y = x), and
// n = 64 steps x 128 rows x 31 elements = 253,952 draws per value.
TEST(StochasticRounding, MeanErrorIsWithinTheBound) {
  const std::vector<float> values = {0.1f,  0.3f,   0.7f,  1.2f,  1.7f,  2.2f,  2.9f,
                                     3.3f,  4.5f,   5.9f,  -0.3f, -2.6f, -4.9f, 0.26f,
                                     1.01f, 5.999f, 0.5f,  3.f};
  const int64_t M = 128, K = 32, steps = 64;
  for (float v : values) {
    std::vector<float> x(size_t(M * K), v);
    for (int64_t r = 0; r < M; ++r) x[size_t(r * K)] = 6.f;
    double sum = 0, sum_rne = 0;
    int64_t n = 0;
    std::vector<float> y(x.size());
    for (int64_t s = 0; s < steps; ++s) {
      Fp4Config c = mxfp4();
      c.stochastic = true;
      c.sr = {2024, uint32_t(s), 9};
      ScaledTensor q;
      quantize_fp4(x.data(), M, K, MXLayout::rowwise, c, q);
      ASSERT_EQ(q.scales[0], 127);
      dequantize(q, y.data());
      for (int64_t r = 0; r < M; ++r)
        for (int64_t k = 1; k < K; ++k, ++n) sum += y[size_t(r * K + k)];
    }
    Fp4Config c = mxfp4();
    ScaledTensor q;
    quantize_fp4(x.data(), M, K, MXLayout::rowwise, c, q);
    dequantize(q, y.data());
    sum_rne = y[1];
    const double a = std::fabs(double(v));
    const double step = a < 2 ? 0.5 : a < 4 ? 1 : 2;
    const double bound = step * 0x1p-24 + 6 * (step / 2) / std::sqrt(double(n));
    const double err = sum / double(n) - double(v);
    EXPECT_LE(std::fabs(err), bound) << "value " << v << ": mean " << sum / double(n);
    // Round to nearest is biased wherever v is off the grid and away from a midpoint.
    const double rne_err = std::fabs(sum_rne - double(v));
    if (rne_err > 0.05 * step) {
      EXPECT_GT(rne_err, bound) << "the bound must be able to tell RNE's bias at " << v;
    }
  }
}

// ---- the random Hadamard transform -----------------------------------------------------------

TEST(Rht, MatrixIsSignedSylvesterHadamardAndOrthogonal) {
  // Row j of 4 * I (16 x 16) transforms into 4 * (1/4) H D e_j = column j of H D.
  std::vector<float> e(16 * 16, 0.f), t(16 * 16);
  for (int j = 0; j < 16; ++j) e[size_t(j * 16 + j)] = 4.f;
  // rht_rows works along rows: the input's rows are the 16 vector entries, its columns the
  // vectors; the identity is its own transpose.
  rht_rows(e.data(), 16, 16, t.data());
  // Sylvester's construction, built here independently: H_{2n} = [[H, H], [H, -H]].
  std::vector<int> h = {1};
  for (int n = 1; n < 16; n *= 2) {
    std::vector<int> g(size_t(4 * n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const int v = h[size_t(i * n + j)];
        g[size_t(i * 2 * n + j)] = v;
        g[size_t(i * 2 * n + j + n)] = v;
        g[size_t((i + n) * 2 * n + j)] = v;
        g[size_t((i + n) * 2 * n + j + n)] = -v;
      }
    h = g;
  }
  const float* s = rht_signs();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(t[size_t(i * 16 + j)], float(h[size_t(i * 16 + j)]) * s[j]) << i << "," << j;
  // H·Hᵀ = 16·I, and the same for the signed matrix.
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      int dot = 0, sdot = 0;
      for (int k = 0; k < 16; ++k) {
        dot += h[size_t(i * 16 + k)] * h[size_t(j * 16 + k)];
        sdot += int(t[size_t(i * 16 + k)] * t[size_t(j * 16 + k)]);
      }
      EXPECT_EQ(dot, i == j ? 16 : 0);
      EXPECT_EQ(sdot, i == j ? 16 : 0);
    }
}

// dW = dyᵀ x over T tokens, with and without the transform on both operands, in exact
// arithmetic: small integer inputs make every transformed value a multiple of 1/4 below 2^10
// and every product and sum exact in FP32 and double. A ragged tail (T = 16k + 7) stays
// untransformed; both operands then hold the same tail.
TEST(Rht, WgradProductIsUnchangedInExactArithmetic) {
  for (int64_t T : {16, 48, 55, 7}) {
    const int64_t N = 5, K = 9;
    std::mt19937 rng{uint32_t(T)};
    std::vector<float> dy(size_t(T * N)), x(size_t(T * K)), tdy(dy.size()), tx(x.size());
    for (float& v : dy) v = float(int(rng() % 17) - 8);
    for (float& v : x) v = float(int(rng() % 17) - 8);
    PathGuard guard;
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      rht_rows(dy.data(), T, N, tdy.data());
      rht_rows(x.data(), T, K, tx.data());
      // dW[n, k] = sum over t of dy[t, n] * x[t, k], in double.
      auto wgrad = [&](const std::vector<float>& d, const std::vector<float>& v) {
        std::vector<double> w(size_t(N * K), 0.0);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
              w[size_t(n * K + k)] += double(d[size_t(t * N + n)]) * double(v[size_t(t * K + k)]);
        return w;
      };
      const std::vector<double> a = wgrad(dy, x), b = wgrad(tdy, tx);
      EXPECT_EQ(a, b) << "T = " << T << " on " << isa_name(isa);
      for (float v : tdy) EXPECT_EQ(v * 4, std::round(v * 4));
      bool changed = false;
      for (size_t i = 0; i < dy.size(); ++i) changed |= tdy[i] != dy[i];
      EXPECT_EQ(changed, T >= 16) << "T = " << T;
    }
  }
}

TEST(Rht, ColwiseCopyIsTheTransformedMatrixQuantized) {
  const int64_t M = 40, K = 33;
  const std::vector<float> x = small_awkward(M, K, 77);
  std::vector<float> clean(x);
  for (float& v : clean)
    if (!std::isfinite(v) || std::fabs(v) > 1e30f) v = 1.f;
  std::vector<float> t(clean.size());
  rht_rows(clean.data(), M, K, t.data());
  Fp4Config c;
  c.rht = true;
  ScaledTensor a, b;
  quantize_fp4(clean.data(), M, K, MXLayout::colwise, c, a);
  c.rht = false;
  quantize_fp4(t.data(), M, K, MXLayout::colwise, c, b);
  EXPECT_TRUE(a.rht);
  EXPECT_FALSE(b.rht);
  EXPECT_TRUE(std::equal(a.data.begin(), a.data.end(), b.data.begin()));
  EXPECT_TRUE(std::equal(a.scales.begin(), a.scales.end(), b.scales.begin()));
  EXPECT_EQ(a.tensor_scale, b.tensor_scale);
  c.rht = true;
  EXPECT_THROW(quantize_fp4(clean.data(), M, K, MXLayout::rowwise, c, a), Error);
}

// The transformed matrix is never held whole: the AVX-512 kernels transform as they read, the
// reference a strip of rows at a time (about 1 MiB of FP32 each, whole groups of 16 and whole
// blocks). Either way the copy must be that of the whole rht_rows output quantized, byte for
// byte — over several strips, a ragged last group, both kinds, both orders, stochastic
// rounding, BF16 input, a given amax and 1 or 3 threads, on every path.
TEST(Rht, StripsEqualTheWholeTransformQuantized) {
  PathGuard guard;
  const int saved = omp_get_max_threads();
  // 4097 columns: strips of 48 rows (NVFP4) or 32 (MXFP4); 1000: 256 rows, the last strip 44.
  for (auto [M, K] : {std::pair<int64_t, int64_t>{117, 4097}, {300, 1000}, {15, 4097}}) {
    const std::vector<float> x = small_awkward(M, K, uint32_t(M * 31 + K));
    const std::vector<uint16_t> xb = testdata::to_bf16(x);
    std::vector<float> t(x.size()), tb(x.size()), xbf(x.size());
    rht_rows(x.data(), M, K, t.data());
    for (size_t i = 0; i < xb.size(); ++i) xbf[i] = bf16_to_f32(xb[i]);
    rht_rows(xbf.data(), M, K, tb.data());
    std::vector<Fp4Config> cfgs;
    for (int mode = 0; mode < 3; ++mode)
      for (bool sr : {false, true}) {
        Fp4Config c;
        c.tensor_scale = mode > 0;
        c.order = mode == 2 ? Nvfp4Order::te : Nvfp4Order::torchao;
        c.stochastic = sr;
        c.sr = {5, 9, 4};
        cfgs.push_back(c);
      }
    Fp4Config m = mxfp4();
    m.stochastic = true;
    cfgs.push_back(m);
    for (Isa isa : supported_isas()) {
      set_isa(isa);
      for (int threads : {1, 3}) {
        omp_set_num_threads(threads);
        for (Fp4Config c : cfgs) {
          const std::string what = std::string(fp4_kind_name(c.kind)) + " ts " +
                                   std::to_string(c.tensor_scale) + " sr " +
                                   std::to_string(c.stochastic) + " " + std::to_string(M) + "x" +
                                   std::to_string(K) + " on " + isa_name(isa) + ", " +
                                   std::to_string(threads) + " threads";
          c.rht = false;
          ScaledTensor want, want_b, got, got_b, got_given;
          const float a_want = quantize_fp4(t.data(), M, K, MXLayout::colwise, c, want);
          quantize_fp4(tb.data(), M, K, MXLayout::colwise, c, want_b);
          c.rht = true;
          const float a_got = quantize_fp4(x.data(), M, K, MXLayout::colwise, c, got);
          quantize_fp4(xb.data(), M, K, MXLayout::colwise, c, got_b);
          quantize_fp4(x.data(), M, K, MXLayout::colwise, c, got_given, fp4_amax(t.data(), M * K));
          EXPECT_TRUE(got.rht && got_b.rht && got_given.rht) << what;
          EXPECT_EQ(f32_bits(a_got), f32_bits(a_want)) << what;
          EXPECT_EQ(f32_bits(got.tensor_scale), f32_bits(want.tensor_scale)) << what;
          got.rht = got_b.rht = got_given.rht = false;
          expect_same_copy(got, want, what + " f32");
          expect_same_copy(got_b, want_b, what + " bf16");
          expect_same_copy(got_given, want, what + " given amax");
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace mxtrain
