// core/quantize_block_ref.cc — scalar reference kernels of FP32-scaled block quantization
// (docs/numerics.md, "Blockwise FP32 scaling").
//
// Written for clarity, not speed: every fast kernel must produce the same bytes as these.
// For each block: amax = max |x| over the block with NaN ignored, the scale from block_scale
// (quantize_block_kernels.h), every element the saturating cast sat_code(fl32(x * scale)),
// and scale_inv = fl32(1 / scale) stored. The dual-axis reference runs rowwise then colwise.
// One scale for the whole tensor (per-tensor) uses the same amax and element rules.
#include <algorithm>

#include "core/quantize_block_kernels.h"

namespace mxtrain::kern {

namespace {

constexpr int64_t B = kFp32Block;

inline float load(const float* x, int64_t i) { return x[i]; }
inline float load(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
inline float max_elem(Elem e) { return elem_info(e).max_value; }

// Quantizes the nr x nc block at x (row stride K) with one scale into d (row stride K);
// returns scale_inv.
template <class T>
float block(const T* x, int64_t nr, int64_t nc, const BParams& p, uint8_t* d) {
  uint32_t ab = 0;
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) ab = std::max(ab, amax_bits(load(x, i * p.K + j)));
  const float s = block_scale(bits_f32(ab), max_elem(p.elem), p.amax_epsilon, p.pow2);
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) d[i * p.K + j] = sat_code(load(x, i * p.K + j) * s, p.elem);
  return 1.f / s;
}

template <class T>
void rowwise(const T* x, const BParams& p, Region g, BOut out) {
  for (int64_t r = g.r0; r < g.r1; ++r)
    for (int64_t c = g.c0; c < g.c1; c += B)
      out.scale_inv[r * out.ld + c / B] =
          block(x + r * p.K + c, 1, std::min(B, p.K - c), p, out.data + r * p.K + c);
}

template <class T>
void colwise(const T* x, const BParams& p, Region g, BOut out) {
  for (int64_t rb = g.r0; rb < g.r1; rb += B)
    for (int64_t c = g.c0; c < g.c1; ++c)
      out.scale_inv[(rb / B) * out.ld + c] =
          block(x + rb * p.K + c, std::min(B, p.M - rb), 1, p, out.data + rb * p.K + c);
}

template <class T>
void tile(const T* x, const BParams& p, Region g, BOut out) {
  for (int64_t rb = g.r0; rb < g.r1; rb += B)
    for (int64_t cb = g.c0; cb < g.c1; cb += B)
      out.scale_inv[(rb / B) * out.ld + cb / B] =
          block(x + rb * p.K + cb, std::min(B, p.M - rb), std::min(B, p.K - cb), p,
                out.data + rb * p.K + cb);
}

// The scale_inv that applies to element (r, c).
inline float scale_inv_at(const float* s, int64_t ld, MXLayout layout, int64_t r, int64_t c) {
  switch (layout) {
    case MXLayout::rowwise: return s[r * ld + c / B];
    case MXLayout::colwise: return s[(r / B) * ld + c];
    case MXLayout::tile: break;
  }
  return s[(r / B) * ld + c / B];
}

}  // namespace

void quantize_b128_rowwise_f32_ref(const float* x, const BParams& p, Region g, BOut out) {
  rowwise(x, p, g, out);
}
void quantize_b128_rowwise_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out) {
  rowwise(x, p, g, out);
}
void quantize_b128_colwise_f32_ref(const float* x, const BParams& p, Region g, BOut out) {
  colwise(x, p, g, out);
}
void quantize_b128_colwise_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out) {
  colwise(x, p, g, out);
}
void quantize_b128_tile_f32_ref(const float* x, const BParams& p, Region g, BOut out) {
  tile(x, p, g, out);
}
void quantize_b128_tile_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut out) {
  tile(x, p, g, out);
}
void quantize_b128_dual_f32_ref(const float* x, const BParams& p, Region g, BOut row, BOut col) {
  rowwise(x, p, g, row);
  colwise(x, p, g, col);
}
void quantize_b128_dual_bf16_ref(const uint16_t* x, const BParams& p, Region g, BOut row,
                                 BOut col) {
  rowwise(x, p, g, row);
  colwise(x, p, g, col);
}

// ---- one scale for the whole tensor ----

namespace {

template <class T>
uint32_t tensor_amax(const T* x, int64_t n) {
  uint32_t ab = 0;
  for (int64_t i = 0; i < n; ++i) ab = std::max(ab, amax_bits(load(x, i)));
  return ab;
}

template <class T>
void tensor_cast(const T* x, int64_t n, Elem e, float s, uint8_t* d) {
  for (int64_t i = 0; i < n; ++i) d[i] = sat_code(load(x, i) * s, e);
}

}  // namespace

uint32_t tensor_amax_f32_ref(const float* x, int64_t n) { return tensor_amax(x, n); }
uint32_t tensor_amax_bf16_ref(const uint16_t* x, int64_t n) { return tensor_amax(x, n); }
void tensor_cast_f32_ref(const float* x, int64_t n, Elem e, float s, uint8_t* d) {
  tensor_cast(x, n, e, s, d);
}
void tensor_cast_bf16_ref(const uint16_t* x, int64_t n, Elem e, float s, uint8_t* d) {
  tensor_cast(x, n, e, s, d);
}

void dequantize_tensor_f32_ref(const uint8_t* data, int64_t n, Elem e, float scale_inv,
                               float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = fp8_to_f32(data[i], e) * scale_inv;
    out[i] = v != v ? bits_f32(0x7FC00000u) : v;
  }
}

// value = fp8(code) * scale_inv in FP32; a NaN result is the canonical quiet NaN 0x7FC00000.
void dequantize_b128_f32_ref(const uint8_t* data, const float* scale_inv, int64_t ld,
                             MXLayout layout, const BParams& p, int64_t r0, int64_t r1,
                             float* out) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < p.K; ++c) {
      const float v =
          fp8_to_f32(data[r * p.K + c], p.elem) * scale_inv_at(scale_inv, ld, layout, r, c);
      out[r * p.K + c] = v != v ? bits_f32(0x7FC00000u) : v;
    }
}

}  // namespace mxtrain::kern
