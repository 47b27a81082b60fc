// tests/nn/ops_test.cc — the model's FP32 layers (nn/ops.h): forward against double-precision
// references or hand values, backward against central finite differences, thread-count
// independence, and argument errors.
//
// Finite-difference step and tolerance: kH, kRtol, kAtol in finite_diff.h.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"
#include "nn/ops_kernels.h"
#include "nn/finite_diff.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using testing_nn::dot_f64;
using testing_nn::expect_fd_close;
using testing_nn::kAtol;
using testing_nn::kH;
using testing_nn::kRtol;
using testing_nn::random_vector;
using layer_test::same_bytes;

// Runs fn with the given OpenMP thread count and restores the previous one.
template <class Fn>
void with_threads(int n, Fn fn) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(prev);
}

// ---- embedding ------------------------------------------------------------------------------

TEST(Embedding, ForwardCopiesRowsAndBackwardSumsRepeatedTokens) {
  const int64_t V = 5, D = 3, N = 4;
  std::vector<float> table(V * D);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i);
  const std::vector<int32_t> tok = {3, 0, 3, 4};
  std::vector<float> out(N * D);
  embedding_forward(out.data(), tok.data(), N, table.data(), V, D);
  const std::vector<float> want_out = {9, 10, 11, 0, 1, 2, 9, 10, 11, 12, 13, 14};
  EXPECT_EQ(out, want_out);

  std::vector<float> dout = {1, 2, 3, 0.5f, 0.25f, 0.125f, 10, 20, 30, -1, -2, -3};
  std::vector<float> dtable(V * D, 1.f);  // accumulates onto existing values
  embedding_backward(dtable.data(), dout.data(), tok.data(), N, V, D);
  const std::vector<float> want = {1.5f, 1.25f, 1.125f, 1, 1, 1, 1, 1, 1, 12, 23, 34, 0, -1, -2};
  EXPECT_EQ(dtable, want);
}

TEST(Embedding, OutOfRangeTokenIsAnError) {
  std::vector<float> table(4 * 2), out(2 * 2);
  const std::vector<int32_t> bad = {1, 4};
  EXPECT_THROW(embedding_forward(out.data(), bad.data(), 2, table.data(), 4, 2), Error);
  const std::vector<int32_t> neg = {-1, 0};
  EXPECT_THROW(embedding_forward(out.data(), neg.data(), 2, table.data(), 4, 2), Error);
}

// ---- RMSNorm --------------------------------------------------------------------------------

TEST(RMSNorm, ForwardMatchesDoubleReference) {
  for (int64_t D : {1, 31, 33, 64}) {
    const int64_t N = 3;
    auto x = random_vector(N * D, 1 + D), g = random_vector(D, 2 + D, 0.5f, 1.5f);
    std::vector<float> out(N * D), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), N, D, 1e-5f);
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += double(x[n * D + d]) * x[n * D + d];
      const double r = 1.0 / std::sqrt(ss / D + 1e-5);
      EXPECT_NEAR(rstd[n], r, 1e-6 * r) << "D=" << D;
      for (int64_t d = 0; d < D; ++d)
        // Three FP32 multiplications: a few ulp of relative error.
        EXPECT_NEAR(out[n * D + d], x[n * D + d] * r * g[d], 1e-6 * r + 1e-6) << "D=" << D;
    }
  }
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  for (int64_t D : {1, 7, 33}) {
    const int64_t N = 4;
    auto x = random_vector(N * D, 10 + D), g = random_vector(D, 20 + D, 0.5f, 1.5f);
    auto w = random_vector(N * D, 30 + D);
    std::vector<float> out(N * D), rstd(N);
    auto f = [&] {
      rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), N, D, 1e-5f);
      return dot_f64(out, w);
    };
    f();
    std::vector<float> dx(N * D, 0.f), dg(D, 0.f);
    rmsnorm_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), rstd.data(), N, D);
    expect_fd_close(x, dx, f, kH, kRtol, kAtol, "rmsnorm dx D=" + std::to_string(D));
    expect_fd_close(g, dg, f, kH, kRtol, kAtol, "rmsnorm dgain D=" + std::to_string(D));
  }
}

TEST(RMSNorm, BackwardIsIndependentOfThreadCount) {
  const int64_t N = 97, D = 65;
  auto x = random_vector(N * D, 3), g = random_vector(D, 4), dy = random_vector(N * D, 5);
  std::vector<float> out(N * D), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), N, D, 1e-5f);
  std::vector<std::vector<float>> dx(3, std::vector<float>(N * D)), dg(3, std::vector<float>(D));
  int i = 0;
  for (int th : {1, 2, 3}) {
    with_threads(th, [&] {
      rmsnorm_backward(dx[i].data(), dg[i].data(), dy.data(), x.data(), g.data(), rstd.data(),
                       N, D);
    });
    ++i;
  }
  EXPECT_TRUE(same_bytes(dx[0], dx[1]) && same_bytes(dx[0], dx[2]));
  EXPECT_TRUE(same_bytes(dg[0], dg[1]) && same_bytes(dg[0], dg[2]));
}

TEST(RMSNorm, BadEpsIsAnError) {
  std::vector<float> x(4), g(4), out(4), r(1);
  EXPECT_THROW(rmsnorm_forward(out.data(), r.data(), x.data(), g.data(), 1, 4, 0.f), Error);
}

// Attention: attention_test.cc.

// ---- SwiGLU ---------------------------------------------------------------------------------

TEST(SwiGLU, ForwardHandValues) {
  // gate = [0, 1, -2], up = [5, 2, 3]: silu(0) = 0, silu(1) = 1/(1+e^-1), silu(-2) = -2/(1+e^2).
  const std::vector<float> a = {0.f, 1.f, -2.f, 5.f, 2.f, 3.f};
  std::vector<float> h(3);
  swiglu_forward(h.data(), a.data(), 1, 3);
  EXPECT_EQ(h[0], 0.f);
  EXPECT_NEAR(h[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(h[2], 3.0 * -2.0 / (1.0 + std::exp(2.0)), 1e-6);
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  for (int64_t F : {1, 9, 33}) {
    const int64_t N = 3;
    auto a = random_vector(N * 2 * F, 80 + F, -3.f, 3.f), w = random_vector(N * F, 90 + F);
    std::vector<float> h(N * F);
    auto f = [&] {
      swiglu_forward(h.data(), a.data(), N, F);
      return dot_f64(h, w);
    };
    std::vector<float> da(a.size(), 0.f);
    swiglu_backward(da.data(), w.data(), a.data(), N, F);
    expect_fd_close(a, da, f, kH, kRtol, kAtol, "swiglu da F=" + std::to_string(F));
  }
}

// In place (da == a, Accum::write) gives the same bytes as into a separate buffer, on the
// dispatched and the scalar kernels, for widths that end inside a 16-lane vector; in place with
// Accum::add (it would read da as a) is refused.
TEST(SwiGLU, BackwardInPlaceEqualsOutOfPlace) {
  for (int64_t F : {1, 15, 16, 17, 31, 33, 65}) {
    for (int64_t N : {1, 3}) {
      const auto a = random_vector(N * 2 * F, 70 + F, -4.f, 4.f), dh = random_vector(N * F, 75);
      std::vector<float> out(a.size()), in_place = a, out_ref(a.size()), in_place_ref = a;
      swiglu_backward(out.data(), dh.data(), a.data(), N, F, Accum::write);
      swiglu_backward(in_place.data(), dh.data(), in_place.data(), N, F, Accum::write);
      ref::swiglu_backward(out_ref.data(), dh.data(), a.data(), N, F, Accum::write);
      ref::swiglu_backward(in_place_ref.data(), dh.data(), in_place_ref.data(), N, F,
                           Accum::write);
      EXPECT_TRUE(same_bytes(out, in_place)) << "N=" << N << " F=" << F;
      EXPECT_TRUE(same_bytes(out_ref, in_place_ref)) << "N=" << N << " F=" << F;
    }
  }
  std::vector<float> a(2, 1.f), dh(1, 1.f);
  EXPECT_THROW(swiglu_backward(a.data(), dh.data(), a.data(), 1, 1, Accum::add), Error);
}

// ---- cross-entropy --------------------------------------------------------------------------

TEST(CrossEntropy, HandCase) {
  // Row 0: uniform logits over 3 classes -> loss ln 3. Row 1: logits (0, ln 2, ln 3) give
  // probabilities (1/6, 2/6, 3/6); target 2 -> loss ln 2.
  const std::vector<float> logits = {0.f, 0.f, 0.f, 0.f, float(std::log(2.0)),
                                     float(std::log(3.0))};
  const std::vector<int32_t> tgt = {1, 2};
  std::vector<float> probs(6), losses(2);
  const double mean = crossentropy_forward(probs.data(), losses.data(), logits.data(),
                                           tgt.data(), 2, 3);
  EXPECT_NEAR(losses[0], std::log(3.0), 1e-6);
  EXPECT_NEAR(losses[1], std::log(2.0), 1e-6);
  EXPECT_NEAR(mean, 0.5 * (std::log(3.0) + std::log(2.0)), 1e-6);
  const double want_p[6] = {1 / 3.0, 1 / 3.0, 1 / 3.0, 1 / 6.0, 2 / 6.0, 3 / 6.0};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(probs[i], want_p[i], 1e-7);
  // dlogits = (p - onehot) * dloss with dloss = 1/N = 0.5.
  std::vector<float> dl(6);
  crossentropy_backward(dl.data(), probs.data(), tgt.data(), 2, 3, 0.5f);
  const double want_d[6] = {1 / 6.0, 1 / 6.0 - 0.5, 1 / 6.0, 1 / 12.0, 1 / 6.0, 0.25 - 0.5};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(dl[i], want_d[i], 1e-7);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesAndMayWorkInPlace) {
  const int64_t N = 4, V = 37;
  auto logits = random_vector(N * V, 100, -3.f, 3.f);
  const std::vector<int32_t> tgt = {0, 36, 5, 5};
  std::vector<float> probs(N * V);
  auto f = [&] {
    return crossentropy_forward(probs.data(), nullptr, logits.data(), tgt.data(), N, V);
  };
  f();
  std::vector<float> dl(N * V);
  crossentropy_backward(dl.data(), probs.data(), tgt.data(), N, V, 1.f / N);
  // The loss is O(3) so f() carries ~3e-7 absolute noise in FP32-derived probabilities: the
  // same tolerance as the other ops applies.
  expect_fd_close(logits, dl, f, kH, kRtol, kAtol, "cross-entropy dlogits");
  // In place: probs and dlogits the same buffer, logits and probs the same buffer.
  std::vector<float> inplace = logits;
  const double m1 = crossentropy_forward(inplace.data(), nullptr, inplace.data(), tgt.data(), N, V);
  crossentropy_backward(inplace.data(), inplace.data(), tgt.data(), N, V, 1.f / N);
  EXPECT_EQ(m1, f());
  EXPECT_TRUE(same_bytes(inplace, dl));
}

TEST(CrossEntropy, BadTargetIsAnError) {
  std::vector<float> logits(6), probs(6);
  const std::vector<int32_t> tgt = {0, 3};
  EXPECT_THROW(crossentropy_forward(probs.data(), nullptr, logits.data(), tgt.data(), 2, 3),
               Error);
}

// ---- residual -------------------------------------------------------------------------------

TEST(Residual, ForwardAddsAndBackwardAccumulatesIntoBothBranches) {
  const std::vector<float> a = {1, 2, 3}, b = {0.5f, -2, 4};
  std::vector<float> out(3);
  residual_forward(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0, 7}));
  std::vector<float> da = {1, 1, 1}, db(3, 0.f);
  const std::vector<float> dout = {2, 3, 4};
  residual_backward(da.data(), db.data(), dout.data(), 3);
  EXPECT_EQ(da, (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(db, dout);
  axpy(da.data(), dout.data(), 0.5f, 3);
  EXPECT_EQ(da, (std::vector<float>{4, 5.5f, 7}));
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  const int64_t V = 11, D = 40, N = 300;
  std::vector<int32_t> tok(N);
  for (int64_t n = 0; n < N; ++n) tok[n] = int32_t((n * 7) % V);
  auto dout = random_vector(N * D, 110);
  std::vector<std::vector<float>> dt(3, std::vector<float>(V * D, 0.f));
  int i = 0;
  for (int th : {1, 2, 3}) {
    with_threads(th, [&] {
      embedding_backward(dt[i].data(), dout.data(), tok.data(), N, V, D);
    });
    ++i;
  }
  EXPECT_TRUE(same_bytes(dt[0], dt[1]) && same_bytes(dt[0], dt[2]));
}

}  // namespace
}  // namespace mxtrain
