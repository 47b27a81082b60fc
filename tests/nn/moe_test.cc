// tests/nn/moe_test.cc — MoE routing (nn/moe.h): top-k gating, token conservation of the
// permutation, the load-balancing loss on a hand case, gradients of the routing chain against
// finite differences, thread-count independence, and the MoE block with real experts.
//
// Finite-difference tolerance as in ops_test.cc: FP32 computation, objective summed in double,
// h = 1e-3 -> ~1e-3 absolute noise per quotient on O(0.1..1) gradients: rtol 1e-2, atol 2e-3.
// Routing is piecewise constant in the logits; the tests pick inputs whose top-k choice has a
// margin far above h and assert that no perturbation changed it.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "nn/finite_diff.h"

namespace mxtrain {
namespace {

using testing_nn::dot_f64;
using testing_nn::expect_fd_close;
using testing_nn::random_vector;

constexpr float kH = 1e-3f;
constexpr double kRtol = 1e-2, kAtol = 2e-3;

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Smallest gap between the k-th and (k+1)-th largest logit over all tokens.
float topk_margin(const std::vector<float>& logits, int64_t N, int64_t E, int64_t k) {
  float m = INFINITY;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> l(logits.begin() + n * E, logits.begin() + (n + 1) * E);
    std::sort(l.begin(), l.end(), std::greater<float>());
    if (k < E) m = std::min(m, l[k - 1] - l[k]);
  }
  return m;
}

TEST(MoERoute, ConservesTokensAndGroupsStably) {
  const int64_t N = 37, E = 5, k = 2, D = 33;
  auto logits = random_vector(N * E, 1, -2.f, 2.f);
  MoERouting r;
  moe_route(r, logits.data(), N, E, k);
  int64_t total = 0;
  for (int64_t c : r.counts) total += c;
  EXPECT_EQ(total, N * k);
  std::vector<int> seen(N, 0);
  for (int64_t row = 0; row < N * k; ++row) ++seen[r.perm_token[row]];
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(seen[n], k) << "token " << n;
  // slot_row and perm_token are inverse; rows of expert e are contiguous, in token order.
  auto groups = r.groups();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = r.slot_row[n * k + j];
      EXPECT_EQ(r.perm_token[row], n);
      const int32_t e = r.expert[n * k + j];
      EXPECT_GE(row, groups.offsets[e]);
      EXPECT_LT(row, groups.offsets[e + 1]);
    }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t row = groups.offsets[e] + 1; row < groups.offsets[e + 1]; ++row)
      EXPECT_LT(r.perm_token[row - 1], r.perm_token[row]);
  // Chosen experts are the k largest logits; gates are their renormalised probabilities.
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits.data() + n * E;
    float gsum = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = r.expert[n * k + j];
      int64_t larger = 0;
      for (int64_t u = 0; u < E; ++u) larger += l[u] > l[e];
      EXPECT_EQ(larger, j);
      gsum += r.gate[n * k + j];
    }
    EXPECT_NEAR(gsum, 1.f, 1e-6f);
    const float p0 = r.probs[n * E + r.expert[n * k]], p1 = r.probs[n * E + r.expert[n * k + 1]];
    EXPECT_NEAR(r.gate[n * k], p0 / (p0 + p1), 1e-6f);
  }
  // unpermute(permute(x)) is x with every row repeated k times, exactly.
  auto x = random_vector(N * D, 2);
  std::vector<float> xp(N * k * D), xs(N * k * D), want(N * k * D);
  moe_permute(xp.data(), x.data(), r, D);
  moe_unpermute(xs.data(), xp.data(), r, D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j)
      std::copy_n(x.data() + n * D, D, want.data() + (n * k + j) * D);
  EXPECT_TRUE(same_bytes(xs, want));
}

TEST(MoERoute, TopOneCombineOfPermuteIsIdentity) {
  const int64_t N = 9, E = 4, k = 1, D = 7;
  auto logits = random_vector(N * E, 3);
  MoERouting r;
  moe_route(r, logits.data(), N, E, k);
  for (float g : r.gate) EXPECT_EQ(g, 1.f);
  auto x = random_vector(N * D, 4);
  x[0] = -0.f;
  std::vector<float> xp(N * D), y(N * D);
  moe_permute(xp.data(), x.data(), r, D);
  moe_combine(y.data(), xp.data(), r, D);
  EXPECT_TRUE(same_bytes(x, y));
}

TEST(MoERoute, TiesGoToTheLowerExpertIndex) {
  const std::vector<float> logits(3 * 4, 0.5f);
  MoERouting r;
  moe_route(r, logits.data(), 3, 4, 2);
  for (int64_t n = 0; n < 3; ++n) {
    EXPECT_EQ(r.expert[n * 2], 0);
    EXPECT_EQ(r.expert[n * 2 + 1], 1);
    EXPECT_EQ(r.gate[n * 2], 0.5f);
  }
  EXPECT_EQ(r.counts, (std::vector<int64_t>{3, 3, 0, 0}));
}

// 4 tokens, 3 experts, router probabilities chosen by hand (logits = ln p):
//   t0 (1/2, 1/4, 1/4)   t1 (1/4, 1/2, 1/4)   t2 (1/8, 1/8, 3/4)   t3 (1/2, 3/8, 1/8)
// P = (11/32, 10/32, 11/32).
// top-1: experts (0, 1, 2, 0), f = (1/2, 1/4, 1/4): aux = 3 (11/64 + 10/128 + 11/128) = 1.0078125
// top-2: (0,1) (1,0) (2,0) (0,1) — t0, t1, t2 break 1/4-1/4 or 1/8-1/8 ties toward the lower
// index — f = (4/8, 3/8, 1/8): aux = 3 (11/64 + 30/256 + 11/256) = 0.99609375.
TEST(MoEAuxLoss, HandCase) {
  const double p[4][3] = {{0.5, 0.25, 0.25}, {0.25, 0.5, 0.25}, {0.125, 0.125, 0.75},
                          {0.5, 0.375, 0.125}};
  std::vector<float> logits(12);
  for (int n = 0; n < 4; ++n)
    for (int e = 0; e < 3; ++e) logits[n * 3 + e] = float(std::log(p[n][e]));
  MoERouting r;
  moe_route(r, logits.data(), 4, 3, 1);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{2, 1, 1}));
  for (int n = 0; n < 4; ++n)
    for (int e = 0; e < 3; ++e) EXPECT_NEAR(r.probs[n * 3 + e], p[n][e], 1e-7);
  // Probabilities come from FP32 exp of rounded logs: ~1e-7 each, hence 1e-6 on aux.
  EXPECT_NEAR(moe_aux_loss(r), 1.0078125, 1e-6);

  moe_route(r, logits.data(), 4, 3, 2);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 1, 0, 2, 0, 0, 1}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{4, 3, 1}));
  EXPECT_NEAR(r.gate[0], 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(r.gate[1], 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(r.gate[4], 0.75 / 0.875, 1e-6);
  EXPECT_NEAR(moe_aux_loss(r), 0.99609375, 1e-6);
  // Uniform router probabilities give exactly 1 whatever the routing.
  const std::vector<float> flat = {0, 0, 0, 0, 0, 0};
  moe_route(r, flat.data(), 3, 2, 1);  // all go to expert 0: f = (1, 0), P = (1/2, 1/2)
  EXPECT_NEAR(moe_aux_loss(r), 1.0, 1e-7);
}

// Whole routing chain with stand-in experts y_e(x) = c_e ⊙ x:
//   L = Σ w ⊙ combine(gates, c_e ⊙ permute(x)) + daux · aux,   logits = x · Wr^T
// Checks d L / d x (both paths: through the experts and through the router) and d L / d Wr.
TEST(MoERoute, ChainGradientMatchesFiniteDifferences) {
  const int64_t N = 6, E = 4, k = 2, D = 5;
  const float daux = 0.7f;
  auto x = random_vector(N * D, 11), wr = random_vector(E * D, 12, -1.5f, 1.5f);
  auto c = random_vector(E * D, 13), w = random_vector(N * D, 14);
  MoERouting r;
  std::vector<float> logits(N * E), xp(N * k * D), yp(N * k * D), y(N * D);
  std::vector<int32_t> base_expert;
  auto f = [&] {
    router_logits_forward(logits.data(), x.data(), wr.data(), N, D, E);
    moe_route(r, logits.data(), N, E, k);
    if (!base_expert.empty()) {
      EXPECT_EQ(r.expert, base_expert) << "a perturbation changed routing";
    }
    moe_permute(xp.data(), x.data(), r, D);
    auto groups = r.groups();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t row = groups.offsets[e]; row < groups.offsets[e + 1]; ++row)
        for (int64_t d = 0; d < D; ++d) yp[row * D + d] = c[e * D + d] * xp[row * D + d];
    moe_combine(y.data(), yp.data(), r, D);
    return dot_f64(y, w) + double(daux) * moe_aux_loss(r);
  };
  f();
  ASSERT_GT(topk_margin(logits, N, E, k), 0.05f) << "pick another seed: routing too close to a tie";
  base_expert = r.expert;
  // Backward.
  std::vector<float> dyp(N * k * D, 0.f), dgate(N * k, 0.f), dxp(N * k * D, 0.f);
  moe_combine_backward(dyp.data(), dgate.data(), w.data(), yp.data(), r, D);
  auto groups = r.groups();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t row = groups.offsets[e]; row < groups.offsets[e + 1]; ++row)
      for (int64_t d = 0; d < D; ++d) dxp[row * D + d] = c[e * D + d] * dyp[row * D + d];
  std::vector<float> dx(N * D, 0.f), dwr(E * D, 0.f), dlogits(N * E);
  moe_permute_backward(dx.data(), dxp.data(), r, D);
  moe_route_backward(dlogits.data(), dgate.data(), daux, r);
  router_logits_backward(dx.data(), dwr.data(), dlogits.data(), x.data(), wr.data(), N, D, E);
  expect_fd_close(x, dx, f, kH, kRtol, kAtol, "moe dx");
  expect_fd_close(wr, dwr, f, kH, kRtol, kAtol, "router dW");
}

TEST(MoERoute, AuxGradientAloneMatchesFiniteDifferences) {
  const int64_t N = 5, E = 3, k = 1;
  auto logits = random_vector(N * E, 21, -2.f, 2.f);
  ASSERT_GT(topk_margin(logits, N, E, k), 0.05f);
  MoERouting r;
  auto f = [&] {
    moe_route(r, logits.data(), N, E, k);
    return moe_aux_loss(r);
  };
  f();
  std::vector<float> dl(N * E);
  moe_route_backward(dl.data(), nullptr, 1.f, r);
  expect_fd_close(logits, dl, f, kH, kRtol, kAtol, "aux dlogits");
}

TEST(MoERoute, RouterBackwardIsIndependentOfThreadCount) {
  const int64_t N = 101, E = 6, D = 35;
  auto x = random_vector(N * D, 31), wr = random_vector(E * D, 32), dl = random_vector(N * E, 33);
  std::vector<std::vector<float>> dx(3, std::vector<float>(N * D)), dw(3, std::vector<float>(E * D));
  const int prev = omp_get_max_threads();
  int i = 0;
  for (int th : {1, 2, 3}) {
    omp_set_num_threads(th);
    router_logits_backward(dx[i].data(), dw[i].data(), dl.data(), x.data(), wr.data(), N, D, E);
    ++i;
  }
  omp_set_num_threads(prev);
  EXPECT_TRUE(same_bytes(dx[0], dx[1]) && same_bytes(dx[0], dx[2]));
  EXPECT_TRUE(same_bytes(dw[0], dw[1]) && same_bytes(dw[0], dw[2]));
}

TEST(MoERoute, NaNLogitsStillGiveValidExpertsAndNaNGates) {
  std::vector<float> logits = {0.5f, NAN, 0.1f, 0.2f, 0.3f, 0.4f};
  MoERouting r;
  moe_route(r, logits.data(), 2, 3, 2);
  EXPECT_NE(r.expert[0], r.expert[1]);
  for (int32_t e : r.expert) EXPECT_TRUE(e >= 0 && e < 3);
  EXPECT_TRUE(std::isnan(r.gate[0]) || std::isnan(r.gate[1]));
  EXPECT_EQ(r.expert[2], 2);  // the finite token routes normally
  EXPECT_EQ(r.expert[3], 1);
  EXPECT_FALSE(std::isnan(r.gate[2]));
}

TEST(MoERoute, BadArgumentsAreErrors) {
  std::vector<float> logits(2 * 3, 0.f);
  MoERouting r;
  EXPECT_THROW(moe_route(r, logits.data(), 2, 3, 4), Error);
  EXPECT_THROW(moe_route(r, logits.data(), 2, 3, 0), Error);
  std::vector<float> y(4), yp(4);
  MoERouting empty;
  EXPECT_THROW(moe_combine(y.data(), yp.data(), empty, 2), Error);
}

}  // namespace
}  // namespace mxtrain
