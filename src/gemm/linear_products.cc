// gemm/linear_products.cc — the forward, dgrad and wgrad products of a (grouped) linear layer
// (mxtrain/gemm.h): picks each operand's copy for the recipe its QTensors carry and runs one
// product per non-empty group, BF16 through oneDNN and MX through gemm_mx.
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {
namespace {

const MXTensor& need(const QTensor& t, bool has, const MXTensor& m, const char* what,
                     const char* op) {
  MXT_CHECK(has, op, ": the ", what, " copy this product reads is missing");
  return m;
}

// The weight copy whose blocks run along the product's reduction axis.
const MXTensor& weight_copy(const QTensor& w, bool forward, const char* op) {
  if (w.has_tile) return w.tile;
  return forward ? need(w, w.has_rowwise, w.rowwise, "weight's rowwise", op)
                 : need(w, w.has_colwise, w.colwise, "weight's colwise", op);
}

void check_bf16(const QTensor& t, int64_t rows, int64_t cols, const char* what, const char* op) {
  MXT_CHECK(t.bf16.size() == size_t(rows * cols), op, ": the ", what, " BF16 copy holds ",
            t.bf16.size(), " values, expected ", rows, "x", cols);
}

}  // namespace

void grouped_forward(const GroupList& groups, const QTensor* x, const QTensor* const* w,
                     float* y, int64_t N) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    float* yg = y + r0 * N;
    if (wg.has_bf16()) {
      const int64_t K = wg.cols;
      check_bf16(wg, N, K, "weight's", "forward");
      check_bf16(x[g], n, K, "input's", "forward");
      gemm_bf16(false, true, n, N, K, x[g].bf16.data(), K, wg.bf16.data(), K, yg, N, false);
    } else {
      const MXTensor& xr = need(x[g], x[g].has_rowwise, x[g].rowwise, "input's rowwise", "forward");
      gemm_mx(false, xr, true, weight_copy(wg, true, "forward"), yg, N, false);
    }
  }
}

void grouped_dgrad(const GroupList& groups, const QTensor* dy, const QTensor* const* w,
                   float* dx, int64_t K) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    float* dxg = dx + r0 * K;
    if (wg.has_bf16()) {
      const int64_t N = wg.rows;
      check_bf16(wg, N, K, "weight's", "dgrad");
      check_bf16(dy[g], n, N, "gradient's", "dgrad");
      gemm_bf16(false, false, n, K, N, dy[g].bf16.data(), N, wg.bf16.data(), K, dxg, K, false);
    } else {
      const MXTensor& dr =
          need(dy[g], dy[g].has_rowwise, dy[g].rowwise, "gradient's rowwise", "dgrad");
      gemm_mx(false, dr, false, weight_copy(wg, false, "dgrad"), dxg, K, false);
    }
  }
}

void grouped_wgrad(const GroupList& groups, const QTensor* dy, const QTensor* x,
                   float* const* dw, bool accumulate) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    if (dy[g].has_bf16()) {
      const int64_t N = dy[g].cols, K = x[g].cols;
      check_bf16(dy[g], n, N, "gradient's", "wgrad");
      check_bf16(x[g], n, K, "input's", "wgrad");
      gemm_bf16(true, false, N, K, n, dy[g].bf16.data(), N, x[g].bf16.data(), K, dw[g], K,
                accumulate);
    } else {
      const MXTensor& dc =
          need(dy[g], dy[g].has_colwise, dy[g].colwise, "gradient's colwise", "wgrad");
      const MXTensor& xc = need(x[g], x[g].has_colwise, x[g].colwise, "input's colwise", "wgrad");
      gemm_mx(true, dc, false, xc, dw[g], xc.cols, accumulate);
    }
  }
}

}  // namespace mxtrain
