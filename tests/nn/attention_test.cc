// tests/nn/attention_test.cc — causal attention (nn/ops.h, nn/attention_kernels.h): the FP32
// reference against a textbook double-precision attention and finite differences, the AVX-512
// BF16 kernel against the BF16 reference on shapes crossing every block edge, BF16 against
// FP32, lse, causality, thread-count independence, the write (not accumulate) contract, RoPE
// fused into the reads (bit for bit the unfused sequence), dispatch and argument errors.
//
// Tolerances are relative to the largest magnitude of the reference tensor (kBlockOrder,
// kFp32Ref, kBf16VsFp32 below, each with its reason). ATTN_TEST_VERBOSE=1 in the environment
// prints every measured worst difference (and the exp error) to stderr.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/isa.h"
#include "mxtrain/nn/ops.h"
#include "nn/attention_kernels.h"
#include "nn/finite_diff.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using nn_detail::attention_backward_avx512bf16;
using nn_detail::attention_backward_ref;
using nn_detail::attention_forward_avx512bf16;
using nn_detail::attention_forward_ref;
using layer_test::same_bytes;
using testing_nn::random_vector;

// AVX-512 kernel vs BF16 reference. Both round the same operands to BF16; they differ in FP32
// summation order (~1e-7 relative per sum) and in exp (polynomial, < 2e-7). Such a difference
// can move a P or dS value across a BF16 rounding boundary, changing that operand by one BF16
// step (2^-8 relative) in one path only: one such term moves an output by at most 2^-8 of the
// largest term. Measured worst: 4e-5 (out), 1e-7 (lse), 8e-5 (dqkv) of the largest magnitude.
constexpr double kBlockOrder = 1e-3;
// FP32 reference vs textbook attention in double: FP32 rounding of sums of at most T + hd
// terms. Measured worst 5e-7 of the largest magnitude.
constexpr double kFp32Ref = 5e-6;
// BF16 vs FP32: each operand carries up to 2^-9 relative rounding, so a score q·k/sqrt(hd)
// moves by ~2^-8 of Σ|q_i k_i| / sqrt(hd), which P = exp(S - lse) turns into a relative error
// of the same size, on top of the rounding of P, V, dO, dS. Measured worst 4.4e-3 of the
// largest magnitude (inputs uniform in [-2, 2]).
constexpr double kBf16VsFp32 = 1.5e-2;

bool fast_available() {
  return isa_supported(Isa::avx512) && cpu_features().avx512_bf16;
}

template <class Fn>
void with_threads(int n, Fn fn) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(prev);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Every element: |a - ref| <= tol * max|ref| (and no NaN).
void expect_close(const std::vector<float>& a, const std::vector<float>& ref, double tol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), ref.size()) << what;
  const double bound = tol * std::max(max_abs(ref), 1e-30);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(ref[i]));
    if (!(d <= worst)) worst = d, at = i;
  }
  if (std::getenv("ATTN_TEST_VERBOSE"))
    std::fprintf(stderr, "%-40s worst/max|ref| = %.3g\n", what.c_str(), worst / std::max(max_abs(ref), 1e-30));
  EXPECT_LE(worst, bound) << what << ": worst at " << at << ": " << a[at] << " vs " << ref[at]
                          << " (max|ref| " << max_abs(ref) << ")";
}

struct Shape {
  int64_t B, T, D, H;
  int64_t hd() const { return D / H; }
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " D=" + std::to_string(D) +
           " H=" + std::to_string(H);
  }
};

// ---- textbook attention in double -----------------------------------------------------------

struct Textbook {
  std::vector<float> out, lse, dqkv;
};

Textbook textbook(const std::vector<float>& qkv, const std::vector<float>& dout, Shape s) {
  const int64_t B = s.B, T = s.T, D = s.D, H = s.H, hd = s.hd(), C3 = 3 * D;
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> out(B * T * D, 0.0), dqkv(B * T * C3, 0.0);
  Textbook r;
  r.lse.resize(B * H * T);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return (b * T + t) * C3 + part * D + h * hd + i;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1), dp(t + 1);
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) dot += double(qkv[at(b, t, 0, h, i)]) * qkv[at(b, u, 1, h, i)];
          p[u] = dot * scale;
          mx = std::max(mx, p[u]);
        }
        double sum = 0;
        for (auto& v : p) sum += (v = std::exp(v - mx));
        r.lse[(b * H + h) * T + t] = float(mx + std::log(sum));
        for (auto& v : p) v /= sum;
        const float* g = dout.data() + (b * T + t) * D + h * hd;
        double pdp = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) {
            out[(b * T + t) * D + h * hd + i] += p[u] * qkv[at(b, u, 2, h, i)];
            d += double(g[i]) * qkv[at(b, u, 2, h, i)];
            dqkv[at(b, u, 2, h, i)] += p[u] * g[i];
          }
          dp[u] = d;
          pdp += p[u] * d;
        }
        for (int64_t u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - pdp) * scale;
          for (int64_t i = 0; i < hd; ++i) {
            dqkv[at(b, t, 0, h, i)] += ds * qkv[at(b, u, 1, h, i)];
            dqkv[at(b, u, 1, h, i)] += ds * qkv[at(b, t, 0, h, i)];
          }
        }
      }
  r.out.assign(out.begin(), out.end());
  r.dqkv.assign(dqkv.begin(), dqkv.end());
  return r;
}

// ---- one run of a kernel ---------------------------------------------------------------------

enum class Via { ref, fast, api };

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run(Via path, AttnPrecision p, const std::vector<float>& qkv, const std::vector<float>& dout,
        Shape s, float dqkv_fill = 0.f, const RopeTable* rope = nullptr) {
  const int64_t B = s.B, T = s.T, D = s.D, H = s.H;
  Result r;
  r.out.assign(B * T * D, std::numeric_limits<float>::quiet_NaN());
  r.lse.assign(B * H * T, std::numeric_limits<float>::quiet_NaN());
  r.dqkv.assign(B * T * 3 * D, dqkv_fill);
  switch (path) {
    case Via::ref:
      attention_forward_ref(r.out.data(), r.lse.data(), qkv.data(), B, T, D, H, p, rope);
      attention_backward_ref(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(),
                             B, T, D, H, p, rope);
      break;
    case Via::fast:
      attention_forward_avx512bf16(r.out.data(), r.lse.data(), qkv.data(), B, T, D, H, rope);
      attention_backward_avx512bf16(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                                r.lse.data(), B, T, D, H, rope);
      break;
    case Via::api:
      attention_forward(r.out.data(), r.lse.data(), qkv.data(), B, T, D, H, p, rope);
      attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), B,
                         T, D, H, p, rope);
      break;
  }
  return r;
}

struct Inputs {
  std::vector<float> qkv, dout;
};
Inputs inputs(Shape s, uint32_t seed) {
  return {random_vector(s.B * s.T * 3 * s.D, seed, -2.f, 2.f),
          random_vector(s.B * s.T * s.D, seed + 1)};
}

// ---- FP32 reference ------------------------------------------------------------------------

TEST(Attention, Fp32ReferenceMatchesTextbook) {
  for (Shape s : {Shape{1, 1, 4, 1}, Shape{2, 5, 8, 2}, Shape{1, 33, 12, 3},
                  Shape{2, 130, 64, 2}, Shape{1, 70, 9, 1}}) {
    const Inputs in = inputs(s, uint32_t(40 + s.T));
    const Textbook want = textbook(in.qkv, in.dout, s);
    const Result got = run(Via::ref, AttnPrecision::fp32, in.qkv, in.dout, s);
    expect_close(got.out, want.out, kFp32Ref, "out " + s.str());
    expect_close(got.lse, want.lse, kFp32Ref, "lse " + s.str());
    expect_close(got.dqkv, want.dqkv, kFp32Ref, "dqkv " + s.str());
  }
}

TEST(Attention, LseIsTheLogSumExpOfTheScaledCausalScores) {
  // T = 1: one key, so out = v and lse = q·k / sqrt(hd).
  std::vector<float> qkv = random_vector(3 * 8, 3), out(8), lse(2);
  attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 8, 2, AttnPrecision::fp32);
  for (int h = 0; h < 2; ++h) {
    double dot = 0;
    for (int i = 0; i < 4; ++i) dot += double(qkv[h * 4 + i]) * qkv[8 + h * 4 + i];
    EXPECT_NEAR(lse[h], dot / 2, 1e-6);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[h * 4 + i], qkv[16 + h * 4 + i]);
  }
  // Equal scores over t + 1 keys: lse = score + log(t + 1).
  const int64_t T = 100, D = 4;
  std::vector<float> q(T * 3 * D, 0.f), o(T * D), l(T);
  attention_forward(o.data(), l.data(), q.data(), 1, T, D, 1, AttnPrecision::fp32);
  for (int64_t t = 0; t < T; ++t) EXPECT_NEAR(l[t], std::log(double(t + 1)), 2e-6) << t;
}

TEST(Attention, Fp32BackwardMatchesFiniteDifferences) {
  for (Shape s : {Shape{2, 5, 8, 2}, Shape{1, 70, 4, 1}}) {
    std::vector<float> qkv = random_vector(s.B * s.T * 3 * s.D, 60);
    const std::vector<float> w = random_vector(s.B * s.T * s.D, 61);
    std::vector<float> out(s.B * s.T * s.D), lse(s.B * s.H * s.T);
    auto f = [&] {
      attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.D, s.H,
                        AttnPrecision::fp32);
      return testing_nn::dot_f64(out, w);
    };
    f();
    std::vector<float> dqkv(qkv.size());
    attention_backward(dqkv.data(), w.data(), qkv.data(), out.data(), lse.data(), s.B, s.T,
                       s.D, s.H, AttnPrecision::fp32);
    std::vector<size_t> idx;  // the long shape: a spread of elements across both key blocks
    if (s.T > 64)
      for (size_t i = 0; i < qkv.size(); i += 7) idx.push_back(i);
    testing_nn::expect_fd_close(qkv, dqkv, f, testing_nn::kH, testing_nn::kRtol,
                                testing_nn::kAtol, "attention dqkv " + s.str(), idx);
  }
}

// ---- the BF16 kernels ------------------------------------------------------------------------

TEST(Attention, FastExpIsAccurate) {
  if (!fast_available()) GTEST_SKIP() << "no AVX512-BF16";
  std::vector<float> x;
  for (double v = -87.0; v <= 88.0; v += 0.000731) x.push_back(float(v));
  std::vector<float> y(x.size());
  nn_detail::exp_avx512(y.data(), x.data(), int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(double(x[i]));
    worst = std::max(worst, std::fabs(y[i] - e) / e);
  }
  if (std::getenv("ATTN_TEST_VERBOSE")) std::fprintf(stderr, "exp worst rel %.3g\n", worst);
  EXPECT_LT(worst, 2e-7);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> sx = {0.f, -inf, -200.f, 100.f, inf,
                           std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> sy(sx.size());
  nn_detail::exp_avx512(sy.data(), sx.data(), int64_t(sx.size()));
  EXPECT_EQ(sy[0], 1.f);
  EXPECT_EQ(sy[1], 0.f);
  EXPECT_EQ(sy[2], 0.f);
  EXPECT_EQ(sy[3], inf);
  EXPECT_EQ(sy[4], inf);
  EXPECT_TRUE(std::isnan(sy[5]));
}

TEST(Attention, FastBf16MatchesBf16ReferenceOnAwkwardShapes) {
  if (!fast_available()) GTEST_SKIP() << "no AVX512-BF16";
  for (int64_t hd : {16, 32, 64, 128, 24, 40, 9})
    for (int64_t T : {1, 31, 33, 63, 64, 65, 127, 129, 257}) {
      const int64_t H = hd >= 64 ? 1 : 2, B = T > 128 ? 1 : 2;
      const Shape s{B, T, hd * H, H};
      const Inputs in = inputs(s, uint32_t(7 * T + hd));
      const Result ref = run(Via::ref, AttnPrecision::bf16, in.qkv, in.dout, s);
      const Result fast = run(Via::fast, AttnPrecision::bf16, in.qkv, in.dout, s);
      expect_close(fast.out, ref.out, kBlockOrder, "out " + s.str());
      expect_close(fast.lse, ref.lse, kBlockOrder, "lse " + s.str());
      expect_close(fast.dqkv, ref.dqkv, kBlockOrder, "dqkv " + s.str());
    }
}

TEST(Attention, Bf16IsWithinBf16BoundOfFp32) {
  for (Shape s : {Shape{2, 65, 64, 2}, Shape{1, 257, 128, 2}, Shape{2, 33, 24, 1}}) {
    const Inputs in = inputs(s, uint32_t(90 + s.T));
    const Result f32 = run(Via::ref, AttnPrecision::fp32, in.qkv, in.dout, s);
    const Result b16 = run(Via::api, AttnPrecision::bf16, in.qkv, in.dout, s);
    expect_close(b16.out, f32.out, kBf16VsFp32, "out " + s.str());
    expect_close(b16.lse, f32.lse, kBf16VsFp32, "lse " + s.str());
    expect_close(b16.dqkv, f32.dqkv, kBf16VsFp32, "dqkv " + s.str());
  }
}

// ---- contract ------------------------------------------------------------------------------

std::vector<Via> paths() {
  std::vector<Via> p{Via::ref};
  if (fast_available()) p.push_back(Via::fast);
  return p;
}

TEST(Attention, ResultDoesNotDependOnThreadCount) {
  const Shape s{2, 130, 96, 3};
  const Inputs in = inputs(s, 70);
  for (Via path : paths())
    for (AttnPrecision p : {AttnPrecision::fp32, AttnPrecision::bf16}) {
      if (path == Via::fast && p == AttnPrecision::fp32) continue;
      Result r1, r2;
      with_threads(1, [&] { r1 = run(path, p, in.qkv, in.dout, s); });
      with_threads(2, [&] { r2 = run(path, p, in.qkv, in.dout, s); });
      EXPECT_TRUE(same_bytes(r1.out, r2.out) && same_bytes(r1.lse, r2.lse) &&
                  same_bytes(r1.dqkv, r2.dqkv))
          << "path " << int(path) << " precision " << int(p);
    }
}

TEST(Attention, BackwardWritesEveryElementOfDqkv) {
  const Shape s{2, 70, 48, 2};
  const Inputs in = inputs(s, 80);
  for (Via path : paths()) {
    const AttnPrecision p = AttnPrecision::bf16;
    const Result zero = run(path, p, in.qkv, in.dout, s, 0.f);
    const Result filled = run(path, p, in.qkv, in.dout, s, std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(same_bytes(zero.dqkv, filled.dqkv)) << "path " << int(path);
  }
}

TEST(Attention, IsCausal) {
  const Shape s{1, 100, 32, 2};
  Inputs in = inputs(s, 50);
  const int64_t t0 = 70;  // change k and v of tokens t0.. ; outputs before t0 must not move
  for (Via path : paths())
    for (AttnPrecision p : {AttnPrecision::fp32, AttnPrecision::bf16}) {
      if (path == Via::fast && p == AttnPrecision::fp32) continue;
      std::vector<float> q2 = in.qkv;
      for (int64_t t = t0; t < s.T; ++t)
        for (int64_t c = s.D; c < 3 * s.D; ++c) q2[t * 3 * s.D + c] += 5.f;
      const Result a = run(path, p, in.qkv, in.dout, s), b = run(path, p, q2, in.dout, s);
      for (int64_t i = 0; i < t0 * s.D; ++i) ASSERT_EQ(a.out[i], b.out[i]) << i;
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t t = 0; t < t0; ++t) ASSERT_EQ(a.lse[h * s.T + t], b.lse[h * s.T + t]);
      EXPECT_NE(a.out[t0 * s.D], b.out[t0 * s.D]);
    }
}

TEST(Attention, DispatchFollowsIsaAndPrecision) {
  const Shape s{1, 65, 64, 2};
  const Inputs in = inputs(s, 90);
  const Result ref = run(Via::ref, AttnPrecision::bf16, in.qkv, in.dout, s);
  set_isa(Isa::scalar);
  EXPECT_EQ(nn_detail::attention_path(AttnPrecision::bf16), Path::scalar);
  const Result scalar = run(Via::api, AttnPrecision::bf16, in.qkv, in.dout, s);
  clear_isa_override();
  EXPECT_TRUE(same_bytes(scalar.out, ref.out) && same_bytes(scalar.dqkv, ref.dqkv));
  EXPECT_EQ(nn_detail::attention_path(AttnPrecision::fp32), Path::scalar);
  const Result f32 = run(Via::api, AttnPrecision::fp32, in.qkv, in.dout, s);
  const Result f32ref = run(Via::ref, AttnPrecision::fp32, in.qkv, in.dout, s);
  EXPECT_TRUE(same_bytes(f32.out, f32ref.out) && same_bytes(f32.dqkv, f32ref.dqkv));
  if (fast_available() && active_isa() >= Isa::avx512) {
    EXPECT_EQ(nn_detail::attention_path(AttnPrecision::bf16), Path::avx512bf16);
    const Result fast = run(Via::fast, AttnPrecision::bf16, in.qkv, in.dout, s);
    const Result api = run(Via::api, AttnPrecision::bf16, in.qkv, in.dout, s);
    EXPECT_TRUE(same_bytes(api.out, fast.out) && same_bytes(api.dqkv, fast.dqkv));
  }
}

// RoPE taken as attention reads q and k: bit for bit rope_forward on a copy, attention without
// it, then rope_backward on dqkv (the unfused sequence), on every path and precision, on head
// dimensions whose halves are not whole vectors (2, 6, 18, 40) and lengths across the block
// edges; qkv itself is left as it was.
TEST(Attention, FusedRopeIsRopeThenAttentionBitForBit) {
  for (Via path : paths())
    for (AttnPrecision p : {AttnPrecision::fp32, AttnPrecision::bf16}) {
      if (path == Via::fast && p == AttnPrecision::fp32) continue;
      for (int64_t hd : {2, 6, 18, 40, 64})
        for (int64_t T : {1, 31, 33, 65, 130}) {
          const int64_t H = 2, B = 2;
          const Shape s{B, T, hd * H, H};
          const Inputs in = inputs(s, uint32_t(11 * T + hd));
          const RopeTable rope(T + 3, hd, 10000.0);
          const std::vector<float> before = in.qkv;
          const Result fused = run(path, p, in.qkv, in.dout, s, 0.f, &rope);
          EXPECT_TRUE(same_bytes(in.qkv, before)) << "qkv was written";
          std::vector<float> rotated = in.qkv;
          rope_forward(rotated.data(), rope, B, T, s.D, H);
          Result seq = run(path, p, rotated, in.dout, s);
          rope_backward(seq.dqkv.data(), rope, B, T, s.D, H);
          const std::string what = "path " + std::to_string(int(path)) + " precision " +
                                   std::to_string(int(p)) + " " + s.str();
          EXPECT_TRUE(same_bytes(fused.out, seq.out)) << "out " << what;
          EXPECT_TRUE(same_bytes(fused.lse, seq.lse)) << "lse " << what;
          EXPECT_TRUE(same_bytes(fused.dqkv, seq.dqkv)) << "dqkv " << what;
        }
    }
  // A table for another head dimension, or too few positions, is refused.
  const Shape s{1, 8, 16, 2};
  const Inputs in = inputs(s, 3);
  std::vector<float> out(8 * 16), lse(2 * 8);
  const RopeTable wrong_hd(8, 4, 10000.0), short_table(7, 8, 10000.0);
  for (const RopeTable* t : {&wrong_hd, &short_table})
    EXPECT_THROW(attention_forward(out.data(), lse.data(), in.qkv.data(), 1, 8, 16, 2,
                                   AttnPrecision::bf16, t),
                 Error);
}

// Attention over a KV cache (attention_cached): the AVX-512 kernel gives the reference's bytes
// on head dimensions 1 to 64 (partial vectors of dimensions: 1, 15, 17, 31, 33) and key counts
// that fill no, one or several vectors and blocks of 64 keys (1, 15, 17, 33, 63, 64, 65, 129),
// with one query or three (later queries see more keys), a cache longer than the keys held,
// and scores large enough (inputs in [-4, 4]) that exp spans many binades. The API runs the
// reference at the scalar level.
TEST(AttentionCached, Avx512MatchesReferenceBitForBit) {
  using nn_detail::attention_cached_avx512;
  using nn_detail::attention_cached_ref;
  const bool fast = isa_supported(Isa::avx512);
  int cases = 0;
  for (int64_t hd : {1, 15, 16, 17, 31, 33, 64})
    for (int64_t H : {1, 3})
      for (int64_t keys : {1, 15, 17, 33, 63, 64, 65, 129})
        for (int64_t n : {1, 3}) {
          if (n > keys) continue;
          const int64_t D = hd * H, pos = keys - n, Tc = keys + 7;
          SCOPED_TRACE("hd " + std::to_string(hd) + " H " + std::to_string(H) + " keys " +
                       std::to_string(keys) + " n " + std::to_string(n));
          const uint32_t seed = uint32_t(1000 * hd + 100 * H + keys + n);
          const std::vector<float> qkv = random_vector(size_t(n * 3 * D), seed, -4.f, 4.f);
          const std::vector<float> kT = random_vector(size_t(D * Tc), seed + 1, -4.f, 4.f);
          const std::vector<float> v = random_vector(size_t(Tc * D), seed + 2, -4.f, 4.f);
          std::vector<float> want(size_t(n * D)), got(size_t(n * D)), api(size_t(n * D));
          std::vector<float> probs(size_t(n * H * Tc));
          attention_cached_ref(want.data(), qkv.data(), n, pos, D, H, kT.data(), v.data(), Tc,
                               probs.data());
          set_isa(Isa::scalar);
          attention_cached(api.data(), qkv.data(), n, pos, D, H, kT.data(), v.data(), Tc,
                           probs.data());
          clear_isa_override();
          EXPECT_TRUE(same_bytes(api, want));
          if (!fast) continue;
          attention_cached_avx512(got.data(), qkv.data(), n, pos, D, H, kT.data(), v.data(),
                                  Tc, probs.data());
          EXPECT_TRUE(same_bytes(got, want));
          ++cases;
        }
  if (fast) EXPECT_EQ(cases, 7 * 2 * (8 * 2 - 1));
  std::vector<float> buf(64);
  EXPECT_THROW(attention_cached(buf.data(), buf.data(), 2, 3, 4, 1, buf.data(), buf.data(), 4,
                                buf.data()),
               Error);  // 2 queries after 3 positions need a cache of 5
}

TEST(Attention, ArgumentErrors) {
  std::vector<float> qkv(3 * 10), out(10), lse(3), dqkv(3 * 10), dout(10);
  const auto p = AttnPrecision::bf16;
  EXPECT_THROW(attention_forward(out.data(), lse.data(), qkv.data(), 1, 1, 10, 3, p), Error);
  EXPECT_THROW(attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                  1, 1, 10, 3, p),
               Error);
  EXPECT_THROW(attention_forward(out.data(), nullptr, qkv.data(), 1, 1, 10, 2, p), Error);
  EXPECT_THROW(attention_forward(nullptr, lse.data(), qkv.data(), 1, 1, 10, 2, p), Error);
  EXPECT_THROW(attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), nullptr, 1,
                                  1, 10, 2, p),
               Error);
  EXPECT_THROW(attention_backward(dqkv.data(), dout.data(), qkv.data(), nullptr, lse.data(), 1,
                                  1, 10, 2, p),
               Error);
  EXPECT_THROW(attention_forward(out.data(), lse.data(), qkv.data(), 0, 1, 10, 2, p), Error);
}

}  // namespace
}  // namespace mxtrain
