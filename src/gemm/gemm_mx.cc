// gemm/gemm_mx.cc — MX-scaled GEMM: orientation checks, then expand-to-BF16 and oneDNN.
//
// gemm_mx (mxtrain/gemm.h) takes two whole quantized matrices whose 32-blocks must run along
// the reduction axis K (see the table in gemm.h). This first implementation is the seam for a
// future fused kernel: each operand is expanded to BF16 with its power-of-two block scale
// folded in (dequantize_bf16, OpenMP-parallel in core) and the product runs through
// gemm_bf16, accumulating in FP32. Callers never see the expansion, so a kernel that works
// on the FP8 codes directly can replace this file without changing them.
//
// Range edge: fp8 · 2^e is exact in BF16 while it stays inside BF16's normal range
// [2^-126, ~2^128). Scales come from finite FP32 data, so the top end is never reached
// (rceil gives e <= 120, floor e <= 119 for E4M3). At the bottom, a block whose scale is
// near 2^-127 holds elements down to 2^-136 (E4M3 subnormal · 2^-127): below 2^-126 they
// become BF16 subnormals and below 2^-133 they round, so such products can differ from the
// exact MX product by those tiny amounts. A NaN block (scale 0xFF) expands to NaN and
// propagates into every output it touches.
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

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

// Reused expansion buffers, one pair per calling thread: a training step calls gemm_mx with
// the same few shapes over and over, and fresh multi-megabyte allocations would be paid in
// page faults each time.
std::vector<uint16_t>& scratch(int which) {
  thread_local std::vector<uint16_t> buf[2];
  return buf[which];
}

}  // namespace

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
  std::vector<uint16_t>& a16 = scratch(0);
  std::vector<uint16_t>& b16 = scratch(1);
  a16.resize(A.data.size());
  b16.resize(B.data.size());
  dequantize_bf16(A, a16.data());
  dequantize_bf16(B, b16.data());
  gemm_bf16(trans_a, trans_b, M, N, K, a16.data(), A.cols, b16.data(), B.cols, C, ldc,
            accumulate);
}

}  // namespace mxtrain
