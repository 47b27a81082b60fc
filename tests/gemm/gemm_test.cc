// tests/gemm/gemm_test.cc — BF16/FP32 oneDNN GEMMs and the MX GEMM against the FP64 reference.
//
// Every product is compared element by element with gemm_ref_f64 on the same (exactly
// representable) inputs. The tolerance is the classic bound for a length-K FP32 dot product:
// |C - C_exact| <= K * u * Σ_k |a_ik| |b_kj| with u = 2^-24 (unit roundoff of FP32), plus one
// more u·|C0| when accumulating into an existing C0. oneDNN may reorder and block the sum;
// the bound holds for any summation order. Padding beyond each matrix's width is filled with
// NaN, so reading outside the described operand shows up as a NaN in the result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/formats.h"
#include "mxtrain/gemm.h"
#include "mxtrain/quantize.h"
#include "gemm/onednn_call.h"

namespace mxtrain {
// gtest prints a GemmShapes parameter by name (found by argument-dependent lookup).
void PrintTo(GemmShapes s, std::ostream* os) { *os << gemm_shapes_name(s); }
namespace {

constexpr double kU32 = 1.0 / (1 << 24);  // FP32 unit roundoff
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// A stored matrix: rows x width, row stride ld >= width, padding NaN.
struct Stored {
  int64_t rows = 0, width = 0, ld = 0;
  std::vector<float> v;  // values are exactly BF16-representable
  float at(int64_t r, int64_t c) const { return v[size_t(r * ld + c)]; }
};

Stored make_stored(int64_t rows, int64_t width, int64_t pad, std::mt19937& rng) {
  Stored s{rows, width, width + pad, {}};
  s.v.assign(size_t(std::max<int64_t>(rows * s.ld, 1)), kNaN);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      s.v[size_t(r * s.ld + c)] = bf16_to_f32(f32_to_bf16(nd(rng)));
  return s;
}

std::vector<uint16_t> to_bf16(const Stored& s) {
  std::vector<uint16_t> out(s.v.size());
  for (size_t i = 0; i < s.v.size(); ++i) out[i] = f32_to_bf16(s.v[i]);
  return out;
}

// |X| with NaN padding kept (it is never read by a correct GEMM).
Stored abs_of(const Stored& s) {
  Stored a = s;
  for (float& x : a.v) x = std::fabs(x);
  return a;
}

struct Shape {
  int64_t M, N, K;
};
const Shape kShapes[] = {{1, 1, 1}, {31, 33, 65}, {33, 1, 257}, {64, 64, 64}, {127, 129, 31}};

enum class Kind { bf16, f32 };

void check_case(Kind kind, Shape sh, bool ta, bool tb, bool acc, int64_t pad) {
  SCOPED_TRACE(::testing::Message() << "M=" << sh.M << " N=" << sh.N << " K=" << sh.K
                                    << " ta=" << ta << " tb=" << tb << " acc=" << acc
                                    << " pad=" << pad);
  std::mt19937 rng(uint32_t(sh.M * 7919 + sh.N * 31 + sh.K + ta * 2 + tb + acc * 5));
  Stored A = ta ? make_stored(sh.K, sh.M, pad, rng) : make_stored(sh.M, sh.K, pad, rng);
  Stored B = tb ? make_stored(sh.N, sh.K, pad, rng) : make_stored(sh.K, sh.N, pad, rng);
  Stored C0 = make_stored(sh.M, sh.N, pad, rng);
  std::vector<float> C = C0.v;
  if (kind == Kind::bf16) {
    auto a16 = to_bf16(A), b16 = to_bf16(B);
    gemm_bf16(ta, tb, sh.M, sh.N, sh.K, a16.data(), A.ld, b16.data(), B.ld, C.data(), C0.ld, acc);
  } else {
    gemm_f32(ta, tb, sh.M, sh.N, sh.K, A.v.data(), A.ld, B.v.data(), B.ld, C.data(), C0.ld, acc);
  }
  std::vector<double> ref(size_t(sh.M * sh.N)), bound(size_t(sh.M * sh.N));
  gemm_ref_f64(ta, tb, sh.M, sh.N, sh.K, A.v.data(), A.ld, B.v.data(), B.ld, ref.data(), sh.N);
  Stored aa = abs_of(A), ab = abs_of(B);
  gemm_ref_f64(ta, tb, sh.M, sh.N, sh.K, aa.v.data(), A.ld, ab.v.data(), B.ld, bound.data(), sh.N);
  int bad = 0;
  for (int64_t i = 0; i < sh.M; ++i)
    for (int64_t j = 0; j < sh.N; ++j) {
      double c0 = acc ? C0.at(i, j) : 0.0;
      double want = ref[size_t(i * sh.N + j)] + c0;
      double tol = double(sh.K + 1) * kU32 * (bound[size_t(i * sh.N + j)] + std::fabs(c0));
      double got = C[size_t(i * C0.ld + j)];
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", want " << want
                      << " +- " << tol;
    }
  // Padding of C must be untouched.
  for (int64_t i = 0; i < sh.M; ++i)
    for (int64_t j = sh.N; j < C0.ld; ++j) EXPECT_TRUE(std::isnan(C[size_t(i * C0.ld + j)]));
}

void run_all(Kind kind) {
  for (const Shape& sh : kShapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc)
          for (int64_t pad : {0, 3}) check_case(kind, sh, ta, tb, acc, pad);
}

// Both of oneDNN's primitive shapings (mxtrain/gemm.h, GemmShapes) meet the same bound.
class GemmShaping : public ::testing::TestWithParam<GemmShapes> {
 protected:
  void SetUp() override { set_gemm_shapes(GetParam()); }
  void TearDown() override { clear_gemm_shapes_override(); }
};
TEST_P(GemmShaping, Bf16MatchesFp64ReferenceAllTransposesAwkwardShapes) { run_all(Kind::bf16); }
TEST_P(GemmShaping, F32MatchesFp64ReferenceAllTransposesAwkwardShapes) { run_all(Kind::f32); }

// The point of runtime shapes: products whose row count changes (an MoE expert's forward and
// dgrad: M; its wgrad: K) reuse one primitive, where exact shapes build one per row count.
TEST_P(GemmShaping, RowCountsBuildOnePrimitiveOnlyWithRuntimeShapes) {
  std::mt19937 rng(11);
  const int64_t N = 24, D = 40;
  Stored W = make_stored(N, D, 0, rng);
  auto w16 = to_bf16(W);
  const int64_t counts[] = {1, 31, 33, 63, 65, 129};
  for (int pass = 0; pass < 2; ++pass) {  // the second pass finds every primitive cached
    const long before = gemm_detail::onednn_primitives_created();
    for (int64_t n : counts) {
      Stored X = make_stored(n, D, 0, rng), G = make_stored(n, N, 0, rng);
      auto x16 = to_bf16(X), g16 = to_bf16(G);
      std::vector<float> y(size_t(n * N)), dw(size_t(N * D));
      gemm_bf16(false, true, n, N, D, x16.data(), D, w16.data(), D, y.data(), N, false);  // fwd
      gemm_bf16(true, false, N, D, n, g16.data(), N, x16.data(), D, dw.data(), D, false);  // wgrad
    }
    const long built = gemm_detail::onednn_primitives_created() - before;
    if (pass == 1)
      EXPECT_EQ(built, 0);
    else if (GetParam() == GemmShapes::runtime)
      EXPECT_LE(built, 2);  // one per (transposes, N, strides); 0 if an earlier test made them
    else
      EXPECT_EQ(built, 2 * long(std::size(counts)));
  }
}

// Which shaping a product gets: exact by default, runtime inside a VaryingRowsScope (nested
// scopes too, and only on the thread that holds it), and an override over both.
TEST(GemmShapesPolicy, ExactByDefaultRuntimeInsideVaryingRowsScopeOverrideWins) {
  if (std::getenv("MXTRAIN_GEMM_SHAPES")) GTEST_SKIP() << "MXTRAIN_GEMM_SHAPES is set";
  EXPECT_EQ(gemm_shapes(), GemmShapes::exact);
  {
    const VaryingRowsScope outer;
    EXPECT_EQ(gemm_shapes(), GemmShapes::runtime);
    {
      const VaryingRowsScope inner;
      EXPECT_EQ(gemm_shapes(), GemmShapes::runtime);
    }
    EXPECT_EQ(gemm_shapes(), GemmShapes::runtime);
    GemmShapes other_thread = GemmShapes::runtime;
    std::thread([&] { other_thread = gemm_shapes(); }).join();
    EXPECT_EQ(other_thread, GemmShapes::exact);
    set_gemm_shapes(GemmShapes::exact);
    EXPECT_EQ(gemm_shapes(), GemmShapes::exact);
    clear_gemm_shapes_override();
  }
  EXPECT_EQ(gemm_shapes(), GemmShapes::exact);
  set_gemm_shapes(GemmShapes::runtime);
  EXPECT_EQ(gemm_shapes(), GemmShapes::runtime);
  clear_gemm_shapes_override();
}

INSTANTIATE_TEST_SUITE_P(Shapings, GemmShaping,
                         ::testing::Values(GemmShapes::exact, GemmShapes::runtime),
                         [](const auto& info) { return std::string(gemm_shapes_name(info.param)); });

TEST(GemmBf16, RepeatedCallsUseCachedPrimitiveAndGiveSameBytes) {
  std::mt19937 rng(5);
  Stored A = make_stored(33, 65, 0, rng), B = make_stored(65, 17, 0, rng);
  auto a16 = to_bf16(A), b16 = to_bf16(B);
  std::vector<float> c1(33 * 17), c2(33 * 17);
  gemm_bf16(false, false, 33, 17, 65, a16.data(), 65, b16.data(), 17, c1.data(), 17, false);
  gemm_bf16(false, false, 33, 17, 65, a16.data(), 65, b16.data(), 17, c2.data(), 17, false);
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * 4));
}

TEST(GemmBf16, EmptyReductionZeroesOrKeepsC) {
  std::vector<float> c = {1.f, 2.f, 3.f, 4.f};
  gemm_bf16(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, c.data(), 2, true);
  EXPECT_EQ(c, (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
  gemm_bf16(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, c.data(), 2, false);
  EXPECT_EQ(c, (std::vector<float>(4, 0.f)));
}

TEST(GemmBf16, BadLeadingDimensionIsAnError) {
  std::vector<uint16_t> a(16), b(16);
  std::vector<float> c(16);
  EXPECT_THROW(gemm_bf16(false, false, 4, 4, 4, a.data(), 3, b.data(), 4, c.data(), 4, false),
               Error);
  EXPECT_THROW(gemm_bf16(false, true, 4, 4, 4, a.data(), 4, b.data(), 2, c.data(), 4, false),
               Error);
  EXPECT_THROW(gemm_f32(false, false, 4, 4, 4, nullptr, 4, nullptr, 4, nullptr, 3, false), Error);
  EXPECT_THROW(gemm_f32(false, false, -1, 4, 4, nullptr, 4, nullptr, 4, nullptr, 4, false), Error);
}

// ---- MX GEMM ------------------------------------------------------------------------------

std::vector<float> randn(int64_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// Expected result from the DEQUANTIZED operands (FP32 values, exact), FP64 accumulation.
// Tolerance: FP32 accumulation of the expanded products, K * u * Σ|a||b| (see top of file).
void expect_mx_matches(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, bool acc) {
  const int64_t M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols;
  const int64_t N = tb ? B.rows : B.cols;
  std::vector<float> a(A.data.size()), b(B.data.size());
  dequantize(A, a.data());
  dequantize(B, b.data());
  std::vector<double> ref(size_t(M * N)), bound(size_t(M * N));
  gemm_ref_f64(ta, tb, M, N, K, a.data(), A.cols, b.data(), B.cols, ref.data(), N);
  for (float& x : a) x = std::fabs(x);
  for (float& x : b) x = std::fabs(x);
  gemm_ref_f64(ta, tb, M, N, K, a.data(), A.cols, b.data(), B.cols, bound.data(), N);
  std::vector<float> c0 = randn(M * N, 99), c = c0;
  gemm_mx(ta, A, tb, B, c.data(), N, acc);
  int bad = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    double base = acc ? c0[size_t(i)] : 0.0;
    double want = ref[size_t(i)] + base;
    double tol = double(K + 1) * kU32 * (bound[size_t(i)] + std::fabs(base));
    if (!(std::fabs(c[size_t(i)] - want) <= tol) && bad++ < 5)
      ADD_FAILURE() << "C[" << i << "] = " << c[size_t(i)] << ", want " << want << " +- " << tol;
  }
}

struct MxShape {
  int64_t M, N, K;
};
const MxShape kMxShapes[] = {{1, 1, 1}, {33, 31, 65}, {64, 64, 64}, {17, 40, 100}};
const QuantConfig kCfg{Elem::e4m3, ScaleRounding::rceil};

TEST(GemmMx, ForwardRowwiseTimesRowwiseTransposed) {
  for (auto s : kMxShapes)
    for (int acc = 0; acc < 2; ++acc) {
      SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " acc=" << acc);
      auto x = randn(s.M * s.K, 1), w = randn(s.N * s.K, 2, 0.05f);
      ScaledTensor xq = quantize(x.data(), s.M, s.K, MXLayout::rowwise, kCfg);
      ScaledTensor wq = quantize(w.data(), s.N, s.K, MXLayout::rowwise, kCfg);
      expect_mx_matches(false, xq, true, wq, acc);
    }
}

TEST(GemmMx, DgradRowwiseTimesColwise) {
  for (auto s : kMxShapes) {
    SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K);
    // dx[T,in] = dy[T,out] · W[out,in]: K = out.
    auto dy = randn(s.M * s.K, 3, 1e-3f), w = randn(s.K * s.N, 4, 0.05f);
    ScaledTensor dyq = quantize(dy.data(), s.M, s.K, MXLayout::rowwise, kCfg);
    ScaledTensor wq = quantize(w.data(), s.K, s.N, MXLayout::colwise, kCfg);
    expect_mx_matches(false, dyq, false, wq, false);
  }
}

TEST(GemmMx, WgradColwiseTransposedTimesColwise) {
  for (auto s : kMxShapes)
    for (int acc = 0; acc < 2; ++acc) {
      SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " acc=" << acc);
      // dW[out,in] = dy[T,out]^T · x[T,in]: K = T.
      auto dy = randn(s.K * s.M, 5, 1e-3f), x = randn(s.K * s.N, 6);
      ScaledTensor dyq = quantize(dy.data(), s.K, s.M, MXLayout::colwise, kCfg);
      ScaledTensor xq = quantize(x.data(), s.K, s.N, MXLayout::colwise, kCfg);
      expect_mx_matches(true, dyq, false, xq, acc);
    }
}

TEST(GemmMx, Tile32WeightServesForwardAndDgrad) {
  for (auto s : kMxShapes) {
    SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K);
    auto x = randn(s.M * s.K, 7), w = randn(s.N * s.K, 8, 0.05f);
    ScaledTensor xq = quantize(x.data(), s.M, s.K, MXLayout::rowwise, kCfg);
    ScaledTensor wt = quantize(w.data(), s.N, s.K, MXLayout::tile, kCfg);  // W [out=N, in=K]
    expect_mx_matches(false, xq, true, wt, false);                      // forward
    auto dy = randn(s.M * s.N, 9, 1e-3f);
    ScaledTensor dyq = quantize(dy.data(), s.M, s.N, MXLayout::rowwise, kCfg);
    expect_mx_matches(false, dyq, false, wt, false);  // dgrad: dy[M,out] · W[out,in]
  }
}

TEST(GemmMx, E5M2AndFloorRoundingOperands) {
  QuantConfig g{Elem::e5m2, ScaleRounding::floor};
  auto dy = randn(33 * 70, 10, 1e-2f), w = randn(70 * 45, 11, 0.05f);
  ScaledTensor dyq = quantize(dy.data(), 33, 70, MXLayout::rowwise, g);
  ScaledTensor wq = quantize(w.data(), 70, 45, MXLayout::colwise, kCfg);
  expect_mx_matches(false, dyq, false, wq, true);
}

TEST(GemmMx, WrongOrientationIsAnError) {
  auto v = randn(64 * 64, 12);
  ScaledTensor row = quantize(v.data(), 64, 64, MXLayout::rowwise, kCfg);
  ScaledTensor col = quantize(v.data(), 64, 64, MXLayout::colwise, kCfg);
  std::vector<float> c(64 * 64);
  EXPECT_THROW(gemm_mx(false, col, true, row, c.data(), 64, false), Error);  // A blocks along M
  EXPECT_THROW(gemm_mx(true, row, false, col, c.data(), 64, false), Error);  // A^T needs colwise
  EXPECT_THROW(gemm_mx(false, row, true, col, c.data(), 64, false), Error);  // B^T needs rowwise
  EXPECT_THROW(gemm_mx(false, row, false, row, c.data(), 64, false), Error); // B needs colwise
  try {
    gemm_mx(false, row, false, row, c.data(), 64, false);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("colwise or tile32"), std::string::npos) << e.what();
  }
  ScaledTensor other = quantize(v.data(), 32, 128, MXLayout::rowwise, kCfg);
  EXPECT_THROW(gemm_mx(false, row, true, other, c.data(), 64, false), Error);  // K 64 vs 128
  EXPECT_THROW(gemm_mx(false, row, true, row, c.data(), 10, false), Error);    // ldc < N
}

TEST(GemmMx, NanBlockPropagatesOnlyWhereItIsUsed) {
  auto x = randn(4 * 64, 13), w = randn(8 * 64, 14);
  x[size_t(1 * 64 + 40)] = kNaN;  // row 1, second K-block
  ScaledTensor xq = quantize(x.data(), 4, 64, MXLayout::rowwise, kCfg);
  ScaledTensor wq = quantize(w.data(), 8, 64, MXLayout::rowwise, kCfg);
  std::vector<float> c(4 * 8);
  gemm_mx(false, xq, true, wq, c.data(), 8, false);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(std::isnan(c[size_t(i * 8 + j)]), i == 1);
}

// ---- GroupList ----------------------------------------------------------------------------

TEST(GroupList, CountsAndCumulativeGiveSameOffsets) {
  GroupList a = GroupList::from_counts({3, 0, 33, 1}, 37);
  GroupList b = GroupList::from_cumulative({3, 3, 36, 37}, 37);
  EXPECT_EQ(a.offsets, (std::vector<int64_t>{0, 3, 3, 36, 37}));
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.num_groups(), 4);
  EXPECT_EQ(a.count(1), 0);
  EXPECT_EQ(a.count(2), 33);
  GroupList z = GroupList::from_counts({0, 0}, 0);
  EXPECT_EQ(z.offsets, (std::vector<int64_t>{0, 0, 0}));
}

TEST(GroupList, BadListsAreErrors) {
  EXPECT_THROW(GroupList::from_counts({}, 0), Error);
  EXPECT_THROW(GroupList::from_counts({2, -1, 3}, 4), Error);
  EXPECT_THROW(GroupList::from_counts({2, 3}, 6), Error);
  EXPECT_THROW(GroupList::from_cumulative({}, 0), Error);
  EXPECT_THROW(GroupList::from_cumulative({4, 2, 6}, 6), Error);  // non-monotone
  EXPECT_THROW(GroupList::from_cumulative({-1, 6}, 6), Error);
  EXPECT_THROW(GroupList::from_cumulative({2, 5}, 6), Error);     // total != rows
  try {
    GroupList::from_counts({2, -1, 3}, 4);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxtrain
