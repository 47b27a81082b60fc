// core/quantize_fp4_ref.cc — scalar reference kernels of 4-bit quantization (NVFP4, MXFP4)
// and of the random Hadamard transform (docs/numerics.md, "4-bit formats").
//
// Written for clarity, not speed: every fast kernel must produce the same bytes as these.
// A region is quantized in two passes: first every block's amax (max |x| bits, NaN winning)
// and its scale by the block rule of quantize_fp4_kernels.h, then the elements in row-major
// order, two codes per byte, each fp4_clamp(x * multiplier) rounded to nearest even (or
// stochastically with the element's Philox bits).
#include <algorithm>
#include <vector>

#include "core/quantize_fp4_kernels.h"
#include "mxtrain/common.h"

namespace mxtrain::kern {

namespace {

inline float load(const float* x, int64_t i) { return x[i]; }
inline float load(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }

// The block of element (r, c) in a copy's scale grid, for each layout.
struct Grid {
  MXLayout layout;
  int64_t B;
  int64_t row(int64_t r) const { return layout == MXLayout::rowwise ? r : r / B; }
  int64_t col(int64_t c) const { return layout == MXLayout::colwise ? c : c / B; }
};

template <class T>
void quantize(const T* x, const Fp4Params& p, Region g, Fp4Out out, MXLayout layout) {
  const Grid grid{layout, p.B};
  // Pass 1: the blocks the region holds, with their rules.
  const int64_t br0 = grid.row(g.r0), br1 = grid.row(g.r1 - 1) + 1;
  const int64_t bc0 = grid.col(g.c0), bc1 = grid.col(g.c1 - 1) + 1;
  const int64_t nbc = bc1 - bc0;
  std::vector<Fp4Block> blocks(size_t((br1 - br0) * nbc));
  std::vector<uint32_t> amax(blocks.size(), 0);
  for (int64_t r = g.r0; r < g.r1; ++r)
    for (int64_t c = g.c0; c < g.c1; ++c) {
      uint32_t& a = amax[size_t((grid.row(r) - br0) * nbc + grid.col(c) - bc0)];
      a = std::max(a, fp4_abs_bits(load(x, r * p.K + c)));
    }
  for (int64_t i = br0; i < br1; ++i)
    for (int64_t j = bc0; j < bc1; ++j) {
      const size_t k = size_t((i - br0) * nbc + j - bc0);
      blocks[k] = fp4_block(amax[k], p);
      out.scales[i * out.scale_ld + j] = blocks[k].scale;
    }
  // Pass 2: the codes.
  auto code = [&](int64_t r, int64_t c) -> uint8_t {
    const Fp4Block& b = blocks[size_t((grid.row(r) - br0) * nbc + grid.col(c) - bc0)];
    const float v = load(x, r * p.K + c);
    if (b.fill >= 0) return uint8_t(b.fill);
    if (b.fill == kFillFloorNan) return nan_block_code(v);
    const float y = fp4_clamp(v * b.mult);
    return p.stochastic ? e2m1_stochastic(y, sr_bits(p, uint64_t(r * p.K + c)))
                        : e2m1_nearest(y);
  };
  for (int64_t r = g.r0; r < g.r1; ++r) {
    uint8_t* row = out.data + r * out.row_bytes;
    for (int64_t c = g.c0; c < g.c1; c += 2) {
      const uint8_t lo = code(r, c), hi = c + 1 < g.c1 ? code(r, c + 1) : 0;
      row[c / 2] = uint8_t(lo | hi << 4);
    }
  }
}

template <class T>
uint32_t amax(const T* x, int64_t n) {
  uint32_t ab = 0;
  for (int64_t i = 0; i < n; ++i) ab = std::max(ab, fp4_abs_bits(load(x, i)));
  return ab;
}

}  // namespace

void quantize_fp4_rowwise_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  quantize(x, p, g, out, MXLayout::rowwise);
}
void quantize_fp4_rowwise_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g,
                                   Fp4Out out) {
  quantize(x, p, g, out, MXLayout::rowwise);
}
void quantize_fp4_colwise_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  quantize(x, p, g, out, MXLayout::colwise);
}
void quantize_fp4_colwise_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g,
                                   Fp4Out out) {
  quantize(x, p, g, out, MXLayout::colwise);
}
void quantize_fp4_tile_f32_ref(const float* x, const Fp4Params& p, Region g, Fp4Out out) {
  quantize(x, p, g, out, MXLayout::tile);
}
void quantize_fp4_tile_bf16_ref(const uint16_t* x, const Fp4Params& p, Region g, Fp4Out out) {
  quantize(x, p, g, out, MXLayout::tile);
}
uint32_t fp4_amax_f32_ref(const float* x, int64_t n) { return amax(x, n); }
uint32_t fp4_amax_bf16_ref(const uint16_t* x, int64_t n) { return amax(x, n); }

// Per column of each full group of 16 rows: v = signs * x, the Walsh-Hadamard butterflies
// (a, b) -> (a + b, a - b) at distances 1, 2, 4, 8 (giving H16 · v in Sylvester order), then
// * 1/4; every step rounded in FP32 in this order. A partial last group is copied.
void rht_rows_f32_ref(const float* x, int64_t M, int64_t K, int64_t r0, int64_t r1,
                      float* out) {
  const float* s = rht_signs();
  const int64_t full = M / kRhtSize * kRhtSize;
  for (int64_t g = r0; g < r1; g += kRhtSize) {
    if (g >= full) {
      for (int64_t r = g; r < std::min(r1, M); ++r)
        for (int64_t c = 0; c < K; ++c) out[r * K + c] = x[r * K + c];
      continue;
    }
    for (int64_t c = 0; c < K; ++c) {
      float v[kRhtSize];
      for (int i = 0; i < kRhtSize; ++i) v[i] = x[(g + i) * K + c] * s[i];
      for (int h = 1; h < kRhtSize; h *= 2)
        for (int i = 0; i < kRhtSize; ++i)
          if ((i & h) == 0) {
            const float a = v[i], b = v[i + h];
            v[i] = a + b;
            v[i + h] = a - b;
          }
      for (int i = 0; i < kRhtSize; ++i) out[(g + i) * K + c] = v[i] * 0.25f;
    }
  }
}

// NVFP4: e2m1(code) * fl(tensor_scale * e4m3(s)) (the block scale alone without a tensor
// scale); MXFP4: e2m1(code) * 2^(s - 127). NaN scale: the canonical quiet NaN.
void dequantize_fp4_f32_ref(const ScaledTensor& q, int64_t r0, int64_t r1, float* out) {
  const Grid grid{q.layout, q.block};
  const int64_t ld = q.scale_cols(), rb = q.row_bytes();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const uint8_t s = q.scales[size_t(grid.row(r) * ld + grid.col(c))];
      const float v = e2m1_to_f32(nibble_get(q.data.data() + r * rb, c));
      float f;
      if (q.is_nvfp4()) {
        const float bs = e4m3_to_f32(s);
        f = v * (q.has_tensor_scale ? q.tensor_scale * bs : bs);
      } else {
        f = v * e8m0_to_f32(s);
      }
      out[r * q.cols + c] = f != f ? bits_f32(0x7FC00000u) : f;
    }
}

}  // namespace mxtrain::kern
