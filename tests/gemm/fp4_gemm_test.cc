// tests/gemm/fp4_gemm_test.cc — products of 4-bit copies (NVFP4, MXFP4) through gemm_mx:
// every orientation a layer uses, ragged shapes, accumulation, every path (docs/numerics.md,
// "4-bit products").
//
// The decode to BF16 is exact, so it is checked byte for byte: the AVX-512 decoder against the
// scalar one, and both against e2m1(code) · block scale. The products: every element is the
// BF16 value the decoder defines, and C = alpha · P (+ C0), so against the FP64 product of the
// decoded operands the tolerance is the bound for a length-K FP32 sum in any order plus the
// one rounding of alpha · P and of the accumulation: (K + 2) · 2^-24 · (|alpha| Σ |a||b| +
// |C0|). The scalar path, which states the sums in K order, is also checked exactly against a
// transcription of that order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gemm/fp4_gemm.h"
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

std::vector<float> rnd(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g) * std::exp2(float(int(g() % 9) - 4));
  return v;
}

struct PathGuard {
  ~PathGuard() {
    clear_isa_override();
    clear_amx_override();
  }
};

// The BF16 values of a 4-bit copy's elements without the tensor scale, as floats.
std::vector<float> values(const ScaledTensor& t) {
  std::vector<uint16_t> b(size_t(t.rows * t.cols));
  gemm_detail::decode_fp4_bf16_ref(t, 0, t.rows, b.data());
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

Fp4Config nv(bool sr = false) {
  Fp4Config c;
  c.stochastic = sr;
  c.sr = {5, 1, 2};
  return c;
}
Fp4Config mx(ScaleRounding r = ScaleRounding::rceil) {
  Fp4Config c;
  c.kind = Fp4Kind::mxfp4;
  c.rounding = r;
  return c;
}

TEST(Fp4Decode, IsCodeTimesBlockScaleOnEveryPath) {
  PathGuard guard;
  for (auto [M, K] : {std::pair<int64_t, int64_t>{1, 1}, {17, 33}, {33, 17}, {64, 65}}) {
    std::vector<float> x = rnd(M * K, uint32_t(M + K));
    x[0] = 1e-38f;  // a tiny block under MXFP4: values below 2^-126 flush
    for (MXLayout l : {MXLayout::rowwise, MXLayout::colwise, MXLayout::tile})
      for (const Fp4Config& c : {nv(), mx(), mx(ScaleRounding::floor)}) {
        ScaledTensor q;
        quantize_fp4(x.data(), M, K, l, c, q);
        std::vector<uint16_t> ref(size_t(M * K)), got(size_t(M * K));
        gemm_detail::decode_fp4_bf16_ref(q, 0, M, ref.data());
        for (int64_t r = 0; r < M; ++r)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t sr = l == MXLayout::rowwise ? r : r / q.block;
            const int64_t sc = l == MXLayout::colwise ? k : k / q.block;
            const uint8_t sb = q.scales[size_t(sr * q.scale_cols() + sc)];
            const double s = q.is_nvfp4() ? e4m3_to_f32(sb) : std::ldexp(1.0, sb - 127);
            double v = e2m1_to_f32(nibble_get(q.data.data() + r * q.row_bytes(), k)) * s;
            if (std::fabs(v) < std::ldexp(1.0, -126)) v = 0;
            EXPECT_EQ(double(bf16_to_f32(ref[size_t(r * K + k)])), v) << r << "," << k;
          }
        gemm_detail::decode_fp4_bf16_avx512(q, 0, M, got.data());
        EXPECT_EQ(got, ref) << layout_name(l) << " " << M << "x" << K;
      }
  }
}

struct Op {
  const char* name;
  bool ta, tb;
  MXLayout la, lb;
};
// forward x rowwise · W (tile or rowwise)^T; dgrad dy rowwise · W (tile or colwise); wgrad
// dy colwise^T · x colwise.
const Op kOps[] = {{"forward tile", false, true, MXLayout::rowwise, MXLayout::tile},
                   {"forward rowwise", false, true, MXLayout::rowwise, MXLayout::rowwise},
                   {"dgrad tile", false, false, MXLayout::rowwise, MXLayout::tile},
                   {"dgrad colwise", false, false, MXLayout::rowwise, MXLayout::colwise},
                   {"wgrad", true, false, MXLayout::colwise, MXLayout::colwise}};

TEST(Fp4Gemm, EveryPathWithinTheSumBoundOfTheDecodedProduct) {
  PathGuard guard;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1}, {3, 17, 33}, {17, 31, 15}, {33, 65, 47}, {64, 16, 257}, {5, 100, 32},
      {40, 70, 1100}};  // the last: K over a 1024-deep chunk
  for (auto [M, N, K] : shapes)
    for (const Op& o : kOps)
      for (const Fp4Config& c : {nv(), nv(true), mx()})
        for (bool acc : {false, true}) {
          // Stored operands: A [M, K] or [K, M], B [K, N] or [N, K].
          const int64_t ar = o.ta ? K : M, ac = o.ta ? M : K;
          const int64_t br = o.tb ? N : K, bc = o.tb ? K : N;
          const std::vector<float> a = rnd(ar * ac, uint32_t(M * 7 + N)),
                                   b = rnd(br * bc, uint32_t(K * 3 + N));
          ScaledTensor A, B;
          quantize_fp4(a.data(), ar, ac, o.la, c, A);
          quantize_fp4(b.data(), br, bc, o.lb, c, B);
          const std::vector<float> av = values(A), bv = values(B);
          const float alpha = (A.has_tensor_scale ? A.tensor_scale : 1.f) *
                              (B.has_tensor_scale ? B.tensor_scale : 1.f);
          const std::vector<float> c0 = rnd(M * N, 99);
          std::vector<double> want(size_t(M * N)), mag(size_t(M * N));
          std::vector<float> order(size_t(M * N));
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = 0, m = 0;
              float p = 0.f;
              for (int64_t k = 0; k < K; ++k) {
                const float x = o.ta ? av[size_t(k * M + i)] : av[size_t(i * K + k)];
                const float y = o.tb ? bv[size_t(j * K + k)] : bv[size_t(k * N + j)];
                s += double(x) * y;
                m += std::fabs(double(x) * y);
                p += x * y;
              }
              const float base = acc ? c0[size_t(i * N + j)] : 0.f;
              want[size_t(i * N + j)] = double(alpha) * s + base;
              mag[size_t(i * N + j)] = std::fabs(double(alpha)) * m + std::fabs(base);
              const float v = alpha == 1.f ? p : alpha * p;
              order[size_t(i * N + j)] = acc ? base + v : v;
            }
          // Every ISA level with AMX off, then the top level with AMX tiles where present.
          std::vector<std::pair<Isa, bool>> paths;
          for (Isa isa : supported_isas()) paths.push_back({isa, false});
          if (amx_available()) paths.push_back({Isa::avx512vbmi, true});
          for (auto [isa, amx] : paths) {
            set_isa(isa);
            if (amx_available()) set_amx(amx);
            std::vector<float> C(acc ? c0 : std::vector<float>(size_t(M * N), 7.f));
            gemm_mx(o.ta, A, o.tb, B, C.data(), N, acc);
            const std::string what = std::string(o.name) + " " + std::to_string(M) + "x" +
                                     std::to_string(N) + "x" + std::to_string(K) + " " +
                                     fp4_kind_name(c.kind) + (acc ? " acc" : "") + " on " +
                                     isa_name(isa) + (amx ? " with AMX" : "");
            for (size_t e = 0; e < C.size(); ++e) {
              const double tol = double(K + 2) * 0x1p-24 * mag[e];
              ASSERT_LE(std::fabs(double(C[e]) - want[e]), tol) << what << " element " << e;
              if (isa == Isa::scalar) {
                ASSERT_EQ(C[e], order[e]) << what << " element " << e;
              }
            }
          }
        }
}

TEST(Fp4Gemm, RefusesMixedTransformAndFamilies) {
  const std::vector<float> a = rnd(32 * 16, 1), b = rnd(32 * 8, 2);
  ScaledTensor x, dy, dy_plain, m8;
  Fp4Config c = nv();
  c.rht = true;
  quantize_fp4(a.data(), 32, 16, MXLayout::colwise, c, x);
  quantize_fp4(b.data(), 32, 8, MXLayout::colwise, c, dy);
  quantize_fp4(b.data(), 32, 8, MXLayout::colwise, nv(), dy_plain);
  std::vector<float> C(8 * 16);
  EXPECT_NO_THROW(gemm_mx(true, dy, false, x, C.data(), 16, false));
  EXPECT_THROW(gemm_mx(true, dy_plain, false, x, C.data(), 16, false), Error);
  m8 = quantize(b.data(), 32, 8, MXLayout::colwise, QuantConfig{});
  EXPECT_THROW(gemm_mx(true, m8, false, x, C.data(), 16, false), Error);
}

// The wgrad product of RHT copies estimates the product of the untransformed matrices: with
// exactly representable inputs the two quantized products agree up to 4-bit rounding only.
TEST(Fp4Gemm, TransformedWgradEstimatesThePlainProduct) {
  const int64_t T = 256, N = 24, K = 40;
  const std::vector<float> dy = rnd(T * N, 11), x = rnd(T * K, 12);
  std::vector<double> exact(size_t(N * K), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        exact[size_t(n * K + k)] += double(dy[size_t(t * N + n)]) * x[size_t(t * K + k)];
  double err_rht = 0, err_plain = 0, norm = 0;
  for (bool rht : {false, true}) {
    Fp4Config c = nv();
    c.rht = rht;
    ScaledTensor qd, qx;
    quantize_fp4(dy.data(), T, N, MXLayout::colwise, c, qd);
    quantize_fp4(x.data(), T, K, MXLayout::colwise, c, qx);
    std::vector<float> dw(size_t(N * K));
    gemm_mx(true, qd, false, qx, dw.data(), K, false);
    double e = 0;
    for (size_t i = 0; i < dw.size(); ++i) {
      e += (dw[i] - exact[i]) * (dw[i] - exact[i]);
      if (!rht) norm += exact[i] * exact[i];
    }
    (rht ? err_rht : err_plain) = std::sqrt(e);
  }
  // 4-bit rounding of both operands: relative error well below 1 either way (measured ~0.1).
  EXPECT_LT(err_rht / std::sqrt(norm), 0.3);
  EXPECT_LT(err_plain / std::sqrt(norm), 0.3);
}

}  // namespace
}  // namespace mxtrain
