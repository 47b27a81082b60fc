// tests/nn/ops_kernels_test.cc — the AVX-512 kernels of nn/ops.h against the scalar reference
// (ref:: in nn/ops_kernels.h) on awkward shapes, thread-count independence of every op on
// both paths, NaN/Inf propagation, and Isa::scalar (what MXTRAIN_ISA=scalar sets) selecting
// the reference.
//
// Tolerances, per element, as a multiple of the size of the terms that make it up:
//   exact (0)   embedding, residual, axpy, cross-entropy backward, RMSNorm dgain, the sum of
//               squares: the same FP32 (double) operations in the same order (bit for bit).
//   kRowSumRel  RMSNorm forward and dx: the row sums (double) are reassociated, so the FP32
//               row scale or mean may differ by an ulp, which moves each output by ~1 ulp of
//               its terms; 4 ulp.
//   kExpRel     SwiGLU and softmax: vexp (<= 1.5 ulp, core/vexp.h) against std::exp, plus
//               FMA contraction of the products; 8 ulp of the terms.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/isa.h"
#include "mxtrain/nn/ops.h"
#include "nn/finite_diff.h"
#include "nn/layer_test_util.h"
#include "nn/ops_kernels.h"

namespace mxtrain {
namespace {

using layer_test::same_bytes;
using testing_nn::random_vector;
using Vec = std::vector<float>;

constexpr double kUlp = 0x1p-23;
constexpr double kRowSumRel = 4 * kUlp;
constexpr double kExpRel = 8 * kUlp;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

const int64_t kRows[] = {1, 31, 33, 255, 257};
const int64_t kWidths[] = {1, 15, 16, 17, 31, 33, 63, 65, 256, 672};
const int64_t kVocabs[] = {256, 1, 3, 257};

std::string shape(int64_t N, int64_t W) {
  return "N=" + std::to_string(N) + " W=" + std::to_string(W);
}

std::vector<int32_t> random_tokens(int64_t N, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(N);
  for (auto& x : t) x = int32_t(rng() % uint32_t(V));
  return t;
}

// got[i] within bound[i] of want[i]; bound 0 means the same bits. NaN must meet NaN, an
// infinity the same infinity. Reports the first failure of a test only.
void expect_within(const Vec& got, const Vec& want, const std::vector<double>& bound,
                   const std::string& what) {
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      ASSERT_TRUE(std::isnan(w) && std::isnan(g)) << what << " i=" << i << ": " << g
                                                   << " vs " << w;
    } else if (std::isinf(w) || std::isinf(g) || bound[i] == 0) {
      ASSERT_EQ(g, w) << what << " i=" << i << std::hexfloat << ": " << g << " vs " << w;
    } else {
      ASSERT_LE(std::fabs(double(g) - double(w)), bound[i])
          << what << " i=" << i << std::hexfloat << ": " << g << " vs " << w;
    }
  }
}
void expect_exact(const Vec& got, const Vec& want, const std::string& what) {
  expect_within(got, want, std::vector<double>(want.size(), 0.0), what);
}

// Runs fn with n OpenMP threads.
template <class Fn>
void with_threads(int n, Fn fn) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(prev);
}

double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class OpsAvx512 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
    set_isa(Isa::avx512);
  }
  void TearDown() override { clear_isa_override(); }
};

// ---- fast against reference ---------------------------------------------------------------

TEST_F(OpsAvx512, EmbeddingIsExact) {
  for (int64_t V : kVocabs)
    for (int64_t N : kRows)
      for (int64_t D : kWidths) {
        const auto tok = random_tokens(N, V, uint32_t(N * 7 + V));
        const Vec table = random_vector(V * D, uint32_t(D)), dout = random_vector(N * D, 3);
        Vec a(N * D), b(N * D);
        embedding_forward(a.data(), tok.data(), N, table.data(), V, D);
        ref::embedding_forward(b.data(), tok.data(), N, table.data(), V, D);
        expect_exact(a, b, "embedding_forward " + shape(N, D));
        Vec da = random_vector(V * D, 4), db = da;
        embedding_backward(da.data(), dout.data(), tok.data(), N, V, D);
        ref::embedding_backward(db.data(), dout.data(), tok.data(), N, V, D);
        expect_exact(da, db, "embedding_backward " + shape(N, D) + " V=" + std::to_string(V));
      }
}

TEST_F(OpsAvx512, RMSNormWithinRowSumTolerance) {
  for (int64_t N : kRows)
    for (int64_t D : kWidths) {
      const Vec x = random_vector(N * D, uint32_t(N + D), -2.f, 2.f);
      const Vec gain = random_vector(D, 5, 0.5f, 1.5f), dout = random_vector(N * D, 6);
      Vec o1(N * D), o2(N * D), r1(N), r2(N);
      rmsnorm_forward(o1.data(), r1.data(), x.data(), gain.data(), N, D, 1e-5f);
      ref::rmsnorm_forward(o2.data(), r2.data(), x.data(), gain.data(), N, D, 1e-5f);
      std::vector<double> bo(N * D), br(N);
      for (int64_t n = 0; n < N; ++n) {
        br[n] = kRowSumRel * r2[n];
        for (int64_t d = 0; d < D; ++d)
          bo[n * D + d] = kRowSumRel * std::fabs(double(x[n * D + d]) * r2[n] * gain[d]);
      }
      expect_within(r1, r2, br, "rmsnorm rstd " + shape(N, D));
      expect_within(o1, o2, bo, "rmsnorm out " + shape(N, D));
      // Backward from the reference's rstd; dx and dgain accumulate onto random values.
      Vec dx1 = random_vector(N * D, 7), dx2 = dx1, dg1 = random_vector(D, 8), dg2 = dg1;
      const Vec dx0 = dx1;
      rmsnorm_backward(dx1.data(), dg1.data(), dout.data(), x.data(), gain.data(), r2.data(),
                       N, D);
      ref::rmsnorm_backward(dx2.data(), dg2.data(), dout.data(), x.data(), gain.data(),
                            r2.data(), N, D);
      std::vector<double> bdx(N * D);
      for (int64_t n = 0; n < N; ++n) {
        double mabs = 0;  // >= |mean_d(dout g xhat)|
        for (int64_t d = 0; d < D; ++d)
          mabs += std::fabs(double(dout[n * D + d]) * gain[d] * x[n * D + d] * r2[n]) / D;
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = size_t(n * D + d);
          const double terms = std::fabs(dout[i] * gain[d]) + std::fabs(x[i] * r2[n]) * mabs;
          bdx[i] = kRowSumRel * (std::fabs(dx0[i]) + r2[n] * terms);
        }
      }
      expect_within(dx1, dx2, bdx, "rmsnorm dx " + shape(N, D));
      expect_exact(dg1, dg2, "rmsnorm dgain " + shape(N, D));
    }
}

TEST_F(OpsAvx512, SwiGLUWithinExpTolerance) {
  for (int64_t N : kRows)
    for (int64_t F : kWidths) {
      // Gates over [-20, 20]: sigmoid from ~2e-9 to 1, both ends of the exp range used.
      const Vec a = random_vector(N * 2 * F, uint32_t(N * 3 + F), -20.f, 20.f);
      const Vec dh = random_vector(N * F, 9);
      Vec h1(N * F), h2(N * F);
      swiglu_forward(h1.data(), a.data(), N, F);
      ref::swiglu_forward(h2.data(), a.data(), N, F);
      Vec da1 = random_vector(N * 2 * F, 10), da2 = da1;
      const Vec da0 = da1;
      swiglu_backward(da1.data(), dh.data(), a.data(), N, F);
      ref::swiglu_backward(da2.data(), dh.data(), a.data(), N, F);
      std::vector<double> bh(N * F), bda(N * 2 * F);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) {
          const double g = a[n * 2 * F + f], u = a[n * 2 * F + F + f], d = dh[n * F + f];
          const double s = sigmoid64(g);
          bh[n * F + f] = kExpRel * std::fabs(g * s * u);
          const size_t ig = size_t(n * 2 * F + f), iu = ig + size_t(F);
          const double dsilu = s + std::fabs(g * s * (1 - s));
          bda[ig] = kExpRel * (std::fabs(da0[ig]) + std::fabs(d * u) * dsilu);
          bda[iu] = kExpRel * (std::fabs(da0[iu]) + std::fabs(d * g * s));
        }
      expect_within(h1, h2, bh, "swiglu_forward " + shape(N, F));
      expect_within(da1, da2, bda, "swiglu_backward " + shape(N, F));
    }
}

TEST_F(OpsAvx512, CrossEntropyWithinExpToleranceAndBackwardExact) {
  for (int64_t V : kVocabs)
    for (int64_t N : kRows) {
      Vec logits = random_vector(N * V, uint32_t(N * 11 + V), -8.f, 8.f);
      if (N > 1)  // one row spread over [-60, 60]: exp(l - max) reaches the subnormal range
        for (int64_t v = 0; v < V; ++v) logits[v] *= 7.5f;
      const auto tgt = random_tokens(N, V, uint32_t(V));
      Vec p1(N * V), p2(N * V), l1(N), l2(N);
      const double m1 = crossentropy_forward(p1.data(), l1.data(), logits.data(), tgt.data(), N, V);
      const double m2 =
          ref::crossentropy_forward(p2.data(), l2.data(), logits.data(), tgt.data(), N, V);
      std::vector<double> bp(N * V), bl(N);
      for (size_t i = 0; i < bp.size(); ++i) bp[i] = kExpRel * p2[i] + 0x1p-149;
      double msum = 0;
      for (int64_t n = 0; n < N; ++n) msum += bl[n] = kExpRel * (1 + std::fabs(l2[n]));
      const std::string what = "crossentropy " + shape(N, V);
      expect_within(p1, p2, bp, what + " probs");
      expect_within(l1, l2, bl, what + " losses");
      EXPECT_NEAR(m1, m2, msum / N) << what;
      // Backward from the same probabilities: exact, in place or not.
      Vec d1(N * V), d2(N * V);
      crossentropy_backward(d1.data(), p2.data(), tgt.data(), N, V, 0.37f);
      ref::crossentropy_backward(d2.data(), p2.data(), tgt.data(), N, V, 0.37f);
      expect_exact(d1, d2, what + " dlogits");
      Vec inplace = p2;
      crossentropy_backward(inplace.data(), inplace.data(), tgt.data(), N, V, 0.37f);
      expect_exact(inplace, d2, what + " dlogits in place");
    }
}

TEST_F(OpsAvx512, ResidualAndAxpyAreExact) {
  for (int64_t N : kRows)
    for (int64_t D : kWidths) {
      const int64_t n = N * D;
      const Vec a = random_vector(n, 12), b = random_vector(n, 13), dout = random_vector(n, 14);
      Vec o1(n), o2(n);
      residual_forward(o1.data(), a.data(), b.data(), n);
      ref::residual_forward(o2.data(), a.data(), b.data(), n);
      expect_exact(o1, o2, "residual_forward " + shape(N, D));
      Vec da1 = a, db1 = b, da2 = a, db2 = b;
      residual_backward(da1.data(), db1.data(), dout.data(), n);
      ref::residual_backward(da2.data(), db2.data(), dout.data(), n);
      residual_backward(nullptr, db1.data(), dout.data(), n);
      ref::residual_backward(nullptr, db2.data(), dout.data(), n);
      expect_exact(da1, da2, "residual_backward da " + shape(N, D));
      expect_exact(db1, db2, "residual_backward db " + shape(N, D));
      axpy(da1.data(), dout.data(), -0.3f, n);
      ref::axpy(da2.data(), dout.data(), -0.3f, n);
      expect_exact(da1, da2, "axpy " + shape(N, D));
    }
}

// The gradient reductions: the sum of squares bit for bit on lengths around the 32-lane and
// block edges (a sum reassociated anywhere would differ in the last bits on these values), the
// finite check against a NaN or Inf at each edge position. The sum of squares is non-finite
// exactly when an element is (the trainer's check, ParamSync::grad_sum_squares_checked): a NaN
// or Inf anywhere makes it so, and elements of FLT_MAX, whose squares are the largest there
// are, leave it finite.
TEST_F(OpsAvx512, SumOfSquaresAndFiniteCheckAreExact) {
  const int64_t B = kSumSquaresBlock;
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(31),
                    int64_t(32), int64_t(33), int64_t(63), int64_t(65), int64_t(255),
                    int64_t(257), B - 1, B, B + 1, 3 * B + 33, int64_t(65536 + 17),
                    int64_t(200003)}) {
    const Vec x = random_vector(std::max<int64_t>(n, 1), 40 + uint32_t(n % 97), -3.f, 3.f);
    const double a = sum_squares_elements(x.data(), n), b = ref::sum_squares_elements(x.data(), n);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "n=" << n << ": " << a << " vs " << b;
    double exact = 0;  // a loose check of the value itself
    for (int64_t i = 0; i < n; ++i) exact += double(x[i]) * x[i];
    EXPECT_NEAR(a, exact, 1e-12 * std::max(1.0, exact)) << "n=" << n;
    EXPECT_TRUE(all_finite_elements(x.data(), n)) << "n=" << n;
    for (int64_t at : {int64_t(0), n / 2, n - 1}) {
      if (n == 0) break;
      for (float bad : {kNan, kInf, -kInf}) {
        Vec y = x;
        y[size_t(at)] = bad;
        EXPECT_FALSE(all_finite_elements(y.data(), n)) << "n=" << n << " at " << at;
        EXPECT_FALSE(ref::all_finite_elements(y.data(), n)) << "n=" << n << " at " << at;
        EXPECT_FALSE(std::isfinite(sum_squares_elements(y.data(), n))) << "n=" << n;
        EXPECT_FALSE(std::isfinite(ref::sum_squares_elements(y.data(), n))) << "n=" << n;
      }
    }
    Vec big(size_t(std::max<int64_t>(n, 1)));
    for (size_t i = 0; i < big.size(); ++i) big[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    EXPECT_TRUE(std::isfinite(sum_squares_elements(big.data(), n))) << "n=" << n;
    EXPECT_TRUE(std::isfinite(ref::sum_squares_elements(big.data(), n))) << "n=" << n;
  }
}

// ---- non-finite inputs propagate as in the reference ----------------------------------------

TEST_F(OpsAvx512, NonFiniteInputsPropagateLikeTheReference) {
  const int64_t N = 5, D = 37, V = 19;
  // Row 0: a NaN, row 1: +inf, row 2: -inf, row 3: +inf and -inf, row 4 finite.
  auto poison = [&](Vec v, int64_t W) {
    v[0 * W + 3] = kNan;
    v[1 * W + 20] = kInf;
    v[2 * W + W - 1] = -kInf;
    v[3 * W + 0] = kInf;
    v[3 * W + 1] = -kInf;
    return v;
  };
  auto nonfinite_bound = [](const Vec& want) {
    std::vector<double> b(want.size());
    for (size_t i = 0; i < want.size(); ++i) b[i] = 1e-5 * (1 + std::fabs(want[i]));
    return b;
  };
  const Vec x = poison(random_vector(N * D, 20), D), gain = random_vector(D, 21, 0.5f, 1.5f);
  const Vec dout = poison(random_vector(N * D, 22), D);
  Vec o1(N * D), o2(N * D), r1(N), r2(N);
  rmsnorm_forward(o1.data(), r1.data(), x.data(), gain.data(), N, D, 1e-5f);
  ref::rmsnorm_forward(o2.data(), r2.data(), x.data(), gain.data(), N, D, 1e-5f);
  expect_within(o1, o2, nonfinite_bound(o2), "rmsnorm out");
  expect_within(r1, r2, nonfinite_bound(r2), "rmsnorm rstd");
  const Vec xf = random_vector(N * D, 23);
  rmsnorm_forward(o2.data(), r2.data(), xf.data(), gain.data(), N, D, 1e-5f);
  Vec dx1(N * D, 0.f), dx2(N * D, 0.f), dg1(D, 0.f), dg2(D, 0.f);
  rmsnorm_backward(dx1.data(), dg1.data(), dout.data(), xf.data(), gain.data(), r2.data(), N, D);
  ref::rmsnorm_backward(dx2.data(), dg2.data(), dout.data(), xf.data(), gain.data(), r2.data(),
                        N, D);
  expect_within(dx1, dx2, nonfinite_bound(dx2), "rmsnorm dx");
  expect_within(dg1, dg2, nonfinite_bound(dg2), "rmsnorm dgain");

  // SwiGLU: poisoned gates (rows 0..3) and up values (row 4).
  Vec a = poison(random_vector(N * 2 * D, 24, -5.f, 5.f), 2 * D);
  a[4 * 2 * D + D + 2] = kNan;
  a[4 * 2 * D + D + 3] = kInf;
  Vec h1(N * D), h2(N * D);
  swiglu_forward(h1.data(), a.data(), N, D);
  ref::swiglu_forward(h2.data(), a.data(), N, D);
  expect_within(h1, h2, nonfinite_bound(h2), "swiglu_forward");
  Vec da1(N * 2 * D, 0.f), da2(N * 2 * D, 0.f);
  swiglu_backward(da1.data(), dout.data(), a.data(), N, D);
  ref::swiglu_backward(da2.data(), dout.data(), a.data(), N, D);
  expect_within(da1, da2, nonfinite_bound(da2), "swiglu_backward");

  // Cross-entropy: any non-finite logit makes its row NaN in both.
  const Vec logits = poison(random_vector(N * V, 25, -3.f, 3.f), V);
  const auto tgt = random_tokens(N, V, 26);
  Vec p1(N * V), p2(N * V), l1(N), l2(N);
  const double m1 = crossentropy_forward(p1.data(), l1.data(), logits.data(), tgt.data(), N, V);
  const double m2 =
      ref::crossentropy_forward(p2.data(), l2.data(), logits.data(), tgt.data(), N, V);
  expect_within(p1, p2, nonfinite_bound(p2), "crossentropy probs");
  expect_within(l1, l2, nonfinite_bound(l2), "crossentropy losses");
  EXPECT_TRUE(std::isnan(m1) && std::isnan(m2));
}

// ---- thread-count independence (1 vs 2 threads, bit for bit), on both paths --------------

void all_ops_thread_independent() {
  // Sizes above every parallel threshold in ops.cc but embedding_backward's (tested below
  // with a wider table), and not multiples of 16.
  const int64_t N = 1031, D = 257, F = 673, V = 259, Dw = 4099;
  const auto tok = random_tokens(N, V, 30);
  const Vec x = random_vector(N * D, 31), gain = random_vector(D, 32, 0.5f, 1.5f);
  const Vec dout = random_vector(N * D, 33), table = random_vector(V * D, 34);
  const Vec a = random_vector(N * 2 * F, 35, -8.f, 8.f), dh = random_vector(N * F, 36);
  const Vec logits = random_vector(N * V, 37, -6.f, 6.f), doutw = random_vector(N * Dw, 38);
  std::vector<std::vector<Vec>> out(2);
  for (int th : {1, 2}) {
    std::vector<Vec>& o = out[th - 1];
    with_threads(th, [&] {
      Vec e(N * D), dt(V * D, 0.f), y(N * D), r(N), dx(N * D, 0.f), dg(D, 0.f);
      embedding_forward(e.data(), tok.data(), N, table.data(), V, D);
      embedding_backward(dt.data(), dout.data(), tok.data(), N, V, D);
      rmsnorm_forward(y.data(), r.data(), x.data(), gain.data(), N, D, 1e-5f);
      rmsnorm_backward(dx.data(), dg.data(), dout.data(), x.data(), gain.data(), r.data(), N, D);
      Vec h(N * F), da(N * 2 * F, 0.f), p(N * V), l(N), dl(N * V);
      swiglu_forward(h.data(), a.data(), N, F);
      swiglu_backward(da.data(), dh.data(), a.data(), N, F);
      const double m = crossentropy_forward(p.data(), l.data(), logits.data(), tok.data(), N, V);
      crossentropy_backward(dl.data(), p.data(), tok.data(), N, V, 0.5f);
      Vec s(N * D), ra = x, rb = dout, ax = x;
      residual_forward(s.data(), x.data(), dout.data(), N * D);
      residual_backward(ra.data(), rb.data(), dout.data(), N * D);
      axpy(ax.data(), dout.data(), 0.7f, N * D);
      Vec dtw(V * Dw, 0.f);
      embedding_backward(dtw.data(), doutw.data(), tok.data(), N, V, Dw);
      const double ss = sum_squares_elements(doutw.data(), N * Dw);
      Vec ssv(2);
      std::memcpy(ssv.data(), &ss, sizeof ss);
      o = {e, dt, y, r, dx, dg, h, da, p, l, Vec{float(m)}, dl, s, ra, rb, ax, dtw, ssv};
    });
  }
  const char* names[] = {"embed", "dtable", "rms out", "rstd", "dx", "dgain", "swiglu h",
                         "swiglu da", "probs", "losses", "mean loss", "dlogits", "residual",
                         "residual da", "residual db", "axpy", "dtable (wide)",
                         "sum of squares"};
  for (size_t i = 0; i < out[0].size(); ++i)
    EXPECT_TRUE(same_bytes(out[0][i], out[1][i])) << names[i] << " on " << isa_name(active_isa());
}

TEST_F(OpsAvx512, EveryOpIsIndependentOfThreadCount) { all_ops_thread_independent(); }

TEST(OpsScalar, EveryOpIsIndependentOfThreadCount) {
  set_isa(Isa::scalar);
  all_ops_thread_independent();
  clear_isa_override();
}

// Called from inside a parallel region (each thread its own data), an op still does all of
// its work: the nested region has one thread.
TEST(OpsNested, CallsFromInsideAParallelRegionDoTheWholeOp) {
  const int64_t n = 1 << 20;  // above every threshold
  std::vector<Vec> a(2, Vec(n, 1.f)), b(2, Vec(n, 2.f)), out(2, Vec(n, 0.f));
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    residual_forward(out[t].data(), a[t].data(), b[t].data(), n);
  }
  for (const Vec& o : out) EXPECT_EQ(o, Vec(n, 3.f));
}

// Isa::scalar (MXTRAIN_ISA=scalar) runs the reference; AVX-512 exp gives other bits.
TEST(OpsScalar, ScalarIsaSelectsTheReference) {
  const int64_t N = 33, F = 65;
  const Vec a = random_vector(N * 2 * F, 40, -6.f, 6.f);
  Vec h(N * F), want(N * F);
  ref::swiglu_forward(want.data(), a.data(), N, F);
  set_isa(Isa::scalar);
  swiglu_forward(h.data(), a.data(), N, F);
  EXPECT_TRUE(same_bytes(h, want));
  if (isa_supported(Isa::avx512)) {
    set_isa(Isa::avx512);
    swiglu_forward(h.data(), a.data(), N, F);
    EXPECT_FALSE(same_bytes(h, want)) << "the AVX-512 path was expected to round differently";
  }
  clear_isa_override();
}

}  // namespace
}  // namespace mxtrain
