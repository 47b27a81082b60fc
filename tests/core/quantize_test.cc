// tests/core/quantize_test.cc — MX block quantization semantics (docs/numerics.md, "MX block
// scaling"), on the scalar path.
//
// The library's quantizer is checked against a direct transcription of those rules written here
// (scale exponent found by searching powers of two in double precision, elements divided in
// double), against the sanity vectors, and for the block rules (zero, NaN/Inf, ragged).
// quantize_paths_test.cc then holds every fast path to the scalar bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/mx_test_data.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs the test body on the scalar path and restores the previous choice afterwards.
struct ScalarPath {
  ScalarPath() { set_isa(Isa::scalar); }
  ~ScalarPath() { clear_isa_override(); }
};

// The scale exponent by definition (docs/numerics.md, "The scale exponent"):
// floor -> floor(log2 amax) - emax; rceil -> the smallest e with
// max_elem * 2^e >= amax. Both clamped to [-127, 127].
int spec_exponent(double amax, Elem elem, ScaleRounding r) {
  const ElemInfo& info = elem_info(elem);
  int e;
  if (r == ScaleRounding::floor) {
    e = -400;
    while (std::ldexp(1.0, e + 1) <= amax) ++e;
    e -= info.emax;
  } else {
    e = -400;
    while (std::ldexp(double(info.max_value), e) < amax) ++e;
  }
  return std::max(-127, std::min(127, e));
}

// The whole tensor quantized by the definition, element by element.
ScaledTensor spec_quantize(const std::vector<float>& x, int64_t M, int64_t K, MXLayout layout,
                           QuantConfig cfg) {
  ScaledTensor t = ScaledTensor::empty(M, K, layout, cfg.elem);
  const int64_t br = layout == MXLayout::rowwise ? 1 : 32;
  const int64_t bc = layout == MXLayout::colwise ? 1 : 32;
  for (int64_t i0 = 0; i0 < M; i0 += br) {
    for (int64_t j0 = 0; j0 < K; j0 += bc) {
      double amax = 0;
      bool nonfinite = false;
      for (int64_t i = i0; i < std::min(M, i0 + br); ++i)
        for (int64_t j = j0; j < std::min(K, j0 + bc); ++j) {
          const float v = x[size_t(i * K + j)];
          if (!std::isfinite(v)) nonfinite = true;
          else amax = std::max(amax, std::fabs(double(v)));
        }
      const int e = spec_exponent(amax, cfg.elem, cfg.rounding);
      const uint8_t sb = nonfinite ? 0xFF : uint8_t(e + 127);
      t.scales[size_t((i0 / br) * t.scale_cols() + j0 / bc)] = sb;
      for (int64_t i = i0; i < std::min(M, i0 + br); ++i)
        for (int64_t j = j0; j < std::min(K, j0 + bc); ++j) {
          uint8_t code;
          if (nonfinite) code = cfg.elem == Elem::e4m3 ? 0x7F : 0x7E;
          else if (amax == 0) code = 0x00;
          else code = f32_to_fp8(float(std::ldexp(double(x[size_t(i * K + j)]), -e)), cfg.elem);
          t.data[size_t(i * K + j)] = code;
        }
    }
  }
  return t;
}

TEST(Quantize, SanityVectorsE4M3) {
  ScalarPath scalar;
  const QuantConfig fl{Elem::e4m3, ScaleRounding::floor}, rc{Elem::e4m3, ScaleRounding::rceil};
  const float fmax = std::numeric_limits<float>::max();
  struct Case { float x; uint8_t floor_scale, floor_code, rceil_scale, rceil_code; };
  for (const Case& c : {Case{fmax, 246, 0x7E, 247, 0x78}, Case{480.f, 127, 0x7E, 128, 0x77},
                        Case{std::ldexp(1.f, -126), 0, 0x40, 0, 0x40}}) {
    for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile}) {
      const ScaledTensor qf = quantize(&c.x, 1, 1, l, fl), qr = quantize(&c.x, 1, 1, l, rc);
      EXPECT_EQ(qf.scales[0], c.floor_scale) << c.x;
      EXPECT_EQ(qf.data[0], c.floor_code) << c.x;
      EXPECT_EQ(qr.scales[0], c.rceil_scale) << c.x;
      EXPECT_EQ(qr.data[0], c.rceil_code) << c.x;
    }
    EXPECT_EQ(mx_scale_byte(c.x, fl), c.floor_scale);
    EXPECT_EQ(mx_scale_byte(c.x, rc), c.rceil_scale);
  }
}

TEST(Quantize, ScaleByteMatchesDefinition) {
  std::vector<float> amaxes = {0.f, std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(), 1.f, 1.75f,
                               std::nextafter(1.75f, 2.f), std::nextafter(1.75f, 0.f), 448.f,
                               std::nextafter(448.f, 1e9f), 57344.f,
                               std::nextafter(57344.f, 1e9f), std::numeric_limits<float>::max()};
  for (int k = -149; k <= 127; ++k)
    for (double m : {1.0, 1.5, 1.75, 1.8, 1.99})
      amaxes.push_back(float(std::ldexp(m, k)));
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) amaxes.push_back(bits_f32(rng() % 0x7F800000u));
  for (Elem elem : {Elem::e4m3, Elem::e5m2})
    for (ScaleRounding r : {ScaleRounding::rceil, ScaleRounding::floor})
      for (float a : amaxes)
        ASSERT_EQ(int(mx_scale_byte(a, {elem, r})), spec_exponent(a, elem, r) + 127)
            << elem_name(elem) << " " << rounding_name(r) << " amax=" << a;
  EXPECT_EQ(mx_scale_byte(kInf, {}), 0xFF);
  EXPECT_EQ(mx_scale_byte(kNaN, {}), 0xFF);
}

// rceil never saturates: every element's magnitude after scaling is at most max_elem.
TEST(Quantize, RceilNeverSaturatesFloorMay) {
  ScalarPath scalar;
  std::vector<float> row(32, 0.f);
  row[0] = 480.f;
  const ScaledTensor r = quantize(row.data(), 1, 32, MXLayout::rowwise, {});
  EXPECT_EQ(fp8_to_f32(r.data[0], Elem::e4m3) * e8m0_to_f32(r.scales[0]), 480.f);
  const ScaledTensor f =
      quantize(row.data(), 1, 32, MXLayout::rowwise, {Elem::e4m3, ScaleRounding::floor});
  EXPECT_EQ(fp8_to_f32(f.data[0], Elem::e4m3) * e8m0_to_f32(f.scales[0]), 448.f);
}

TEST(Quantize, MatchesDefinitionOnAwkwardData) {
  ScalarPath scalar;
  for (auto [M, K] : {std::pair<int64_t, int64_t>{1, 1}, {1, 33}, {31, 31}, {33, 65}, {64, 64},
                      {97, 130}}) {
    const std::vector<float> x = testdata::awkward_matrix(M, K, uint32_t(M * 1000 + K));
    const std::vector<uint16_t> xb = testdata::to_bf16(x);
    std::vector<float> xb_f32(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) xb_f32[i] = bf16_to_f32(xb[i]);
    for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile})
      for (Elem e : {Elem::e4m3, Elem::e5m2})
        for (ScaleRounding r : {ScaleRounding::rceil, ScaleRounding::floor}) {
          const QuantConfig cfg{e, r};
          const ScaledTensor want = spec_quantize(x, M, K, l, cfg);
          const ScaledTensor got = quantize(x.data(), M, K, l, cfg);
          EXPECT_EQ(got.scales, want.scales) << M << "x" << K << " " << layout_name(l);
          EXPECT_EQ(got.data, want.data) << M << "x" << K << " " << layout_name(l);
          const ScaledTensor want_b = spec_quantize(xb_f32, M, K, l, cfg);
          const ScaledTensor got_b = quantize(xb.data(), M, K, l, cfg);
          EXPECT_EQ(got_b.scales, want_b.scales) << "bf16 " << M << "x" << K;
          EXPECT_EQ(got_b.data, want_b.data) << "bf16 " << M << "x" << K;
        }
  }
}

TEST(Quantize, BlockRules) {
  ScalarPath scalar;
  // Row 0: a block of -0 (zero block -> scale 0x00, data 0x00, sign dropped), then a partial
  // block of one element. Row 1: one Inf poisons its block; the next block holds a NaN.
  const int64_t K = 33;
  std::vector<float> x(2 * K, 1.0f);
  for (int j = 0; j < 32; ++j) x[j] = -0.0f;
  x[32] = 1000.f;  // partial block: amax over this one element only
  x[K + 5] = -kInf;
  x[K + 32] = kNaN;
  const ScaledTensor q = quantize(x.data(), 2, K, MXLayout::rowwise, {});
  ASSERT_EQ(q.scale_cols(), 2);
  EXPECT_EQ(q.scales[0], 0x00);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q.data[j], 0x00);
  EXPECT_EQ(q.scales[1], mx_scale_byte(1000.f, {}));
  EXPECT_EQ(q.scales[1], 127 + 2);  // 1000 / 448 -> 2^2
  EXPECT_EQ(q.data[32], f32_to_e4m3(250.f));
  EXPECT_EQ(q.scales[2], 0xFF);
  EXPECT_EQ(q.scales[3], 0xFF);
  for (int j = 0; j < K; ++j) EXPECT_EQ(q.data[K + j], 0x7F) << j;

  // Colwise: a ragged 33-row tensor has a second block row holding only row 32.
  std::vector<float> col(33, 2.0f);
  col[32] = 0.5f;
  const ScaledTensor c = quantize(col.data(), 33, 1, MXLayout::colwise, {});
  ASSERT_EQ(c.scale_rows(), 2);
  EXPECT_EQ(c.scales[1], mx_scale_byte(0.5f, {}));
  EXPECT_EQ(c.scale_at(32, 0), c.scales[1]);
  EXPECT_EQ(fp8_to_f32(c.data[32], Elem::e4m3) * e8m0_to_f32(c.scales[1]), 0.5f);
}

TEST(Quantize, DequantizeIsCodeTimesScale) {
  ScalarPath scalar;
  const int64_t M = 45, K = 70;
  const std::vector<float> x = testdata::awkward_matrix(M, K, 11);
  for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile})
    for (Elem e : {Elem::e4m3, Elem::e5m2}) {
      const ScaledTensor q = quantize(x.data(), M, K, l, {e, ScaleRounding::rceil});
      std::vector<float> y(size_t(M * K));
      std::vector<uint16_t> yb(size_t(M * K));
      dequantize(q, y.data());
      dequantize_bf16(q, yb.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < K; ++j) {
          const size_t n = size_t(i * K + j);
          const uint8_t s = q.scale_at(i, j);
          const float want = float(double(fp8_to_f32(q.data[n], e)) * std::ldexp(1.0, s - 127));
          if (s == 0xFF) {
            EXPECT_TRUE(std::isnan(y[n]));
            EXPECT_TRUE(std::isnan(bf16_to_f32(yb[n])));
          } else {
            ASSERT_EQ(y[n], want) << i << "," << j;
            ASSERT_EQ(yb[n], f32_to_bf16(want)) << i << "," << j;
          }
        }
    }
}

// Round trip error. Within a block with scale 2^e every element y = x/2^e is rounded once
// to nearest: with m mantissa bits the error is at most half a step, i.e. 2^-(m+1) relative
// for |y| in the normal range (2^-4 for E4M3, 2^-3 for E5M2), and at most half the smallest
// subnormal (2^-10 resp. 2^-17, times 2^e) absolutely below it. rceil never saturates, so
// this bounds every finite element — except at the very top of FP32: an element within a
// rounding step of FLT_MAX rounds up to 2^128 in the scaled domain (e.g. the sanity
// vector FLT_MAX -> 0x78 * 2^120), which dequantizes to Inf in FP32.
TEST(Quantize, RoundTripErrorWithinFormatBound) {
  ScalarPath scalar;
  const int64_t M = 64, K = 96;
  const std::vector<float> x = testdata::awkward_matrix(M, K, 5, /*with_nonfinite=*/false);
  for (Elem e : {Elem::e4m3, Elem::e5m2}) {
    const double rel = e == Elem::e4m3 ? std::ldexp(1.0, -4) : std::ldexp(1.0, -3);
    const int sub_half = e == Elem::e4m3 ? -10 : -17;
    for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile}) {
      const ScaledTensor q = quantize(x.data(), M, K, l, {e, ScaleRounding::rceil});
      std::vector<float> y(x.size());
      dequantize(q, y.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < K; ++j) {
          const size_t n = size_t(i * K + j);
          const double xe = x[n], err = std::fabs(double(y[n]) - xe);
          if (std::isinf(y[n])) {
            ASSERT_GE(std::fabs(xe), std::ldexp(1.875, 127)) << "only FP32's top rounds to Inf";
            continue;
          }
          const double bound = std::max(rel * std::fabs(xe),
                                        std::ldexp(1.0, sub_half + q.scale_at(i, j) - 127));
          ASSERT_LE(err, bound) << elem_name(e) << " " << layout_name(l) << " x=" << xe;
        }
    }
  }
}

TEST(Quantize, LayoutsAndShapes) {
  const ScaledTensor r = ScaledTensor::empty(33, 65, MXLayout::rowwise, Elem::e4m3);
  const ScaledTensor c = ScaledTensor::empty(33, 65, MXLayout::colwise, Elem::e4m3);
  const ScaledTensor t = ScaledTensor::empty(33, 65, MXLayout::tile, Elem::e5m2);
  EXPECT_EQ(r.scale_rows(), 33);
  EXPECT_EQ(r.scale_cols(), 3);
  EXPECT_EQ(c.scale_rows(), 2);
  EXPECT_EQ(c.scale_cols(), 65);
  EXPECT_EQ(t.scale_rows(), 2);
  EXPECT_EQ(t.scale_cols(), 3);
  EXPECT_EQ(r.bytes(), size_t(33 * 65 + 33 * 3));
  EXPECT_EQ(t.bytes(), size_t(33 * 65 + 6));
  EXPECT_STREQ(layout_name(MXLayout::tile), "tile");
  EXPECT_EQ(parse_rounding("floor"), ScaleRounding::floor);
  EXPECT_STREQ(rounding_name(ScaleRounding::rceil), "rceil");
  EXPECT_THROW(parse_rounding("ceil"), Error);
  EXPECT_THROW(r.scale_at(33, 0), Error);
  // Empty tensors are fine.
  const ScaledTensor z = quantize(static_cast<const float*>(nullptr), 0, 5, MXLayout::colwise, {});
  EXPECT_EQ(z.data.size(), 0u);
  EXPECT_EQ(z.scales.size(), 0u);
}

// ScaledTensor storage starts on a 64-byte line for every size, and survives copies, growth
// and moves with its contents and alignment.
TEST(Quantize, StorageIsCacheLineAligned) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; };
  for (int64_t n : {1, 31, 64, 1000, 200000, 5000000}) {
    const ScaledTensor t = ScaledTensor::empty(1, n, MXLayout::rowwise, Elem::e4m3);
    EXPECT_TRUE(aligned(t.data.data())) << n;
    EXPECT_TRUE(aligned(t.scales.data())) << n;
  }
  ByteBuffer b(100);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7);
  ByteBuffer c = b;
  c.resize(300000, 0xAB);
  EXPECT_TRUE(aligned(c.data()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), c.begin()));
  EXPECT_EQ(c[299999], 0xAB);
  const ByteBuffer d = std::move(c);
  EXPECT_TRUE(aligned(d.data()));
  EXPECT_EQ(d.size(), 300000u);
  EXPECT_EQ(d[99], uint8_t(99 * 7));
}

TEST(Quantize, ApiErrorsAreClear) {
  std::vector<float> x(64, 1.f);
  ScaledTensor wrong = ScaledTensor::empty(4, 16, MXLayout::rowwise, Elem::e4m3);
  try {
    quantize_into(x.data(), 8, 8, {}, wrong);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output is 4x16 but the input is 8x8"),
              std::string::npos) << e.what();
  }
  ScaledTensor e5 = ScaledTensor::empty(8, 8, MXLayout::rowwise, Elem::e5m2);
  EXPECT_THROW(quantize_into(x.data(), 8, 8, {}, e5), Error);
  EXPECT_THROW(quantize(x.data(), -1, 8, MXLayout::rowwise, {}), Error);
  EXPECT_THROW(quantize(static_cast<const float*>(nullptr), 2, 2, MXLayout::rowwise, {}), Error);
  ScaledTensor broken = ScaledTensor::empty(8, 8, MXLayout::tile, Elem::e4m3);
  broken.scales.clear();
  std::vector<float> out(64);
  EXPECT_THROW(dequantize(broken, out.data()), Error);
  ScaledTensor a, b;
  EXPECT_THROW(quantize_dual(x.data(), 8, 8, {}, a, a), Error);
  quantize_dual(x.data(), 8, 8, {}, a, b);  // outputs are (re)shaped as needed
  EXPECT_EQ(a.layout, MXLayout::rowwise);
  EXPECT_EQ(b.layout, MXLayout::colwise);
  EXPECT_EQ(b.scales.size(), 8u);
}

TEST(Quantize, ArrayHelpers) {
  ScalarPath scalar;
  std::vector<float> x = testdata::awkward_matrix(3, 1000, 9);
  std::vector<uint16_t> b(x.size());
  f32_to_bf16_array(x.data(), b.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b[i], f32_to_bf16(x[i]));
  std::vector<float> back(x.size());
  bf16_to_f32_array(b.data(), back.data(), int64_t(b.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(f32_bits(back[i]), uint32_t(b[i]) << 16);
  std::vector<float> fin(1000, 1.f);
  EXPECT_FALSE(has_nonfinite(fin.data(), 1000));
  fin[999] = -kInf;
  EXPECT_TRUE(has_nonfinite(fin.data(), 1000));
  EXPECT_FALSE(has_nonfinite(fin.data(), 999));
  fin[0] = kNaN;
  EXPECT_TRUE(has_nonfinite(fin.data(), 1));
}

}  // namespace
}  // namespace mxtrain
