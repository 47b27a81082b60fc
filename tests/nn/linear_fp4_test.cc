// tests/nn/linear_fp4_test.cc — Linear and GroupedLinear in the 4-bit recipes (nvfp4, mxfp4)
// and their switches (docs/numerics.md, "4-bit formats"; docs/config.md).
//
// Exact checks: each product is gemm_mx on the copies make_copies gives with the recipe's
// formats and the layer's stochastic-rounding keys (so the layer adds nothing of its own);
// defer_backward_quant on and off give the same bytes; one weight quantization per optimizer
// step; the keys follow the model's clock (same clock, same bytes; another step, other bits);
// ragged expert groups (0, 15, 17, 33 rows) in the grouped layer.
// Tolerance: kCosine4 = 0.95 against the BF16 layer on random normal data — an E2M1 element
// has one mantissa bit (relative step up to 1/3 at the block's top), so cosines near 0.99 are
// expected; 0.95 leaves room for the stochastic rounding of gradients (measured values are
// printed on failure).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using namespace layer_test;

constexpr double kCosine4 = 0.95;

Recipe variant(const std::string& name, Fp4Switches s = {}) {
  Recipe r = get_recipe(name);
  set_fp4_switches(r, s);
  return r;
}

// Every combination of the switches on nvfp4, and mxfp4.
std::vector<Recipe> recipes() {
  std::vector<Recipe> out;
  for (bool sr : {true, false})
    for (bool rht : {true, false})
      for (bool w2d : {true, false}) out.push_back(variant("nvfp4", {sr, rht, w2d, {}}));
  out.push_back(variant("nvfp4", {{}, {}, {}, Nvfp4Order::te}));
  out.push_back(get_recipe("mxfp4"));
  out.push_back(variant("mxfp4", {true, true, true, {}}));
  return out;
}

std::string label(const Recipe& r) {
  const TensorFormat &w = r.role(Role::weight), &g = r.role(Role::grad);
  return r.name + (g.stochastic ? " sr" : "") + (g.rht ? " rht" : "") + " w" +
         block_name(w.block) + (w.tensor_scale ? std::string(" ") + nvfp4_order_name(w.order) : "");
}

struct Result {
  std::vector<float> y, dx, dW;
  size_t held = 0;
};

Result run(Linear& l, const std::vector<float>& x, const std::vector<float>& dy, int64_t T) {
  Result r;
  r.y.resize(size_t(T * l.out_features()));
  r.dx.resize(size_t(T * l.in_features()));
  LinearSaved s;
  l.forward(x.data(), T, r.y.data(), s);
  r.held = s.held_bytes();
  l.weight.zero_grad();
  l.backward(s, dy.data(), r.dx.data());
  r.dW.assign(l.weight.grad.begin(), l.weight.grad.end());
  return r;
}

Linear layer(const Recipe& rc, bool defer, int64_t in, int64_t out, uint32_t seed,
             const RoundingClock* clock) {
  LinearPrecision p;
  p.recipe = rc;
  p.defer_backward_quant = defer;
  Linear l("layers.1.mlp.fc1", in, out, false, p);
  l.weight.value = buffer(randn(in * out, seed, 0.05f));
  l.set_rounding_clock(clock);
  return l;
}

bool same_copy(const ScaledTensor& a, const ScaledTensor& b) {
  return a.rows == b.rows && a.cols == b.cols && a.data == b.data && a.scales == b.scales &&
         a.has_tensor_scale == b.has_tensor_scale && a.rht == b.rht &&
         std::memcmp(&a.tensor_scale, &b.tensor_scale, sizeof(float)) == 0;
}

// NVFP4 copies with an agreed amax (make_copies' `agree`, the tensor- and expert-tensor-
// parallel layers' hook): the agreement is asked once, for x's amax and, with an RHT colwise
// copy, the transformed matrix's; each copy is then quantize_fp4 with the agreed amax, byte for
// byte; an agreement that changes nothing gives make_copies' own copies. Awkward shapes: rows
// 1, 15, 17, 33 (a last RHT group and colwise block short), columns 16, 31 and 48.
TEST(MakeCopiesFp4, AnAgreedAmaxIsQuantizeFp4WithThatAmax) {
  int checked = 0;  // copies compared (every NVFP4 variant, role and shape)
  for (const Recipe& rc : recipes()) {
    if (!rc.role(Role::input).tensor_scale) continue;
    for (Role role : {Role::input, Role::weight, Role::grad})
      for (int64_t M : {1, 15, 17, 33})
        for (int64_t K : {16, 31, 48}) {
          SCOPED_TRACE(label(rc) + " role " + std::to_string(int(role)) + " " +
                       std::to_string(M) + "x" + std::to_string(K));
          const TensorFormat& f = rc.role(role);
          const CopySet copies = copies_needed(rc, role);
          const std::vector<float> x = randn(M * K, uint32_t(M * 64 + K), 0.3f);
          const SrKey key{5, 7, 11};
          std::vector<float> asked;
          const AmaxAgree times4 = [&](float* a, int n) {  // as if another rank held 4x more
            asked.assign(a, a + n);
            for (int i = 0; i < n; ++i) a[i] *= 4.f;
          };
          QTensor got;
          make_copies(x.data(), M, K, f, got, copies, nullptr, &key, &times4);
          const bool rht = copies.has(Copy::colwise) && f.rht;
          const bool plain = copies.has(Copy::rowwise) || copies.has(Copy::tile) ||
                             (copies.has(Copy::colwise) && !f.rht);
          std::vector<float> t(size_t(M * K));
          rht_rows(x.data(), M, K, t.data());
          std::vector<float> want_asked;
          if (plain) want_asked.push_back(fp4_amax(x.data(), M * K));
          if (rht) want_asked.push_back(fp4_amax(t.data(), M * K));
          EXPECT_EQ(asked, want_asked);
          const float a_plain = 4.f * fp4_amax(x.data(), M * K);
          const float a_rht = 4.f * fp4_amax(t.data(), M * K);
          for (Copy c : {Copy::rowwise, Copy::colwise, Copy::tile}) {
            if (!copies.has(c)) continue;
            const MXLayout layout = c == Copy::rowwise   ? MXLayout::rowwise
                                    : c == Copy::colwise ? MXLayout::colwise
                                                         : MXLayout::tile;
            const Fp4Config cfg = f.fp4_config(layout, key);
            ScaledTensor want;
            quantize_fp4(x.data(), M, K, layout, cfg, want, cfg.rht ? a_rht : a_plain);
            EXPECT_TRUE(same_copy(got.scaled(c), want)) << copy_name(c);
            ++checked;
          }
          QTensor own, same;
          const AmaxAgree identity = [](float*, int) {};
          make_copies(x.data(), M, K, f, own, copies, nullptr, &key);
          make_copies(x.data(), M, K, f, same, copies, nullptr, &key, &identity);
          for (Copy c : {Copy::rowwise, Copy::colwise, Copy::tile}) {
            if (!copies.has(c)) continue;
            EXPECT_TRUE(same_copy(same.scaled(c), own.scaled(c))) << copy_name(c);
          }
        }
  }
  // 9 NVFP4 variants x 12 shapes x (input 2, weight 1 or 2, grad 2 copies).
  EXPECT_GE(checked, 9 * 12 * 5);
}

TEST(LinearFp4, ProductsAreGemmMxOnTheRecipesCopiesWithTheLayersKeys) {
  const int64_t T = 53, in = 70, out = 45;
  const auto x = randn(T * in, 1), dy = randn(T * out, 2, 1e-3f);
  const RoundingClock clock{77, 5};
  for (const Recipe& rc : recipes()) {
    SCOPED_TRACE(label(rc));
    Linear l = layer(rc, false, in, out, 3, &clock);
    const Result r = run(l, x, dy, T);
    const LayerScaleHistories& k = l.scale_histories();
    auto copies = [&](const float* v, int64_t M, int64_t K, Role role) {
      QTensor q;
      const SrKey key = k.sr_key(role, 0);
      make_copies(v, M, K, rc.role(role), q, copies_needed(rc, role), nullptr, &key);
      return q;
    };
    auto copy = [&](Role role, Use use) { return copies_needed(rc, role, use).only(); };
    const QTensor xq = copies(x.data(), T, in, Role::input);
    const QTensor wq = copies(l.weight.value.data(), out, in, Role::weight);
    const QTensor dyq = copies(dy.data(), T, out, Role::grad);
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
    // The wgrad copies are the transformed matrices exactly when the switch is on.
    EXPECT_EQ(dyq.scaled(copy(Role::grad, Use::wgrad)).rht, rc.role(Role::grad).rht);
  }
}

TEST(LinearFp4, TracksTheBf16Layer) {
  const int64_t T = 128, in = 96, out = 80;
  const auto x = randn(T * in, 10), dy = randn(T * out, 11);
  Linear ref = layer(get_recipe("bf16"), false, in, out, 12, nullptr);
  const Result rb = run(ref, x, dy, T);
  for (const Recipe& rc : recipes()) {
    SCOPED_TRACE(label(rc));
    Linear l = layer(rc, false, in, out, 12, nullptr);
    const Result r = run(l, x, dy, T);
    EXPECT_GE(cosine(r.y, rb.y), kCosine4);
    EXPECT_GE(cosine(r.dx, rb.dx), kCosine4);
    EXPECT_GE(cosine(r.dW, rb.dW), kCosine4);
    EXPECT_FALSE(same_bytes(r.y, rb.y));
  }
}

TEST(LinearFp4, DeferOnAndOffGiveIdenticalBytesAndDeferHoldsLess) {
  const int64_t T = 33, in = 65, out = 47;
  const auto x = randn(T * in, 30), dy = randn(T * out, 31, 1e-2f);
  const RoundingClock clock{9, 3};
  for (const Recipe& rc : recipes()) {
    SCOPED_TRACE(label(rc));
    Linear a = layer(rc, false, in, out, 32, &clock), b = layer(rc, true, in, out, 32, &clock);
    const Result ra = run(a, x, dy, T), rb = run(b, x, dy, T);
    EXPECT_TRUE(same_bytes(ra.y, rb.y));
    EXPECT_TRUE(same_bytes(ra.dx, rb.dx));
    EXPECT_TRUE(same_bytes(ra.dW, rb.dW));
    EXPECT_LT(rb.held, ra.held);
    // A 4-bit input copy is about half an 8-bit one: the held x copy is ceil(in/2) bytes a row.
    const size_t x_codes = size_t(T * ((in + 1) / 2));
    EXPECT_GE(ra.held, x_codes);
  }
}

TEST(LinearFp4, StochasticKeysFollowTheModelsClock) {
  const int64_t T = 48, in = 64, out = 32;
  const auto x = randn(T * in, 40), dy = randn(T * out, 41, 1e-2f);
  const Recipe rc = get_recipe("nvfp4");
  RoundingClock clock{5, 100};
  Linear l = layer(rc, false, in, out, 42, &clock);
  const Result a = run(l, x, dy, T), b = run(l, x, dy, T);
  EXPECT_TRUE(same_bytes(a.dW, b.dW)) << "the same clock draws the same bits";
  clock.step = 101;
  const Result c = run(l, x, dy, T);
  EXPECT_FALSE(same_bytes(a.dW, c.dW)) << "another micro-batch draws other bits";
  EXPECT_TRUE(same_bytes(a.y, c.y)) << "forward is rounded to nearest";
  // Another layer name: other tensor ids.
  Linear other = layer(rc, false, in, out, 42, &clock);
  EXPECT_NE(layer_hash("layers.1.mlp.fc1"), layer_hash("layers.1.mlp.fc2"));
  EXPECT_NE(l.scale_histories().sr_key(Role::grad, 0).tensor,
            l.scale_histories().sr_key(Role::input, 0).tensor);
  EXPECT_NE(l.scale_histories().sr_key(Role::grad, 0).tensor,
            l.scale_histories().sr_key(Role::grad, 1).tensor);
  // Stochastic rounding off: the clock changes nothing.
  const Recipe rne = variant("nvfp4", {false, {}, {}, {}});
  Linear n = layer(rne, false, in, out, 42, &clock);
  const Result d = run(n, x, dy, T);
  clock.step = 7;
  const Result e = run(n, x, dy, T);
  EXPECT_TRUE(same_bytes(d.dW, e.dW));
}

TEST(LinearFp4, OneWeightQuantizationPerStep) {
  const int64_t T = 16, in = 48, out = 32;
  for (const Recipe& rc : {get_recipe("nvfp4"), get_recipe("mxfp4")}) {
    Linear l = layer(rc, false, in, out, 50, nullptr);
    const auto x = randn(T * in, 51), dy = randn(T * out, 52);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in));
    for (int micro = 0; micro < 3; ++micro) {
      LinearSaved s;
      l.forward(x.data(), T, y.data(), s);
      l.backward(s, dy.data(), dx.data());
    }
    // nvfp4: one 16x16-tile copy serves forward and dgrad; mxfp4's rowwise and colwise copies
    // are made together at the first forward.
    EXPECT_EQ(l.weight_quantizations(), 1) << rc.name;
  }
}

// Experts with 0, 15, 17 and 33 rows: each group's products are gemm_mx on that group's copies
// with the group's keys (token-axis blocks and the transform restart at each group).
TEST(GroupedLinearFp4, RaggedGroupsAreTheirOwnProducts) {
  const int64_t in = 40, out = 24;
  const std::vector<int64_t> counts = {15, 0, 17, 33};
  int64_t T = 0;
  for (int64_t c : counts) T += c;
  const GroupList groups = GroupList::from_counts(counts, T);
  const auto x = randn(T * in, 60), dy = randn(T * out, 61, 1e-2f);
  const RoundingClock clock{3, 8};
  for (const Recipe& rc : recipes()) {
    SCOPED_TRACE(label(rc));
    LinearPrecision p;
    p.recipe = rc;
    GroupedLinear g("layers.0.mlp.experts.fc1", int64_t(counts.size()), in, out, p);
    g.weight.value = buffer(randn(int64_t(counts.size()) * out * in, 62, 0.05f));
    g.set_rounding_clock(&clock);
    std::vector<float> y(size_t(T * out)), dx(size_t(T * in));
    GroupedLinearSaved s;
    g.forward(x.data(), T, groups, y.data(), s);
    g.weight.zero_grad();
    g.backward(s, dy.data(), dx.data());
    const LayerScaleHistories& k = g.scale_histories();
    auto copy = [&](Role role, Use use) { return copies_needed(rc, role, use).only(); };
    for (int64_t e = 0; e < int64_t(counts.size()); ++e) {
      const int64_t n = groups.count(e), r0 = groups.offsets[e];
      const float* W = g.weight.value.data() + e * out * in;
      const float* dW = g.weight.grad.data() + e * out * in;
      if (n == 0) {
        for (int64_t i = 0; i < out * in; ++i) ASSERT_EQ(dW[i], 0.f);
        continue;
      }
      QTensor xq, wq, dq;
      const SrKey ki = k.sr_key(Role::input, e), kw = k.sr_key(Role::weight, e),
                  kg = k.sr_key(Role::grad, e);
      make_copies(x.data() + r0 * in, n, in, rc.role(Role::input), xq,
                  copies_needed(rc, Role::input), nullptr, &ki);
      make_copies(W, out, in, rc.role(Role::weight), wq, copies_needed(rc, Role::weight),
                  nullptr, &kw);
      make_copies(dy.data() + r0 * out, n, out, rc.role(Role::grad), dq,
                  copies_needed(rc, Role::grad), nullptr, &kg);
      std::vector<float> ye(size_t(n * out)), dxe(size_t(n * in)), dWe(size_t(out * in), 0.f);
      gemm_mx(false, xq.scaled(copy(Role::input, Use::forward)), true,
              wq.scaled(copy(Role::weight, Use::forward)), ye.data(), out, false);
      gemm_mx(false, dq.scaled(copy(Role::grad, Use::dgrad)), false,
              wq.scaled(copy(Role::weight, Use::dgrad)), dxe.data(), in, false);
      gemm_mx(true, dq.scaled(copy(Role::grad, Use::wgrad)), false,
              xq.scaled(copy(Role::input, Use::wgrad)), dWe.data(), in, true);
      EXPECT_TRUE(same_bytes({y.data() + r0 * out, size_t(n * out)}, ye)) << "expert " << e;
      EXPECT_TRUE(same_bytes({dx.data() + r0 * in, size_t(n * in)}, dxe)) << "expert " << e;
      EXPECT_TRUE(same_bytes({dW, size_t(out * in)}, dWe)) << "expert " << e;
    }
  }
}

TEST(Fp4Switches, ChangeTheFormatsAndAreRefusedElsewhere) {
  const Recipe base = get_recipe("nvfp4");
  EXPECT_TRUE(base.role(Role::grad).stochastic);
  EXPECT_FALSE(base.role(Role::input).stochastic);
  EXPECT_TRUE(base.role(Role::input).rht && base.role(Role::grad).rht);
  EXPECT_FALSE(base.role(Role::weight).rht);
  EXPECT_EQ(base.role(Role::weight).block, BlockShape::b16x16);
  const Recipe off = variant("nvfp4", {false, false, false, Nvfp4Order::te});
  EXPECT_FALSE(off.role(Role::grad).stochastic);
  EXPECT_FALSE(off.role(Role::input).rht || off.role(Role::grad).rht);
  EXPECT_EQ(off.role(Role::weight).block, BlockShape::b1x16);
  EXPECT_EQ(copies_needed(off, Role::weight), (CopySet{Copy::rowwise, Copy::colwise}));
  for (const TensorFormat& f : off.roles) EXPECT_EQ(f.order, Nvfp4Order::te);
  const Recipe mx2d = variant("mxfp4", {{}, {}, true, {}});
  EXPECT_EQ(mx2d.role(Role::weight).block, BlockShape::b32x32);
  EXPECT_TRUE(products_built(off) && products_built(mx2d));
  Recipe m = get_recipe("mxfp4");
  EXPECT_THROW(set_fp4_switches(m, {{}, {}, {}, Nvfp4Order::te}), Error);
  EXPECT_THROW(check_fp4_setting(get_recipe("mxfp8"), "fp4_rht"), Error);
  EXPECT_NO_THROW(check_fp4_setting(get_recipe("mxfp4"), "fp4_rht"));
}

}  // namespace
}  // namespace mxtrain
