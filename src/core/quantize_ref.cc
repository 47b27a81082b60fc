// core/quantize_ref.cc — scalar reference kernels for MX quantize/dequantize
// (docs/numerics.md, "MX block scaling").
//
// Written for clarity, not speed: every fast kernel must produce the same bytes as these.
// Each element is encoded with the exact scalar converters of formats.h after an exact
// multiply by 2^-e (a normal power of two; see scale_exponent in quantize_kernels.h).
// Block rules: amax == 0 -> scale 0x00 and 0x00 data; NaN/Inf anywhere -> scale 0xFF and
// every element the canonical NaN code; otherwise fp8(x * 2^-e).
// The reference dual-axis kernel simply runs rowwise then colwise; reading X once is a
// property of the fast kernels only.
#include <algorithm>

#include "core/quantize_kernels.h"

namespace mxtrain::kern {

namespace {

inline float load(const float* x, int64_t i) { return x[i]; }
inline float load(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
inline uint32_t abs_bits(float v) { return f32_bits(v) & 0x7FFFFFFFu; }

// Encodes n elements x[i*stride], i < n, into d[i*dstride] with the block's scale byte.
template <class T>
void encode_block(const T* x, int64_t stride, int64_t n, uint32_t ab, uint8_t byte, Elem elem,
                  uint8_t* d, int64_t dstride) {
  if (byte == kE8M0Nan) {
    for (int64_t i = 0; i < n; ++i) d[i * dstride] = nan_code(elem);
  } else if (ab == 0) {
    for (int64_t i = 0; i < n; ++i) d[i * dstride] = 0;
  } else {
    const float inv = inv_scale(byte);
    for (int64_t i = 0; i < n; ++i) d[i * dstride] = f32_to_fp8(load(x, i * stride) * inv, elem);
  }
}

template <class T>
void rowwise(const T* x, const QParams& p, Region g, QOut out) {
  for (int64_t r = g.r0; r < g.r1; ++r) {
    for (int64_t c = g.c0; c < g.c1; c += kMXBlock) {
      const int64_t n = std::min(kMXBlock, p.K - c);
      const T* xb = x + r * p.K + c;
      uint32_t ab = 0;
      for (int64_t i = 0; i < n; ++i) ab = std::max(ab, abs_bits(load(xb, i)));
      const uint8_t byte = scale_byte(ab, p.elem, p.rounding);
      out.scales[r * out.scale_ld + c / kMXBlock] = byte;
      encode_block(xb, 1, n, ab, byte, p.elem, out.data + r * p.K + c, 1);
    }
  }
}

template <class T>
void colwise(const T* x, const QParams& p, Region g, QOut out) {
  for (int64_t rb = g.r0; rb < g.r1; rb += kMXBlock) {
    const int64_t n = std::min(kMXBlock, p.M - rb);
    for (int64_t c = g.c0; c < g.c1; ++c) {
      const T* xb = x + rb * p.K + c;
      uint32_t ab = 0;
      for (int64_t i = 0; i < n; ++i) ab = std::max(ab, abs_bits(load(xb, i * p.K)));
      const uint8_t byte = scale_byte(ab, p.elem, p.rounding);
      out.scales[(rb / kMXBlock) * out.scale_ld + c] = byte;
      encode_block(xb, p.K, n, ab, byte, p.elem, out.data + rb * p.K + c, p.K);
    }
  }
}

template <class T>
void tile32(const T* x, const QParams& p, Region g, QOut out) {
  for (int64_t rb = g.r0; rb < g.r1; rb += kMXBlock) {
    const int64_t nr = std::min(kMXBlock, p.M - rb);
    for (int64_t cb = g.c0; cb < g.c1; cb += kMXBlock) {
      const int64_t nc = std::min(kMXBlock, p.K - cb);
      uint32_t ab = 0;
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t j = 0; j < nc; ++j)
          ab = std::max(ab, abs_bits(load(x, (rb + i) * p.K + cb + j)));
      const uint8_t byte = scale_byte(ab, p.elem, p.rounding);
      out.scales[(rb / kMXBlock) * out.scale_ld + cb / kMXBlock] = byte;
      for (int64_t i = 0; i < nr; ++i)
        encode_block(x + (rb + i) * p.K + cb, 1, nc, ab, byte, p.elem,
                     out.data + (rb + i) * p.K + cb, 1);
    }
  }
}

// Scale byte that applies to element (r, c) of a copy with the given layout.
inline uint8_t scale_for(const uint8_t* scales, int64_t ld, MXLayout layout, int64_t r,
                         int64_t c) {
  switch (layout) {
    case MXLayout::rowwise: return scales[r * ld + c / kMXBlock];
    case MXLayout::colwise: return scales[(r / kMXBlock) * ld + c];
    case MXLayout::tile: break;
  }
  return scales[(r / kMXBlock) * ld + c / kMXBlock];
}

}  // namespace

void quantize_mx_rowwise_f32_ref(const float* x, const QParams& p, Region g, QOut out) {
  rowwise(x, p, g, out);
}
void quantize_mx_rowwise_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out) {
  rowwise(x, p, g, out);
}
void quantize_mx_colwise_f32_ref(const float* x, const QParams& p, Region g, QOut out) {
  colwise(x, p, g, out);
}
void quantize_mx_colwise_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out) {
  colwise(x, p, g, out);
}
void quantize_mx_tile32_f32_ref(const float* x, const QParams& p, Region g, QOut out) {
  tile32(x, p, g, out);
}
void quantize_mx_tile32_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut out) {
  tile32(x, p, g, out);
}
void quantize_mx_dual_f32_ref(const float* x, const QParams& p, Region g, QOut row, QOut col) {
  rowwise(x, p, g, row);
  colwise(x, p, g, col);
}
void quantize_mx_dual_bf16_ref(const uint16_t* x, const QParams& p, Region g, QOut row,
                                QOut col) {
  rowwise(x, p, g, row);
  colwise(x, p, g, col);
}

namespace {

// value = fp8(code) * 2^(scale-127), one FP32 multiply (exact unless the product leaves the
// normal FP32 range). A 0xFF scale or a NaN code gives the canonical quiet NaN 0x7FC00000
// (which operand's NaN a multiply passes on is not something to depend on).
inline float dequant_value(uint8_t code, uint8_t scale, Elem elem) {
  const float v = fp8_to_f32(code, elem) * e8m0_to_f32(scale);
  return v != v ? bits_f32(0x7FC00000u) : v;
}

}  // namespace

void dequantize_mx_f32_ref(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                            MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                            float* out) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < p.K; ++c)
      out[r * p.K + c] =
          dequant_value(data[r * p.K + c], scale_for(scales, scale_ld, layout, r, c), p.elem);
}

// BF16 output: the FP32 value above rounded to nearest even. E4M3/E5M2 significands fit in
// BF16's 8 bits, so this is exact while the product is a normal BF16 number.
void dequantize_mx_bf16_ref(const uint8_t* data, const uint8_t* scales, int64_t scale_ld,
                             MXLayout layout, const QParams& p, int64_t r0, int64_t r1,
                             uint16_t* out) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < p.K; ++c)
      out[r * p.K + c] = f32_to_bf16(
          dequant_value(data[r * p.K + c], scale_for(scales, scale_ld, layout, r, c), p.elem));
}

void convert_f32_to_bf16_ref(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void convert_bf16_to_f32_ref(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i]);
}

bool has_nonfinite_f32_ref(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (abs_bits(x[i]) >= 0x7F800000u) return true;
  return false;
}

}  // namespace mxtrain::kern
