// tests/gemm/scaled_gemm_test.cc — products of FP32-scaled (blockwise 128) copies through
// gemm_mx: every orientation, pow2 and plain FP32 scales, E4M3 and E5M2, ragged shapes.
//
// The pow2 path must equal, bit for bit, the MX product of the same codes with the E8M0 grid
// expanded by hand (it is that product). The fp32 path's fast kernel sums each 128-deep chunk
// in its own FP32 order, so against fp32_block_gemm_ref the tolerance is the bound for a
// length-K FP32 sum in any order, (K + 1) · 2^-24 · (Σ |a||b| + |C0|), with a, b the scaled
// values; the same bound holds for the reference against the FP64 product of the dequantized
// operands (the scaling multiplies add one rounding each per chunk, covered by the +1 per k).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gemm/mx_gemm.h"
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

struct Op {
  bool ta, tb;
  MXLayout la, lb;
};
// nt fwd: x rowwise · W tile^T; nn dgrad: dy rowwise · W tile; tn wgrad: dy colwise^T · x colwise
const Op kOps[] = {{false, true, MXLayout::rowwise, MXLayout::tile},
                   {false, false, MXLayout::rowwise, MXLayout::tile},
                   {true, false, MXLayout::colwise, MXLayout::colwise}};

// op(A) [M,K] · op(B) [K,N] in FP64 from the dequantized copies; also Σ|a||b| per element.
void f64_product(const Op& o, const ScaledTensor& A, const ScaledTensor& B, int64_t M, int64_t N,
                 int64_t K, std::vector<double>& C, std::vector<double>& mag) {
  std::vector<float> a(A.data.size()), b(B.data.size());
  dequantize(A, a.data());
  dequantize(B, b.data());
  C.assign(size_t(M * N), 0.0);
  mag.assign(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double x = o.ta ? a[size_t(k * M + i)] : a[size_t(i * K + k)];
      for (int64_t j = 0; j < N; ++j) {
        const double y = o.tb ? b[size_t(j * K + k)] : b[size_t(k * N + j)];
        C[size_t(i * N + j)] += x * y;
        mag[size_t(i * N + j)] += std::fabs(x * y);
      }
    }
}

ScaledTensor make_op(bool trans, bool is_a, MXLayout l, int64_t outer, int64_t K, Elem e,
                     ScaleType s, uint32_t seed) {
  // stored [outer, K] unless (A and trans) or (B and !trans): then [K, outer]
  const bool k_rows = is_a ? trans : !trans;
  const int64_t r = k_rows ? K : outer, c = k_rows ? outer : K;
  const std::vector<float> v = rnd(r * c, seed);
  BlockQuantConfig cfg;
  cfg.elem = e;
  cfg.scale = s;
  return quantize_blocks(v.data(), r, c, l, cfg);
}

// Runs op(A) · op(B) (+ C0 when acc) through gemm_mx and fp32_block_gemm_ref and checks the
// reference against the FP64 product of the dequantized operands within the any-order FP32
// sum bound (K + 1 + extra)·2^-24·(Σ|a||b| + |C0|) + flush, and the fast path against the
// reference within twice that; `extra` counts further roundings (the per-tensor path's
// sa · sb · P), `flush` the pow2 path's flush of |v| < 2^-126. Reports the first failures
// (labelled) and counts every one in `bad`.
void check_against_reference(const Op& o, const ScaledTensor& A, const ScaledTensor& B, int64_t M,
                             int64_t N, int64_t K, bool acc, int extra, double flush,
                             const std::string& label, int& bad) {
  std::vector<float> c0 = rnd(M * N, 99);
  std::vector<float> fast = c0, ref = c0;
  gemm_mx(o.ta, A, o.tb, B, fast.data(), N, acc);
  gemm_detail::fp32_block_gemm_ref(o.ta, A, o.tb, B, ref.data(), N, acc);
  std::vector<double> exact, mag;
  f64_product(o, A, B, M, N, K, exact, mag);
  for (int64_t i = 0; i < M * N; ++i) {
    const double c0v = acc ? c0[size_t(i)] : 0.0;
    const double tol =
        double(K + 1 + extra) * 0x1.0p-24 * (mag[size_t(i)] + std::fabs(c0v)) + flush;
    if (!(std::fabs(fast[size_t(i)] - ref[size_t(i)]) <= 2 * tol) ||
        !(std::fabs(ref[size_t(i)] - (exact[size_t(i)] + c0v)) <= tol))
      if (bad++ < 5)
        ADD_FAILURE() << label << " ta=" << o.ta << " tb=" << o.tb << " " << M << "x" << N
                      << "x" << K << " acc=" << acc << " i=" << i << ": fast "
                      << fast[size_t(i)] << " ref " << ref[size_t(i)] << " exact "
                      << exact[size_t(i)] + c0v;
  }
}

TEST(ScaledGemm, FastAgreesWithReferenceAndFp64AllOrientations) {
  const int64_t shapes[][3] = {{1, 1, 1},     {31, 33, 127}, {33, 31, 129}, {128, 1, 257},
                               {129, 127, 255}, {1, 257, 128}, {255, 129, 33}};
  int bad = 0;
  for (const Op& o : kOps)
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (ScaleType s : {ScaleType::fp32_pow2, ScaleType::fp32})
        for (const auto& sh : shapes)
          for (bool acc : {false, true}) {
            const int64_t M = sh[0], N = sh[1], K = sh[2];
            const ScaledTensor A = make_op(o.ta, true, o.la, M, K, e, s, uint32_t(M * 7 + K));
            const ScaledTensor B = make_op(o.tb, false, o.lb, N, K, e, s, uint32_t(N * 13 + K));
            check_against_reference(o, A, B, M, N, K, acc, 0, double(K) * 0x1.0p-126,
                                    scale_type_name(s), bad);
          }
  EXPECT_EQ(bad, 0);
}

// The panel kernels of the fp32 path (fp32_block_gemm_avx512bf16 / _avx512vbmi_bf16, through
// gemm_mx on the avx512 and avx512vbmi paths) give the bytes of fp32_block_gemm_panel_ref, the
// scalar statement of their sums: every orientation, accumulate on and off, E4M3 and E5M2, a
// per-tensor operand against a blockwise one, shapes 1, 31, 33, 127, 128, 129, 2^n +- 1 with
// ragged 128-blocks, K over a panel chunk (1024), and forwards/dgrads that run transposed
// (64 <= M < N) or split rows between threads. (AMX tiles off: their sums are the next test's.)
const int64_t kPanelShapes[][3] = {{1, 1, 1},     {31, 33, 127},   {33, 31, 129}, {128, 1, 257},
                                   {129, 127, 255}, {1, 257, 128},  {70, 300, 1100},
                                   {65, 129, 2049}, {255, 33, 1023}, {200, 97, 385}};
TEST(ScaledGemm, PanelKernelsGiveTheBytesOfTheirReference) {
  std::vector<Isa> isas;
  for (Isa i : {Isa::avx512, Isa::avx512vbmi})
    if (isa_supported(i) && cpu_features().avx512_bf16) isas.push_back(i);
  if (isas.empty()) GTEST_SKIP() << "no AVX512-BF16: the panel kernels do not run here";
  if (amx_available()) set_amx(false);
  const auto& shapes = kPanelShapes;
  // Unit-grid view and per-chunk scales, as the fp32 path defines them (docs/numerics.md,
  // "FP32-scaled products"): op(A) row i and op(B) column j in 128-deep chunk c.
  auto view = [](const ScaledTensor& t, std::vector<uint8_t>& g) {
    const int64_t gr = t.layout == MXLayout::rowwise ? t.rows : ceil_div(t.rows, 32);
    const int64_t gc = t.layout == MXLayout::colwise ? t.cols : ceil_div(t.cols, 32);
    g.assign(size_t(gr * gc), 127);
    return gemm_detail::MXOperand{t.data.data(), g.data(), t.rows, t.cols, gc, t.layout, t.elem};
  };
  auto scale = [](const ScaledTensor& t, int64_t r, int64_t c) {
    const float* sc = reinterpret_cast<const float*>(t.scales.data());
    if (t.is_fp32_tensor()) return sc[0];
    const int64_t sr = t.layout == MXLayout::rowwise ? r : r / 128;
    const int64_t scl = t.layout == MXLayout::colwise ? c : c / 128;
    return sc[sr * t.scale_cols() + scl];
  };
  int bad = 0;
  for (const Op& o : kOps)
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (int tensor_a = 0; tensor_a < 2; ++tensor_a)
        for (const auto& sh : shapes)
          for (bool acc : {false, true}) {
            const int64_t M = sh[0], N = sh[1], K = sh[2];
            ScaledTensor A =
                make_op(o.ta, true, o.la, M, K, e, ScaleType::fp32, uint32_t(M + 3 * K));
            const ScaledTensor B =
                make_op(o.tb, false, o.lb, N, K, e, ScaleType::fp32, uint32_t(N + 5 * K));
            if (tensor_a) {  // op(A) with one scale for the tensor, against blockwise B
              const std::vector<float> va = rnd(M * K, uint32_t(M * 9 + K));
              quantize_tensor_scaled(va.data(), o.ta ? K : M, o.ta ? M : K, {e, 0.f}, A);
            }
            const int64_t chunks = ceil_div(K, 128);
            std::vector<float> sa(size_t(chunks * M)), sb(size_t(chunks * N));
            for (int64_t c = 0; c < chunks; ++c) {
              for (int64_t i = 0; i < M; ++i)
                sa[size_t(c * M + i)] = o.ta ? scale(A, c * 128, i) : scale(A, i, c * 128);
              for (int64_t j = 0; j < N; ++j)
                sb[size_t(c * N + j)] = o.tb ? scale(B, j, c * 128) : scale(B, c * 128, j);
            }
            std::vector<uint8_t> ga, gb;
            const auto orient = o.ta ? gemm_detail::Orient::tn
                                     : o.tb ? gemm_detail::Orient::nt : gemm_detail::Orient::nn;
            const std::vector<float> c0 = rnd(M * N, 77);
            std::vector<float> want = c0;
            gemm_detail::fp32_block_gemm_panel_ref(orient, view(A, ga), view(B, gb),
                                                   {sa.data(), sb.data()}, want.data(), N, acc);
            for (Isa isa : isas) {
              set_isa(isa);
              std::vector<float> got = c0;
              gemm_mx(o.ta, A, o.tb, B, got.data(), N, acc);
              if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0 && bad++ < 5)
                ADD_FAILURE() << isa_name(isa) << " ta=" << o.ta << " tb=" << o.tb << " "
                              << elem_name(e) << (tensor_a ? " per-tensor A " : " ") << M << "x"
                              << N << "x" << K << " acc=" << acc;
            }
            clear_isa_override();
          }
  clear_amx_override();
  EXPECT_EQ(bad, 0);
}

// The AMX path (fp32_block_gemm_amx_bf16: each 128-deep chunk summed on the tiles, then the
// same promotion) on the panel test's shapes, against fp32_block_gemm_ref within the any-order
// FP32 sum bound of check_against_reference: TDPBF16PS rounds its sums otherwise than
// VDPBF16PS, so the bytes are not the panel reference's. Accumulate on and off and a
// per-tensor operand against a blockwise one alternate over the shapes (the FP64 product of
// every combination would take minutes under the sanitizers).
TEST(ScaledGemm, AmxTilesWithinTheSumBoundOfTheReference) {
  if (!amx_available()) GTEST_SKIP() << "no AMX-BF16 granted: path amx_bf16 does not run here";
  set_isa(Isa::avx512vbmi);
  set_amx(true);
  ASSERT_EQ(gemm_detail::mx_product_choice().path, Path::amx_bf16);
  int bad = 0;
  for (const Op& o : kOps)
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (size_t si = 0; si < std::size(kPanelShapes); ++si) {
        const auto& sh = kPanelShapes[si];
        const bool acc = (si + size_t(e == Elem::e5m2)) % 2 == 1;
        const int tensor_a = si % 3 == 2;
        const int64_t M = sh[0], N = sh[1], K = sh[2];
        ScaledTensor A =
            make_op(o.ta, true, o.la, M, K, e, ScaleType::fp32, uint32_t(M + 3 * K));
        const ScaledTensor B =
            make_op(o.tb, false, o.lb, N, K, e, ScaleType::fp32, uint32_t(N + 5 * K));
        if (tensor_a) {
          const std::vector<float> va = rnd(M * K, uint32_t(M * 9 + K));
          quantize_tensor_scaled(va.data(), o.ta ? K : M, o.ta ? M : K, {e, 0.f}, A);
        }
        // A per-tensor scale rounds the dequantized values and sa · sb: two roundings more
        // (as the per-tensor test below counts them).
        check_against_reference(o, A, B, M, N, K, acc, tensor_a ? 2 : 0,
                                double(K) * 0x1.0p-126,
                                tensor_a ? "amx per-tensor A" : "amx", bad);
      }
  clear_isa_override();
  clear_amx_override();
  EXPECT_EQ(bad, 0);
}

// One FP32 scale per tensor (fp8-current) on both operands: C = sa · sb · P over the whole K,
// every orientation (the tile copy serves both axes), ragged shapes, accumulate on and off.
TEST(ScaledGemm, PerTensorAgreesWithReferenceAndFp64AllOrientations) {
  const int64_t shapes[][3] = {{1, 1, 1}, {31, 33, 127}, {33, 31, 129}, {129, 127, 255},
                               {1, 257, 128}, {255, 129, 33}};
  int bad = 0;
  for (const Op& o : kOps)
    for (Elem e : {Elem::e4m3, Elem::e5m2})
      for (const auto& sh : shapes)
        for (bool acc : {false, true}) {
          const int64_t M = sh[0], N = sh[1], K = sh[2];
          // stored shapes as make_op: A [M,K] or [K,M] (ta), B [K,N] or [N,K] (tb)
          const std::vector<float> va = rnd(M * K, uint32_t(M * 5 + K)),
                                   vb = rnd(N * K, uint32_t(N * 11 + K));
          ScaledTensor A, B;
          quantize_tensor_scaled(va.data(), o.ta ? K : M, o.ta ? M : K, {e, 0.f}, A);
          quantize_tensor_scaled(vb.data(), o.tb ? N : K, o.tb ? K : N, {e, 0.f}, B);
          ASSERT_TRUE(A.is_fp32_tensor() && B.is_fp32_tensor());
          check_against_reference(o, A, B, M, N, K, acc, 2, 0x1.0p-126, "per-tensor", bad);
        }
  EXPECT_EQ(bad, 0);
}

// The pow2 path is the MX product of the expanded E8M0 grid, bit for bit, on every kernel
// path this CPU has (it reads the copy's own codes beside a grid made for them; the expansion
// path, avx2 and A^T · B^T, copies them), in all four orientations, on ragged shapes.
TEST(ScaledGemm, Pow2EqualsMxProductOfExpandedGridOnEveryPath) {
  auto expand = [](const ScaledTensor& t) {
    ScaledTensor m = ScaledTensor::empty(t.rows, t.cols, t.layout, t.elem);
    std::memcpy(m.data.data(), t.data.data(), t.data.size());
    const float* s = reinterpret_cast<const float*>(t.scales.data());
    for (int64_t i = 0; i < m.scale_rows(); ++i)
      for (int64_t j = 0; j < m.scale_cols(); ++j) {
        const int64_t si = t.layout == MXLayout::rowwise ? i : i / 4;
        const int64_t sj = t.layout == MXLayout::colwise ? j : j / 4;
        m.scales[size_t(i * m.scale_cols() + j)] =
            uint8_t(127 + std::ilogb(s[si * t.scale_cols() + sj]));
      }
    return m;
  };
  // nt, nn, tn as the layers run them, and tt (tile A^T · tile B^T: no layer needs it).
  const Op ops[] = {kOps[0], kOps[1], kOps[2], {true, true, MXLayout::tile, MXLayout::tile}};
  const int64_t shapes[][3] = {{129, 33, 257}, {1, 31, 129}, {200, 97, 33}, {64, 130, 1}};
  std::vector<Isa> isas{Isa::scalar};
  for (Isa i : {Isa::avx2, Isa::avx512, Isa::avx512vbmi})
    if (isa_supported(i)) isas.push_back(i);
  for (Isa isa : isas) {
    set_isa(isa);
    for (const Op& o : ops)
      for (const auto& sh : shapes) {
        const int64_t M = sh[0], N = sh[1], K = sh[2];
        const ScaledTensor A = make_op(o.ta, true, o.la, M, K, Elem::e4m3, ScaleType::fp32_pow2, 1);
        const ScaledTensor B =
            make_op(o.tb, false, o.lb, N, K, Elem::e5m2, ScaleType::fp32_pow2, 2);
        std::vector<float> got(size_t(M * N)), want(size_t(M * N));
        gemm_mx(o.ta, A, o.tb, B, got.data(), N, false);
        gemm_mx(o.ta, expand(A), o.tb, expand(B), want.data(), N, false);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
            << isa_name(isa) << " ta=" << o.ta << " tb=" << o.tb << " " << M << "x" << N << "x"
            << K;
      }
  }
  clear_isa_override();
}

TEST(ScaledGemm, NanCodePropagatesAndMixedFamiliesRefused) {
  for (ScaleType s : {ScaleType::fp32_pow2, ScaleType::fp32}) {
    ScaledTensor A = make_op(false, true, MXLayout::rowwise, 3, 200, Elem::e4m3, s, 5);
    const ScaledTensor B = make_op(true, false, MXLayout::tile, 4, 200, Elem::e4m3, s, 6);
    A.data[size_t(1 * 200 + 150)] = 0x7F;  // E4M3 NaN in row 1, second K chunk
    std::vector<float> c(12);
    gemm_mx(false, A, true, B, c.data(), 4, false);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(std::isnan(c[size_t(i * 4 + j)]), i == 1);
  }
  const ScaledTensor A =
      make_op(false, true, MXLayout::rowwise, 3, 64, Elem::e4m3, ScaleType::fp32_pow2, 7);
  std::vector<float> w = rnd(4 * 64, 8);
  const ScaledTensor B = quantize(w.data(), 4, 64, MXLayout::rowwise, QuantConfig{});
  std::vector<float> c(12);
  try {
    gemm_mx(false, A, true, B, c.data(), 4, false);
    ADD_FAILURE() << "mixed families accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("both operands must be of one family"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace mxtrain
