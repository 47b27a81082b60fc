// core/quantize_fp4_kernels.h — private: the kernels of 4-bit quantization (NVFP4, MXFP4;
// docs/numerics.md, "4-bit formats") and their tables.
//
// quantize_fp4.cc (API checks, the per-tensor scale, dispatch, OpenMP split) calls these
// through one PathTable per op family. A quantize kernel works on one Region of X[M,K] whose
// first row and column are multiples of the block edge B (16 or 32, even), so a block never
// straddles two calls, a byte's two codes are written by one call, and the bytes do not depend
// on how the work is split. quantize_fp4_ref.cc holds the scalar reference,
// quantize_fp4_avx512.cc the AVX-512 kernels. The block rules and the element rounding below
// are shared by every kernel (internal linkage, as in quantize_kernels.h), so all paths agree
// bit for bit.
#pragma once

#include <cfloat>
#include <cstdint>
#include <vector>

#include "core/quantize_kernels.h"
#include "mxtrain/philox.h"

namespace mxtrain::kern {

// How an NVFP4 copy's second level enters its block scales.
enum class TensorScaleMode : uint8_t {
  none,     // block scale = amax_b / 6, element multiplier 1 / s
  torchao,  // block scale = (amax_b / 6) / p, element multiplier (1 / p) / s
  te,       // block scale = amax_b * (S_enc * (1/6)), multiplier 1 / (s * S_dec)
};

// Shape and settings of one 4-bit quantization.
struct Fp4Params {
  int64_t M, K;
  Fp4Kind kind;
  int64_t B;                    // block edge: 16 (NVFP4) or 32 (MXFP4)
  ScaleRounding rounding;       // MXFP4
  TensorScaleMode mode;         // NVFP4
  float p, inv_p;               // torchao: the decode scale p and fl(1 / p)
  float te_mult, te_sdec;       // te: fl(S_enc * fl(1/6)) and fl(1 / S_enc)
  uint8_t nan_fill;             // NVFP4: the code of every element of a NaN-scale block
  bool stochastic;
  uint64_t seed;                // stochastic rounding key (SrKey)
  uint32_t step, tensor;
  uint32_t copy;                // 0 rowwise, 1 colwise, 2 tile (counter bits 16-17)
  // Quantize the random Hadamard transform of x (its rows in groups of 16, rht_rows), made in
  // the kernel as it reads x: set for the colwise kernels of a table with rht_amax kernels
  // only (the reference's kernels get strips of the transformed matrix instead).
  bool rht;
};

// One 4-bit copy being written: packed data [M, row_bytes]; scale bytes [.., scale_ld].
struct Fp4Out {
  uint8_t* data;
  uint8_t* scales;
  int64_t scale_ld;
  int64_t row_bytes;
};

namespace {

// A block's scale byte and what its elements are multiplied by; fill >= 0: every element of
// the block is that code (a block whose scale is NaN), fill == kFillFloorNan: MXFP4 floor's
// NaN block (each element by its own value, nan_block_code below).
struct Fp4Block {
  uint8_t scale;
  float mult;
  int fill;
};
constexpr int kFillNone = -1, kFillFloorNan = -2;

// max over |x| bits: ordinary floats order like their bits, and NaN bits (> Inf's) win, so the
// maximum is NaN when any element is (torch.amax's rule).
inline uint32_t fp4_abs_bits(float v) { return f32_bits(v) & 0x7FFFFFFFu; }

// NVFP4's block rule from the block amax bits (docs/numerics.md, "NVFP4 block scales").
inline Fp4Block nvfp4_block(uint32_t ab, const Fp4Params& p) {
  const float amax = bits_f32(ab);
  if (p.mode == TensorScaleMode::te) {
    float b = amax * p.te_mult;
    if (b > FLT_MAX) b = FLT_MAX;  // NaN stays NaN
    if (b > 448.f) b = 448.f;
    const uint8_t s = f32_to_e4m3(b);
    if ((s & 0x7F) == 0x7F) return {0x7F, 0.f, 0};
    float enc = 1.f / (e4m3_to_f32(s) * p.te_sdec);
    if (enc > FLT_MAX) enc = FLT_MAX;
    return {s, enc, kFillNone};
  }
  float b = amax / 6.f;
  if (p.mode == TensorScaleMode::torchao) b = b / p.p;
  if (b < 0x1p-6f) b = 0x1p-6f;  // torch.clamp(min=E4M3 tiny, max=448): NaN stays NaN
  if (b > 448.f) b = 448.f;
  const uint8_t s = f32_to_e4m3(b);
  if ((s & 0x7F) == 0x7F) return {0x7F, 0.f, p.nan_fill};
  const float sv = e4m3_to_f32(s);
  return {s, p.mode == TensorScaleMode::torchao ? p.inv_p / sv : 1.f / sv, kFillNone};
}

// MXFP4's block rule (torchao's to_mx; docs/numerics.md, "MXFP4 block scales").
inline Fp4Block mxfp4_block(uint32_t ab, ScaleRounding rounding) {
  const bool floor = rounding == ScaleRounding::floor;
  if (ab > 0x7F800000u) return {kE8M0Nan, 0.f, floor ? kFillFloorNan : 3};
  int byte;
  float mult;
  if (floor) {
    int e = int(ab >> 23) - 127 - 2;  // Inf: exponent field 255 -> 126
    e = e < -127 ? -127 : e;
    byte = e + 127;
    // x / max(2^e, 2^-126): torchao's scale never goes below the smallest normal float.
    mult = byte == 0 ? 0x1p126f : bits_f32(uint32_t(254 - byte) << 23);
  } else if (ab == 0x7F800000u) {
    byte = 254;
    mult = 0x1p-127f;
  } else {
    // e = ceil(log2(amax / 6)), exact: amax = 1.m * 2^k gives k - 2, plus 1 when 1.m > 1.5.
    int e = ab < 0x00800000u ? -127 : int(ab >> 23) - 127 - 2 + ((ab & 0x7FFFFFu) > 0x400000u);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    byte = e + 127;
    mult = byte == 0 ? 1.f : bits_f32(uint32_t(254 - byte) << 23);
  }
  return {uint8_t(byte), mult, kFillNone};
}

inline Fp4Block fp4_block(uint32_t ab, const Fp4Params& p) {
  return p.kind == Fp4Kind::nvfp4 ? nvfp4_block(ab, p) : mxfp4_block(ab, p.rounding);
}

// MXFP4 floor, NaN block: x / Inf in FP32 — ±0 for finite x, x's own NaN (canonical: 3) for
// NaN, the default NaN (negative: 0xB) for ±Inf.
inline uint8_t nan_block_code(float x) {
  const uint32_t u = f32_bits(x), a = u & 0x7FFFFFFFu;
  const uint8_t sign = uint8_t((u >> 28) & 8u);
  if (a == 0x7F800000u) return 0xB;
  if (a > 0x7F800000u) return sign | 3;
  return sign;
}

// The scaled value y of an element, clamped to ±6 (NaN stays; the encoders saturate anyway).
inline float fp4_clamp(float y) {
  return y > 6.f ? 6.f : (y < -6.f ? -6.f : y);
}

// Stochastic E2M1 rounding of y (|y| <= 6 or NaN) with 32 random bits r (docs/numerics.md,
// "Stochastic rounding"): between the grid points lo <= |y| < hi, round up when
// u = (r >> 8) * 2^-24 < (|y| - lo) / (hi - lo), exactly; the sign (of zero too) is kept.
inline uint8_t e2m1_stochastic(float y, uint32_t r) {
  if (y != y) return 0xB;
  const float a = __builtin_fabsf(y);
  const float step = a < 2.f ? 0.5f : (a < 4.f ? 1.f : 2.f);
  const float t = a / step;  // exact: step is a power of two, a is not tiny
  const float n = __builtin_floorf(t);
  const float frac = t - n;  // exact
  const float u = float(r >> 8) * 0x1p-24f;
  const float q = (n + (u < frac ? 1.f : 0.f)) * step;
  return f32_to_e2m1(y < 0.f || (y == 0.f && __builtin_signbit(y)) ? -q : q);
}

// The E2M1 code of a scaled value: NaN (only from Inf * 0 or a NaN multiplier) is the x86
// default NaN's code 0xB, as torchao's cast gives it.
inline uint8_t e2m1_nearest(float y) { return y != y ? 0xB : f32_to_e2m1(y); }

// The 32 random bits of element i (row-major index in the logical matrix).
inline uint32_t sr_bits(const Fp4Params& p, uint64_t i) {
  const uint64_t q = i >> 2;
  const PhiloxCounter c = philox4x32_10(
      {uint32_t(q), uint32_t(q >> 32) | (p.copy << 16), p.tensor, p.step},
      {uint32_t(p.seed), uint32_t(p.seed >> 32)});
  return c[i & 3];
}

}  // namespace

// ---- kernel signatures ---------------------------------------------------------------------
using Fp4QuantF32 = void (*)(const float* x, const Fp4Params& p, Region g, Fp4Out out);
using Fp4QuantBF16 = void (*)(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out);
// max |x| bits over n elements, NaN winning (fp4_abs_bits).
using Fp4AmaxF32 = uint32_t (*)(const float* x, int64_t n);
using Fp4AmaxBF16 = uint32_t (*)(const uint16_t* x, int64_t n);
// The random Hadamard transform of rows [r0, r1) (r0 a multiple of 16) of x [M, K] into out.
using RhtF32 = void (*)(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1, float* out);
// Both tensor amaxes of rows [r0, r1) (r0 a multiple of 16) of x [M, K] from one read, with
// nothing stored (fp4_abs_bits: NaN wins): max |x| bits and max |T x| bits, T the transform.
struct AmaxBits {
  uint32_t plain, rht;
};
using RhtAmaxF32 = AmaxBits (*)(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1);
using RhtAmaxBF16 = AmaxBits (*)(const uint16_t* x, int64_t M, int64_t K, int64_t r0,
                                 int64_t r1);

struct Fp4QuantizeKernels {
  Fp4QuantF32 rowwise_f32, colwise_f32, tile_f32;
  Fp4QuantBF16 rowwise_bf16, colwise_bf16, tile_bf16;
  Fp4AmaxF32 amax_f32;
  Fp4AmaxBF16 amax_bf16;
  RhtF32 rht;
  // Null in the reference: an RHT copy is then the transformed matrix (rht, a strip of rows
  // at a time) quantized; with them, the colwise kernels transform as they read
  // (Fp4Params::rht) and the tensor amax is taken by these, so nothing the size of x is
  // written.
  RhtAmaxF32 rht_amax_f32;
  RhtAmaxBF16 rht_amax_bf16;
};

// ---- scalar reference (quantize_fp4_ref.cc) ------------------------------------------------
void quantize_fp4_rowwise_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_rowwise_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_colwise_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_colwise_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_tile_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_tile_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out);
uint32_t fp4_amax_f32_ref(const float* x, int64_t n);
uint32_t fp4_amax_bf16_ref(const uint16_t* x, int64_t n);
void rht_rows_f32_ref(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1, float* out);
// Dequantize rows [r0, r1) of a 4-bit copy to FP32 (docs/numerics.md, "4-bit formats").
void dequantize_fp4_f32_ref(const ScaledTensor& q, int64_t r0, int64_t r1, float* out);

// ---- AVX-512 (quantize_fp4_avx512.cc) ------------------------------------------------------
void quantize_fp4_rowwise_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_rowwise_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g,
                                      Fp4Out out);
void quantize_fp4_colwise_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_colwise_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g,
                                      Fp4Out out);
void quantize_fp4_tile_f32_avx512(const float* x, const Fp4Params& p, Region g, Fp4Out out);
void quantize_fp4_tile_bf16_avx512(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out);
uint32_t fp4_amax_f32_avx512(const float* x, int64_t n);
uint32_t fp4_amax_bf16_avx512(const uint16_t* x, int64_t n);
void rht_rows_f32_avx512(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1,
                         float* out);
AmaxBits fp4_rht_amax_f32_avx512(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1);
AmaxBits fp4_rht_amax_bf16_avx512(const uint16_t* x, int64_t M, int64_t K, int64_t r0,
                                  int64_t r1);

// What the 4-bit table chooses now (mxtrain info).
PathChoice fp4_quantize_choice();

}  // namespace mxtrain::kern
