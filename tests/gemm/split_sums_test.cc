// tests/gemm/split_sums_test.cc — SplitSumsScope (gemm.h): inside it a forward or dgrad
// product equals, bit for bit, the sum in rank order of the products each rank of a
// row-parallel layer computes from its own slices (quantized from the FP32 slice, as that
// rank does), for BF16, MX rowwise/colwise (mxfp8) and 32x32-tile (mxfp8-32x32) copies, with
// one to three blocks of K (proj and fc2; fc1's gate and up; qkv's q, k, v) and awkward row
// counts. wgrad, and a scope of one rank, are the unscoped product's bytes; a slice that cuts
// a block, and a scope inside a scope, are refused naming why.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// The K indices rank p of P holds: slice p of each of nb equal blocks of K.
std::vector<int64_t> rank_k(int64_t K, int P, int nb, int p) {
  const int64_t Kp = K / (int64_t(P) * nb);
  std::vector<int64_t> ks;
  for (int b = 0; b < nb; ++b)
    for (int64_t k = 0; k < Kp; ++k) ks.push_back((int64_t(b) * P + p) * Kp + k);
  return ks;
}

// Columns `ks` of x [rows, cols].
std::vector<float> columns(const std::vector<float>& x, int64_t rows, int64_t cols,
                           const std::vector<int64_t>& ks) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k : ks) out.push_back(x[size_t(r * cols + k)]);
  return out;
}

// Rows `ks` of x [rows, cols].
std::vector<float> rows_of(const std::vector<float>& x, int64_t cols,
                           const std::vector<int64_t>& ks) {
  std::vector<float> out;
  for (int64_t k : ks) out.insert(out.end(), x.begin() + k * cols, x.begin() + (k + 1) * cols);
  return out;
}

QTensor copies(const std::vector<float>& x, int64_t rows, int64_t cols, const Recipe& r,
               Role role, Use use) {
  QTensor q;
  make_copies(x.data(), rows, cols, r.role(role), q, copies_needed(r, role, use));
  return q;
}

GroupList one_group(int64_t rows) { return GroupList::from_counts({rows}, rows); }

// y [M, N] = x [M, K] · W [N, K]^T.
std::vector<float> forward(const Recipe& r, const std::vector<float>& x,
                           const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  const QTensor xq = copies(x, M, K, r, Role::input, Use::forward);
  const QTensor wq = copies(w, N, K, r, Role::weight, Use::forward);
  const QTensor* wp = &wq;
  std::vector<float> y(size_t(M * N));
  grouped_forward(r, one_group(M), &xq, &wp, y.data(), N);
  return y;
}

// dx [M, K] = dy [M, O] · W [O, K].
std::vector<float> dgrad(const Recipe& r, const std::vector<float>& dy,
                         const std::vector<float>& w, int64_t M, int64_t O, int64_t K) {
  const QTensor dq = copies(dy, M, O, r, Role::grad, Use::dgrad);
  const QTensor wq = copies(w, O, K, r, Role::weight, Use::dgrad);
  const QTensor* wp = &wq;
  std::vector<float> dx(size_t(M * K));
  grouped_dgrad(r, one_group(M), &dq, &wp, dx.data(), K);
  return dx;
}

struct Case {
  const char* recipe;
  int ranks, blocks;
  int64_t slice;  // K per rank per block
};

TEST(SplitSumsScope, ForwardAndDgradAreTheRanksPartialProductsAddedInRankOrder) {
  for (const Case c : {Case{"bf16", 2, 1, 5}, Case{"bf16", 2, 3, 32}, Case{"bf16", 3, 2, 17},
                       Case{"mxfp8", 2, 1, 64}, Case{"mxfp8", 2, 2, 32}, Case{"mxfp8", 2, 3, 32},
                       Case{"mxfp8-32x32", 2, 3, 32}, Case{"mxfp8-32x32", 4, 1, 32}})
    for (const int64_t M : {1, 17, 33}) {
      const Recipe& r = get_recipe(c.recipe);
      const int P = c.ranks, nb = c.blocks;
      const int64_t K = c.slice * P * nb, N = 64;
      SCOPED_TRACE(std::string(c.recipe) + " ranks " + std::to_string(P) + " blocks " +
                   std::to_string(nb) + " M " + std::to_string(M));
      const std::vector<float> x = randn(M * K, 1), w = randn(N * K, 2), dy = randn(M * K, 3),
                               w2 = randn(K * N, 4);
      // What the ranks compute, each on its own slices, added in rank order.
      std::vector<float> y_ranks(size_t(M * N), 0.f), dx_ranks(size_t(M * N), 0.f);
      for (int p = 0; p < P; ++p) {
        const std::vector<int64_t> ks = rank_k(K, P, nb, p);
        const int64_t Kl = int64_t(ks.size());
        const std::vector<float> yp = forward(r, columns(x, M, K, ks), columns(w, N, K, ks), M,
                                              N, Kl);
        const std::vector<float> dxp =
            dgrad(r, columns(dy, M, K, ks), rows_of(w2, N, ks), M, Kl, N);
        for (size_t i = 0; i < yp.size(); ++i) {
          y_ranks[i] = p == 0 ? yp[i] : y_ranks[i] + yp[i];
          dx_ranks[i] = p == 0 ? dxp[i] : dx_ranks[i] + dxp[i];
        }
      }
      std::vector<float> y, dx;
      {
        SplitSumsScope scope(P, nb);
        y = forward(r, x, w, M, N, K);
        dx = dgrad(r, dy, w2, M, K, N);
      }
      EXPECT_EQ(y, y_ranks);
      EXPECT_EQ(dx, dx_ranks);
    }
}

TEST(SplitSumsScope, WgradAndOneRankAreTheUnscopedProduct) {
  for (const char* name : {"bf16", "mxfp8", "mxfp8-32x32"}) {
    SCOPED_TRACE(name);
    const Recipe& r = get_recipe(name);
    const int64_t M = 33, N = 64, K = 128;
    const std::vector<float> dy = randn(M * N, 5), x = randn(M * K, 6), w = randn(N * K, 7);
    const QTensor dq = copies(dy, M, N, r, Role::grad, Use::wgrad);
    const QTensor xq = copies(x, M, K, r, Role::input, Use::wgrad);
    std::vector<float> plain(size_t(N * K)), scoped(size_t(N * K));
    float* dw = plain.data();
    grouped_wgrad(r, one_group(M), &dq, &xq, &dw, false);
    const std::vector<float> y = forward(r, x, w, M, N, K);
    {
      SplitSumsScope scope(2, 1);
      dw = scoped.data();
      grouped_wgrad(r, one_group(M), &dq, &xq, &dw, false);
    }
    EXPECT_EQ(scoped, plain);
    SplitSumsScope one(1, 1);
    EXPECT_EQ(forward(r, x, w, M, N, K), y);
  }
}

TEST(SplitSumsScope, SlicesThatCutABlockAndNestedScopesAreRefused) {
  const Recipe& r = get_recipe("mxfp8");
  const int64_t M = 4, N = 32, K = 80;  // 40 per rank at 2 ranks: a 32-block straddles them
  const std::vector<float> x = randn(M * K, 8), w = randn(N * K, 9);
  {
    SplitSumsScope scope(2, 1);
    try {
      forward(r, x, w, M, N, K);
      ADD_FAILURE() << "a slice that cuts an MX block was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not whole blocks of 32"), std::string::npos)
          << e.what();
    }
    try {
      SplitSumsScope inner(2, 1);
      ADD_FAILURE() << "a nested scope was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("scopes do not nest"), std::string::npos) << e.what();
    }
  }
  try {
    SplitSumsScope scope(2, 3);  // K = 80 is not 3 blocks of 2 slices
    forward(get_recipe("bf16"), x, w, M, N, K);
    ADD_FAILURE() << "K that is not blocks x ranks slices was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not 3 block(s) of 2 slices"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mxtrain
