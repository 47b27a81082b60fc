// gemm/gemm_mx.cc — the MX product: checks, then the kernel path chosen for this CPU.
//
// gemm_mx (mxtrain/gemm.h) takes two whole quantized matrices whose 32-blocks must run along
// the reduction axis K (see the table in gemm.h), checks them once, and dispatches:
//   avx512bf16 — gemm/mx_gemm_avx512.cc: FP8 panels decoded into cache-resident BF16 blocks
//                with the scales folded in, VDPBF16PS micro-kernel. No full-size copy.
//   onednn     — CPUs without AVX512-BF16 (and --isa avx2): each operand is expanded whole to
//                BF16 with its scales folded in (dequantize_bf16), then oneDNN's BF16 matmul.
//   scalar     — gemm/mx_gemm_ref.cc, the reference (--isa scalar).
// All three form the same element values (docs/numerics.md, "MX products"); they differ in
// FP32 summation order, and the expansion path keeps BF16 subnormals where the others flush
// them to zero (values below 2^-126, which only blocks with scales near 2^-127 hold).
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"
#include "gemm/mx_gemm.h"

namespace mxtrain {
namespace {

bool layout_ok(MXLayout l, bool k_along_cols) {
  // Blocks along K: if K is the stored matrix's column axis the copy must be rowwise (blocks
  // along columns) or tile32; if K is its row axis, colwise or tile32.
  if (l == MXLayout::tile32) return true;
  return k_along_cols ? l == MXLayout::rowwise : l == MXLayout::colwise;
}

const char* wanted(bool k_along_cols) {
  return k_along_cols ? "rowwise or tile32" : "colwise or tile32";
}

void check_tensor(const char* what, const MXTensor& t) {
  MXT_CHECK(t.rows >= 0 && t.cols >= 0, "gemm_mx: ", what, " has a negative shape");
  MXT_CHECK(t.data.size() == size_t(t.rows * t.cols), "gemm_mx: ", what, " holds ",
            t.data.size(), " data bytes, expected rows*cols = ", t.rows * t.cols);
  MXT_CHECK(t.scales.size() == size_t(t.scale_rows() * t.scale_cols()), "gemm_mx: ", what,
            " holds ", t.scales.size(), " scale bytes, expected ",
            t.scale_rows() * t.scale_cols(), " for layout ", layout_name(t.layout));
}

// Expansion path: both operands whole in BF16 (per-thread buffers reused across calls, so a
// training step's repeated shapes do not fault in fresh pages), then oneDNN.
void gemm_mx_expanded(bool trans_a, const MXTensor& A, bool trans_b, const MXTensor& B,
                      int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  thread_local std::vector<uint16_t> a16, b16;
  a16.resize(A.data.size());
  b16.resize(B.data.size());
  dequantize_bf16(A, a16.data());
  dequantize_bf16(B, b16.data());
  gemm_bf16(trans_a, trans_b, M, N, K, a16.data(), A.cols, b16.data(), B.cols, C, ldc,
            accumulate);
}

}  // namespace

GemmPath gemm_path() {
  const Isa isa = active_isa();
  if (isa == Isa::scalar) return GemmPath::scalar;
  if (isa >= Isa::avx512 && cpu_features().avx512_bf16) return GemmPath::avx512bf16;
  return GemmPath::onednn;
}

const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::scalar: return "scalar";
    case GemmPath::onednn: return "onednn";
    case GemmPath::avx512bf16: return "avx512bf16";
  }
  return "?";
}

// C: [M, N] (row stride ldc) = op(A) · op(B); A stored [M,K] or [K,M] (trans_a), B stored
// [K,N] or [N,K] (trans_b).
void gemm_mx(bool trans_a, const MXTensor& A, bool trans_b, const MXTensor& B, float* C,
             int64_t ldc, bool accumulate) {
  check_tensor("A", A);
  check_tensor("B", B);
  const bool a_k_cols = !trans_a, b_k_cols = trans_b;
  MXT_CHECK(layout_ok(A.layout, a_k_cols), "gemm_mx: A is ", layout_name(A.layout),
            " but its 32-blocks must run along K; with trans_a=", trans_a, " A must be ",
            wanted(a_k_cols));
  MXT_CHECK(layout_ok(B.layout, b_k_cols), "gemm_mx: B is ", layout_name(B.layout),
            " but its 32-blocks must run along K; with trans_b=", trans_b, " B must be ",
            wanted(b_k_cols));
  const int64_t M = trans_a ? A.cols : A.rows, K = trans_a ? A.rows : A.cols;
  const int64_t Kb = trans_b ? B.cols : B.rows, N = trans_b ? B.rows : B.cols;
  MXT_CHECK(K == Kb, "gemm_mx: inner dimensions differ: op(A) is [", M, ",", K, "], op(B) is [",
            Kb, ",", N, "]");
  MXT_CHECK(ldc >= N, "gemm_mx: ldc=", ldc, " is smaller than N=", N);
  if (M == 0 || N == 0) return;
  MXT_CHECK(C != nullptr, "gemm_mx: C is null");
  if (K == 0) {  // empty sum
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  using namespace gemm_detail;
  const GemmPath path = gemm_path();
  if (trans_a && trans_b) {  // A^T · B^T: no layer needs it; the expansion path serves it
    gemm_mx_expanded(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
    return;
  }
  const Orient o = trans_a ? Orient::tn : trans_b ? Orient::nt : Orient::nn;
  switch (path) {
    case GemmPath::scalar:
      mx_gemm_ref(o, MXOperand::of(A), MXOperand::of(B), C, ldc, accumulate);
      return;
    case GemmPath::avx512bf16:
      mx_gemm_avx512bf16(o, MXOperand::of(A), MXOperand::of(B), C, ldc, accumulate);
      return;
    case GemmPath::onednn:
      gemm_mx_expanded(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
      return;
  }
}

}  // namespace mxtrain
