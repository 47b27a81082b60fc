// tests/core/recipe_test.cc — granularity validation and the recipe registry
// (docs/numerics.md, "Recipes").
#include <gtest/gtest.h>

#include "mxtrain/common.h"
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
  ASSERT_GE(names.size(), 3u);
  EXPECT_EQ(names[0], "bf16");
  EXPECT_EQ(names[1], "mxfp8");
  EXPECT_EQ(names[2], "mxfp8-32x32");
  for (const std::string& n : names) EXPECT_EQ(get_recipe(n).name, n);
}

TEST(Recipe, Settings) {
  const Recipe bf16 = get_recipe("bf16");
  EXPECT_FALSE(bf16.quantized());
  EXPECT_FALSE(bf16.weight_tiled());

  const Recipe mx = get_recipe("mxfp8");
  EXPECT_TRUE(mx.quantized());
  EXPECT_FALSE(mx.weight_tiled());
  EXPECT_EQ(mx.granularity.block_size, (std::array<int, 3>{1, 1, 32}));
  EXPECT_EQ(mx.strategy, "dynamic");
  // E4M3 for every role and rceil scales by default (docs/numerics.md, "Registered recipes").
  EXPECT_EQ(mx.input_elem, Elem::e4m3);
  EXPECT_EQ(mx.weight_elem, Elem::e4m3);
  EXPECT_EQ(mx.grad_elem, Elem::e4m3);
  EXPECT_EQ(mx.rounding, ScaleRounding::rceil);
  EXPECT_EQ(mx.grad_cfg().elem, Elem::e4m3);
  EXPECT_EQ(mx.weight_cfg().rounding, ScaleRounding::rceil);

  const Recipe tile = get_recipe("mxfp8-32x32");
  EXPECT_TRUE(tile.weight_tiled());
  EXPECT_EQ(tile.granularity.block_size, (std::array<int, 3>{1, 32, 32}));
  EXPECT_EQ(tile.input_elem, Elem::e4m3);

  const Recipe e5 = get_recipe("mxfp8-e5m2grad");
  EXPECT_EQ(e5.grad_elem, Elem::e5m2);
  EXPECT_EQ(e5.grad_cfg().elem, Elem::e5m2);
  EXPECT_EQ(e5.input_elem, Elem::e4m3);
}

TEST(Recipe, UnknownNameListsRegistered) {
  const std::string msg = error_of([] { get_recipe("fp8"); });
  EXPECT_NE(msg.find("unknown recipe 'fp8'"), std::string::npos) << msg;
  for (const std::string& n : recipe_names()) EXPECT_NE(msg.find(n), std::string::npos) << n;
}

TEST(Recipe, GranularityValidation) {
  ScalingGranularity g;
  g.type = ScalingType::mx;
  for (std::array<int, 3> ok : {std::array<int, 3>{1, 1, 32}, std::array<int, 3>{1, 32, 32}}) {
    g.block_size = ok;
    EXPECT_NO_THROW(g.validate());
  }
  for (std::array<int, 3> bad : {std::array<int, 3>{1, 1, 16}, std::array<int, 3>{32, 32, 32},
                                 std::array<int, 3>{1, 32, 1}, std::array<int, 3>{0, 0, 0}}) {
    g.block_size = bad;
    const std::string msg = error_of([&] { g.validate(); });
    EXPECT_NE(msg.find("[1,1,32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1,32,32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[" + std::to_string(bad[0]) + "," + std::to_string(bad[1]) + "," +
                       std::to_string(bad[2]) + "]"),
              std::string::npos)
        << "names the rejected size: " << msg;
  }
  ScalingGranularity none;  // type none: nothing to validate
  EXPECT_NO_THROW(none.validate());
}

TEST(Recipe, FromGranularity) {
  ScalingGranularity g{ScalingType::mx, {1, 32, 32}};
  EXPECT_EQ(recipe_from_granularity(g).name, "mxfp8-32x32");
  g.block_size = {1, 1, 32};
  EXPECT_EQ(recipe_from_granularity(g).name, "mxfp8");
  EXPECT_EQ(recipe_from_granularity(ScalingGranularity{}).name, "bf16");
  g.block_size = {1, 16, 16};
  EXPECT_THROW(recipe_from_granularity(g), Error);
}

TEST(Recipe, Describe) {
  const std::string d = get_recipe("mxfp8-e5m2grad").describe();
  EXPECT_NE(d.find("mxfp8-e5m2grad"), std::string::npos) << d;
  EXPECT_NE(d.find("[1,1,32]"), std::string::npos) << d;
  EXPECT_NE(d.find("grads e5m2"), std::string::npos) << d;
  EXPECT_NE(d.find("rceil"), std::string::npos) << d;
  EXPECT_NE(get_recipe("bf16").describe().find("no quantization"), std::string::npos);
}

}  // namespace
}  // namespace mxtrain
