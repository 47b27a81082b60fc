// tests/gemm/mx_gemm_paths_test.cc — every MX product kernel path against the scalar
// reference and the exact product, on awkward shapes, all three orientations and layouts.
//
// The exact product is formed in FP64 from the defined element values (mx_operand_value:
// fp8 · 2^(s-127) as BF16, below 2^-126 flushed). Every path may sum in its own FP32 order,
// so the tolerance is the bound for a length-K FP32 sum in any order,
//   |C - C_exact| <= (K + 1) · u · (Σ_k |a_k||b_k| + |C0|),  u = 2^-24,
// plus K · 2^-126 for products the AVX512-BF16 kernel flushes below FP32's normal range (it
// treats subnormal results as zero). The paths' shapes cross every blocking edge of the
// AVX-512 kernels: K odd (half pairs), K > 1024 (two chunks), M > 96 (several row blocks),
// N not a multiple of 64 (masked columns), M % 6 != 0 (short micro-tiles), M <= 16 (the
// streaming forward) with N % 4 != 0 and K % 64 != 0.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gemm/fp4_gemm.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using gemm_detail::mx_operand_value;

constexpr double kU32 = 1.0 / (1 << 24);

std::vector<float> randn(int64_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (float& x : v) x = nd(rng);
  return v;
}

// The value the kernels multiply at stored (r, c).
double value(const ScaledTensor& t, int64_t r, int64_t c) {
  return mx_operand_value(t.data[size_t(r * t.cols + c)], t.scale_at(r, c), t.elem);
}

// Paths this CPU can run, with the ISA path that selects each.
std::vector<Isa> path_isas() {
  std::vector<Isa> out{Isa::scalar};
  if (isa_supported(Isa::avx2)) out.push_back(Isa::avx2);  // onednn expansion path
  if (isa_supported(Isa::avx512)) out.push_back(Isa::avx512);  // panels only
  if (isa_supported(Isa::avx512vbmi)) out.push_back(Isa::avx512vbmi);  // + streaming forward
  return out;
}

struct IsaGuard {
  ~IsaGuard() {
    clear_isa_override();
    clear_amx_override();
  }
};

// The VDPBF16PS kernels (AMX tiles off where the CPU has them), for the tests of their bytes.
void no_amx() {
  if (amx_available()) set_amx(false);
}

// Every product path this CPU can run: each ISA level with AMX off, then avx512vbmi with AMX
// tiles where the CPU has them.
struct ProductPath {
  Isa isa;
  bool amx;
};
std::vector<ProductPath> product_paths() {
  std::vector<ProductPath> out;
  for (Isa isa : path_isas()) out.push_back({isa, false});
  if (amx_available()) out.push_back({Isa::avx512vbmi, true});
  return out;
}
void select(const ProductPath& p) {
  set_isa(p.isa);
  if (amx_available()) set_amx(p.amx);
}

// op(A) · op(B) for stored A, B as gemm_mx sees them; checks every available path.
void check_all_paths(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, bool acc,
                     const char* what) {
  const int64_t M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols;
  const int64_t N = tb ? B.rows : B.cols;
  std::vector<double> exact(size_t(M * N)), mag(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? value(A, k, i) : value(A, i, k);
        const double b = tb ? value(B, j, k) : value(B, k, j);
        s += a * b;
        m += std::fabs(a * b);
      }
      exact[size_t(i * N + j)] = s;
      mag[size_t(i * N + j)] = m;
    }
  const std::vector<float> c0 = randn(M * N, 7);
  IsaGuard guard;
  for (const ProductPath& path : product_paths()) {
    select(path);
    SCOPED_TRACE(std::string(what) + " on path " + path_name(gemm_mx_path()) + ", M=" +
                 std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    std::vector<float> c(c0.begin(), c0.begin() + M * N);
    gemm_mx(ta, A, tb, B, c.data(), N, acc);
    int bad = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      const double base = acc ? c0[size_t(i)] : 0.0;
      const double want = exact[size_t(i)] + base;
      const double tol =
          double(K + 1) * kU32 * (mag[size_t(i)] + std::fabs(base)) + double(K) * 0x1p-126;
      if (!(std::fabs(c[size_t(i)] - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "C[" << i / N << "," << i % N << "] = " << c[size_t(i)] << ", want "
                      << want << " +- " << tol;
    }
  }
}

struct Shape {
  int64_t M, N, K;
};
// Beyond the blocking edges: forward products with 64 rows or more but fewer rows than outputs
// run transposed ({70,300,100}, {200,1100,70}: several row ranges, a ragged last panel), and
// products with more rows than outputs split rows between threads ({250,40,64}). Forwards with
// 9 to 16 rows take the streaming kernel's passes of more than 8 rows ({9,65,97}, {16,48,130}).
const Shape kShapes[] = {{1, 1, 1},      {1, 64, 32},    {4, 65, 33},   {31, 33, 63},
                         {6, 128, 256},  {7, 129, 257},  {33, 31, 511}, {97, 70, 300},
                         {193, 17, 65},  {2, 200, 1025}, {70, 300, 100}, {200, 1100, 70},
                         {250, 40, 64},  {9, 65, 97},    {16, 48, 130}};

ScaledTensor q(const std::vector<float>& x, int64_t r, int64_t c, MXLayout l, Elem e,
               ScaleRounding rnd = ScaleRounding::rceil) {
  return quantize(x.data(), r, c, l, QuantConfig{e, rnd});
}

TEST(MxGemmPaths, ForwardAllLayoutsAndFormats) {
  for (const Shape& s : kShapes)
    for (MXLayout wl : {MXLayout::rowwise, MXLayout::tile}) {
      const auto x = randn(s.M * s.K, 1), w = randn(s.N * s.K, 2, 0.05f);
      const ScaledTensor xq = q(x, s.M, s.K, MXLayout::rowwise, Elem::e4m3);
      const ScaledTensor wq = q(w, s.N, s.K, wl, Elem::e4m3, ScaleRounding::floor);
      check_all_paths(false, xq, true, wq, false, "forward");
    }
}

TEST(MxGemmPaths, DgradAllLayoutsAndFormats) {
  for (const Shape& s : kShapes)
    for (MXLayout wl : {MXLayout::colwise, MXLayout::tile}) {
      // dx[M, N] = dy[M, K] · W[K, N]: dy E5M2 rowwise, W stored [K, N].
      const auto dy = randn(s.M * s.K, 3, 1e-3f), w = randn(s.K * s.N, 4, 0.05f);
      const ScaledTensor dq = q(dy, s.M, s.K, MXLayout::rowwise, Elem::e5m2);
      const ScaledTensor wq = q(w, s.K, s.N, wl, Elem::e4m3);
      check_all_paths(false, dq, false, wq, true, "dgrad");
    }
}

TEST(MxGemmPaths, WgradAllLayoutsAndFormats) {
  for (const Shape& s : kShapes)
    for (MXLayout al : {MXLayout::colwise, MXLayout::tile}) {
      // dW[M, N] += dy^T · x with dy stored [K, M], x stored [K, N] (K = tokens).
      const auto dy = randn(s.K * s.M, 5, 1e-2f), x = randn(s.K * s.N, 6);
      const ScaledTensor dq = q(dy, s.K, s.M, al, Elem::e5m2);
      const ScaledTensor xq = q(x, s.K, s.N, MXLayout::colwise, Elem::e4m3);
      check_all_paths(true, dq, false, xq, true, "wgrad");
    }
}

// Blocks whose values fall below 2^-126 (flushed) next to ordinary ones; E5M2 scale 0 too.
TEST(MxGemmPaths, TinyScalesFlushTheSameWayOnEveryPath) {
  for (int64_t rows : {40, 3}) {  // panels, and the streaming forward
    std::vector<float> x = randn(rows * 70, 8), w = randn(50 * 70, 9);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 32; ++c) x[size_t(r * 70 + c)] *= 0x1p-120f;  // first block tiny
    for (int64_t c = 0; c < 32; ++c) w[size_t(5 * 70 + c)] *= 0x1p-125f;     // and one of W's
    for (float& v : w) v *= 0x1p-10f;
    for (Elem e : {Elem::e4m3, Elem::e5m2}) {
      const ScaledTensor xq = q(x, rows, 70, MXLayout::rowwise, e);
      const ScaledTensor wq = q(w, 50, 70, MXLayout::rowwise, e);
      check_all_paths(false, xq, true, wq, false, "tiny scales");
    }
  }
}

// An E4M3 scale of 247 or more (amax above 2^127) cannot be folded into the AVX-512
// multiplier; such operands take the reference kernel, and the result is exact to it.
TEST(MxGemmPaths, HugeE4M3ScalesGiveTheReferenceBytes) {
  std::vector<float> x = randn(9 * 64, 10), w = randn(12 * 64, 11, 1e-30f);
  x[5] = 3e38f;
  const ScaledTensor xq = q(x, 9, 64, MXLayout::rowwise, Elem::e4m3);
  const ScaledTensor wq = q(w, 12, 64, MXLayout::rowwise, Elem::e4m3);
  ASSERT_GE(xq.scale_at(0, 5), 247);
  check_all_paths(false, xq, true, wq, false, "huge scale");
}

TEST(MxGemmPaths, HugeE4M3ScalesOnAvx512GiveTheReferenceBytes) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512 path";
  std::vector<float> x = randn(9 * 64, 10), w = randn(12 * 64, 11, 1e-30f);
  x[5] = 3e38f;
  const ScaledTensor xq = q(x, 9, 64, MXLayout::rowwise, Elem::e4m3);
  const ScaledTensor wq = q(w, 12, 64, MXLayout::rowwise, Elem::e4m3);
  ASSERT_GE(xq.scale_at(0, 5), 247);
  IsaGuard guard;
  std::vector<float> ref(9 * 12), fast(9 * 12);
  set_isa(Isa::scalar);
  gemm_mx(false, xq, true, wq, ref.data(), 12, false);
  set_isa(Isa::avx512);
  gemm_mx(false, xq, true, wq, fast.data(), 12, false);
  EXPECT_EQ(0, std::memcmp(ref.data(), fast.data(), ref.size() * sizeof(float)));
}

// A NaN in x makes its block's scale 0xFF: exactly the outputs that read that block are NaN.
TEST(MxGemmPaths, NanBlockReachesOnlyItsOutputsOnEveryPath) {
  std::vector<float> x = randn(10 * 96, 12), w = randn(70 * 96, 13);
  x[3 * 96 + 40] = NAN;  // row 3, K block 1
  const ScaledTensor xq = q(x, 10, 96, MXLayout::rowwise, Elem::e4m3);
  const ScaledTensor wq = q(w, 70, 96, MXLayout::rowwise, Elem::e4m3);
  IsaGuard guard;
  for (Isa isa : path_isas()) {
    set_isa(isa);
    std::vector<float> c(10 * 70);
    gemm_mx(false, xq, true, wq, c.data(), 70, false);
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t j = 0; j < 70; ++j)
        EXPECT_EQ(std::isnan(c[size_t(i * 70 + j)]), i == 3)
            << path_name(gemm_mx_path()) << " C[" << i << "," << j << "]";
  }
}

// `product(C, accumulate)` runs a product C [M, N] on the transposed path; ct [N, M] is the
// direct product of the transposed problem. C must equal ct's transpose bit for bit, and
// accumulating into random C0 must give exactly C0 + ct^T (C0 is added once, in FP32).
template <class Product>
void expect_transpose_of_direct(const Product& product, const std::vector<float>& ct, int64_t M,
                                int64_t N, uint32_t seed, const std::string& what) {
  const auto differing = [&](const std::vector<float>& c, const std::vector<float>* c0) {
    int bad = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float want = (c0 ? (*c0)[size_t(i * N + j)] : 0.f) + ct[size_t(j * M + i)];
        bad += std::memcmp(&c[size_t(i * N + j)], &want, sizeof(float)) != 0;
      }
    return bad;
  };
  std::vector<float> c(size_t(M * N));
  product(c.data(), false);
  EXPECT_EQ(differing(c, nullptr), 0) << what;
  std::vector<float> acc = randn(M * N, seed);
  const std::vector<float> c0 = acc;
  product(acc.data(), true);
  EXPECT_EQ(differing(acc, &c0), 0) << what << ", accumulate";
}

// Each output element is summed by one thread in a fixed order: 1 and 2 threads agree bytewise.
// A forward with fewer tokens than outputs runs as C^T = W · X^T on the panel kernel; the
// product of the transposed problem (more rows than outputs: run directly) must be its
// transpose bit for bit, and accumulating must add exactly C0 to it.
TEST(MxGemmPaths, TransposedForwardIsTheTransposeOfTheDirectProduct) {
  if (!isa_supported(Isa::avx512) || !cpu_features().avx512_bf16)
    GTEST_SKIP() << "the transposed product runs on the AVX512-BF16 panel kernel, which this "
                    "CPU lacks";
  for (Isa isa : path_isas()) {
    if (isa < Isa::avx512) continue;  // the panel kernel's paths only
    IsaGuard guard;
    set_isa(isa);
    for (const Shape& s : {Shape{64, 300, 100}, Shape{100, 130, 1100}, Shape{200, 1100, 70}}) {
      const auto x = randn(s.M * s.K, 21), w = randn(s.N * s.K, 22, 0.05f);
      const ScaledTensor xq = q(x, s.M, s.K, MXLayout::rowwise, Elem::e4m3);
      const ScaledTensor wq = q(w, s.N, s.K, MXLayout::rowwise, Elem::e4m3);
      std::vector<float> ct(size_t(s.N * s.M));
      gemm_mx(false, wq, true, xq, ct.data(), s.M, false);  // N > M rows: direct
      expect_transpose_of_direct(
          [&](float* c, bool acc) { gemm_mx(false, xq, true, wq, c, s.N, acc); },  // transposed
          ct, s.M, s.N, 23,
          std::string(isa_name(isa)) + " " + std::to_string(s.M) + "x" + std::to_string(s.N) +
              "x" + std::to_string(s.K));
    }
  }
}

// The same for the dgrad form dX = dY · W (nn) with fewer tokens than inputs, which runs as
// dX^T = W^T · dY^T. Its direct counterpart: the tn product of W's colwise copy and dY^T
// quantized colwise (the same codes and scales as dY rowwise, transposed), which has more
// rows than columns and runs directly.
TEST(MxGemmPaths, TransposedDgradIsTheTransposeOfTheDirectProduct) {
  if (!isa_supported(Isa::avx512) || !cpu_features().avx512_bf16)
    GTEST_SKIP() << "the transposed product runs on the AVX512-BF16 panel kernel, which this "
                    "CPU lacks";
  for (Isa isa : path_isas()) {
    if (isa < Isa::avx512) continue;  // the panel kernel's paths only
    IsaGuard guard;
    set_isa(isa);
    // {M tokens, N inputs, K outputs (the sum)}, all M < N: ragged K blocks and panels, one
    // K of two chunks.
    for (const Shape& s : {Shape{64, 100, 300}, Shape{100, 130, 1100}, Shape{70, 1100, 33}}) {
      const auto dy = randn(s.M * s.K, 31), w = randn(s.K * s.N, 32, 0.05f);
      std::vector<float> dyt(dy.size());
      for (int64_t i = 0; i < s.M; ++i)
        for (int64_t k = 0; k < s.K; ++k) dyt[size_t(k * s.M + i)] = dy[size_t(i * s.K + k)];
      const ScaledTensor dyq = q(dy, s.M, s.K, MXLayout::rowwise, Elem::e4m3);
      const ScaledTensor dytq = q(dyt, s.K, s.M, MXLayout::colwise, Elem::e4m3);
      const ScaledTensor wq = q(w, s.K, s.N, MXLayout::colwise, Elem::e4m3);
      std::vector<float> ct(size_t(s.N * s.M));
      gemm_mx(true, wq, false, dytq, ct.data(), s.M, false);  // tn, N > M rows: direct
      expect_transpose_of_direct(
          [&](float* c, bool acc) { gemm_mx(false, dyq, false, wq, c, s.N, acc); },  // transposed
          ct, s.M, s.N, 33,
          std::string(isa_name(isa)) + " " + std::to_string(s.M) + "x" + std::to_string(s.K) +
              "x" + std::to_string(s.N));
    }
  }
}

// The VBMI row packer (pack_a_rows_avx512vbmi_bf16) decodes by table lookup where the scale folds
// exactly and falls back to the general decoder elsewhere: the panel products on the avx512vbmi
// path equal the avx512 path's bit for bit, with ordinary scales, a block scaled by 2^-120
// (scale below the table's range: the general decoder), one by 2^120 (near its top), a NaN
// block (the general decoder), E5M2, and K ending inside a 64-code piece or a chunk.
TEST(MxGemmPaths, VbmiRowPackerGivesTheSameBytes) {
  if (!cpu_features().avx512_bf16 || !cpu_features().avx512vbmi) GTEST_SKIP() << "no VBMI";
  for (Elem e : {Elem::e4m3, Elem::e5m2}) {
    // Forward with rows >= outputs (A = x in rows), transposed forward (A = W in rows), dgrad
    // (A = dy in rows).
    for (const Shape& s : {Shape{100, 70, 33}, Shape{70, 300, 100}, Shape{130, 64, 1100},
                           Shape{97, 40, 1025}}) {
      auto x = randn(s.M * s.K, 41), w = randn(s.N * s.K, 42, 0.05f);
      for (int64_t k = 0; k < std::min<int64_t>(s.K, 32); ++k) {
        x[size_t(k)] *= 0x1p-120f;       // row 0, first block
        x[size_t(s.K + k)] *= 0x1p120f;  // row 1, first block
      }
      if (s.M > 2) x[size_t(2 * s.K + s.K / 2)] = NAN;  // a NaN block in row 2
      const ScaledTensor xq = q(x, s.M, s.K, MXLayout::rowwise, e);
      const ScaledTensor wq = q(w, s.N, s.K, MXLayout::rowwise, e);
      const auto dy = randn(s.M * s.N, 43);
      const ScaledTensor dyq = q(dy, s.M, s.N, MXLayout::rowwise, e);
      const ScaledTensor wc = q(w, s.N, s.K, MXLayout::colwise, e);
      std::vector<float> f[2], ft[2], d[2];
      IsaGuard guard;
      int i = 0;
      for (Isa isa : {Isa::avx512, Isa::avx512vbmi}) {
        set_isa(isa);
        no_amx();
        f[i].resize(size_t(s.M * s.N));
        ft[i].resize(size_t(s.N * s.M));
        d[i].resize(size_t(s.M * s.K));
        gemm_mx(false, xq, true, wq, f[i].data(), s.N, false);
        gemm_mx(false, wq, true, xq, ft[i].data(), s.M, false);
        gemm_mx(false, dyq, false, wc, d[i].data(), s.K, false);
        ++i;
      }
      const std::string what = std::string(elem_name(e)) + " " + std::to_string(s.M) + "x" +
                               std::to_string(s.N) + "x" + std::to_string(s.K);
      const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
      };
      EXPECT_TRUE(same(f[0], f[1])) << "forward " << what;
      EXPECT_TRUE(same(ft[0], ft[1])) << "forward, W as A " << what;
      EXPECT_TRUE(same(d[0], d[1])) << "dgrad " << what;
    }
  }
}

// The VBMI pair packer (pack_pairs_avx512vbmi_bf16: pairs of stored rows, the weight in dgrad,
// both operands of wgrad) decodes by table lookup where a block's scales fold exactly and falls
// back to the general decoder per 32 columns elsewhere: the products on the avx512vbmi path
// equal the avx512 path's bit for bit. Colwise and tile32 weights, E4M3 and E5M2, a block scaled
// by 2^-120 (below the tables' range), one by 2^120, a NaN, -0 codes (a -0 element, and tiny
// negatives that round to zero), K odd (a last row without a partner), K over a chunk, columns
// not a multiple of 16 or 32, transposed dgrads (A = W in pairs from a 48-row grain offset), and
// accumulation into a C holding -0.
TEST(MxGemmPaths, VbmiPairPackerGivesTheSameBytes) {
  if (!cpu_features().avx512_bf16 || !cpu_features().avx512vbmi) GTEST_SKIP() << "no VBMI";
  // M tokens, N outputs, K inputs: dgrad dx [M, K] = dy [M, N] · W [N, K]; wgrad dW [N, K] =
  // dy^T · x.
  for (Elem e : {Elem::e4m3, Elem::e5m2})
    for (MXLayout wl : {MXLayout::colwise, MXLayout::tile})
      for (const Shape& s : {Shape{100, 70, 33}, Shape{70, 97, 300}, Shape{128, 1100, 130},
                             Shape{64, 33, 1500}, Shape{9, 65, 97}, Shape{200, 129, 1030}}) {
        auto w = randn(s.N * s.K, 51, 0.05f), x = randn(s.M * s.K, 52), dy = randn(s.M * s.N, 53);
        const auto poke = [](std::vector<float>& v, int64_t rows, int64_t cols) {
          for (int64_t r = 0; r < std::min<int64_t>(rows, 32); ++r)
            for (int64_t c = 0; c < std::min<int64_t>(cols, 20); ++c) {
              v[size_t(r * cols + c)] *= 0x1p-120f;                           // block (0, 0)
              if (c + 40 < cols) v[size_t(r * cols + c + 40)] *= 0x1p120f;  // block (0, 1)
            }
          if (rows > 40 && cols > 3) {
            v[size_t(40 * cols + 3)] = NAN;
            v[size_t(41 * cols + 2)] = -0.f;
            v[size_t(42 * cols + 1)] = -1e-30f;  // rounds to a -0 code
          }
        };
        poke(w, s.N, s.K);
        poke(x, s.M, s.K);
        poke(dy, s.M, s.N);
        const ScaledTensor wq = q(w, s.N, s.K, wl, e);
        const ScaledTensor dyr = q(dy, s.M, s.N, MXLayout::rowwise, e);
        const ScaledTensor dyc = q(dy, s.M, s.N, MXLayout::colwise, e);
        const ScaledTensor xc = q(x, s.M, s.K, MXLayout::colwise, e);
        std::vector<float> d[2], g[2];
        IsaGuard guard;
        for (int i = 0; i < 2; ++i) {
          set_isa(i == 0 ? Isa::avx512 : Isa::avx512vbmi);
          no_amx();
          d[i].assign(size_t(s.M * s.K), -0.f);
          g[i].assign(size_t(s.N * s.K), -0.f);
          gemm_mx(false, dyr, false, wq, d[i].data(), s.K, false);
          gemm_mx(true, dyc, false, xc, g[i].data(), s.K, true);
        }
        const std::string what = std::string(elem_name(e)) + " " + layout_name(wl) + " " +
                                 std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                                 std::to_string(s.K);
        EXPECT_EQ(std::memcmp(d[0].data(), d[1].data(), d[0].size() * 4), 0) << "dgrad " << what;
        EXPECT_EQ(std::memcmp(g[0].data(), g[1].data(), g[0].size() * 4), 0) << "wgrad " << what;
      }
}

TEST(MxGemmPaths, ResultDoesNotDependOnThreadCount) {
  const auto x = randn(100 * 300, 14), w = randn(130 * 300, 15);
  const ScaledTensor xq = q(x, 100, 300, MXLayout::rowwise, Elem::e4m3);
  const ScaledTensor wq = q(w, 130, 300, MXLayout::rowwise, Elem::e4m3);
  const int saved = omp_get_max_threads();
  std::vector<float> c1(100 * 130), c2(100 * 130);
  omp_set_num_threads(1);
  gemm_mx(false, xq, true, wq, c1.data(), 130, false);
  omp_set_num_threads(2);
  gemm_mx(false, xq, true, wq, c2.data(), 130, false);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)));
}

// ---- 4-bit products (NVFP4, MXFP4) ------------------------------------------------------------
//
// The AVX512-BF16 kernels read the 4-bit codes directly and their sums are stated, element by
// element, by fp4_gemm_panel_ref (gemm/fp4_gemm.h): every path that runs them (the avx512 and
// avx512vbmi ISA levels on a CPU with AVX512-BF16) must give its bytes, for every orientation a
// layer uses, NVFP4 (1x16 and 16x16 blocks, tensor scales, stochastic rounding, the random
// Hadamard transform) and MXFP4, accumulating or not, on shapes that cross every edge: K odd,
// K a multiple of neither 16 nor 32 (ragged blocks), K over a 1024-deep chunk (accumulating:
// one longer chunk up to 4096, the sums buffer beyond), forwards of at most 16 rows (the
// streaming kernel, and the panel kernel on the same operands), forwards and dgrads run
// transposed (64 <= M < N), dgrads of at most 192 rows run directly, column counts not a
// multiple of 16 or 64. NaN results compare as NaN (their payloads are the hardware's).

// Normal values times 2^u, u uniform in [-spread, spread] per element: products whose sums
// round in FP32 (the order of the sums shows in the bytes).
std::vector<float> wide(int64_t n, uint32_t seed, float sigma = 1.f, int spread = 12) {
  std::vector<float> v = randn(n, seed, sigma);
  std::mt19937 rng(seed ^ 0x9E3779B9u);
  for (float& x : v) x = std::ldexp(x, int(rng() % uint32_t(2 * spread + 1)) - spread);
  return v;
}

bool same_float(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

// The paths that run the 4-bit panel kernels on this CPU.
std::vector<Isa> fp4_panel_isas() {
  std::vector<Isa> out;
  if (!cpu_features().avx512_bf16) return out;
  if (isa_supported(Isa::avx512)) out.push_back(Isa::avx512);
  if (isa_supported(Isa::avx512vbmi)) out.push_back(Isa::avx512vbmi);
  return out;
}

Fp4Config nvfp4_cfg(bool sr = false, bool rht = false) {
  Fp4Config c;
  c.stochastic = sr;
  c.sr = {11, 3, 5};
  c.rht = rht;
  return c;
}
Fp4Config mxfp4_cfg() {
  Fp4Config c;
  c.kind = Fp4Kind::mxfp4;
  return c;
}

ScaledTensor q4(const std::vector<float>& x, int64_t r, int64_t c, MXLayout l,
                const Fp4Config& cfg) {
  ScaledTensor t;
  quantize_fp4(x.data(), r, c, l, cfg, t);
  return t;
}

// op(A) · op(B) on every 4-bit panel path (and, for a forward of at most 16 rows, on the panel
// kernel besides the streaming one, and with one thread) against fp4_gemm_panel_ref, bytes.
void check_fp4_bytes(bool ta, const ScaledTensor& A, bool tb, const ScaledTensor& B, bool acc,
                     const std::string& what) {
  const int64_t M = ta ? A.cols : A.rows, N = tb ? B.rows : B.cols;
  const gemm_detail::Orient o = ta ? gemm_detail::Orient::tn
                                   : tb ? gemm_detail::Orient::nt : gemm_detail::Orient::nn;
  const float alpha = (A.has_tensor_scale ? A.tensor_scale : 1.f) *
                      (B.has_tensor_scale ? B.tensor_scale : 1.f);
  std::vector<float> c0 = randn(M * N, 77);
  c0[0] = -0.f;
  std::vector<float> want = c0;
  const auto va = gemm_detail::MXOperand::of(A), vb = gemm_detail::MXOperand::of(B);
  gemm_detail::fp4_gemm_panel_ref(o, va, vb, alpha, want.data(), N, acc);
  const auto expect_same = [&](const std::vector<float>& c, const std::string& how) {
    int bad = 0;
    for (int64_t i = 0; i < M * N; ++i)
      if (!same_float(c[size_t(i)], want[size_t(i)]) && bad++ < 3)
        ADD_FAILURE() << what << " (" << how << ", M=" << M << " N=" << N << ") C[" << i / N
                      << "," << i % N << "] = " << c[size_t(i)] << ", reference "
                      << want[size_t(i)];
  };
  IsaGuard guard;
  for (Isa isa : fp4_panel_isas()) {
    set_isa(isa);
    no_amx();
    std::vector<float> c = c0;
    gemm_mx(ta, A, tb, B, c.data(), N, acc);
    expect_same(c, std::string("gemm_mx on ") + isa_name(isa));
  }
  if (fp4_panel_isas().empty()) return;
  if (o == gemm_detail::Orient::nt && M <= gemm_detail::kGemvMaxRows) {
    std::vector<float> c = c0;
    gemm_detail::fp4_gemm_avx512bf16(o, va, vb, alpha, c.data(), N, acc);
    expect_same(c, "panel kernel");
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> c = c0;
  gemm_mx(ta, A, tb, B, c.data(), N, acc);
  omp_set_num_threads(saved);
  expect_same(c, "one thread");
}

struct Fp4Op {
  const char* name;
  bool ta, tb;
  MXLayout la, lb;
  int role_a, role_b;  // 0 input (round to nearest), 1 gradient (stochastic), 2 weight
};
// forward x rowwise · W (tile or rowwise)^T; dgrad dy rowwise · W (tile or colwise); wgrad
// dy colwise^T · x colwise (both transformed when the setting says).
const Fp4Op kFp4Ops[] = {{"forward tile", false, true, MXLayout::rowwise, MXLayout::tile, 0, 2},
                         {"forward rowwise", false, true, MXLayout::rowwise, MXLayout::rowwise, 0, 2},
                         {"dgrad tile", false, false, MXLayout::rowwise, MXLayout::tile, 1, 2},
                         {"dgrad colwise", false, false, MXLayout::rowwise, MXLayout::colwise, 1, 2},
                         {"wgrad", true, false, MXLayout::colwise, MXLayout::colwise, 1, 0}};

// {M, N, K} of C [M, N] with K the reduction.
const Shape kFp4Shapes[] = {{1, 1, 1},      {1, 17, 33},    {4, 65, 33},     {15, 31, 63},
                            {16, 48, 130},  {17, 33, 127},  {9, 129, 257},   {33, 15, 1025},
                            {64, 300, 100}, {97, 70, 300},  {193, 17, 65},   {2, 200, 1025},
                            {70, 129, 31},  {250, 40, 64},  {65, 127, 1031}, {200, 1100, 70},
                            {5, 33, 4099}};

TEST(Fp4GemmPaths, EveryPanelPathGivesTheReferenceBytes) {
  if (fp4_panel_isas().empty()) GTEST_SKIP() << "this CPU has no AVX512-BF16 path";
  struct Setting {
    const char* name;
    Fp4Config input, grad, weight;
  };
  const Setting settings[] = {
      {"nvfp4", nvfp4_cfg(), nvfp4_cfg(true), nvfp4_cfg()},
      {"nvfp4 rht", nvfp4_cfg(false, true), nvfp4_cfg(true, true), nvfp4_cfg()},
      {"mxfp4", mxfp4_cfg(), mxfp4_cfg(), mxfp4_cfg()}};
  for (const Shape& s : kFp4Shapes)
    for (const Fp4Op& op : kFp4Ops)
      for (const Setting& st : settings) {
        if (st.input.rht && !op.ta) continue;  // the transform is the wgrad operands'
        if (op.la == MXLayout::tile || op.lb == MXLayout::tile) {
          if (st.weight.kind == Fp4Kind::mxfp4 && op.lb == MXLayout::tile) continue;
        }
        const int64_t ar = op.ta ? s.K : s.M, ac = op.ta ? s.M : s.K;
        const int64_t br = op.tb ? s.N : s.K, bc = op.tb ? s.K : s.N;
        const auto a = wide(ar * ac, uint32_t(s.M * 31 + s.K), op.role_a == 1 ? 1e-3f : 1.f);
        const auto b = wide(br * bc, uint32_t(s.N * 17 + s.K), op.role_b == 2 ? 0.05f : 1.f);
        const auto cfg = [&](int role, MXLayout l) {
          Fp4Config c = role == 0 ? st.input : role == 1 ? st.grad : st.weight;
          if (l != MXLayout::colwise) c.rht = false;
          return c;
        };
        const ScaledTensor A = q4(a, ar, ac, op.la, cfg(op.role_a, op.la));
        const ScaledTensor B = q4(b, br, bc, op.lb, cfg(op.role_b, op.lb));
        for (bool acc : {false, true})
          check_fp4_bytes(op.ta, A, op.tb, B, acc,
                          std::string(st.name) + " " + op.name + (acc ? " acc" : "") + " " +
                              std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                              std::to_string(s.K));
      }
}

// Special blocks: MXFP4 scales near 2^-127 (elements flushed below 2^-126) and rows whose
// products and sums lie about 2^-128 (partial sums the dot product flushes to zero), scales near
// 2^127 (Inf elements, Inf and NaN sums), NaN blocks (a NaN input), -0 codes; NVFP4 with the
// same inputs (its block scales clamp them). Every orientation, panels and the streaming forward.
TEST(Fp4GemmPaths, SpecialBlocksGiveTheReferenceBytes) {
  if (fp4_panel_isas().empty()) GTEST_SKIP() << "this CPU has no AVX512-BF16 path";
  for (const Shape& s : {Shape{5, 70, 97}, Shape{70, 100, 130}, Shape{40, 33, 1100}}) {
    auto x = randn(s.M * s.K, 61), w = randn(s.N * s.K, 62);
    const auto poke = [](std::vector<float>& v, int64_t rows, int64_t cols) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          if (r % 4 == 0) v[size_t(r * cols + c)] *= 0x1p-63f;  // whole rows: products ~2^-126
          if (r % 4 == 1 && c < 32) v[size_t(r * cols + c)] *= 0x1p-125f;  // elements ~2^-126
          if (r % 7 == 2 && c >= 32 && c < 64) v[size_t(r * cols + c)] *= 0x1p126f;
        }
      if (rows > 3 && cols > 40) {
        v[size_t(3 * cols + 40)] = NAN;
        v[size_t(2 * cols + 5)] = -0.f;
        v[size_t(rows / 2 * cols + 1)] = -1e-30f;
      }
    };
    poke(x, s.M, s.K);
    poke(w, s.N, s.K);
    for (const Fp4Config& c : {mxfp4_cfg(), nvfp4_cfg()}) {
      const bool nv = c.kind == Fp4Kind::nvfp4;
      const std::string what = std::string(nv ? "nvfp4" : "mxfp4") + " special " +
                               std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                               std::to_string(s.K);
      // forward y [M, N] = x · W^T; dgrad [M, K] = (x as dy [M, K'=N]) ...: use the same
      // tensors in every orientation.
      const ScaledTensor xr = q4(x, s.M, s.K, MXLayout::rowwise, c);
      const ScaledTensor wr = q4(w, s.N, s.K, MXLayout::rowwise, c);
      check_fp4_bytes(false, xr, true, wr, false, what + " forward");
      check_fp4_bytes(false, xr, true, wr, true, what + " forward acc");
      const ScaledTensor wc = q4(w, s.K, s.N, MXLayout::colwise, c);  // W as [K, N]
      check_fp4_bytes(false, xr, false, wc, false, what + " dgrad colwise");
      const ScaledTensor xc = q4(x, s.M, s.K, MXLayout::colwise, c);  // tokens M
      const ScaledTensor wt = q4(w, s.M, s.N, MXLayout::colwise, c);  // "dy" [M, N], from w
      check_fp4_bytes(true, wt, false, xc, true, what + " wgrad acc");
      if (nv) {
        const ScaledTensor wtile = q4(w, s.N, s.K, MXLayout::tile, c);
        check_fp4_bytes(false, xr, true, wtile, false, what + " forward tile");
      }
    }
  }
}

// A forward's output rows do not depend on how many rows the product has: the first m rows of
// x · W^T, computed alone, are the first m rows of the product of all of x, bit for bit, on
// every panel path (AMX tiles too), for MXFP8 and NVFP4 (tensor scales; 16x16 and 1x16
// weights). A layout that splits the tokens (sequence parallelism, micro-batches) relies on
// it. m crosses the streaming kernels' limits (16; 8 on AMX), the AMX tiles' 16 and 32 rows,
// the micro-tile's 6 and the transposed product's 64. The exceptions, stated here: forwards
// of at most the path's streaming limit take a streaming kernel, whose MXFP8 sums are in its
// own FP32 order (docs/numerics.md, "MX products") and whose sums are VDPBF16PS's, not the
// AMX tiles', so MXFP8 on avx512vbmi_bf16 holds from 17 rows on, both formats on amx_bf16
// from 9.
ScaledTensor first_rows(const ScaledTensor& t, int64_t m) {
  ScaledTensor r = t;
  r.rows = m;
  r.data.resize(r.data_bytes());
  r.scales.resize(r.scale_bytes());
  return r;
}

TEST(MxGemmPaths, FewRowsAreTheRowsOfTheLargerProduct) {
  if (!isa_supported(Isa::avx512) || !cpu_features().avx512_bf16)
    GTEST_SKIP() << "no AVX512-BF16 panel kernel";
  constexpr int64_t M = 100, N = 200, K = 300;
  const auto x = randn(M * K, 61), w = randn(N * K, 62, 0.05f);
  struct Case {
    std::string name;
    ScaledTensor x, w;
  };
  std::vector<Case> cases;
  cases.push_back({"mxfp8", q(x, M, K, MXLayout::rowwise, Elem::e4m3),
                   q(w, N, K, MXLayout::rowwise, Elem::e4m3)});
  cases.push_back({"nvfp4 tile", q4(x, M, K, MXLayout::rowwise, nvfp4_cfg()),
                   q4(w, N, K, MXLayout::tile, nvfp4_cfg())});
  cases.push_back({"nvfp4 rowwise", q4(x, M, K, MXLayout::rowwise, nvfp4_cfg()),
                   q4(w, N, K, MXLayout::rowwise, nvfp4_cfg())});
  IsaGuard guard;
  for (const ProductPath& path : product_paths()) {
    if (path.isa < Isa::avx512) continue;
    select(path);
    for (const Case& c : cases) {
      std::vector<float> all(size_t(M * N));
      gemm_mx(false, c.x, true, c.w, all.data(), N, false);
      const bool own_stream = gemm_mx_path() == Path::amx_bf16 ||
                              (c.name == "mxfp8" && gemm_mx_path() == Path::avx512vbmi_bf16);
      for (int64_t m : {1, 4, 6, 15, 16, 17, 31, 32, 33, 64, 65}) {
        if (own_stream && m <= gemm_detail::mx_stream_rows()) continue;
        std::vector<float> part(size_t(m * N));
        gemm_mx(false, first_rows(c.x, m), true, c.w, part.data(), N, false);
        EXPECT_EQ(std::memcmp(part.data(), all.data(), part.size() * sizeof(float)), 0)
            << c.name << ", " << m << " of " << M << " rows, on "
            << path_name(gemm_mx_path());
      }
    }
  }
}

// Which kernel a forward of few rows takes: each path streams up to its own limit (16 rows on
// avx512vbmi_bf16; on amx_bf16 8, and 4 for 4-bit rowwise weights; none where there is no
// streaming kernel) and hands larger ones to its panel or tile kernel; set_stream_rows moves
// the limit on every path, and 0 turns streaming off. The bytes say which kernel ran: gemm_mx's
// output is compared with each kernel's, called directly, at the limit and one row past it
// (the sums round, and each kernel sums in its own order: x's blocks lie 2^-14 .. 2^14 apart).
struct StreamGuard : IsaGuard {
  ~StreamGuard() { clear_stream_rows_override(); }
};

TEST(MxGemmPaths, StreamRowsChoosesTheForwardKernel) {
  using gemm_detail::MXOperand;
  using gemm_detail::Orient;
  StreamGuard guard;
  EXPECT_THROW(set_stream_rows(17), Error);
  EXPECT_THROW(set_stream_rows(-1), Error);
  if (stream_rows_override() >= 0) GTEST_SKIP() << "MXTRAIN_STREAM_ROWS is set";
  set_isa(Isa::scalar);
  EXPECT_EQ(stream_rows(false), 0);  // the references
  EXPECT_EQ(stream_rows(true), 0);
  if (!isa_supported(Isa::avx512vbmi) || !cpu_features().avx512_bf16)
    GTEST_SKIP() << "no streaming kernel on this CPU";
  constexpr int64_t N = 70, K = 200;
  auto x = randn(17 * K, 81);
  const auto w = randn(N * K, 82, 0.05f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], int(i / 16 % 29) - 14);
  const auto scale = [](const ScaledTensor& t) {
    return t.has_tensor_scale ? t.tensor_scale : 1.f;
  };
  // Each case: its weight copy, its x copy of m rows, and whether it is 4-bit.
  struct Case {
    const char* name;
    ScaledTensor w;
    bool fp4;
  };
  const Case cases[] = {{"mxfp8", q(w, N, K, MXLayout::rowwise, Elem::e4m3), false},
                        {"nvfp4, 16x16 W", q4(w, N, K, MXLayout::tile, nvfp4_cfg()), true},
                        {"mxfp4, rowwise W", q4(w, N, K, MXLayout::rowwise, mxfp4_cfg()), true}};
  for (const ProductPath& path : product_paths()) {
    if (path.isa != Isa::avx512vbmi) continue;
    select(path);
    for (const Case& c : cases) {
      const bool tile = c.w.layout == MXLayout::tile;
      const int64_t own = !path.amx ? gemm_detail::kGemvMaxRows
                          : !c.fp4 || tile ? gemm_detail::kAmxStreamRows
                                           : gemm_detail::kAmxStreamRowsWords;
      for (int64_t limit : {int64_t(-1), int64_t(0), int64_t(5)}) {
        if (limit >= 0) set_stream_rows(limit);
        const int64_t want = limit >= 0 ? limit : own;
        ASSERT_EQ(stream_rows(c.fp4, tile), want)
            << c.name << " on " << path_name(gemm_mx_path());
        for (int64_t m : {want, want + 1}) {
          if (m < 1) continue;
          SCOPED_TRACE(std::string(c.name) + " on " + path_name(gemm_mx_path()) + ", limit " +
                       std::to_string(want) + ", " + std::to_string(m) + " rows");
          const Fp4Config xcfg = c.w.is_nvfp4() ? nvfp4_cfg() : mxfp4_cfg();
          const ScaledTensor xq = c.fp4 ? q4(x, m, K, MXLayout::rowwise, xcfg)
                                        : q(x, m, K, MXLayout::rowwise, Elem::e4m3);
          const MXOperand a = MXOperand::of(xq), b = MXOperand::of(c.w);
          const float alpha = scale(xq) * scale(c.w);
          std::vector<float> got(size_t(m * N)), kern(size_t(m * N));
          gemm_mx(false, xq, true, c.w, got.data(), N, false);
          float* k = kern.data();
          if (m <= want && c.fp4)
            gemm_detail::fp4_gemv_nt_avx512vbmi_bf16(a, b, alpha, k, N, false);
          else if (m <= want)
            gemm_detail::mx_gemv_nt_avx512vbmi_bf16(a, b, k, N, false);
          else if (c.fp4 && path.amx)
            gemm_detail::fp4_gemm_amx_bf16(Orient::nt, a, b, alpha, k, N, false);
          else if (c.fp4)
            gemm_detail::fp4_gemm_avx512bf16(Orient::nt, a, b, alpha, k, N, false);
          else if (path.amx)
            gemm_detail::mx_gemm_amx_bf16(Orient::nt, a, b, k, N, false);
          else
            gemm_detail::mx_gemm_avx512vbmi_bf16(Orient::nt, a, b, k, N, false);
          EXPECT_EQ(std::memcmp(got.data(), k, got.size() * sizeof(float)), 0)
              << "gemm_mx and the " << (m <= want ? "streaming" : "panel") << " kernel";
        }
        clear_stream_rows_override();
      }
    }
  }
}

}  // namespace
}  // namespace mxtrain
