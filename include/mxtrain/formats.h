// mxtrain/formats.h — exact scalar encode/decode of the MX element and scale formats.
//
// E4M3 (e4m3fn), E5M2, E2M1, E8M0 and BF16 as in OCP MX v1.0 / OFP8 (docs/numerics.md,
// "Formats"). Conversions to the 8-bit element formats round to nearest, ties to even, then
// saturate finite values to ±max ("satfinite"); NaN stays NaN. ±Inf input becomes NaN for
// E4M3 (it has no Inf) and stays ±Inf for E5M2; the quantizer never feeds Inf here (a block
// holding Inf is all NaN). E2M1 (4 bits, ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}) has neither Inf nor
// NaN: it rounds to nearest even and saturates ±Inf to ±6; two E2M1 codes share a byte
// (docs/numerics.md, "4-bit formats"). The element width is a property of the format
// (elem_bits, elem_row_bytes): every buffer of codes asks it rather than assuming a byte.
// These functions are the scalar reference every vectorised kernel is tested against.
#pragma once

#include <cstdint>
#include <cstring>

namespace mxtrain {

enum class Elem : uint8_t { e4m3, e5m2, e2m1 };

// Properties of an element format.
struct ElemInfo {
  const char* name;
  int emax;         // exponent of the largest binade: 8 (E4M3), 15 (E5M2), 2 (E2M1)
  float max_value;  // 448, 57344 or 6
  int bits;         // bits per code: 8, or 4 (E2M1: two codes per byte)
};
const ElemInfo& elem_info(Elem e);
const char* elem_name(Elem e);
Elem parse_elem(const char* name);  // "e4m3" | "e5m2" | "e2m1", throws listing the choices
inline int elem_bits(Elem e) { return e == Elem::e2m1 ? 4 : 8; }
inline bool elem_is_4bit(Elem e) { return e == Elem::e2m1; }

// ---- packing ------------------------------------------------------------------------------
// A matrix of codes [rows, cols] is stored row by row; a row of 8-bit codes takes cols bytes,
// a row of 4-bit codes ceil(cols / 2): code c of the row sits in byte c / 2, in the low nibble
// when c is even and the high nibble when c is odd — torchao's pack_uint4 order
// (byte = code[2i] | code[2i+1] << 4), which is also the float4_e2m1fn_x2 order. The high
// nibble of an odd-length row's last byte is 0. Rows start on byte boundaries, so a range of
// rows is a contiguous range of bytes.
inline int64_t elem_row_bytes(Elem e, int64_t cols) {
  return elem_is_4bit(e) ? (cols + 1) / 2 : cols;
}
inline int64_t elem_bytes(Elem e, int64_t rows, int64_t cols) {
  return rows * elem_row_bytes(e, cols);
}
// The 4-bit code of element c of a packed row, and storing one (the other nibble kept).
inline uint8_t nibble_get(const uint8_t* row, int64_t c) {
  return uint8_t((row[c >> 1] >> ((c & 1) * 4)) & 0xF);
}
inline void nibble_put(uint8_t* row, int64_t c, uint8_t code) {
  uint8_t& b = row[c >> 1];
  b = (c & 1) ? uint8_t((b & 0x0F) | (code << 4)) : uint8_t((b & 0xF0) | (code & 0xF));
}

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
uint8_t f32_to_e2m1(float f);
float e2m1_to_f32(uint8_t code);
// Any element format's code (E2M1: the low nibble).
inline uint8_t f32_to_fp8(float f, Elem e) {
  return e == Elem::e4m3 ? f32_to_e4m3(f) : e == Elem::e5m2 ? f32_to_e5m2(f) : f32_to_e2m1(f);
}
inline float fp8_to_f32(uint8_t b, Elem e) {
  return e == Elem::e4m3 ? e4m3_to_f32(b) : e == Elem::e5m2 ? e5m2_to_f32(b) : e2m1_to_f32(b);
}
bool fp8_is_nan(uint8_t b, Elem e);

// ---- E2M1 elements (4 bits: sign, 2 exponent bits with bias 1, 1 mantissa bit) ----------------
// Codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. Round to nearest even on the
// code; |x| >= 6 and ±Inf give ±6 (code 7 | sign); the sign of zero and of values that round
// to zero is kept (-0 -> 0x8). NaN has no code: it gives 0x0 (no quantizer passes one here:
// a block holding NaN takes the block rule of docs/numerics.md, "4-bit formats"). Declared
// above; e2m1_to_f32 reads the low 4 bits of its argument.

// ---- E8M0 scales ----------------------------------------------------------------------------
// Byte b encodes 2^(b-127); 0xFF is NaN.
constexpr uint8_t kE8M0Nan = 0xFF;
float e8m0_to_f32(uint8_t b);  // 2^(b-127) (b=0 -> 2^-127, a subnormal float); 0xFF -> NaN
inline uint8_t e8m0_from_exponent(int e) { return uint8_t(e + 127); }  // e in [-127, 127]

// ---- scale types ----------------------------------------------------------------------------
// How a block's scale is stored: none (an unscaled BF16 copy), one E8M0 byte (a power of two:
// MX), one FP32, one FP32 rounded down to a power of two, or one E4M3 byte (NVFP4's positive
// block decode scale).
enum class ScaleType : uint8_t { none, e8m0, fp32, fp32_pow2, e4m3 };
const char* scale_type_name(ScaleType t);  // "none" | "e8m0" | "fp32" | "fp32_pow2" | "e4m3"
int scale_type_bytes(ScaleType t);         // bytes per scale: 0, 1, 4, 4, 1

}  // namespace mxtrain
