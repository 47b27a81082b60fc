// core/formats.cc — exact scalar encode/decode of E4M3, E5M2, E2M1, E8M0 and BF16
// (docs/numerics.md, "Formats", "4-bit formats").
//
// These are the reference conversions: every vectorised quantize kernel is tested byte for
// byte against them. Encoding works on the FP32 bit pattern with integer arithmetic only
// (round to nearest, ties to even, then satfinite), so the result never depends on the
// floating-point environment. The vectorised kernels use a different rounding mechanism
// (a float "magic add"), which makes the byte-equality tests a real cross-check.
#include "mxtrain/formats.h"

#include <cmath>
#include <limits>

#include "mxtrain/common.h"

namespace mxtrain {

namespace {

const ElemInfo kE4M3{"e4m3", 8, 448.0f, 8};
const ElemInfo kE5M2{"e5m2", 15, 57344.0f, 8};
const ElemInfo kE2M1{"e2m1", 2, 6.0f, 4};

// Parameters of one 8-bit float format as needed by the generic encoder.
struct Fp8Spec {
  int mbits;          // mantissa bits: 3 or 2
  int bias;           // exponent bias: 7 or 15
  uint8_t max_code;   // largest finite magnitude code: 0x7E or 0x7B
  uint8_t nan_code;   // canonical NaN magnitude: 0x7F or 0x7E
  uint8_t inf_code;   // code for +-Inf input (NaN for E4M3, Inf for E5M2)
  uint32_t max_bits;  // FP32 bits of the largest finite value
};

constexpr Fp8Spec kSpecE4M3{3, 7, 0x7E, 0x7F, 0x7F, 0x43E00000u};  // 448
constexpr Fp8Spec kSpecE5M2{2, 15, 0x7B, 0x7E, 0x7C, 0x47600000u};  // 57344
// E2M1 through the same encoder: the sign goes to bit 3 instead of bit 7 (below), NaN has no
// code (0), Inf saturates to 6 (code 7).
constexpr Fp8Spec kSpecE2M1{1, 1, 0x07, 0x00, 0x07, 0x40C00000u};  // 6

// Round-to-nearest-even right shift of a non-negative integer by `shift` (>= 1) bits.
uint32_t shift_rne(uint32_t v, int shift) {
  if (shift >= 32) return 0;  // v < 2^24 here, so the result is below one half: 0
  const uint32_t q = v >> shift;
  const uint32_t rem = v & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

uint8_t encode_fp8(float f, const Fp8Spec& s) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | s.nan_code;     // NaN keeps its sign
  if (a == 0x7F800000u) return sign | s.inf_code;    // Inf: NaN (E4M3) / Inf (E5M2)
  if (a >= s.max_bits) return sign | s.max_code;     // satfinite
  const int exp_field = int(a >> 23);
  if (exp_field == 0) return sign;                   // FP32 subnormal: far below half the
                                                     // smallest FP8 subnormal -> +-0
  const int unbiased = exp_field - 127;
  const int emin = 1 - s.bias;                       // exponent of the smallest normal
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u; // 24-bit significand
  uint32_t code;
  if (unbiased >= emin) {
    // Normal: keep mbits of the fraction; a carry out of the fraction bumps the exponent,
    // which is exactly the next code.
    const uint32_t q = shift_rne(a & 0x7FFFFFFFu, 23 - s.mbits);
    code = q - (uint32_t(127 - s.bias) << s.mbits);
  } else {
    // Subnormal in FP8: value = mant * 2^(unbiased-23), step 2^(emin-mbits). Rounding up
    // to 2^emin yields code 1 << mbits, the smallest normal — again exactly right.
    const int shift = (emin - s.mbits) - (unbiased - 23);
    code = shift_rne(mant, shift);
  }
  if (code > s.max_code) code = s.max_code;  // cannot trigger below max_bits; kept as a guard
  return sign | uint8_t(code);
}

float decode_fp8(uint8_t b, int mbits, int bias) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp_field = (b >> mbits) & ((1 << (7 - mbits)) - 1);
  const int mant = b & ((1 << mbits) - 1);
  if (exp_field == 0) return sign * std::ldexp(float(mant), 1 - bias - mbits);
  return sign * std::ldexp(float((1 << mbits) | mant), exp_field - bias - mbits);
}

}  // namespace

const ElemInfo& elem_info(Elem e) {
  return e == Elem::e4m3 ? kE4M3 : e == Elem::e5m2 ? kE5M2 : kE2M1;
}
const char* elem_name(Elem e) { return elem_info(e).name; }

Elem parse_elem(const char* name) {
  const std::string n = name ? name : "";
  if (n == "e4m3") return Elem::e4m3;
  if (n == "e5m2") return Elem::e5m2;
  if (n == "e2m1") return Elem::e2m1;
  MXT_FAIL("unknown element format '", n, "'; valid choices: e4m3, e5m2, e2m1");
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

uint8_t f32_to_e4m3(float f) { return encode_fp8(f, kSpecE4M3); }
uint8_t f32_to_e5m2(float f) { return encode_fp8(f, kSpecE5M2); }

namespace {

// Every E4M3 value, from the definition once (NVFP4's block scales are decoded per block and
// per lane, where ldexp would cost more than the rest of the work).
struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int b = 0; b < 256; ++b)
      v[b] = (b & 0x7F) == 0x7F
                 ? std::copysign(std::numeric_limits<float>::quiet_NaN(), (b & 0x80) ? -1.f : 1.f)
                 : decode_fp8(uint8_t(b), 3, 7);
  }
};
}  // namespace

float e4m3_to_f32(uint8_t b) {
  static const E4M3Table t;  // made on first use: safe from any static initializer
  return t.v[b];
}

float e5m2_to_f32(uint8_t b) {
  const uint8_t m = b & 0x7F;
  if (m == 0x7C) return (b & 0x80) ? -std::numeric_limits<float>::infinity()
                                   : std::numeric_limits<float>::infinity();
  if (m > 0x7C) return std::copysign(std::numeric_limits<float>::quiet_NaN(),
                                     (b & 0x80) ? -1.0f : 1.0f);
  return decode_fp8(b, 2, 15);
}

bool fp8_is_nan(uint8_t b, Elem e) {
  if (e == Elem::e2m1) return false;
  const uint8_t m = b & 0x7F;
  return e == Elem::e4m3 ? m == 0x7F : m > 0x7C;
}

uint8_t f32_to_e2m1(float f) {
  if (f != f) return 0;
  // The 8-bit encoder's code has the sign in bit 7 and the magnitude (0..7) below it.
  const uint8_t c = encode_fp8(f, kSpecE2M1);
  return uint8_t(((c & 0x80) >> 4) | (c & 0x07));
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kValues[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kValues[code & 7];
  return (code & 8) ? -v : v;
}

float e8m0_to_f32(uint8_t b) {
  if (b == kE8M0Nan) return std::numeric_limits<float>::quiet_NaN();
  if (b == 0) return bits_f32(0x00400000u);  // 2^-127, the one subnormal scale
  return bits_f32(uint32_t(b) << 23);
}

const char* scale_type_name(ScaleType t) {
  switch (t) {
    case ScaleType::none: return "none";
    case ScaleType::e8m0: return "e8m0";
    case ScaleType::fp32: return "fp32";
    case ScaleType::fp32_pow2: return "fp32_pow2";
    case ScaleType::e4m3: return "e4m3";
  }
  return "?";
}

int scale_type_bytes(ScaleType t) {
  switch (t) {
    case ScaleType::none: return 0;
    case ScaleType::e8m0:
    case ScaleType::e4m3: return 1;
    case ScaleType::fp32:
    case ScaleType::fp32_pow2: return 4;
  }
  return 0;
}

}  // namespace mxtrain
