// tests/nn/moe_test.cc — MoE routing (nn/moe.h): top-k gating, token conservation of the
// permutation, the load-balancing loss on a hand case, gradients of the routing chain against
// finite differences, thread-count independence, and the MoE block with real experts.
//
// Finite-difference step and tolerance as for the ops (kH, kRtol, kAtol in finite_diff.h).
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
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using testing_nn::dot_f64;
using testing_nn::expect_fd_close;
using testing_nn::kAtol;
using testing_nn::kH;
using testing_nn::kRtol;
using testing_nn::random_vector;
using layer_test::buffer;
using layer_test::same_bytes;

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

// Sequence parallelism: the tokens of one micro-batch split over ranks, each routing its own
// share (MoEBalance over the group). The shares' aux losses add up to the whole micro-batch's,
// and each share's dlogits are the whole's rows (the same numbers: the per-expert factor is
// computed from the same counts and tokens, so exactly equal).
TEST(MoEAuxLoss, TokenGroupSharesAddUpToTheWhole) {
  const int64_t N = 12, E = 4, k = 2, S = 3;  // three shares of 4 tokens
  auto logits = random_vector(N * E, 41, -2.f, 2.f);
  MoERouting whole;
  moe_route(whole, logits.data(), N, E, k);
  std::vector<float> dl_whole(N * E);
  moe_route_backward(dl_whole.data(), nullptr, 0.9f, whole);
  double sum = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    MoERouting part;
    moe_route(part, logits.data() + s * (N / S) * E, N / S, E, k);
    const MoEBalance b{whole.counts.data(), N};  // the group's summed counts and tokens
    sum += moe_aux_loss(part, b);
    std::vector<float> dl(N / S * E);
    moe_route_backward(dl.data(), nullptr, 0.9f, part, b);
    for (int64_t i = 0; i < N / S * E; ++i)
      EXPECT_EQ(dl[i], dl_whole[s * (N / S) * E + i]) << "share " << s << " value " << i;
  }
  // The probabilities' sums add in another grouping: double rounding, 1e-12.
  EXPECT_NEAR(sum, moe_aux_loss(whole), 1e-12);
  MoERouting part;
  moe_route(part, logits.data(), N / S, E, k);
  EXPECT_THROW(moe_aux_loss(part, MoEBalance{whole.counts.data(), 1}), Error);
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

// ---- the MoE block with GroupedLinear experts ------------------------------------------------

LinearPrecision precision(const char* recipe, bool defer = false) {
  LinearPrecision p;
  p.recipe = get_recipe(recipe);
  p.defer_backward_quant = defer;
  return p;
}

struct MoECase {
  int64_t N = 37, D = 16, F = 8, E = 4, k = 2;  // 74 expert rows: no count is a multiple of 32
  std::vector<float> x, w;                       // input [N, D], output weighting [N, D]
};

MoECase moe_case() {
  MoECase c;
  c.x = random_vector(c.N * c.D, 201);
  c.w = random_vector(c.N * c.D, 202);
  return c;
}

MoELayer make_moe(const MoECase& c, const char* recipe, bool defer = false) {
  MoELayer m("layers.0.mlp", c.D, c.F, c.E, c.k, precision(recipe, defer),
             precision(recipe, defer));
  m.router.value = buffer(random_vector(m.router.value.size(), 203, -1.f, 1.f));
  m.fc1.weight.value = buffer(random_vector(m.fc1.weight.value.size(), 204, -0.5f, 0.5f));
  m.fc2.weight.value = buffer(random_vector(m.fc2.weight.value.size(), 205, -0.5f, 0.5f));
  return m;
}

std::vector<float> grads_of(MoELayer& m) {
  std::vector<float> g(m.router.grad.begin(), m.router.grad.end());
  g.insert(g.end(), m.fc1.weight.grad.begin(), m.fc1.weight.grad.end());
  g.insert(g.end(), m.fc2.weight.grad.begin(), m.fc2.weight.grad.end());
  return g;
}

// y[n] = Σ_j gate[n,j] · fc2_e(silu(gate_half) · up_half of fc1_e(x[n])), in double per token.
TEST(MoELayer, ForwardMatchesPerTokenReference) {
  MoECase c = moe_case();
  for (const char* recipe : {"bf16", "mxfp8"}) {
    for (bool ref : {true, false}) {
      if (ref && std::string(recipe) != "bf16") continue;
      MoELayer m = make_moe(c, recipe);
      m.set_fp32_reference(ref);
      std::vector<float> y(c.N * c.D);
      m.forward(c.x.data(), c.N, y.data());
      const MoERouting& r = m.routing();
      double ymax = 0, err = 0;
      for (int64_t n = 0; n < c.N; ++n) {
        std::vector<double> acc(c.D, 0.0);
        for (int64_t j = 0; j < c.k; ++j) {
          const int64_t e = r.expert[n * c.k + j];
          const float* w1 = m.fc1.weight.value.data() + e * 2 * c.F * c.D;
          const float* w2 = m.fc2.weight.value.data() + e * c.D * c.F;
          std::vector<double> a(2 * c.F, 0.0), h(c.F);
          for (int64_t o = 0; o < 2 * c.F; ++o)
            for (int64_t d = 0; d < c.D; ++d) a[o] += double(w1[o * c.D + d]) * c.x[n * c.D + d];
          for (int64_t f = 0; f < c.F; ++f) h[f] = a[f] / (1.0 + std::exp(-a[f])) * a[c.F + f];
          for (int64_t d = 0; d < c.D; ++d) {
            double o = 0;
            for (int64_t f = 0; f < c.F; ++f) o += double(w2[d * c.F + f]) * h[f];
            acc[d] += double(r.gate[n * c.k + j]) * o;
          }
        }
        for (int64_t d = 0; d < c.D; ++d) {
          ymax = std::max(ymax, std::fabs(acc[d]));
          err = std::max(err, std::fabs(acc[d] - y[n * c.D + d]));
        }
      }
      // Error relative to max |y|. FP32 products: ~1e-6 (measured 1.8e-7). BF16 operands:
      // 2^-9 per operand, two layers deep (measured 3.7e-3). E4M3 operands: 2^-4 per operand,
      // two layers deep (measured 5.5e-2).
      const double tol = ref ? 1e-5 : (std::string(recipe) == "bf16" ? 2e-2 : 1.5e-1);
      EXPECT_LE(err, tol * ymax) << recipe << " fp32_reference=" << ref;
    }
  }
}

// Backward of the whole block (experts in FP32 reference mode so the function is exactly
// differentiable) against finite differences, for x, the router and both expert weights.
// Every 5th entry is checked; entries whose perturbation changes the routing are skipped.
TEST(MoELayer, BackwardMatchesFiniteDifferencesFp32) {
  MoECase c = moe_case();
  MoELayer m = make_moe(c, "bf16");
  m.set_fp32_reference(true);
  const float daux = 0.3f;
  std::vector<float> y(c.N * c.D);
  m.forward(c.x.data(), c.N, y.data());
  const std::vector<int32_t> base = m.routing().expert;
  std::vector<float> dx(c.N * c.D, 0.f);
  m.backward(c.w.data(), daux, dx.data());
  bool changed = false;
  auto f = [&] {
    const double aux = m.forward(c.x.data(), c.N, y.data());
    changed = changed || m.routing().expert != base;
    return dot_f64(y, c.w) + double(daux) * aux;
  };
  int skipped = 0, checked = 0;
  auto check = [&](auto& v, const auto& g, const char* what) {
    for (size_t i = 0; i < v.size(); i += 5) {
      changed = false;
      const float x0 = v[i];
      v[i] = x0 + kH;
      const double fp = f();
      v[i] = x0 - kH;
      const double fm = f();
      v[i] = x0;
      if (changed) {
        ++skipped;
        continue;
      }
      const double fd = (fp - fm) / (double(x0 + kH) - double(x0 - kH));
      EXPECT_LE(std::fabs(fd - g[i]), kAtol + kRtol * std::fabs(fd))
          << what << "[" << i << "]: finite difference " << fd << " vs backward " << g[i];
      ++checked;
    }
  };
  check(c.x, dx, "dx");
  check(m.router.value, m.router.grad, "router");
  check(m.fc1.weight.value, m.fc1.weight.grad, "experts.fc1");
  check(m.fc2.weight.value, m.fc2.weight.grad, "experts.fc2");
  EXPECT_GT(checked, 400);
  EXPECT_LE(skipped, checked / 50);
}

// An expert nobody routes to: router row 3 is zero while x and rows 0..2 are positive, so
// expert 3's logit (0) is always below the others'. Counts (not multiples of 32, one zero) run
// through the mxfp8 experts; expert 3's weight gradient stays exactly zero.
TEST(MoELayer, EmptyExpertAndRaggedCountsWithMxfp8) {
  MoECase c = moe_case();
  for (float& v : c.x) v = std::fabs(v) + 0.01f;
  MoELayer m = make_moe(c, "mxfp8");
  for (int64_t d = 0; d < c.D; ++d) {
    for (int64_t e = 0; e < 3; ++e) m.router.value[e * c.D + d] = std::fabs(m.router.value[e * c.D + d]);
    m.router.value[3 * c.D + d] = 0.f;
  }
  std::vector<float> y(c.N * c.D), dx(c.N * c.D, 0.f);
  m.forward(c.x.data(), c.N, y.data());
  EXPECT_EQ(m.routing().counts[3], 0);
  for (int64_t e = 0; e < 3; ++e) EXPECT_NE(m.routing().counts[e] % 32, 0);
  m.backward(c.w.data(), 0.1f, dx.data());
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  for (float v : dx) ASSERT_TRUE(std::isfinite(v));
  const int64_t per1 = 2 * c.F * c.D, per2 = c.D * c.F;
  for (int64_t i = 0; i < per1; ++i) EXPECT_EQ(m.fc1.weight.grad[3 * per1 + i], 0.f);
  for (int64_t i = 0; i < per2; ++i) EXPECT_EQ(m.fc2.weight.grad[3 * per2 + i], 0.f);
  float g0 = 0.f;
  for (int64_t i = 0; i < per1; ++i) g0 = std::max(g0, std::fabs(m.fc1.weight.grad[i]));
  EXPECT_GT(g0, 0.f);
}

TEST(MoELayer, DeferOnOffAndThreadCountGiveIdenticalBytes) {
  MoECase c = moe_case();
  std::vector<std::vector<float>> ys, dxs, gs;
  const int prev = omp_get_max_threads();
  struct Run { bool defer; int threads; };
  for (Run run : {Run{false, 1}, Run{true, 1}, Run{false, 2}, Run{true, 2}}) {
    omp_set_num_threads(run.threads);
    MoELayer m = make_moe(c, "mxfp8", run.defer);
    std::vector<float> y(c.N * c.D), dx(c.N * c.D, 0.f);
    m.forward(c.x.data(), c.N, y.data());
    m.backward(c.w.data(), 0.1f, dx.data());
    ys.push_back(y);
    dxs.push_back(dx);
    gs.push_back(grads_of(m));
  }
  omp_set_num_threads(prev);
  for (size_t i = 1; i < ys.size(); ++i) {
    EXPECT_TRUE(same_bytes(ys[0], ys[i])) << "run " << i;
    EXPECT_TRUE(same_bytes(dxs[0], dxs[i])) << "run " << i;
    EXPECT_TRUE(same_bytes(gs[0], gs[i])) << "run " << i;
  }
}

// The experts' inputs (xp for fc1, h for fc2) have buffers of their own only when the
// GroupedLinear keeps a pointer instead of a copy (defer on): bf16 and mxfp8 with defer off
// write them into the backward's scratch, so the block holds exactly rows x (D + F) floats less.
TEST(MoELayer, ExpertInputsAreKeptOnlyWhenTheLayerKeepsNoCopy) {
  MoECase c = moe_case();
  const int64_t rows = c.N * c.k;
  size_t bytes[3];
  int i = 0;
  for (auto [recipe, defer] : {std::pair{"bf16", false}, std::pair{"mxfp8", false},
                               std::pair{"mxfp8", true}}) {
    MoELayer m = make_moe(c, recipe, defer);
    std::vector<float> y(c.N * c.D), dx(c.N * c.D, 0.f);
    m.forward(c.x.data(), c.N, y.data());
    m.backward(c.w.data(), 0.1f, dx.data());
    bytes[i++] = m.activation_bytes();
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  EXPECT_EQ(bytes[2] - bytes[1], size_t(rows * (c.D + c.F)) * sizeof(float));
}

}  // namespace
}  // namespace mxtrain
