// gemm/gemm_scaled.cc — products of FP32-scaled copies (blockwise 1x128 / 128x1 / 128x128,
// and one FP32 scale per tensor), called by gemm_mx (gemm_mx.cc) once both operands are
// FP32-scaled (docs/numerics.md, "FP32-scaled products"):
//   fp32_pow2 scales — every scale_inv is 2^e, folded exactly into the BF16 element, so the
//                      product is the MX product of the same codes with E8M0 scale 127 + e per
//                      32-block: the FP32 grid is expanded into an E8M0 grid beside the
//                      copy's own codes (a view, no copy of the codes) and the MX
//                      dispatch table runs it (every MX path serves it);
//   fp32 scales      — per 128-deep K chunk (the whole K when both operands have one scale per
//                      tensor), the FP32 partial sum P of the unscaled code values,
//                      then C += (sa · sb) · P: fp32_block_gemm_ref (scalar) or the fast path
//                      (codes decoded unscaled to BF16, oneDNN's BF16 product per chunk, then
//                      the scaled add). oneDNN rather than the MX panel kernels because a
//                      chunk's product is a plain BF16 matmul with strided operands.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemm/mx_gemm.h"
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {
namespace gemm_detail {
namespace {

// FP32 scale_inv of stored element (r, c) of an FP32-scaled copy t.
float scale_of(const ScaledTensor& t, int64_t r, int64_t c) {
  const float* s = reinterpret_cast<const float*>(t.scales.data());
  if (t.is_fp32_tensor()) return s[0];
  const int64_t sr = t.layout == MXLayout::rowwise ? r : r / t.block;
  const int64_t sc = t.layout == MXLayout::colwise ? c : c / t.block;
  return s[sr * t.scale_cols() + sc];
}

// The E8M0 byte of a power-of-two scale_inv 2^e with -127 <= e <= 127, else -1: for
// -126 <= e <= 127 the FP32 bits are a bare exponent field (sign and mantissa zero), which is
// the byte; 2^-127 is the subnormal 0x00400000 (byte 0). The quantizer makes scale =
// max_elem / amax clamped to FLT_MAX (>= max_elem / FLT_MAX > 2^-127 for any FP8 max_elem >=
// 1) and scale_inv = 1 / scale, so e stays in range; an operand built some other way that
// breaks it takes the FP32 path.
inline int e8m0_of_pow2(float s) {
  const uint32_t u = __builtin_bit_cast(uint32_t, s);
  if (u == 0x00400000u) return 0;
  const uint32_t field = u >> 23;
  return (u & 0x807FFFFFu) == 0 && field >= 1 && field <= 254 ? int(field) : -1;
}

// t (an FP32-scaled pow2 copy) as an MX operand: its own codes, read where they are, and an
// E8M0 grid per 32 written into `grid` (a 1x128 block's byte repeated over its four 1x32
// blocks, a 128x1 block's over its four 32x1, a 128x128 tile's over its sixteen 32x32 tiles).
// False, with nothing usable in `out`, if a scale is not a foldable power of two.
bool pow2_view(const ScaledTensor& t, ByteBuffer& grid, MXOperand& out) {
  if (t.scale_type != ScaleType::fp32_pow2) return false;  // per-tensor copies are fp32
  const float* s = reinterpret_cast<const float*>(t.scales.data());
  const int64_t fc = t.scale_cols();  // the FP32 grid's row stride
  // The E8M0 grid of the MX copy with this shape and layout: rows [R] or [ceil(R/32)],
  // columns [ceil(C/32)] or [C].
  const int64_t gr = t.layout == MXLayout::rowwise ? t.rows : ceil_div(t.rows, kMXBlock);
  const int64_t gc = t.layout == MXLayout::colwise ? t.cols : ceil_div(t.cols, kMXBlock);
  const int64_t rdiv = t.layout == MXLayout::rowwise ? 1 : kFp32ScaleBlock / kMXBlock;
  const int64_t cdiv = t.layout == MXLayout::colwise ? 1 : kFp32ScaleBlock / kMXBlock;
  grid.resize(size_t(gr * gc));
  uint8_t* g = grid.data();
  int bad = 0;
  for (int64_t i = 0; i < gr; ++i) {
    const float* srow = s + (i / rdiv) * fc;
    uint8_t* grow = g + i * gc;
    if (i % rdiv != 0) {  // the same FP32 row as the grid row above: already checked
      std::memcpy(grow, grow - gc, size_t(gc));
      continue;
    }
    for (int64_t j = 0; j < gc; ++j) {
      const int b = e8m0_of_pow2(srow[j / cdiv]);
      bad |= b < 0;
      grow[j] = uint8_t(b);
    }
  }
  if (bad) return false;
  out = MXOperand{t.data.data(), g, t.rows, t.cols, gc, t.layout, t.elem, kMXBlock, false};
  return true;
}

// Unscaled BF16 values of the codes (exact: FP8 values are BF16 values; NaN codes NaN).
void decode_unscaled(const ScaledTensor& t, std::vector<uint16_t>& out) {
  uint16_t lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = f32_to_bf16(fp8_to_f32(uint8_t(i), t.elem));
  out.resize(t.data.size());
  const uint8_t* c = t.data.data();
  const int64_t n = int64_t(t.data.size());
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = lut[c[i]];
}

struct Dims {
  int64_t M, N, K;
};

// The depth of the K chunks whose partial sums are scaled: the whole K when both operands have
// one scale for the tensor, else 128 (a per-tensor operand's scale is then the same for every
// chunk).
int64_t chunk_depth(const ScaledTensor& A, const ScaledTensor& B, int64_t K) {
  return A.is_fp32_tensor() && B.is_fp32_tensor() ? std::max<int64_t>(K, 1) : kFp32ScaleBlock;
}

// Scale of op(A) row i (A stored [M,K] or [K,M]) at K index k, and of op(B) column j.
float sa_at(bool ta, const ScaledTensor& A, int64_t i, int64_t k) {
  return ta ? scale_of(A, k, i) : scale_of(A, i, k);
}
float sb_at(bool tb, const ScaledTensor& B, int64_t k, int64_t j) {
  return tb ? scale_of(B, j, k) : scale_of(B, k, j);
}

// t's codes as an MX operand whose every E8M0 scale is 127 (factor 1): the panels then hold
// the unscaled code values. The grid has the MX shape of t's layout (a per-tensor copy is a
// tile).
MXOperand unit_view(const ScaledTensor& t, ByteBuffer& grid) {
  const int64_t gr = t.layout == MXLayout::rowwise ? t.rows : ceil_div(t.rows, kMXBlock);
  const int64_t gc = t.layout == MXLayout::colwise ? t.cols : ceil_div(t.cols, kMXBlock);
  grid.resize(size_t(gr * gc));
  std::memset(grid.data(), 127, grid.size());
  return MXOperand{t.data.data(), grid.data(), t.rows, t.cols, gc, t.layout, t.elem, kMXBlock,
                   false};
}

// The per-chunk scale tables of ChunkScales (gemm/mx_gemm.h): sa [chunks][M], sb [chunks][N].
void chunk_scales(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, Dims d,
                  FloatBuffer& sa, FloatBuffer& sb) {
  const int64_t chunks = ceil_div(d.K, kFp32ScaleBlock);
  sa.resize(size_t(chunks * d.M));
  sb.resize(size_t(chunks * d.N));
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t i = 0; i < d.M; ++i) sa[size_t(c * d.M + i)] = sa_at(ta, A, i, c * kFp32ScaleBlock);
    for (int64_t j = 0; j < d.N; ++j) sb[size_t(c * d.N + j)] = sb_at(tb, B, c * kFp32ScaleBlock, j);
  }
}

using PanelKernel = void (*)(Orient, const MXOperand&, const MXOperand&, const ChunkScales&,
                             float*, int64_t, bool);

// The panel kernel's product, or the oneDNN path for what it does not serve: A^T · B^T (no
// layer needs it) and two per-tensor operands (one chunk over the whole K).
void panels(PanelKernel kernel, bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B,
            Dims d, float* C, int64_t ldc, bool accumulate) {
  if ((ta && tb) || (A.is_fp32_tensor() && B.is_fp32_tensor()))
    return fp32_block_gemm_onednn(ta, A, tb, B, d.M, d.N, d.K, C, ldc, accumulate);
  thread_local ByteBuffer ga, gb;   // reused: no fresh pages per call
  thread_local FloatBuffer sa, sb;
  const MXOperand va = unit_view(A, ga), vb = unit_view(B, gb);
  chunk_scales(ta, A, tb, B, d, sa, sb);
  const Orient o = ta ? Orient::tn : tb ? Orient::nt : Orient::nn;
  kernel(o, va, vb, ChunkScales{sa.data(), sb.data()}, C, ldc, accumulate);
}

}  // namespace

void fp32_block_gemm_ref(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, float* C,
                         int64_t ldc, bool accumulate) {
  const int64_t M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols;
  const int64_t N = tb ? B.rows : B.cols;
  auto code_a = [&](int64_t i, int64_t k) {
    return fp8_to_f32(ta ? A.data[size_t(k * A.cols + i)] : A.data[size_t(i * A.cols + k)],
                      A.elem);
  };
  auto code_b = [&](int64_t k, int64_t j) {
    return fp8_to_f32(tb ? B.data[size_t(j * B.cols + k)] : B.data[size_t(k * B.cols + j)],
                      B.elem);
  };
  const int64_t depth = chunk_depth(A, B, K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float c = accumulate ? C[i * ldc + j] : 0.f;
      for (int64_t k0 = 0; k0 < K; k0 += depth) {
        const int64_t k1 = std::min(K, k0 + depth);
        float p = 0.f;
        for (int64_t k = k0; k < k1; ++k) p += code_a(i, k) * code_b(k, j);
        c += (sa_at(ta, A, i, k0) * sb_at(tb, B, k0, j)) * p;
      }
      C[i * ldc + j] = c;
    }
}

void fp32_block_gemm_ref_entry(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B,
                               int64_t, int64_t, int64_t, float* C, int64_t ldc, bool accumulate) {
  fp32_block_gemm_ref(ta, A, tb, B, C, ldc, accumulate);
}

void fp32_block_gemm_onednn(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B,
                            int64_t M, int64_t N, int64_t K, float* C, int64_t ldc,
                            bool accumulate) {
  const Dims d{M, N, K};
  thread_local std::vector<uint16_t> a16, b16;
  thread_local std::vector<float> P;
  decode_unscaled(A, a16);
  decode_unscaled(B, b16);
  P.resize(size_t(d.M * d.N));
  if (!accumulate)
    for (int64_t i = 0; i < d.M; ++i)
      for (int64_t j = 0; j < d.N; ++j) C[i * ldc + j] = 0.f;
  const int64_t depth = chunk_depth(A, B, d.K);
  for (int64_t k0 = 0; k0 < d.K; k0 += depth) {
    const int64_t kc = std::min(depth, d.K - k0);
    const uint16_t* ap = ta ? a16.data() + k0 * A.cols : a16.data() + k0;
    const uint16_t* bp = tb ? b16.data() + k0 : b16.data() + k0 * B.cols;
    gemm_bf16(ta, tb, d.M, d.N, kc, ap, A.cols, bp, B.cols, P.data(), d.N, false);
    const float* p = P.data();
#pragma omp parallel for schedule(static) if (d.M * d.N >= (1 << 16))
    for (int64_t i = 0; i < d.M; ++i) {
      const float sa = sa_at(ta, A, i, k0);
      for (int64_t j = 0; j < d.N; ++j)
        C[i * ldc + j] += (sa * sb_at(tb, B, k0, j)) * p[i * d.N + j];
    }
  }
}

void fp32_block_gemm_panels_avx512bf16(bool ta, const ScaledTensor& A, bool tb,
                                       const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                       float* C, int64_t ldc, bool accumulate) {
  panels(fp32_block_gemm_avx512bf16, ta, A, tb, B, Dims{M, N, K}, C, ldc, accumulate);
}

void fp32_block_gemm_panels_avx512vbmi_bf16(bool ta, const ScaledTensor& A, bool tb,
                                            const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                            float* C, int64_t ldc, bool accumulate) {
  panels(fp32_block_gemm_avx512vbmi_bf16, ta, A, tb, B, Dims{M, N, K}, C, ldc, accumulate);
}

void fp32_block_gemm_panels_amx_bf16(bool ta, const ScaledTensor& A, bool tb,
                                     const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                     float* C, int64_t ldc, bool accumulate) {
  panels(fp32_block_gemm_amx_bf16, ta, A, tb, B, Dims{M, N, K}, C, ldc, accumulate);
}

// Both operands FP32-scaled, checked by gemm_mx; K > 0, M, N > 0.
void gemm_fp32_scaled(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, int64_t M,
                      int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  thread_local ByteBuffer ga, gb;  // the E8M0 grids, reused: no fresh pages per call
  MXOperand va, vb;
  if (pow2_view(A, ga, va) && pow2_view(B, gb, vb))
    return gemm_mx_run(ta, va, tb, vb, M, N, K, C, ldc, accumulate);
  gemm_fp32_run(ta, A, tb, B, M, N, K, C, ldc, accumulate);
}

}  // namespace gemm_detail
}  // namespace mxtrain
