// tests/nn/grouped_linear_test.cc — MoE expert projections (nn/grouped_linear.h,
// docs/numerics.md, "Grouped Linear").
//
// The central property: each expert of a GroupedLinear is byte-identical to a Linear of the
// same precision run on that expert's rows alone (same quantization per group, same GEMM
// calls: the Linear runs in a VaryingRowsScope, as the experts' products do). That covers "wgrad blocks never straddle experts": a Linear on the expert's rows
// cannot see another expert's values, so any straddling block would change the bytes.
// Tolerances as in linear_test.cc: kU32 = 2^-24 FP32 accumulation bound against FP64 on
// BF16-rounded operands; kCosine = 0.99 for MX against the BF16 layer on random normal data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using namespace layer_test;

constexpr double kU32 = 1.0 / (1 << 24);
constexpr double kCosine = 0.99;

LinearPrecision prec(const std::string& recipe, bool defer = false) {
  LinearPrecision p;
  p.recipe = get_recipe(recipe);
  p.defer_backward_quant = defer;
  return p;
}

GroupedLinear make_grouped(const LinearPrecision& p, int64_t E, int64_t in, int64_t out,
                           uint32_t seed) {
  GroupedLinear l("experts.fc1", E, in, out, p);
  l.weight.value = buffer(randn(E * in * out, seed, 0.05f));
  return l;
}

struct Result {
  std::vector<float> y, dx, dW;
  size_t held = 0;
};

Result run_grouped(GroupedLinear& l, const std::vector<float>& x, const std::vector<float>& dy,
                   const GroupList& groups, bool want_dx = true) {
  const int64_t T = groups.offsets.back();
  Result r;
  r.y.assign(size_t(T * l.out_features()), -7.f);
  GroupedLinearSaved s;
  l.forward(x.data(), T, groups, r.y.data(), s);
  r.held = s.held_bytes();
  if (want_dx) r.dx.assign(size_t(T * l.in_features()), -7.f);
  l.weight.zero_grad();
  l.backward(s, dy.data(), want_dx ? r.dx.data() : nullptr);
  r.dW.assign(l.weight.grad.begin(), l.weight.grad.end());
  return r;
}

const std::vector<int64_t> kCounts = {33, 0, 5, 64, 1, 0, 40};  // 143 rows, ragged, empty

TEST(GroupedLinearBf16, MatchesFp64ReferencePerExpert) {
  const int64_t E = 7, in = 65, out = 31;
  GroupList groups = GroupList::from_counts(kCounts, 143);
  const int64_t T = 143;
  GroupedLinear l = make_grouped(prec("bf16"), E, in, out, 1);
  auto x = randn(T * in, 2), dy = randn(T * out, 3);
  Result r = run_grouped(l, x, dy, groups);
  auto xb = round_bf16(x), dyb = round_bf16(dy), wb = round_bf16(l.weight.value);
  for (int64_t g = 0; g < E; ++g) {
    const int64_t n = groups.count(g), r0 = groups.offsets[g];
    std::vector<float> w(wb.begin() + g * out * in, wb.begin() + (g + 1) * out * in);
    std::vector<float> dWg(r.dW.begin() + g * out * in, r.dW.begin() + (g + 1) * out * in);
    if (n == 0) {
      for (float v : dWg) ASSERT_EQ(v, 0.f) << "expert " << g << " has no rows";
      continue;
    }
    std::vector<float> xg(xb.begin() + r0 * in, xb.begin() + (r0 + n) * in);
    std::vector<float> dyg(dyb.begin() + r0 * out, dyb.begin() + (r0 + n) * out);
    RefProduct y = ref_product(false, true, n, out, in, xg, w);
    for (int64_t i = 0; i < n * out; ++i)
      ASSERT_NEAR(r.y[size_t(r0 * out + i)], y.c[size_t(i)], (in + 1) * kU32 * y.abs[size_t(i)]);
    RefProduct dx = ref_product(false, false, n, in, out, dyg, w);
    for (int64_t i = 0; i < n * in; ++i)
      ASSERT_NEAR(r.dx[size_t(r0 * in + i)], dx.c[size_t(i)],
                  (out + 1) * kU32 * dx.abs[size_t(i)]);
    RefProduct dW = ref_product(true, false, out, in, n, dyg, xg);
    for (int64_t i = 0; i < out * in; ++i)
      ASSERT_NEAR(dWg[size_t(i)], dW.c[size_t(i)], (n + 2) * kU32 * dW.abs[size_t(i)]);
  }
}

TEST(GroupedLinear, EachExpertEqualsItsOwnLinearByteForByte) {
  const int64_t E = 7, in = 70, out = 45, T = 143;
  GroupList groups = GroupList::from_counts(kCounts, T);
  auto x = randn(T * in, 10), dy = randn(T * out, 11, 1e-2f);
  for (std::string name :
       {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed"})
    for (bool defer : {false, true}) {
      if (name == "bf16" && defer) continue;
      SCOPED_TRACE(name + (defer ? " defer" : ""));
      GroupedLinear gl = make_grouped(prec(name, defer), E, in, out, 12);
      Result r = run_grouped(gl, x, dy, groups);
      for (int64_t g = 0; g < E; ++g) {
        const int64_t n = groups.count(g), r0 = groups.offsets[g];
        if (n == 0) continue;
        Linear l("expert", in, out, false, prec(name, defer));
        l.weight.value.assign(gl.weight.value.begin() + g * out * in,
                              gl.weight.value.begin() + (g + 1) * out * in);
        std::vector<float> xg(x.begin() + r0 * in, x.begin() + (r0 + n) * in);
        std::vector<float> dyg(dy.begin() + r0 * out, dy.begin() + (r0 + n) * out);
        std::vector<float> y(size_t(n * out)), dx(size_t(n * in));
        LinearSaved s;
        {
          const VaryingRowsScope varying;  // the oneDNN primitives the experts' products use
          l.forward(xg.data(), n, y.data(), s);
          l.backward(s, dyg.data(), dx.data());
        }
        EXPECT_TRUE(same_bytes(y, std::vector<float>(r.y.begin() + r0 * out,
                                                     r.y.begin() + (r0 + n) * out)))
            << "y of expert " << g;
        EXPECT_TRUE(same_bytes(dx, std::vector<float>(r.dx.begin() + r0 * in,
                                                      r.dx.begin() + (r0 + n) * in)))
            << "dx of expert " << g;
        EXPECT_TRUE(same_bytes(l.weight.grad,
                               std::vector<float>(r.dW.begin() + g * out * in,
                                                  r.dW.begin() + (g + 1) * out * in)))
            << "dW of expert " << g;
      }
    }
}

// Counter-check that straddling would be visible: expert 0's rows are 1e6 times larger, so a
// colwise block shared with expert 1 (rows 32..37 of one pass over 33 + 5 rows) would flush
// expert 1's values below E4M3's subnormal range. The layer's dW for expert 1 must instead
// track the unquantized product (cosine >= kCosine), while the joint quantization loses it.
TEST(GroupedLinear, WgradBlocksDoNotStraddleExperts) {
  const int64_t in = 64, out = 32;
  auto x = randn(38 * in, 20), dy = randn(38 * out, 21);
  for (int64_t i = 0; i < 33 * in; ++i) x[size_t(i)] *= 1e6f;
  GroupedLinear gl = make_grouped(prec("mxfp8"), 2, in, out, 22);
  Result r = run_grouped(gl, x, dy, GroupList::from_counts({33, 5}, 38));
  std::vector<float> x1(x.begin() + 33 * in, x.end()), dy1(dy.begin() + 33 * out, dy.end());
  RefProduct exact = ref_product(true, false, out, in, 5, dy1, x1);
  std::vector<float> exact_f(exact.c.begin(), exact.c.end());
  std::vector<float> dW1(r.dW.begin() + out * in, r.dW.end());
  EXPECT_GE(cosine(dW1, exact_f), kCosine);
  // What a joint pass would have given expert 1's x rows: mostly flushed to zero.
  Recipe rc = get_recipe("mxfp8");
  ScaledTensor joint =
      quantize(x.data(), 38, in, MXLayout::colwise, rc.role(Role::input).quant_config());
  std::vector<float> a(joint.data.size());
  dequantize(joint, a.data());
  std::vector<float> x1_joint(a.begin() + 33 * in, a.end());
  RefProduct straddled = ref_product(true, false, out, in, 5, dy1, x1_joint);
  std::vector<float> straddled_f(straddled.c.begin(), straddled.c.end());
  EXPECT_LT(cosine(straddled_f, exact_f), 0.9);
}

TEST(GroupedLinear, CountsAndOffsetsGiveIdenticalResults) {
  const int64_t E = 4, in = 40, out = 24, T = 70;
  auto x = randn(T * in, 30), dy = randn(T * out, 31);
  GroupedLinear a = make_grouped(prec("mxfp8"), E, in, out, 32);
  GroupedLinear b = make_grouped(prec("mxfp8"), E, in, out, 32);
  Result ra = run_grouped(a, x, dy, GroupList::from_counts({33, 0, 36, 1}, T));
  Result rb = run_grouped(b, x, dy, GroupList::from_cumulative({33, 33, 69, 70}, T));
  EXPECT_TRUE(same_bytes(ra.y, rb.y));
  EXPECT_TRUE(same_bytes(ra.dx, rb.dx));
  EXPECT_TRUE(same_bytes(ra.dW, rb.dW));
}

TEST(GroupedLinear, ZeroTokenExpertsAndAllEmpty) {
  const int64_t E = 3, in = 32, out = 16;
  for (std::string name :
       {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed"}) {
    SCOPED_TRACE(name);
    GroupedLinear l = make_grouped(prec(name), E, in, out, 40);
    auto x = randn(33 * in, 41), dy = randn(33 * out, 42);
    Result r = run_grouped(l, x, dy, GroupList::from_counts({0, 33, 0}, 33));
    for (int64_t g : {0, 2})
      for (int64_t i = 0; i < out * in; ++i) ASSERT_EQ(r.dW[size_t(g * out * in + i)], 0.f);
    for (float v : r.y) ASSERT_NE(v, -7.f);  // every row written
    for (float v : r.dx) ASSERT_NE(v, -7.f);
    // No tokens at all (an EP rank that received none): nothing to do, no error.
    GroupedLinearSaved s;
    l.forward(nullptr, 0, GroupList::from_counts({0, 0, 0}, 0), nullptr, s);
    EXPECT_EQ(s.held_bytes(), s.weight_bytes_for_backward);
    l.backward(s, nullptr, nullptr);
  }
}

TEST(GroupedLinear, MxTracksBf16Layer) {
  const int64_t E = 3, in = 96, out = 64, T = 150;
  GroupList groups = GroupList::from_counts({33, 80, 37}, T);
  auto x = randn(T * in, 50), dy = randn(T * out, 51);
  GroupedLinear ref = make_grouped(prec("bf16"), E, in, out, 52);
  Result rb = run_grouped(ref, x, dy, groups);
  for (std::string name : {"mxfp8", "mxfp8-32x32", "blockwise", "fp8-current"}) {
    SCOPED_TRACE(name);
    GroupedLinear l = make_grouped(prec(name), E, in, out, 52);
    Result rm = run_grouped(l, x, dy, groups);
    EXPECT_GE(cosine(rm.y, rb.y), kCosine);
    EXPECT_GE(cosine(rm.dx, rb.dx), kCosine);
    EXPECT_GE(cosine(rm.dW, rb.dW), kCosine);
  }
}

TEST(GroupedLinear, DeferOnAndOffIdenticalAndDeferHoldsLess) {
  const int64_t E = 5, in = 65, out = 33, T = 110;
  GroupList groups = GroupList::from_counts({33, 0, 1, 64, 12}, T);
  auto x = randn(T * in, 60), dy = randn(T * out, 61, 1e-2f);
  for (std::string name : {"mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed"})
    for (bool want_dx : {true, false}) {
      SCOPED_TRACE(name + (want_dx ? " with dx" : " without dx"));
      GroupedLinear off = make_grouped(prec(name, false), E, in, out, 62);
      GroupedLinear on = make_grouped(prec(name, true), E, in, out, 62);
      Result a = run_grouped(off, x, dy, groups, want_dx);
      Result b = run_grouped(on, x, dy, groups, want_dx);
      EXPECT_TRUE(same_bytes(a.y, b.y));
      EXPECT_TRUE(same_bytes(a.dx, b.dx));
      EXPECT_TRUE(same_bytes(a.dW, b.dW));
      EXPECT_LT(b.held, a.held);
    }
}

TEST(GroupedLinear, WeightReuseAcrossMicroBatchesAndVersionBump) {
  const int64_t E = 3, in = 32, out = 32, T = 40;
  GroupList groups = GroupList::from_counts({10, 0, 30}, T);
  auto x = randn(T * in, 70), dy = randn(T * out, 71);
  struct Case {
    const char* recipe;
    bool defer;
    int64_t per_step;
  };
  for (Case c : {Case{"bf16", false, 1}, Case{"mxfp8", false, 1}, Case{"mxfp8", true, 2},
                 Case{"mxfp8-32x32", true, 1}}) {
    SCOPED_TRACE(std::string(c.recipe) + (c.defer ? " defer" : ""));
    GroupedLinear l = make_grouped(prec(c.recipe, c.defer), E, in, out, 72);
    Result first;
    for (int m = 0; m < 3; ++m) {
      Result r = run_grouped(l, x, dy, groups);
      if (m == 0) first = r;
      EXPECT_TRUE(same_bytes(r.y, first.y));
    }
    EXPECT_EQ(l.weight_quantizations(), c.per_step);
    auto w_new = randn(E * in * out, 73, 0.05f);
    l.weight.value = buffer(w_new);
    ++l.weight.version;
    Result r = run_grouped(l, x, dy, groups);
    EXPECT_EQ(l.weight_quantizations(), 2 * c.per_step);
    GroupedLinear fresh = make_grouped(prec(c.recipe, c.defer), E, in, out, 72);
    fresh.weight.value = buffer(w_new);
    Result rf = run_grouped(fresh, x, dy, groups);
    EXPECT_TRUE(same_bytes(r.y, rf.y));
    EXPECT_FALSE(same_bytes(r.y, first.y));
  }
}

TEST(GroupedLinear, ProviderPerExpert) {
  const int64_t E = 3, in = 64, out = 32, T = 50;
  GroupList groups = GroupList::from_counts({20, 0, 30}, T);
  auto x = randn(T * in, 80), dy = randn(T * out, 81);
  GroupedLinear plain = make_grouped(prec("mxfp8", true), E, in, out, 82);
  Result want = run_grouped(plain, x, dy, groups);
  GroupedLinear l = make_grouped(prec("mxfp8", true), E, in, out, 82);
  const FloatBuffer master = l.weight.value;
  l.weight.value.clear();
  std::vector<int> calls(E, 0);
  Recipe rc = get_recipe("mxfp8");
  l.set_weight_provider([&](Use use, int64_t g, QuantizedWeight& c) {
    ++calls[size_t(g)];
    const float* w = master.data() + g * out * in;
    if (use == Use::forward) {
      c.rowwise = quantize(w, out, in, MXLayout::rowwise, rc.role(Role::weight).quant_config());
      c.present |= {Copy::rowwise};
    } else {
      c.colwise = quantize(w, out, in, MXLayout::colwise, rc.role(Role::weight).quant_config());
      c.present |= {Copy::colwise};
    }
  });
  Result got = run_grouped(l, x, dy, groups);
  EXPECT_TRUE(same_bytes(got.y, want.y));
  EXPECT_TRUE(same_bytes(got.dx, want.dx));
  EXPECT_TRUE(same_bytes(got.dW, want.dW));
  EXPECT_EQ(calls, (std::vector<int>{2, 2, 2}));
}

TEST(GroupedLinear, ShapeAndGroupErrors) {
  EXPECT_THROW(GroupedLinear("e", 0, 4, 4, prec("bf16")), Error);
  EXPECT_THROW(GroupedLinear("e", 2, 4, 4, prec("bf16", true)), Error);
  GroupedLinear l = make_grouped(prec("mxfp8"), 2, 32, 16, 90);
  auto x = randn(10 * 32, 91);
  std::vector<float> y(10 * 16), dy(10 * 16);
  GroupedLinearSaved s;
  EXPECT_THROW(l.forward(x.data(), 10, GroupList::from_counts({4, 3, 3}, 10), y.data(), s),
               Error);  // 3 groups for 2 experts
  EXPECT_THROW(l.forward(x.data(), 10, GroupList::from_counts({4, 3}, 7), y.data(), s),
               Error);  // covers 7 of 10 rows
  GroupList bad;
  bad.offsets = {0, 6, 4};  // hand-built, non-monotone
  bad.offsets.back() = 10;
  bad.offsets[1] = 12;
  EXPECT_THROW(l.forward(x.data(), 10, bad, y.data(), s), Error);
  EXPECT_THROW(l.backward(s, dy.data(), nullptr), Error);  // no forward
}

}  // namespace
}  // namespace mxtrain
