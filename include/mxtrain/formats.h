// mxtrain/formats.h — exact scalar encode/decode of the MX element and scale formats.
//
// E4M3 (e4m3fn), E5M2, E8M0 and BF16 as in OCP MX v1.0 / OFP8 (docs/numerics.md, "Formats").
// Conversions to the
// 8-bit element formats round to nearest, ties to even, then saturate finite values to
// ±max ("satfinite"); NaN stays NaN. ±Inf input becomes NaN for E4M3 (it has no Inf) and
// stays ±Inf for E5M2; the quantizer never feeds Inf here (a block holding Inf is all NaN).
// These functions are the scalar reference every vectorised kernel is tested against.
#pragma once

#include <cstdint>
#include <cstring>

namespace mxtrain {

enum class Elem : uint8_t { e4m3, e5m2 };

// Properties of an 8-bit element format.
struct ElemInfo {
  const char* name;
  int emax;         // exponent of the largest binade: 8 (E4M3), 15 (E5M2)
  float max_value;  // 448 or 57344
};
const ElemInfo& elem_info(Elem e);
const char* elem_name(Elem e);
Elem parse_elem(const char* name);  // "e4m3" | "e5m2", throws listing the valid choices

// ---- bit casts --------------------------------------------------------------------------
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- BF16 ---------------------------------------------------------------------------------
// Round to nearest even; NaN stays a (quiet) NaN with its sign.
uint16_t f32_to_bf16(float f);
inline float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

// ---- FP8 elements ---------------------------------------------------------------------------
// Round to nearest even, satfinite. NaN -> 0x7F|sign (E4M3) or 0x7E|sign (E5M2).
// +-Inf -> NaN for E4M3; +-Inf -> +-Inf (0x7C/0xFC) for E5M2.
uint8_t f32_to_e4m3(float f);
uint8_t f32_to_e5m2(float f);
float e4m3_to_f32(uint8_t b);
float e5m2_to_f32(uint8_t b);
inline uint8_t f32_to_fp8(float f, Elem e) { return e == Elem::e4m3 ? f32_to_e4m3(f) : f32_to_e5m2(f); }
inline float fp8_to_f32(uint8_t b, Elem e) { return e == Elem::e4m3 ? e4m3_to_f32(b) : e5m2_to_f32(b); }
bool fp8_is_nan(uint8_t b, Elem e);

// ---- E8M0 scales ----------------------------------------------------------------------------
// Byte b encodes 2^(b-127); 0xFF is NaN.
constexpr uint8_t kE8M0Nan = 0xFF;
float e8m0_to_f32(uint8_t b);  // 2^(b-127) (b=0 -> 2^-127, a subnormal float); 0xFF -> NaN
inline uint8_t e8m0_from_exponent(int e) { return uint8_t(e + 127); }  // e in [-127, 127]

// ---- scale types ----------------------------------------------------------------------------
// How a block's scale is stored: none (an unscaled BF16 copy), one E8M0 byte (a power of two:
// MX), one FP32, or one FP32 rounded down to a power of two.
enum class ScaleType : uint8_t { none, e8m0, fp32, fp32_pow2 };
const char* scale_type_name(ScaleType t);  // "none" | "e8m0" | "fp32" | "fp32_pow2"
int scale_type_bytes(ScaleType t);         // bytes per scale: 0, 1, 4, 4

}  // namespace mxtrain
