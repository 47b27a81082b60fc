// tests/core/formats_test.cc — exactness of the scalar format conversions (formats.h).
//
// The encoders in src/core/formats.cc round with integer bit arithmetic. The reference here
// is written differently on purpose: it lists every representable value of the format as a
// double, finds the two neighbours of the input, and picks the nearer one (ties to the even
// code) by comparing 2x with lo + hi, which is exact in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/formats.h"

namespace mxtrain {
namespace {

struct RefFormat {
  int ebits, mbits, bias;
  bool has_inf;               // E5M2: exponent all ones, mantissa 0 is Inf
  std::vector<double> vals;   // value of codes 0..max_code (non-negative, increasing)
  int max_code;
};

// Value of a non-negative code from the textbook definition.
double ref_value(int code, int ebits, int mbits, int bias) {
  const int e = code >> mbits, m = code & ((1 << mbits) - 1);
  if (e == 0) return std::ldexp(double(m), 1 - bias - mbits);
  return std::ldexp(double((1 << mbits) + m), e - bias - mbits);
}

RefFormat make_ref(Elem elem) {
  RefFormat f;
  if (elem == Elem::e4m3) {
    f = {4, 3, 7, false, {}, 0x7E};
  } else {
    f = {5, 2, 15, true, {}, 0x7B};
  }
  for (int c = 0; c <= f.max_code; ++c) f.vals.push_back(ref_value(c, f.ebits, f.mbits, f.bias));
  return f;
}

// Expected code for an FP32 input: NaN -> NaN code with sign, Inf -> NaN (E4M3) / Inf (E5M2),
// |x| >= max -> max, else nearest representable, ties to even code.
uint8_t ref_encode(float x, const RefFormat& f) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | (f.has_inf ? 0x7E : 0x7F);
  if (std::isinf(x)) return sign | (f.has_inf ? 0x7C : 0x7F);
  const double a = std::fabs(double(x));
  if (a >= f.vals.back()) return sign | uint8_t(f.max_code);
  const auto it = std::upper_bound(f.vals.begin(), f.vals.end(), a);  // first value > a
  const int hi = int(it - f.vals.begin()), lo = hi - 1;
  const double twice = 2.0 * a, mid2 = f.vals[lo] + f.vals[hi];
  int code;
  if (twice < mid2) code = lo;
  else if (twice > mid2) code = hi;
  else code = (lo % 2 == 0) ? lo : hi;
  return sign | uint8_t(code);
}

// Expected BF16 for an FP32 input, by comparing distances to the two BF16 neighbours.
uint16_t ref_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  const uint32_t lo = a & 0xFFFF0000u, hi = lo + 0x10000u;
  const double va = double(bits_f32(a)), vlo = double(bits_f32(lo));
  // The neighbour above the largest finite BF16 is 2^128 for rounding purposes (-> Inf).
  const double vhi = hi == 0x7F800000u ? std::ldexp(1.0, 128) : double(bits_f32(hi));
  if (a >= 0x7F800000u) return uint16_t((sign | a) >> 16);  // +-Inf stays
  uint32_t r;
  if (2 * va < vlo + vhi) r = lo;
  else if (2 * va > vlo + vhi) r = hi;
  else r = ((lo >> 16) & 1) ? hi : lo;
  return uint16_t((sign | r) >> 16);
}

TEST(Formats, ElemInfoAndNames) {
  EXPECT_STREQ(elem_name(Elem::e4m3), "e4m3");
  EXPECT_STREQ(elem_name(Elem::e5m2), "e5m2");
  EXPECT_EQ(elem_info(Elem::e4m3).emax, 8);
  EXPECT_EQ(elem_info(Elem::e5m2).emax, 15);
  EXPECT_EQ(elem_info(Elem::e4m3).max_value, 448.0f);
  EXPECT_EQ(elem_info(Elem::e5m2).max_value, 57344.0f);
  EXPECT_EQ(parse_elem("e4m3"), Elem::e4m3);
  EXPECT_EQ(parse_elem("e5m2"), Elem::e5m2);
  try {
    parse_elem("fp8");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3, e5m2"), std::string::npos) << e.what();
  }
}

TEST(Formats, E4M3AllCodesDecodeAndReencode) {
  const RefFormat f = make_ref(Elem::e4m3);
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_f32(uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      EXPECT_TRUE(fp8_is_nan(uint8_t(b), Elem::e4m3));
      EXPECT_EQ(f32_to_e4m3(v), uint8_t(b)) << "NaN keeps its sign: " << b;
      continue;
    }
    EXPECT_FALSE(fp8_is_nan(uint8_t(b), Elem::e4m3));
    const double expect = ((b & 0x80) ? -1.0 : 1.0) * f.vals[b & 0x7F];
    EXPECT_EQ(double(v), expect) << b;
    EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << b;
    EXPECT_EQ(f32_to_e4m3(v), uint8_t(b)) << b;
    // Exactly representable in BF16 as well (docs/numerics.md, "Formats").
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v) << b;
  }
}

TEST(Formats, E5M2AllCodesDecodeAndReencode) {
  const RefFormat f = make_ref(Elem::e5m2);
  for (int b = 0; b < 256; ++b) {
    const float v = e5m2_to_f32(uint8_t(b));
    const int m = b & 0x7F;
    if (m == 0x7C) {
      EXPECT_TRUE(std::isinf(v)) << b;
      EXPECT_EQ(f32_to_e5m2(v), uint8_t(b));
      continue;
    }
    if (m > 0x7C) {
      EXPECT_TRUE(std::isnan(v)) << b;
      EXPECT_TRUE(fp8_is_nan(uint8_t(b), Elem::e5m2));
      EXPECT_TRUE(fp8_is_nan(f32_to_e5m2(v), Elem::e5m2));
      continue;
    }
    EXPECT_FALSE(fp8_is_nan(uint8_t(b), Elem::e5m2));
    EXPECT_EQ(double(v), ((b & 0x80) ? -1.0 : 1.0) * f.vals[m]) << b;
    EXPECT_EQ(f32_to_e5m2(v), uint8_t(b)) << b;
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v) << b;
  }
}

TEST(Formats, E8M0AllCodes) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(double(e8m0_to_f32(uint8_t(b))), std::ldexp(1.0, b - 127)) << b;
    EXPECT_EQ(e8m0_from_exponent(b - 127), uint8_t(b));
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

TEST(Formats, AllBf16PatternsMatchIndependentReference) {
  const RefFormat r4 = make_ref(Elem::e4m3), r5 = make_ref(Elem::e5m2);
  int bad4 = 0, bad5 = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = bf16_to_f32(uint16_t(h));
    if (f32_to_e4m3(x) != ref_encode(x, r4) && bad4++ < 10)
      ADD_FAILURE() << "e4m3 bf16=0x" << std::hex << h << " got 0x" << int(f32_to_e4m3(x))
                    << " want 0x" << int(ref_encode(x, r4));
    if (f32_to_e5m2(x) != ref_encode(x, r5) && bad5++ < 10)
      ADD_FAILURE() << "e5m2 bf16=0x" << std::hex << h << " got 0x" << int(f32_to_e5m2(x))
                    << " want 0x" << int(ref_encode(x, r5));
  }
  EXPECT_EQ(bad4, 0);
  EXPECT_EQ(bad5, 0);
}

// Midpoints between adjacent codes, and one FP32 ulp either side of each, plus random FP32
// bit patterns: the cases BF16 inputs cannot reach.
TEST(Formats, Fp32HalfwayAndRandomMatchIndependentReference) {
  for (Elem elem : {Elem::e4m3, Elem::e5m2}) {
    const RefFormat f = make_ref(elem);
    std::vector<float> xs;
    for (size_t i = 0; i + 1 < f.vals.size(); ++i) {
      const float mid = float((f.vals[i] + f.vals[i + 1]) / 2);  // exact in FP32
      ASSERT_EQ(double(mid), (f.vals[i] + f.vals[i + 1]) / 2);
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)});
    }
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) xs.push_back(bits_f32(uint32_t(rng())));
    for (float x : xs) {
      for (float s : {x, -x}) {
        const uint8_t got = f32_to_fp8(s, elem), want = ref_encode(s, f);
        if (std::isnan(s)) {
          EXPECT_TRUE(fp8_is_nan(got, elem));
          EXPECT_EQ(got & 0x80, want & 0x80);
        } else {
          ASSERT_EQ(got, want) << elem_name(elem) << " x=" << s << " bits=0x" << std::hex
                               << f32_bits(s);
        }
      }
    }
  }
}

TEST(Formats, NamedBoundaryCases) {
  // E4M3: max 448 = 0x7E; the halfway point to the (NaN) next code saturates anyway.
  EXPECT_EQ(f32_to_e4m3(448.f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(464.f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7F);   // no Inf: NaN
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFF);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  // Smallest subnormal 2^-9 = 0x01; half of it ties to even (0), just above rounds up.
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.f, -9)), 0x01);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.f, -10), 1.f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.f, -10)), 0x80);
  EXPECT_EQ(f32_to_e4m3(1.5f * std::ldexp(1.f, -9)), 0x02);  // tie 1.5 -> even 2
  EXPECT_EQ(f32_to_e4m3(2.5f * std::ldexp(1.f, -9)), 0x02);  // tie 2.5 -> even 2
  // Largest subnormal 7*2^-9 and rounding up into the smallest normal 2^-6 = 0x08.
  EXPECT_EQ(f32_to_e4m3(7.f * std::ldexp(1.f, -9)), 0x07);
  EXPECT_EQ(f32_to_e4m3(7.5f * std::ldexp(1.f, -9)), 0x08);
  // Halfway between 1.0 (0x38) and 1.125 (0x39) -> even 0x38; between 1.125 and 1.25 -> 0x3A.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);
  // Carry into the next binade: 1.9375 is halfway between 1.875 (0x3F) and 2 (0x40).
  EXPECT_EQ(f32_to_e4m3(1.9375f), 0x40);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);

  // E5M2: max 57344 = 0x7B, Inf stays Inf, smallest subnormal 2^-16.
  EXPECT_EQ(f32_to_e5m2(57344.f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(61440.f), 0x7B);  // halfway to the Inf code: satfinite
  EXPECT_EQ(f32_to_e5m2(-1e30f), 0xFB);
  EXPECT_EQ(f32_to_e5m2(std::numeric_limits<float>::infinity()), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-std::numeric_limits<float>::infinity()), 0xFC);
  EXPECT_EQ(f32_to_e5m2(std::numeric_limits<float>::quiet_NaN()), 0x7E);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.f, -16)), 0x01);
  EXPECT_EQ(f32_to_e5m2(std::ldexp(1.f, -17)), 0x00);
  EXPECT_EQ(f32_to_e5m2(3.f * std::ldexp(1.f, -17)), 0x02);  // 1.5 steps -> even 2
  EXPECT_EQ(f32_to_e5m2(1.125f), 0x3C);                       // halfway 1.0/1.25 -> 1.0
  EXPECT_EQ(f32_to_e5m2(1.375f), 0x3E);                       // halfway 1.25/1.5 -> 1.5
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.f, -16));
}

TEST(Formats, Fp32ToBf16RoundsToNearestEven) {
  std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  // Exact halfway cases: low half 0x8000 with even and odd kept LSB, and +-1 around them.
  for (uint32_t hi : {0x3F800000u, 0x3F810000u, 0x7F7F0000u, 0x00010000u, 0x80010000u,
                      0x7F7E0000u, 0xC2FF0000u}) {
    for (uint32_t lo : {0x7FFFu, 0x8000u, 0x8001u, 0x0000u, 0xFFFFu})
      xs.push_back(bits_f32(hi | lo));
  }
  // A sweep over all exponents with a stride through the mantissa.
  for (uint64_t u = 0; u < 0x100000000ull; u += 0x1357u) xs.push_back(bits_f32(uint32_t(u)));
  for (float x : xs) {
    const uint16_t got = f32_to_bf16(x), want = ref_bf16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(got)));
      EXPECT_EQ(got & 0x8000, f32_bits(x) >> 16 & 0x8000) << "sign kept";
      EXPECT_EQ(got, want) << "quiet NaN keeps its payload top bits";
    } else {
      ASSERT_EQ(got, want) << "x bits 0x" << std::hex << f32_bits(x);
    }
  }
  // Named: the largest value that still rounds to the largest finite BF16, and one above.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7F7F8000u)), 0x7F80);  // halfway, odd LSB -> Inf
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7FC00001u)), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7F800001u)), 0x7FC0);  // signalling NaN gets quieted
}

}  // namespace
}  // namespace mxtrain
