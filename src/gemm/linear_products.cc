// gemm/linear_products.cc — the forward, dgrad and wgrad products of a (grouped) linear layer
// (mxtrain/gemm.h): each operand's copy is the one copies_needed() names for the recipe, role
// and use; one product per non-empty group, BF16 through oneDNN and scaled copies through
// gemm_mx.
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {
namespace {

// The copy of role's matrix t that `use` reads, present and [rows, cols].
Copy copy_read(const Recipe& r, Role role, Use use, const QTensor& t, int64_t rows,
               int64_t cols, const char* what) {
  const Copy c = copies_needed(r, role, use).only();
  MXT_CHECK(t.has(c), use_name(use), ": the ", what, "'s ", copy_name(c),
            " copy this product reads is missing");
  // Its buffer holds what the copy's element format packs rows x cols into (bf16: a value
  // each; scaled: MXTensor::data_bytes()).
  const size_t n = c == Copy::bf16 ? t.bf16.size() : t.scaled(c).data.size();
  const size_t want = c == Copy::bf16 ? size_t(rows * cols)
                                      : size_t(elem_bytes(t.scaled(c).elem, rows, cols));
  MXT_CHECK(t.rows == rows && t.cols == cols && n == want, use_name(use), ": the ", what, "'s ",
            copy_name(c), " copy is ", t.rows, "x", t.cols, " (", n, " elements/bytes), "
            "expected ", rows, "x", cols, " (", want, ")");
  return c;
}

// C [M, N] = op(A) · op(B) from the copies ca of A and cb of B: both BF16, or both scaled.
void product(bool trans_a, const QTensor& A, Copy ca, bool trans_b, const QTensor& B, Copy cb,
             int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate,
             Use use) {
  MXT_CHECK((ca == Copy::bf16) == (cb == Copy::bf16), use_name(use),
            ": one operand is BF16 and the other scaled (", copy_name(ca), ", ", copy_name(cb),
            "); a recipe must scale both or neither");
  if (ca == Copy::bf16) {
    gemm_bf16(trans_a, trans_b, M, N, K, A.bf16.data(), A.cols, B.bf16.data(), B.cols, C, ldc,
              accumulate);
  } else {
    gemm_mx(trans_a, A.scaled(ca), trans_b, B.scaled(cb), C, ldc, accumulate);
  }
}

}  // namespace

void grouped_forward(const Recipe& r, const GroupList& groups, const QTensor* x,
                     const QTensor* const* w, float* y, int64_t N) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    const int64_t K = wg.cols;
    const Copy cx = copy_read(r, Role::input, Use::forward, x[g], n, K, "input");
    const Copy cw = copy_read(r, Role::weight, Use::forward, wg, N, K, "weight");
    product(false, x[g], cx, true, wg, cw, n, N, K, y + groups.offsets[g] * N, N, false,
            Use::forward);
  }
}

void grouped_dgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* const* w, float* dx, int64_t K) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    const int64_t N = wg.rows;
    const Copy cd = copy_read(r, Role::grad, Use::dgrad, dy[g], n, N, "gradient");
    const Copy cw = copy_read(r, Role::weight, Use::dgrad, wg, N, K, "weight");
    product(false, dy[g], cd, false, wg, cw, n, K, N, dx + groups.offsets[g] * K, K, false,
            Use::dgrad);
  }
}

void grouped_wgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* x, float* const* dw, bool accumulate) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const int64_t N = dy[g].cols, K = x[g].cols;
    const Copy cd = copy_read(r, Role::grad, Use::wgrad, dy[g], n, N, "gradient");
    const Copy cx = copy_read(r, Role::input, Use::wgrad, x[g], n, K, "input");
    product(true, dy[g], cd, false, x[g], cx, N, K, n, dw[g], K, accumulate, Use::wgrad);
  }
}

}  // namespace mxtrain
