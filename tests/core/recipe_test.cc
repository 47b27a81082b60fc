// tests/core/recipe_test.cc — the recipe types and registry, and copies_needed, the one rule
// for which copies a product reads (docs/numerics.md, "Recipes").
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Recipe, RegisteredNamesInOrder) {
  const std::vector<std::string> names = recipe_names();
  ASSERT_EQ(names, (std::vector<std::string>{"bf16", "mxfp8", "mxfp8-32x32", "mxfp8-e5m2grad",
                                             "blockwise", "blockwise-e5m2grad",
                                             "fp8-current", "fp8-delayed", "nvfp4",
                                             "mxfp4"}));
  for (const std::string& n : names) EXPECT_EQ(get_recipe(n).name, n);
  ASSERT_EQ(registered_recipes().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(registered_recipes()[i], get_recipe(names[i]));
}

TensorFormat mx(BlockShape b, Elem e = Elem::e4m3) {
  TensorFormat f;
  f.scale = ScaleType::e8m0;
  f.elem = e;
  f.block = b;
  return f;
}

TEST(Recipe, EntriesAreTheirFormats) {
  const TensorFormat bf16{};  // unscaled
  EXPECT_FALSE(bf16.quantized());
  EXPECT_EQ(bf16.scale, ScaleType::none);
  EXPECT_EQ(bf16.block, BlockShape::none);
  const Recipe b = get_recipe("bf16");
  EXPECT_FALSE(b.quantized());
  for (const TensorFormat& f : b.roles) EXPECT_EQ(f, bf16);

  // E4M3, E8M0 scales per 1x32 block, rceil, no epsilon, the current tensor's amax
  // (docs/numerics.md, "Registered recipes").
  const TensorFormat m = mx(BlockShape::b1x32);
  EXPECT_EQ(m.rule, ScaleRounding::rceil);
  EXPECT_EQ(m.amax_epsilon, 0.f);
  EXPECT_EQ(m.source, ScaleSource::current);
  EXPECT_EQ(m.quant_config().elem, Elem::e4m3);
  EXPECT_EQ(m.quant_config().rounding, ScaleRounding::rceil);
  const Recipe x = get_recipe("mxfp8");
  EXPECT_TRUE(x.quantized());
  for (Role r : {Role::input, Role::weight, Role::grad}) EXPECT_EQ(x.role(r), m) << role_name(r);

  const Recipe t = get_recipe("mxfp8-32x32");
  EXPECT_EQ(t.role(Role::input), m);
  EXPECT_EQ(t.role(Role::weight), mx(BlockShape::b32x32));
  EXPECT_EQ(t.role(Role::grad), m);

  const Recipe e5 = get_recipe("mxfp8-e5m2grad");
  EXPECT_EQ(e5.role(Role::input), m);
  EXPECT_EQ(e5.role(Role::weight), m);
  EXPECT_EQ(e5.role(Role::grad), mx(BlockShape::b1x32, Elem::e5m2));

  // blockwise: FP32 power-of-two scales, epsilon 0, 1x128 inputs and grads, 128x128 weights.
  auto fp32b = [](BlockShape b, Elem e = Elem::e4m3) {
    TensorFormat f;
    f.scale = ScaleType::fp32_pow2;
    f.elem = e;
    f.block = b;
    return f;
  };
  const Recipe bw = get_recipe("blockwise");
  EXPECT_EQ(bw.role(Role::input), fp32b(BlockShape::b1x128));
  EXPECT_EQ(bw.role(Role::weight), fp32b(BlockShape::b128x128));
  EXPECT_EQ(bw.role(Role::grad), fp32b(BlockShape::b1x128));
  EXPECT_EQ(bw.role(Role::input).amax_epsilon, 0.f);
  const Recipe bw5 = get_recipe("blockwise-e5m2grad");
  EXPECT_EQ(bw5.role(Role::input), fp32b(BlockShape::b1x128));
  EXPECT_EQ(bw5.role(Role::weight), fp32b(BlockShape::b128x128));
  EXPECT_EQ(bw5.role(Role::grad), fp32b(BlockShape::b1x128, Elem::e5m2));

  // fp8-current / fp8-delayed: one FP32 scale per tensor (not pow2), E4M3 inputs and
  // weights, E5M2 grads; the amax of the current tensor or of a history.
  for (auto [n, src] : {std::pair{"fp8-current", ScaleSource::current},
                        std::pair{"fp8-delayed", ScaleSource::amax_history}}) {
    const Recipe pt = get_recipe(n);
    for (Role role : {Role::input, Role::weight, Role::grad}) {
      TensorFormat f;
      f.scale = ScaleType::fp32;
      f.elem = role == Role::grad ? Elem::e5m2 : Elem::e4m3;
      f.block = BlockShape::tensor;
      f.source = src;
      if (src == ScaleSource::amax_history) f.history = {1024, 0, AmaxAlgo::max};  // TE's
      EXPECT_EQ(pt.role(role), f) << n << " " << role_name(role);
    }
  }

  Recipe floor = x;
  floor.set_rule(ScaleRounding::floor);
  for (const TensorFormat& f : floor.roles) EXPECT_EQ(f.rule, ScaleRounding::floor);
  EXPECT_FALSE(floor == x);
}

TEST(Recipe, UnknownNameListsRegistered) {
  const std::string msg = error_of([] { get_recipe("fp8"); });
  EXPECT_NE(msg.find("unknown recipe 'fp8'"), std::string::npos) << msg;
  for (const std::string& n : recipe_names()) EXPECT_NE(msg.find(n), std::string::npos) << n;
}

TEST(Recipe, BlockShapes) {
  EXPECT_EQ(block_edge(BlockShape::b1x32), 32);
  EXPECT_EQ(block_edge(BlockShape::b32x32), 32);
  EXPECT_EQ(block_edge(BlockShape::b1x128), 128);
  EXPECT_EQ(block_edge(BlockShape::b128x128), 128);
  EXPECT_EQ(block_edge(BlockShape::tensor), 0);
  for (BlockShape b : {BlockShape::b32x32, BlockShape::b128x128, BlockShape::tensor})
    EXPECT_TRUE(block_is_2d(b)) << block_name(b);
  for (BlockShape b : {BlockShape::none, BlockShape::b1x32, BlockShape::b1x128})
    EXPECT_FALSE(block_is_2d(b)) << block_name(b);
}

// Every (recipe, role, use) of the registry: the copy its product reads.
TEST(Recipe, CopiesNeeded) {
  using C = CopySet;
  const C none{}, bf{Copy::bf16}, row{Copy::rowwise}, col{Copy::colwise}, tile{Copy::tile};
  struct Want {
    const char* recipe;
    Role role;
    C forward, dgrad, wgrad;
  };
  const Want want[] = {
      {"bf16", Role::input, bf, none, bf},
      {"bf16", Role::weight, bf, bf, none},
      {"bf16", Role::grad, none, bf, bf},
      {"mxfp8", Role::input, row, none, col},
      {"mxfp8", Role::weight, row, col, none},
      {"mxfp8", Role::grad, none, row, col},
      {"mxfp8-32x32", Role::input, row, none, col},
      {"mxfp8-32x32", Role::weight, tile, tile, none},
      {"mxfp8-32x32", Role::grad, none, row, col},
      {"mxfp8-e5m2grad", Role::grad, none, row, col},
      {"blockwise", Role::input, row, none, col},
      {"blockwise", Role::weight, tile, tile, none},
      {"blockwise", Role::grad, none, row, col},
  };
  for (const Want& w : want) {
    const Recipe r = get_recipe(w.recipe);
    SCOPED_TRACE(std::string(w.recipe) + " " + role_name(w.role));
    EXPECT_EQ(copies_needed(r, w.role, Use::forward), w.forward);
    EXPECT_EQ(copies_needed(r, w.role, Use::dgrad), w.dgrad);
    EXPECT_EQ(copies_needed(r, w.role, Use::wgrad), w.wgrad);
    EXPECT_EQ(copies_needed(r, w.role), w.forward | w.dgrad | w.wgrad);
  }
  // Formats no registered recipe has yet follow the same rule: 1-D blocks by axis, 2-D
  // blocks and tensor scales one copy.
  Recipe r = get_recipe("mxfp8");
  r.role(Role::input) = mx(BlockShape::b1x128);
  r.role(Role::weight) = mx(BlockShape::b128x128);
  r.role(Role::grad) = mx(BlockShape::tensor);
  EXPECT_EQ(copies_needed(r, Role::input), C({Copy::rowwise, Copy::colwise}));
  EXPECT_EQ(copies_needed(r, Role::weight), tile);
  EXPECT_EQ(copies_needed(r, Role::grad), tile);
}

TEST(Recipe, CopySet) {
  const CopySet rc{Copy::rowwise, Copy::colwise};
  EXPECT_EQ(rc.size(), 2);
  EXPECT_TRUE(rc.has(Copy::colwise));
  EXPECT_FALSE(rc.has(Copy::tile));
  EXPECT_TRUE(rc.contains(CopySet{Copy::rowwise}));
  EXPECT_FALSE(CopySet{Copy::rowwise}.contains(rc));
  EXPECT_EQ(rc - CopySet{Copy::rowwise}, CopySet{Copy::colwise});
  EXPECT_EQ(rc.name(), "rowwise+colwise");
  EXPECT_EQ(CopySet{}.name(), "none");
  EXPECT_EQ(CopySet{Copy::tile}.only(), Copy::tile);
  EXPECT_THROW(rc.only(), Error);
  EXPECT_EQ(CopySet::from_bits(rc.bits()), rc);
}

// make_copies makes the copies asked for, marks them present, and refuses a format this build
// has no kernels for, naming it; the MX API refuses a copy that is not MX.
TEST(Recipe, MakeCopiesAndUnsupportedFormats) {
  const int64_t M = 33, K = 70;
  std::vector<float> x(size_t(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.25f;
  const Recipe r = get_recipe("mxfp8");
  QTensor a, b;
  make_copies(x.data(), M, K, r.role(Role::input), a, {Copy::rowwise}, b, {Copy::colwise});
  EXPECT_EQ(a.present, CopySet{Copy::rowwise});
  EXPECT_EQ(b.present, CopySet{Copy::colwise});
  const QuantConfig cfg = r.role(Role::input).quant_config();
  EXPECT_TRUE(a.rowwise.data == quantize(x.data(), M, K, MXLayout::rowwise, cfg).data);
  EXPECT_TRUE(b.colwise.scales == quantize(x.data(), M, K, MXLayout::colwise, cfg).scales);
  QTensor c;
  make_copies(x.data(), M, K, TensorFormat{}, c, {Copy::bf16});
  EXPECT_EQ(c.present, CopySet{Copy::bf16});
  EXPECT_EQ(c.bytes(), size_t(M * K) * 2);
  c.invalidate();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.bytes(), 0u);

  TensorFormat f = mx(BlockShape::b1x128);
  QTensor d;
  const std::string msg = error_of([&] { make_copies(x.data(), M, K, f, d, {Copy::rowwise}); });
  EXPECT_NE(msg.find("e4m3, e8m0 scales per 1x128 block"), std::string::npos) << msg;
  EXPECT_TRUE(d.empty());
  f = mx(BlockShape::b1x32);
  f.scale = ScaleType::fp32;
  EXPECT_NE(error_of([&] { make_copies(x.data(), M, K, f, d, {Copy::rowwise}); }).find("fp32"),
            std::string::npos);

  ScaledTensor big = ScaledTensor::empty(M, K, MXLayout::rowwise, Elem::e4m3);
  big.block = 128;
  const std::string q = error_of([&] { quantize_into(x.data(), M, K, cfg, big); });
  EXPECT_NE(q.find("per 128-element block"), std::string::npos) << q;
  EXPECT_NE(error_of([&] { big.scale_at(0, 0); }).find("not E8M0 per 32"), std::string::npos);
}

// Every registered recipe has its products; a format no product reads (here E8M0 scales per
// 128-block) stops every place that would run one with one line.
TEST(Recipe, ProductsBuilt) {
  for (const std::string& n : recipe_names()) {
    EXPECT_TRUE(products_built(get_recipe(n))) << n;
    EXPECT_NO_THROW(check_products_built(get_recipe(n)));
  }
  Recipe odd = get_recipe("mxfp8");
  odd.name = "mx128";
  odd.role(Role::input).block = BlockShape::b1x128;
  EXPECT_FALSE(products_built(odd));
  EXPECT_EQ(error_of([&] { check_products_built(odd); })
                .rfind("mx128: no quantized products read its formats (they read E8M0 scales "
                       "per 32, FP32 scales per 128-block, one FP32 scale per tensor, or 4-bit "
                       "E2M1 codes with E4M3 scales per 16 (NVFP4) or E8M0 per 32 (MXFP4))", 0),
            0u);
}

// Delayed scaling: TransformerEngine's defaults in the registry entry, the settings refused on
// other recipes, and what keeps no history refused in one line.
TEST(Recipe, AmaxHistorySettings) {
  const Recipe d = get_recipe("fp8-delayed");
  EXPECT_TRUE(uses_amax_history(d));
  for (Role r : {Role::input, Role::weight, Role::grad}) {
    EXPECT_EQ(d.role(r).source, ScaleSource::amax_history);
    EXPECT_EQ(d.role(r).history, (AmaxHistorySpec{1024, 0, AmaxAlgo::max}));
  }
  for (const char* n : {"bf16", "mxfp8", "blockwise", "fp8-current"})
    EXPECT_FALSE(uses_amax_history(get_recipe(n))) << n;
  Recipe s = d;
  set_amax_history(s, {16, 2, AmaxAlgo::most_recent});
  EXPECT_EQ(s.role(Role::grad).history, (AmaxHistorySpec{16, 2, AmaxAlgo::most_recent}));
  EXPECT_NE(s.role(Role::weight).describe().find("(16 steps, most_recent, margin 2)"),
            std::string::npos) << s.role(Role::weight).describe();
  auto starts = [](const std::string& msg, const std::string& prefix) {
    return msg.rfind(prefix, 0) == 0;
  };
  EXPECT_TRUE(starts(error_of([&] { set_amax_history(s, {0, 0, AmaxAlgo::max}); }),
                     "the amax history length must be >= 1, got 0"));
  EXPECT_TRUE(starts(error_of([&] { set_amax_history(s, {8, -1, AmaxAlgo::max}); }),
                     "the amax margin must be >= 0, got -1"));
  Recipe c = get_recipe("fp8-current");
  EXPECT_TRUE(starts(error_of([&] { set_amax_history(c, {8, 0, AmaxAlgo::max}); }),
                     "an amax history setting applies to recipes with delayed scaling "
                     "(fp8-delayed: scales from an amax history); recipe 'fp8-current' takes "
                     "each scale from the tensor it scales"));
  EXPECT_EQ(parse_amax_algo("most_recent"), AmaxAlgo::most_recent);
  EXPECT_TRUE(starts(error_of([] { parse_amax_algo("mean"); }),
                     "unknown amax_compute_algo 'mean'; valid choices: max (default), "
                     "most_recent"));
  EXPECT_NO_THROW(check_no_amax_history(c, "x"));
  EXPECT_EQ(error_of([&] { check_no_amax_history(d, "matmul"); }).rfind(
                "fp8-delayed takes its scales from amax histories, which a training run keeps "
                "and updates after every optimizer step; matmul keeps none", 0),
            0u);
}

// make_copies of a blockwise role: the bytes of quantize_blocks with the role's settings.
TEST(Recipe, MakeCopiesBlockwise) {
  const int64_t M = 130, K = 129;
  std::vector<float> x(size_t(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 29) - 14) * 0.37f;
  Recipe r = get_recipe("blockwise");
  r.role(Role::weight).amax_epsilon = 100.f;  // above every amax here: the scale is 448/100
  r.role(Role::weight).scale = ScaleType::fp32;
  const QTensor in = quantize_qtensor(x.data(), M, K, r, Role::input, {});
  const QTensor w = quantize_qtensor(x.data(), M, K, r, Role::weight, {});
  EXPECT_EQ(in.present, CopySet({Copy::rowwise, Copy::colwise}));
  EXPECT_EQ(w.present, CopySet{Copy::tile});
  const ScaledTensor row = quantize_blocks(x.data(), M, K, MXLayout::rowwise, {});
  const ScaledTensor col = quantize_blocks(x.data(), M, K, MXLayout::colwise, {});
  const ScaledTensor tile =
      quantize_blocks(x.data(), M, K, MXLayout::tile, {Elem::e4m3, ScaleType::fp32, 100.f});
  EXPECT_TRUE(in.rowwise.data == row.data && in.rowwise.scales == row.scales);
  EXPECT_TRUE(in.colwise.data == col.data && in.colwise.scales == col.scales);
  EXPECT_TRUE(w.tile.data == tile.data && w.tile.scales == tile.scales);
  EXPECT_EQ(w.tile.scale_type, ScaleType::fp32);
  float s0;
  std::memcpy(&s0, w.tile.scales.data(), 4);
  EXPECT_EQ(s0, 1.f / (448.f / 100.f));
}

// make_copies of a per-tensor role: one tile copy per role (it serves both axes), the bytes
// of quantize_tensor_scaled with the role's element; delayed scaling needs its history.
TEST(Recipe, MakeCopiesPerTensor) {
  const int64_t M = 130, K = 129;
  std::vector<float> x(size_t(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 29) - 14) * 0.37f;
  const Recipe r = get_recipe("fp8-current");
  for (Role role : {Role::input, Role::weight, Role::grad}) {
    EXPECT_EQ(copies_needed(r, role), CopySet{Copy::tile}) << role_name(role);
    QTensor q;
    make_copies(x.data(), M, K, r.role(role), q, copies_needed(r, role));
    EXPECT_EQ(q.present, CopySet{Copy::tile});
    ScaledTensor want;
    EXPECT_EQ(quantize_tensor_scaled(x.data(), M, K, {r.role(role).elem, 0.f}, want),
              14.f * 0.37f);
    EXPECT_TRUE(q.tile.is_fp32_tensor());
    EXPECT_EQ(q.tile.elem, role == Role::grad ? Elem::e5m2 : Elem::e4m3);
    EXPECT_TRUE(q.tile.data == want.data && q.tile.scales == want.scales) << role_name(role);
  }
  const Recipe d = get_recipe("fp8-delayed");
  QTensor q;
  const std::string msg =
      error_of([&] { make_copies(x.data(), M, K, d.role(Role::input), q, {Copy::tile}); });
  EXPECT_NE(msg.find("amax history"), std::string::npos) << msg;
}

TEST(Recipe, Describe) {
  const std::string d = get_recipe("mxfp8-e5m2grad").describe();
  EXPECT_NE(d.find("mxfp8-e5m2grad: "), std::string::npos) << d;
  EXPECT_NE(d.find("grad    e5m2, e8m0 scales per 1x32 block, rceil, current amax"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("input   e4m3, e8m0 scales per 1x32 block"), std::string::npos) << d;
  EXPECT_NE(get_recipe("mxfp8-32x32").describe().find("weight  e4m3, e8m0 scales per 32x32 block"),
            std::string::npos);
  EXPECT_NE(get_recipe("bf16").describe().find("input   bf16 (no scale)"), std::string::npos);
  EXPECT_NE(get_recipe("blockwise").describe().find(
                "weight  e4m3, fp32_pow2 scales per 128x128 block, current amax"),
            std::string::npos)
      << get_recipe("blockwise").describe();
  const std::string pt = get_recipe("fp8-delayed").describe();
  EXPECT_NE(pt.find("grad    e5m2, fp32 scales per tensor, amax_history amax"),
            std::string::npos)
      << pt;
}

}  // namespace
}  // namespace mxtrain
