// tests/nn/linear_test.cc — the quantized Linear layer (nn/linear.h, docs/numerics.md,
// "Quantized Linear").
//
// Tolerances:
// - kU32 = 2^-24 (FP32 unit roundoff): a length-K FP32 dot product of exact inputs is within
//   (K+2)·u·Σ|a||b| of the exact sum (any summation order; +2 covers the bias add / the
//   accumulation into an existing gradient).
// - kBf16Input = 2^-7: converting both operands to BF16 (unit roundoff 2^-8 each) changes each
//   product by at most (2·2^-8 + 2^-16)|a||b| <= 2^-7·|a||b|; used against the unrounded FP64
//   result.
// - kCosine = 0.99: MXFP8 E4M3 keeps 3 mantissa bits plus a shared block scale; on random
//   normal data its outputs and gradients track the BF16 layer's with cosine similarity well
//   above 0.99 (the MXFP8 papers report matching training curves at this fidelity).
// Everything exact is compared byte for byte: defer on/off, weight reuse, provider, the
// layer against gemm_mx on the same quantized operands, thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/linear.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using namespace layer_test;

constexpr double kU32 = 1.0 / (1 << 24);
constexpr double kBf16Input = 1.0 / 128;
constexpr double kCosine = 0.99;

LinearPrecision prec(const std::string& recipe, bool defer = false) {
  LinearPrecision p;
  p.recipe = get_recipe(recipe);
  p.defer_backward_quant = defer;
  return p;
}

Linear make_layer(const std::string& recipe, bool defer, int64_t in, int64_t out, bool bias,
                  uint32_t seed) {
  Linear l("fc", in, out, bias, prec(recipe, defer));
  l.weight.value = buffer(randn(in * out, seed, 0.05f));
  if (bias) l.bias.value = buffer(randn(out, seed + 1, 0.1f));
  return l;
}

struct Result {
  std::vector<float> y, dx, dW, db;
  size_t held = 0;
};

Result run_layer(Linear& l, const std::vector<float>& x, const std::vector<float>& dy, int64_t T,
              bool want_dx = true) {
  Result r;
  r.y.resize(size_t(T * l.out_features()));
  LinearSaved s;
  l.forward(x.data(), T, r.y.data(), s);
  r.held = s.held_bytes();
  if (want_dx) r.dx.resize(size_t(T * l.in_features()));
  l.weight.zero_grad();
  if (!l.bias.shape.empty()) l.bias.zero_grad();
  l.backward(s, dy.data(), want_dx ? r.dx.data() : nullptr);
  r.dW.assign(l.weight.grad.begin(), l.weight.grad.end());
  r.db.assign(l.bias.grad.begin(), l.bias.grad.end());
  return r;
}

// |got - want| <= tol elementwise, reporting the first few failures.
void expect_within(const std::vector<float>& got, const std::vector<double>& want,
                   const std::vector<double>& tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " +- "
                    << tol[i];
}

// A recipe whose formats no product reads is refused when the layer is made (and when it is
// switched to), before anything is allocated.
TEST(LinearPrecision, RefusesRecipesWithoutProducts) {
  LinearPrecision p;
  p.recipe = get_recipe("mxfp8");
  p.recipe.name = "mx128";
  p.recipe.role(Role::weight).block = BlockShape::b1x128;
  try {
    Linear("l", 8, 8, false, p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("mx128: no quantized products read its formats", 0),
              0u)
        << e.what();
  }
  Linear ok("l", 8, 8, false, LinearPrecision{});
  EXPECT_THROW(ok.set_precision(p), Error);
  EXPECT_EQ(ok.precision().recipe.name, "bf16");
}

TEST(LinearBf16, ForwardBackwardMatchFp64Reference) {
  const int64_t T = 33, in = 65, out = 31;
  Linear l = make_layer("bf16", false, in, out, true, 1);
  auto x = randn(T * in, 2), dy = randn(T * out, 3);
  Result r = run_layer(l, x, dy, T);
  auto xb = round_bf16(x), wb = round_bf16(l.weight.value), dyb = round_bf16(dy);
  // (a) against FP64 on the BF16-rounded operands: only FP32 accumulation error remains.
  {
    RefProduct y = ref_product(false, true, T, out, in, xb, wb);
    std::vector<double> tol(y.c.size());
    for (size_t i = 0; i < y.c.size(); ++i) {
      double b = l.bias.value[i % out];
      y.c[i] += b;
      tol[i] = (in + 2) * kU32 * (y.abs[i] + std::fabs(b));
    }
    expect_within(r.y, y.c, tol, "y");
    RefProduct dx = ref_product(false, false, T, in, out, dyb, wb);
    std::vector<double> tdx(dx.c.size());
    for (size_t i = 0; i < dx.c.size(); ++i) tdx[i] = (out + 2) * kU32 * dx.abs[i];
    expect_within(r.dx, dx.c, tdx, "dx");
    RefProduct dW = ref_product(true, false, out, in, T, dyb, xb);
    std::vector<double> tdw(dW.c.size());
    for (size_t i = 0; i < dW.c.size(); ++i) tdw[i] = (T + 2) * kU32 * dW.abs[i];
    expect_within(r.dW, dW.c, tdw, "dW");
    std::vector<double> db(out, 0.0), tdb(out, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < out; ++j) {
        db[j] += dy[t * out + j];  // the bias gradient uses the FP32 dy, not BF16
        tdb[j] += 2 * kU32 * std::fabs(dy[t * out + j]);
      }
    expect_within(r.db, db, tdb, "db");
  }
  // (b) against FP64 on the unrounded operands: BF16 input rounding dominates.
  {
    RefProduct y = ref_product(false, true, T, out, in, x, l.weight.value);
    std::vector<double> tol(y.c.size());
    for (size_t i = 0; i < y.c.size(); ++i) {
      y.c[i] += l.bias.value[i % out];
      tol[i] = (kBf16Input + (in + 2) * kU32) * y.abs[i] + 2 * kU32;
    }
    expect_within(r.y, y.c, tol, "y (unrounded reference)");
  }
}

// Loss L = Σ g ⊙ y is linear in x, W and b, so a central difference is exact when x ± h and
// W ± h stay exactly representable in BF16 and every sum is exact in FP32: the data are
// multiples of 1/8 in [-2, 2] (at most 5 significant bits), h = 1/8, products are multiples
// of 1/64 and every partial sum stays far below 2^24/64. The finite differences therefore
// equal the analytic gradients exactly; the tolerance only absorbs the FP64 loss sum.
TEST(LinearBf16, FiniteDifferenceGradientsAreExactOnDyadicData) {
  const int64_t T = 5, in = 7, out = 6;
  auto dyadic = [](int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> d(-16, 16);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng) / 8.f;
    return v;
  };
  Linear l("fd", in, out, true, prec("bf16"));
  l.weight.value = buffer(dyadic(in * out, 1));
  l.bias.value = buffer(dyadic(out, 2));
  auto x = dyadic(T * in, 3), g = dyadic(T * out, 4);
  auto loss = [&](std::vector<float>& xx) {
    std::vector<float> y(size_t(T * out));
    LinearSaved s;
    l.forward(xx.data(), T, y.data(), s);
    double L = 0;
    for (size_t i = 0; i < y.size(); ++i) L += double(g[i]) * y[i];
    return L;
  };
  Result r = run_layer(l, x, g, T);
  const float h = 0.125f;
  for (int64_t i = 0; i < T * in; ++i) {
    auto xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR((loss(xp) - loss(xm)) / (2 * h), r.dx[i], 1e-9) << "dx[" << i << "]";
  }
  for (int64_t i = 0; i < in * out; ++i) {
    float w0 = l.weight.value[i];
    l.weight.value[i] = w0 + h;
    ++l.weight.version;
    double lp = loss(x);
    l.weight.value[i] = w0 - h;
    ++l.weight.version;
    double lm = loss(x);
    l.weight.value[i] = w0;
    ++l.weight.version;
    EXPECT_NEAR((lp - lm) / (2 * h), r.dW[i], 1e-9) << "dW[" << i << "]";
  }
  for (int64_t j = 0; j < out; ++j) {
    float b0 = l.bias.value[j];
    l.bias.value[j] = b0 + h;
    double lp = loss(x);
    l.bias.value[j] = b0 - h;
    double lm = loss(x);
    l.bias.value[j] = b0;
    EXPECT_NEAR((lp - lm) / (2 * h), r.db[j], 1e-9) << "db[" << j << "]";
  }
}

TEST(LinearMx, OutputsAndGradientsTrackBf16Layer) {
  const int64_t T = 128, in = 96, out = 80;
  auto x = randn(T * in, 10), dy = randn(T * out, 11);
  Linear ref = make_layer("bf16", false, in, out, true, 12);
  Result rb = run_layer(ref, x, dy, T);
  for (std::string name : {"mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed"}) {
    SCOPED_TRACE(name);
    Linear l = make_layer(name, false, in, out, true, 12);
    Result rm = run_layer(l, x, dy, T);
    EXPECT_GE(cosine(rm.y, rb.y), kCosine);
    EXPECT_GE(cosine(rm.dx, rb.dx), kCosine);
    EXPECT_GE(cosine(rm.dW, rb.dW), kCosine);
    EXPECT_TRUE(same_bytes(rm.db, rb.db));  // the bias gradient is FP32 in every recipe
    EXPECT_FALSE(same_bytes(rm.y, rb.y));   // it really quantized
  }
}

// The layer's products are exactly gemm_mx on the operands the recipe prescribes.
TEST(LinearMx, ProductsEqualGemmMxOnPrescribedOperands) {
  const int64_t T = 37, in = 70, out = 45;
  auto x = randn(T * in, 20), dy = randn(T * out, 21, 1e-3f);
  for (std::string name : {"mxfp8", "mxfp8-32x32"}) {
    SCOPED_TRACE(name);
    Linear l = make_layer(name, false, in, out, false, 22);
    Result r = run_layer(l, x, dy, T);
    // Both recipes: E4M3 and rceil for every role; mxfp8-32x32's weight is one 32x32 copy.
    const bool tiled = name == "mxfp8-32x32";
    const QuantConfig cfg{Elem::e4m3, ScaleRounding::rceil};
    MXLayout fwd_w = tiled ? MXLayout::tile : MXLayout::rowwise;
    MXLayout bwd_w = tiled ? MXLayout::tile : MXLayout::colwise;
    const float* W = l.weight.value.data();
    ScaledTensor xr = quantize(x.data(), T, in, MXLayout::rowwise, cfg);
    ScaledTensor xc = quantize(x.data(), T, in, MXLayout::colwise, cfg);
    ScaledTensor wf = quantize(W, out, in, fwd_w, cfg);
    ScaledTensor wb = quantize(W, out, in, bwd_w, cfg);
    ScaledTensor dyr = quantize(dy.data(), T, out, MXLayout::rowwise, cfg);
    ScaledTensor dyc = quantize(dy.data(), T, out, MXLayout::colwise, cfg);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in)), dW(size_t(out * in), 0.f);
    gemm_mx(false, xr, true, wf, y.data(), out, false);
    gemm_mx(false, dyr, false, wb, dx.data(), in, false);
    gemm_mx(true, dyc, false, xc, dW.data(), in, true);
    EXPECT_TRUE(same_bytes(r.y, y));
    EXPECT_TRUE(same_bytes(r.dx, dx));
    EXPECT_TRUE(same_bytes(r.dW, dW));
  }
}

// The FP32-scaled recipes: each product is gemm_mx on the copies copies_needed names, made by
// quantize_qtensor with each role's own format (fp8-current's gradients are E5M2).
TEST(LinearMx, Fp32ScaledProductsEqualGemmMxOnTheirCopies) {
  const int64_t T = 37, in = 70, out = 45;
  auto x = randn(T * in, 20), dy = randn(T * out, 21, 1e-3f);
  for (std::string name : {"blockwise", "fp8-current"}) {
    SCOPED_TRACE(name);
    Linear l = make_layer(name, false, in, out, false, 22);
    Result r = run_layer(l, x, dy, T);
    const Recipe rc = get_recipe(name);
    auto q = [&](const float* v, int64_t M, int64_t K, Role role) {
      return quantize_qtensor(v, M, K, rc, role, rc.role(role).quant_config());
    };
    auto copy = [&](Role role, Use use) { return copies_needed(rc, role, use).only(); };
    const QTensor xq = q(x.data(), T, in, Role::input);
    const QTensor wq = q(l.weight.value.data(), out, in, Role::weight);
    const QTensor dyq = q(dy.data(), T, out, Role::grad);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in)), dW(size_t(out * in), 0.f);
    gemm_mx(false, xq.scaled(copy(Role::input, Use::forward)), true,
            wq.scaled(copy(Role::weight, Use::forward)), y.data(), out, false);
    gemm_mx(false, dyq.scaled(copy(Role::grad, Use::dgrad)), false,
            wq.scaled(copy(Role::weight, Use::dgrad)), dx.data(), in, false);
    gemm_mx(true, dyq.scaled(copy(Role::grad, Use::wgrad)), false,
            xq.scaled(copy(Role::input, Use::wgrad)), dW.data(), in, true);
    EXPECT_TRUE(same_bytes(r.y, y));
    EXPECT_TRUE(same_bytes(r.dx, dx));
    EXPECT_TRUE(same_bytes(r.dW, dW));
  }
}

TEST(LinearMx, DeferOnAndOffGiveIdenticalBytesAndDeferHoldsLess) {
  const int64_t T = 33, in = 65, out = 47;
  auto x = randn(T * in, 30), dy = randn(T * out, 31, 1e-2f);
  std::vector<Recipe> recipes = {get_recipe("mxfp8"), get_recipe("mxfp8-32x32"),
                                 get_recipe("fp8-delayed")};
  Recipe e5 = get_recipe("mxfp8");
  e5.role(Role::grad).elem = Elem::e5m2;
  e5.set_rule(ScaleRounding::floor);
  recipes.push_back(e5);
  for (const Recipe& rc : recipes)
    for (bool want_dx : {true, false}) {
      SCOPED_TRACE(rc.describe() + (want_dx ? " with dx" : " without dx"));
      Result res[2];
      for (int defer = 0; defer < 2; ++defer) {
        LinearPrecision p;
        p.recipe = rc;
        p.defer_backward_quant = defer;
        Linear l("fc", in, out, true, p);
        l.weight.value = buffer(randn(in * out, 32, 0.05f));
        l.bias.value = buffer(randn(out, 33));
        res[defer] = run_layer(l, x, dy, T, want_dx);
      }
      EXPECT_TRUE(same_bytes(res[0].y, res[1].y));
      EXPECT_TRUE(same_bytes(res[0].dx, res[1].dx));
      EXPECT_TRUE(same_bytes(res[0].dW, res[1].dW));
      EXPECT_TRUE(same_bytes(res[0].db, res[1].db));
      EXPECT_LT(res[1].held, res[0].held);
    }
}

// Delayed scaling: every copy is the given-scale quantization with the history's scale (1
// before any update), each quantization records its tensor's amax, and after update() the next
// optimizer step's copies use fp8_max / amax. Products as fp8-current's: gemm_mx on the copies.
TEST(LinearDelayed, QuantizesWithTheHistoryScaleAndRecordsAmaxes) {
  const int64_t T = 37, in = 70, out = 45;
  auto x = randn(T * in, 20), dy = randn(T * out, 21, 1e-3f);
  Linear l = make_layer("fp8-delayed", false, in, out, false, 22);
  LayerScaleHistories& hs = l.scale_histories();
  ScaleHistory& hx = *hs.get(Role::input, 0);
  ScaleHistory& hw = *hs.get(Role::weight, 0);
  ScaleHistory& hg = *hs.get(Role::grad, 0);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const float sx = hx.scale(), sw = hw.scale(), sg = hg.scale();
    if (step == 0) {
      EXPECT_EQ(sx * sw * sg, 1.f);
    }
    Result r = run_layer(l, x, dy, T);
    EXPECT_EQ(hx.step_amax(), tensor_amax(x.data(), T * in));
    EXPECT_EQ(hw.step_amax(), tensor_amax(l.weight.value.data(), out * in));
    EXPECT_EQ(hg.step_amax(), tensor_amax(dy.data(), T * out));
    ScaledTensor xq, wq, dyq;
    quantize_tensor_given_scale(x.data(), T, in, Elem::e4m3, sx, xq);
    quantize_tensor_given_scale(l.weight.value.data(), out, in, Elem::e4m3, sw, wq);
    quantize_tensor_given_scale(dy.data(), T, out, Elem::e5m2, sg, dyq);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in)), dW(size_t(out * in), 0.f);
    gemm_mx(false, xq, true, wq, y.data(), out, false);
    gemm_mx(false, dyq, false, wq, dx.data(), in, false);
    gemm_mx(true, dyq, false, xq, dW.data(), in, true);
    EXPECT_TRUE(same_bytes(r.y, y));
    EXPECT_TRUE(same_bytes(r.dx, dx));
    EXPECT_TRUE(same_bytes(r.dW, dW));
    // The end of the optimizer step: new scales, a new weight version.
    for (ScaleHistory* h : {&hx, &hw, &hg}) {
      const float amax = h->step_amax();
      h->update();
      EXPECT_EQ(h->scale(), h == &hg ? 57344.f / amax : 448.f / amax);
    }
    ++l.weight.version;
  }
}

// Operands made by the caller (what sequence parallelism gathers): forward_given and
// backward_given on copies of x and dy give the bytes forward and backward compute from x and
// dy themselves; the wgrad copy of x must then come with the backward.
TEST(LinearGiven, GivenCopiesGiveTheSameBytes) {
  const int64_t T = 37, in = 70, out = 45;
  auto x = randn(T * in, 120), dy = randn(T * out, 121, 1e-2f);
  for (std::string name : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise"}) {
    SCOPED_TRACE(name);
    Linear a = make_layer(name, false, in, out, false, 122);
    Linear b = make_layer(name, false, in, out, false, 122);
    Result want = run_layer(a, x, dy, T);
    const Recipe& r = b.precision().recipe;
    QTensor xf, xw, dyq;
    make_copies(x.data(), T, in, r.role(Role::input), xf,
                copies_needed(r, Role::input, Use::forward));
    make_copies(x.data(), T, in, r.role(Role::input), xw,
                copies_needed(r, Role::input, Use::wgrad));
    make_copies(dy.data(), T, out, r.role(Role::grad), dyq,
                copies_needed(r, Role::grad, Use::dgrad) | copies_needed(r, Role::grad, Use::wgrad));
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in));
    LinearSaved s;
    b.forward_given(xf, y.data(), s);
    EXPECT_EQ(s.held_bytes(), s.weight_bytes_for_backward);  // nothing of x kept
    try {
      b.backward(s, dy.data(), dx.data());
      ADD_FAILURE() << "a backward without x's wgrad copy ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a forward_given needs x's wgrad copy"),
                std::string::npos) << e.what();
    }
    b.weight.zero_grad();
    b.backward_given(s, nullptr, &dyq, &xw, dx.data());
    EXPECT_TRUE(same_bytes(y, want.y));
    EXPECT_TRUE(same_bytes(dx, want.dx));
    EXPECT_TRUE(same_bytes(std::vector<float>(b.weight.grad.begin(), b.weight.grad.end()), want.dW));
  }
}

TEST(LinearMx, HeldBytesAccountForSavedCopies) {
  const int64_t T = 40, in = 64, out = 96;
  auto x = randn(T * in, 40);
  std::vector<float> y(size_t(T * out));
  auto held = [&](const std::string& name, bool defer) {
    Linear l = make_layer(name, defer, in, out, false, 41);
    LinearSaved s;
    l.forward(x.data(), T, y.data(), s);
    return s.held_bytes();
  };
  const size_t x_col = size_t(T * in + ceil_div(T, 32) * in);   // data + scales
  const size_t w_col = size_t(out * in + ceil_div(out, 32) * in);  // colwise copy
  EXPECT_EQ(held("bf16", false), size_t(T * in) * 2);
  EXPECT_EQ(held("mxfp8", false), x_col + w_col);
  EXPECT_EQ(held("mxfp8", true), 0u);
  EXPECT_EQ(held("mxfp8-32x32", false), x_col);  // the tile copy is made for forward
  EXPECT_EQ(held("mxfp8-32x32", true), 0u);
}

// An MX layer's weight cache holds the FP8 copies with their scales and nothing else: the
// products read FP8 directly, so no BF16 image of W exists between steps.
TEST(LinearMx, WeightCacheHoldsOnlyFp8Copies) {
  const int64_t T = 40, in = 70, out = 96;
  auto x = randn(T * in, 45), dy = randn(T * out, 46);
  const size_t row = size_t(out * in + out * ceil_div(in, 32));
  const size_t col = size_t(out * in + ceil_div(out, 32) * in);
  const size_t tile = size_t(out * in + ceil_div(out, 32) * ceil_div(in, 32));
  // blockwise: one FP32 scale (4 bytes) per 128x128 tile.
  const size_t tile128 = size_t(out * in + 4 * ceil_div(out, 128) * ceil_div(in, 128));
  const size_t per_tensor = size_t(out * in + 4);  // fp8-current: one FP32 scale
  for (std::string name : {"mxfp8", "mxfp8-32x32", "blockwise", "fp8-current"})
    for (bool defer : {false, true}) {
      SCOPED_TRACE(name + (defer ? " defer" : ""));
      Linear l = make_layer(name, defer, in, out, true, 47);
      run_layer(l, x, dy, T);
      EXPECT_EQ(l.weight_cache().bytes(),
                name == "mxfp8"         ? row + col
                : name == "blockwise"   ? tile128
                : name == "fp8-current" ? per_tensor
                                        : tile);
      EXPECT_FALSE(l.weight_cache().has(Copy::bf16));
    }
}

TEST(LinearWeightReuse, OneQuantizationPerStepAcrossMicroBatches) {
  const int64_t T = 20, in = 40, out = 24, k = 3;
  auto dy = randn(T * out, 50);
  struct Case {
    const char* recipe;
    bool defer;
    int64_t per_step;
  };
  for (Case c : {Case{"bf16", false, 1}, Case{"mxfp8", false, 1}, Case{"mxfp8", true, 2},
                 Case{"mxfp8-32x32", false, 1}, Case{"mxfp8-32x32", true, 1}}) {
    SCOPED_TRACE(std::string(c.recipe) + (c.defer ? " defer" : ""));
    Linear l = make_layer(c.recipe, c.defer, in, out, true, 51);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in));
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> outs;
      for (int64_t m = 0; m < k; ++m) {
        auto x = randn(T * in, 52);  // same micro-batch every time: outputs must repeat
        LinearSaved s;
        l.forward(x.data(), T, y.data(), s);
        l.backward(s, dy.data(), dx.data());
        outs.push_back(y);
      }
      EXPECT_EQ(l.weight_quantizations(), (step + 1) * c.per_step);
      EXPECT_TRUE(same_bytes(outs[0], outs[k - 1]));
      // Optimizer step: new values and a version bump; the next forward must use them.
      for (float& w : l.weight.value) w *= -2.f;
      ++l.weight.version;
    }
  }
}

TEST(LinearWeightReuse, VersionBumpUsesNewWeightAndStaleValueOtherwise) {
  const int64_t T = 9, in = 33, out = 17;
  auto x = randn(T * in, 60);
  for (std::string name : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current"}) {
    SCOPED_TRACE(name);
    Linear l = make_layer(name, false, in, out, false, 61);
    std::vector<float> y0(size_t(T * out)), y1 = y0, y2 = y0, yf = y0;
    LinearSaved s;
    l.forward(x.data(), T, y0.data(), s);
    auto w_new = randn(in * out, 62, 0.05f);
    l.weight.value = buffer(w_new);  // changed without a version bump: the cached copy is still used
    l.forward(x.data(), T, y1.data(), s);
    EXPECT_TRUE(same_bytes(y0, y1));
    ++l.weight.version;
    l.forward(x.data(), T, y2.data(), s);
    Linear fresh = make_layer(name, false, in, out, false, 61);
    fresh.weight.value = buffer(w_new);
    fresh.forward(x.data(), T, yf.data(), s);
    EXPECT_TRUE(same_bytes(y2, yf));
    EXPECT_FALSE(same_bytes(y2, y0));
    EXPECT_EQ(l.weight_quantizations(), 2);
  }
}

TEST(LinearWeightReuse, ProviderReplacesParameterValue) {
  const int64_t T = 12, in = 64, out = 40;
  auto x = randn(T * in, 70), dy = randn(T * out, 71);
  for (std::string name : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current"})
    for (bool defer : {false, true}) {
      if (name == "bf16" && defer) continue;
      SCOPED_TRACE(name + (defer ? " defer" : ""));
      Linear plain = make_layer(name, defer, in, out, true, 72);
      Result want = run_layer(plain, x, dy, T);
      Linear l = make_layer(name, defer, in, out, true, 72);
      const FloatBuffer master = l.weight.value;
      l.weight.value.clear();  // as on an FSDP rank
      int calls = 0;
      // What each recipe's weight copies are (E4M3, rceil): bf16, 32x32 tiles, or rowwise for
      // forward and colwise for dgrad.
      const QuantConfig cfg{Elem::e4m3, ScaleRounding::rceil};
      l.set_weight_provider([&](Use use, QuantizedWeight& c) {
        ++calls;
        if (name == "bf16") {
          c.bf16.resize(master.size());
          f32_to_bf16_array(master.data(), c.bf16.data(), int64_t(master.size()));
          c.present |= {Copy::bf16};
        } else if (name == "mxfp8-32x32") {
          c.tile = quantize(master.data(), out, in, MXLayout::tile, cfg);
          c.present |= {Copy::tile};
        } else if (name == "blockwise" || name == "fp8-current") {  // one FP32-scaled tile copy
          make_copies(master.data(), out, in, get_recipe(name).role(Role::weight), c,
                      {Copy::tile});
        } else if (use == Use::forward) {
          c.rowwise = quantize(master.data(), out, in, MXLayout::rowwise, cfg);
          c.present |= {Copy::rowwise};
        } else {
          c.colwise = quantize(master.data(), out, in, MXLayout::colwise, cfg);
          c.present |= {Copy::colwise};
        }
      });
      Result got = run_layer(l, x, dy, T);
      EXPECT_TRUE(same_bytes(got.y, want.y));
      EXPECT_TRUE(same_bytes(got.dx, want.dx));
      EXPECT_TRUE(same_bytes(got.dW, want.dW));
      EXPECT_EQ(calls, name == "mxfp8" ? 2 : 1);
      EXPECT_EQ(l.weight_quantizations(), calls);
    }
  // A provider that fills nothing is a clear error.
  Linear l = make_layer("mxfp8", false, in, out, false, 73);
  l.set_weight_provider([](Use, QuantizedWeight&) {});
  std::vector<float> y(size_t(T * out));
  LinearSaved s;
  EXPECT_THROW(l.forward(x.data(), T, y.data(), s), Error);
}

TEST(LinearErrors, BadArgumentsAndPrecision) {
  EXPECT_THROW(Linear("fc", 4, 4, false, prec("bf16", true)), Error);
  try {
    prec("bf16", true).validate();
    ADD_FAILURE() << "bf16 + defer must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("defer_backward_quant"), std::string::npos);
  }
  EXPECT_THROW(Linear("fc", 0, 4, false, prec("bf16")), Error);
  Linear l = make_layer("mxfp8", false, 8, 4, false, 80);
  EXPECT_THROW(l.set_precision(prec("bf16", true)), Error);
  std::vector<float> x(16), y(8), dy(8);
  LinearSaved s;
  EXPECT_THROW(l.forward(x.data(), 0, y.data(), s), Error);
  EXPECT_THROW(l.forward(nullptr, 2, y.data(), s), Error);
  EXPECT_THROW(l.backward(s, dy.data(), nullptr), Error);  // no forward
  l.forward(x.data(), 2, y.data(), s);
  l.backward(s, dy.data(), nullptr);
  EXPECT_THROW(l.backward(s, dy.data(), nullptr), Error);  // twice
  Linear nov("fc", 8, 4, false, prec("mxfp8"));
  nov.weight.value.clear();
  EXPECT_THROW(nov.forward(x.data(), 2, y.data(), s), Error);  // no value, no provider
}

// Inside a ForwardOnlyScope a forward gives the same bytes, keeps less (no wgrad copies of
// x), and its backward is refused by name; the same layer then trains as before. Every recipe
// family, defer on and off, and the FP32 reference.
TEST(LinearForwardOnly, SameOutputLessHeldAndNoBackward) {
  const int64_t T = 33, in = 65, out = 47;
  auto x = randn(T * in, 40), dy = randn(T * out, 41, 1e-2f);
  for (const char* recipe : {"bf16", "mxfp8", "nvfp4", "mxfp4", "fp32"})
    for (bool defer : {false, true}) {
      const bool fp32 = std::string(recipe) == "fp32";
      if (defer && (fp32 || std::string(recipe) == "bf16")) continue;
      SCOPED_TRACE(std::string(recipe) + (defer ? " defer" : ""));
      Linear l = make_layer(fp32 ? "bf16" : recipe, defer, in, out, true, 42);
      l.set_fp32_reference(fp32);
      std::vector<float> y(size_t(T * out));
      LinearSaved s;
      size_t held_only = 0;
      {
        const ForwardOnlyScope scope;
        EXPECT_TRUE(forward_only());
        l.forward(x.data(), T, y.data(), s);
        held_only = s.held_bytes();
      }
      EXPECT_FALSE(forward_only());
      try {
        l.backward(s, dy.data(), nullptr);
        ADD_FAILURE() << "a backward of a forward-only forward must throw";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("without gradients"), std::string::npos)
            << e.what();
      }
      const Result r = run_layer(l, x, dy, T);
      EXPECT_TRUE(same_bytes(y, r.y));
      if (!defer && !fp32) EXPECT_LT(held_only, r.held);
    }
}

TEST(LinearMx, NanPropagatesWithoutThrowing) {
  const int64_t T = 4, in = 64, out = 8;
  for (std::string name : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current",
                           "fp8-delayed"}) {
    SCOPED_TRACE(name);
    Linear l = make_layer(name, false, in, out, true, 90);
    auto x = randn(T * in, 91), dy = randn(T * out, 92);
    x[2 * in + 5] = std::numeric_limits<float>::quiet_NaN();
    Result r;
    ASSERT_NO_THROW(r = run_layer(l, x, dy, T));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < out; ++j) EXPECT_EQ(std::isnan(r.y[t * out + j]), t == 2);
    bool dw_nan = false;
    for (float v : r.dW) dw_nan |= std::isnan(v);
    EXPECT_TRUE(dw_nan);
  }
}

TEST(LinearMx, ResultsIndependentOfThreadCount) {
  const int64_t T = 200, in = 256, out = 192;
  auto x = randn(T * in, 100), dy = randn(T * out, 101);
  const int saved_threads = omp_get_max_threads();
  for (std::string name : {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current",
                           "fp8-delayed"}) {
    SCOPED_TRACE(name);
    Result res[2];
    for (int i = 0; i < 2; ++i) {
      omp_set_num_threads(i == 0 ? 1 : 2);
      Linear l = make_layer(name, false, in, out, true, 102);
      res[i] = run_layer(l, x, dy, T);
    }
    EXPECT_TRUE(same_bytes(res[0].y, res[1].y));
    EXPECT_TRUE(same_bytes(res[0].dx, res[1].dx));
    EXPECT_TRUE(same_bytes(res[0].dW, res[1].dW));
    EXPECT_TRUE(same_bytes(res[0].db, res[1].db));
  }
  omp_set_num_threads(saved_threads);
}

}  // namespace
}  // namespace mxtrain
