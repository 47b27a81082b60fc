// gemm/fp4_gemm.cc — the 4-bit product (gemm/fp4_gemm.h): its dispatch table, the element
// definition and its tables, the scalar decode and reference product, and the oneDNN path.
//
// Dispatch (core/dispatch.h), one entry per path:
//   scalar     — decode_fp4_bf16_ref, then the reference product: FP32 sums in K order;
//   avx2       — decode_fp4_bf16_ref, then oneDNN's BF16 matmul;
//   avx512     — decode_fp4_bf16_avx512, then oneDNN's BF16 matmul;
//   avx512bf16 — the codes read by the panel kernels (fp4_gemm_avx512bf16), and forward
//                products of at most kGemvMaxRows rows streamed (fp4_gemv_nt_avx512bf16); A^T ·
//                B^T (no layer needs it) takes the avx512 entry's kernels;
//   avx512vbmi_bf16 — the same, the streaming forward fp4_gemv_nt_avx512vbmi_bf16;
//   amx_bf16   — the same with the panel sums on AMX tiles (fp4_gemm_amx_bf16); forwards
//                stream up to kAmxStreamRows rows only (kAmxStreamRowsWords: rowwise W).
// The decoded operands live in per-thread buffers reused across calls (a training step's
// repeated shapes fault in no fresh pages).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gemm/fp4_gemm.h"
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain::gemm_detail {

namespace {

// The reference product on decoded operands: C = alpha · Σ_k a_ik b_kj (+ C), each sum in FP32
// in K order (a and b are op(A) [M, K] and op(B) [K, N] as floats).
void product_ref(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N,
                 int64_t K, float alpha, float* C, int64_t ldc, bool accumulate) {
#pragma omp parallel for schedule(static) if (M * N * K >= (1 << 20))
  for (int64_t i = 0; i < M; ++i) {
    std::vector<float> p(size_t(N), 0.f);
    for (int64_t k = 0; k < K; ++k) {
      const float x = a[size_t(i * K + k)];
      const float* brow = b.data() + k * N;
      for (int64_t j = 0; j < N; ++j) p[size_t(j)] += x * brow[j];
    }
    float* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) {
      const float v = alpha == 1.f ? p[size_t(j)] : alpha * p[size_t(j)];
      c[j] = accumulate ? c[j] + v : v;
    }
  }
}

// op(t) as a float matrix [rows, cols] of op, from its BF16 decode d (stored orientation).
void as_op(const std::vector<uint16_t>& d, int64_t rows, int64_t cols, bool trans,
           std::vector<float>& out) {
  out.resize(d.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(trans ? c * rows + r : r * cols + c)] = bf16_to_f32(d[size_t(r * cols + c)]);
}

enum class Product : uint8_t { reference, onednn, panels };

using GemvNt = void (*)(const MXOperand&, const MXOperand&, float, float*, int64_t, bool);
using Panels = void (*)(Orient, const MXOperand&, const MXOperand&, float, float*, int64_t, bool);

struct Fp4ProductKernels {
  DecodeFp4 decode;  // the whole-operand decode (reference and oneDNN products)
  Product product;
  GemvNt gemv = nullptr;    // forwards of few rows (panels only)
  Panels panels = nullptr;  // the panel kernel (panels only)
  int64_t stream_rows = kGemvMaxRows;        // gemv's forwards: up to this many rows
  int64_t stream_rows_words = kGemvMaxRows;  // ... when W is rowwise (decoded the words way)
  // The rows up to which forwards with W in 16x16 tiles (or rowwise) stream now (the override
  // first; 0: no streaming kernel).
  int64_t stream_limit_now(bool tile_weights) const {
    return gemv ? stream_limit(tile_weights ? stream_rows : stream_rows_words) : 0;
  }
};

const PathTable<Fp4ProductKernels>& fp4_table() {
  static const PathTable<Fp4ProductKernels> t(
      "GEMM 4-bit (nvfp4, mxfp4 recipes)",
      {{Path::scalar, "decode_fp4_bf16_ref + reference product (FP32, K order)",
        {decode_fp4_bf16_ref, Product::reference}},
       {Path::avx2, "decode_fp4_bf16_ref + oneDNN BF16 matmul",
        {decode_fp4_bf16_ref, Product::onednn}},
       {Path::avx512, "decode_fp4_bf16_avx512 + oneDNN BF16 matmul",
        {decode_fp4_bf16_avx512, Product::onednn}},
       {Path::avx512bf16,
        "fp4_gemm_avx512bf16 (4-bit codes -> BF16 panels, VDPBF16PS 6x64); forward with "
        "m <= 16: fp4_gemv_nt_avx512bf16",
        {decode_fp4_bf16_avx512, Product::panels, fp4_gemv_nt_avx512bf16, fp4_gemm_avx512bf16}},
       {Path::avx512vbmi_bf16,
        "fp4_gemm_avx512bf16 (4-bit codes -> BF16 panels, VDPBF16PS 6x64); forward with "
        "m <= 16: fp4_gemv_nt_avx512vbmi_bf16 (tile code bytes transposed by VPERMT2B)",
        {decode_fp4_bf16_avx512, Product::panels, fp4_gemv_nt_avx512vbmi_bf16,
         fp4_gemm_avx512bf16}},
       {Path::amx_bf16,
        "fp4_gemm_amx_bf16 (4-bit codes -> BF16 panels, TDPBF16PS on AMX tiles); forward "
        "with m <= 8 (W in tiles; rowwise W: m <= 4): fp4_gemv_nt_avx512vbmi_bf16",
        {decode_fp4_bf16_avx512, Product::panels, fp4_gemv_nt_avx512vbmi_bf16,
         fp4_gemm_amx_bf16, kAmxStreamRows, kAmxStreamRowsWords}}});
  static_assert(kAmxStreamRows == 8 && kAmxStreamRowsWords == 4,
                "the amx_bf16 entry's description names the limits");
  return t;
}

void decode(DecodeFp4 k, const ScaledTensor& t, std::vector<uint16_t>& out) {
  out.resize(size_t(t.rows * t.cols));
  constexpr int64_t kRows = 32;
  const int64_t chunks = ceil_div(t.rows, kRows);
#pragma omp parallel for schedule(static) if (t.rows * t.cols >= (1 << 16))
  for (int64_t i = 0; i < chunks; ++i)
    k(t, i * kRows, std::min(t.rows, (i + 1) * kRows), out.data());
}

float tensor_scale(const ScaledTensor& t) { return t.has_tensor_scale ? t.tensor_scale : 1.f; }

}  // namespace

// v = e2m1(code) · s in FP32 (exact), |v| < 2^-126 -> ±0, NaN scale -> NaN, rounded to BF16
// (exact).
uint16_t fp4_value_bf16(uint8_t code, uint8_t scale, bool nvfp4) {
  const float s = nvfp4 ? e4m3_to_f32(scale) : e8m0_to_f32(scale);
  float v = e2m1_to_f32(code) * s;
  if (std::fabs(v) < 0x1p-126f) v = std::copysign(0.f, v);
  return f32_to_bf16(v);
}

namespace {

struct TablesOf : Fp4Tables {
  explicit TablesOf(bool nvfp4) {
    for (int s = 0; s < 256; ++s) {
      for (int c = 0; c < 16; ++c) bf16[s][c] = fp4_value_bf16(uint8_t(c), uint8_t(s), nvfp4);
      scale[s] = nvfp4 ? e4m3_to_f32(uint8_t(s)) : e8m0_to_f32(uint8_t(s));
    }
  }
};

}  // namespace

const Fp4Tables& fp4_tables(bool nvfp4) {
  static const TablesOf nv(true), mx(false);  // made on first use
  return nvfp4 ? static_cast<const Fp4Tables&>(nv) : mx;
}

void decode_fp4_bf16_ref(const ScaledTensor& t, int64_t r0, int64_t r1, uint16_t* out) {
  const int64_t ld = t.scale_cols(), rb = t.row_bytes(), B = t.block;
  const bool nv = t.is_nvfp4();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < t.cols; ++c) {
      const int64_t sr = t.layout == MXLayout::rowwise ? r : r / B;
      const int64_t sc = t.layout == MXLayout::colwise ? c : c / B;
      out[r * t.cols + c] =
          fp4_value_bf16(nibble_get(t.data.data() + r * rb, c), t.scales[size_t(sr * ld + sc)], nv);
    }
}

PathChoice fp4_product_choice() { return fp4_table().choice(); }

int64_t fp4_stream_rows(bool tile_weights) {
  return fp4_table().get().stream_limit_now(tile_weights);
}

void gemm_fp4(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B, int64_t M,
              int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  MXT_CHECK(A.rht == B.rht, "gemm_mx: one operand holds the random-Hadamard-transformed matrix "
            "and the other does not (A ", A.rht ? "transformed" : "plain", ", B ",
            B.rht ? "transformed" : "plain", "); the transform cancels only between two "
            "transformed wgrad operands");
  const Fp4ProductKernels& k = fp4_table().get();
  const float alpha = tensor_scale(A) * tensor_scale(B);
  if (k.product == Product::panels && !(trans_a && trans_b)) {
    const MXOperand a = MXOperand::of(A), b = MXOperand::of(B);
    if (!trans_a && trans_b && M <= k.stream_limit_now(B.layout == MXLayout::tile))
      return k.gemv(a, b, alpha, C, ldc, accumulate);
    const Orient o = trans_a ? Orient::tn : trans_b ? Orient::nt : Orient::nn;
    return k.panels(o, a, b, alpha, C, ldc, accumulate);
  }
  thread_local std::vector<uint16_t> a16, b16;
  decode(k.decode, A, a16);
  decode(k.decode, B, b16);
  if (k.product == Product::reference) {
    thread_local std::vector<float> a, b;
    as_op(a16, A.rows, A.cols, trans_a, a);
    as_op(b16, B.rows, B.cols, trans_b, b);
    return product_ref(a, b, M, N, K, alpha, C, ldc, accumulate);
  }
  if (alpha == 1.f)
    return gemm_bf16(trans_a, trans_b, M, N, K, a16.data(), A.cols, b16.data(), B.cols, C, ldc,
                     accumulate);
  thread_local std::vector<float> P;
  P.resize(size_t(M * N));
  gemm_bf16(trans_a, trans_b, M, N, K, a16.data(), A.cols, b16.data(), B.cols, P.data(), N,
            false);
  const float* p = P.data();
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float v = alpha * p[i * N + j];
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + v : v;
    }
}

}  // namespace mxtrain::gemm_detail
