// tests/nn/swiglu_fp8_test.cc — SwiGLU's input kept in FP8 for backward
// (GPT::set_swiglu_input, nn/fp8_activation.h), dense and MoE: the forward and everything the
// backward computes before the SwiGLU backward are unchanged bit for bit, the held bytes drop
// by exactly the FP32 copy minus the FP8 one, what follows stays close to the FP32-input
// gradients, and the FP32 reference mode ignores the setting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/quantize.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using layer_test::cosine;
using layer_test::recipe_resolver;
using layer_test::make_batch;
using layer_test::TokenBatch;
using layer_test::param_named;
using layer_test::same_bytes;
using layer_test::swiglu_model;


TEST(Fp8Activation, KeepsTheRowwiseE4M3CopyAndRestoresItsValues) {
  for (int64_t cols : {1, 31, 33, 65}) {
    const int64_t rows = 3;
    std::vector<float> x(size_t(rows * cols));
    std::mt19937 rng{uint32_t(cols)};
    std::normal_distribution<float> nd(0.f, 2.f);
    for (float& v : x) v = nd(rng);
    Fp8Activation a;
    a.keep(x.data(), rows, cols, ScaleRounding::rceil);
    const ScaledTensor q = quantize(x.data(), rows, cols, MXLayout::rowwise,
                                    QuantConfig{Elem::e4m3, ScaleRounding::rceil});
    EXPECT_EQ(a.bytes(), q.bytes());
    EXPECT_EQ(a.bytes(), size_t(rows * cols + rows * ceil_div(cols, 32)));
    std::vector<float> got(x.size()), want(x.size());
    a.restore(got.data());
    dequantize(q, want.data());
    EXPECT_TRUE(same_bytes(got, want)) << cols;
    // E4M3 keeps 3 mantissa bits: within half an ulp, 2^-4 of the value, for normal codes.
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::fabs(x[i]) > 1e-2f) {
        EXPECT_NEAR(got[i], x[i], std::fabs(x[i]) / 16) << i;
      }
    }
  }
  Fp8Activation empty;
  std::vector<float> out(4);
  EXPECT_THROW(empty.restore(out.data()), Error);
  EXPECT_THROW(empty.keep(nullptr, 1, 1, ScaleRounding::rceil), Error);
}

// Forward: same loss bytes. Held: the model's FP32 fc1 output [R, 2F] per layer (R = N tokens,
// or N·top_k expert rows) is replaced by E4M3 codes and one scale per 32 along F of each half.
TEST(SwigluFp8, ForwardIsUnchangedAndHeldBytesDropByTheFp32Copy) {
  for (bool moe : {false, true}) {
    for (int d_ff : {48, 33}) {
      const int B = 4, T = 8;
      TokenBatch b = make_batch(B, T, 31);
      GPT f32(swiglu_model(moe, d_ff), recipe_resolver("mxfp8"), 7);
      GPT f8(swiglu_model(moe, d_ff), recipe_resolver("mxfp8"), 7);
      f8.set_swiglu_input(SwigluInput::fp8);
      const float l32 = f32.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      const float l8 = f8.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      EXPECT_EQ(std::memcmp(&l32, &l8, sizeof(float)), 0) << "moe=" << moe;
      const ModelConfig& c = f32.config();
      int64_t drop = 0;
      for (int l = 0; l < c.n_layers; ++l) {
        const bool expert = c.is_moe_layer(l);
        const int64_t R = int64_t(B) * T * (expert ? c.moe_top_k : 1);
        const int64_t F = expert ? c.expert_d_ff() : c.d_ff;
        drop += 4 * R * 2 * F - (2 * R * F + 2 * R * ceil_div(F, 32));
      }
      EXPECT_EQ(int64_t(f32.last_held_bytes()) - int64_t(f8.last_held_bytes()), drop)
          << "moe=" << moe << " d_ff=" << d_ff;
    }
  }
}

// follow_fc1 (the trainer's `auto`): FP8 only in the layers whose fc1 quantizes its input. Three
// layers, fc1 of layer 0 in bf16, of layer 1 in mxfp8 with deferred quantization (it keeps its
// FP32 input, so the SwiGLU input stays FP32 too), of layer 2 in mxfp8: the held bytes drop by
// layer 2's FP32 copy minus its FP8 one and nothing else, and the loss is the same bytes.
TEST(SwigluFp8, FollowFc1KeepsFp8OnlyWhereFc1Quantizes) {
  for (bool moe : {false, true}) {
    ModelConfig c = layer_test::tiny_model({.n_layers = 3, .moe_d_ff = moe ? 24 : 0});
    const LinearPrecisionFn mixed = [](const ModuleInfo& m) {
      LinearPrecision p;
      p.recipe = get_recipe(m.name == "fc1" && m.layer == 0 ? "bf16" : "mxfp8");
      p.defer_backward_quant = m.name == "fc1" && m.layer == 1;
      return p;
    };
    const int B = 2, T = 8;
    TokenBatch b = make_batch(B, T, 14);
    GPT f32(c, mixed, 5), follow(c, mixed, 5);
    follow.set_swiglu_input(SwigluInput::follow_fc1);
    const float l32 = f32.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
    const float lf = follow.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
    EXPECT_EQ(std::memcmp(&l32, &lf, sizeof(float)), 0) << "moe=" << moe;
    const int64_t R = int64_t(B) * T * (moe ? c.moe_top_k : 1);
    const int64_t F = moe ? c.expert_d_ff() : c.d_ff;
    EXPECT_EQ(int64_t(f32.last_held_bytes()) - int64_t(follow.last_held_bytes()),
              4 * R * 2 * F - (2 * R * F + 2 * R * ceil_div(F, 32)))
        << "moe=" << moe;
    LinearPrecision bf16, mx;
    mx.recipe = get_recipe("mxfp8");
    EXPECT_TRUE(swiglu_input_fp8(SwigluInput::fp8, bf16));
    EXPECT_FALSE(swiglu_input_fp8(SwigluInput::fp32, mx));
    EXPECT_EQ(parse_swiglu_input("auto"), SwigluInput::follow_fc1);
  }
}

// The backward runs lm_head, the final norm and the last layer's fc2 before the first SwiGLU
// backward: their gradients are the same bytes. From there on the SwiGLU backward reads
// E4M3-rounded inputs (up to 2^-4 relative error each); measured minimum cosine to the
// FP32-input gradients over all tensors, recipes and both models (seed 8): 0.9985. Threshold 0.99,
// as for the recipes' own E4M3 rounding (transformer_test: RecipeGradientsTrackFp32Reference);
// the last layer's fc1 gradient must differ, so the setting is seen to act.
TEST(SwigluFp8, GradientsBeforeTheSwigluBackwardAreUnchangedAndTheRestStayClose) {
  for (bool moe : {false, true}) {
    for (const char* recipe : {"mxfp8", "mxfp8-32x32"}) {
      const int B = 2, T = 8;
      TokenBatch b = make_batch(B, T, 8);
      GPT f32(swiglu_model(moe), recipe_resolver(recipe), 8),
          f8(swiglu_model(moe), recipe_resolver(recipe), 8);
      f8.set_swiglu_input(SwigluInput::fp8, ScaleRounding::rceil);
      f32.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      f8.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      const std::string last = "layers." + std::to_string(f32.config().n_layers - 1) + ".mlp.";
      const std::string fc = last + (moe ? "experts." : "");
      for (const std::string& name : {std::string("lm_head.weight"), std::string("final_norm.gain"),
                                      fc + "fc2.weight"})
        EXPECT_TRUE(same_bytes(param_named(f32, name).grad, param_named(f8, name).grad))
            << recipe << " moe=" << moe << " " << name;
      EXPECT_FALSE(same_bytes(param_named(f32, fc + "fc1.weight").grad,
                              param_named(f8, fc + "fc1.weight").grad))
          << recipe << " moe=" << moe;
      auto p32 = f32.parameters(), p8 = f8.parameters();
      for (size_t i = 0; i < p32.size(); ++i)
        EXPECT_GE(cosine(p32[i]->grad, p8[i]->grad), 0.99)
            << recipe << " moe=" << moe << " " << p32[i]->name;
    }
  }
}

// The FP32 reference keeps FP32 whatever the setting; a smaller micro-batch after a larger one
// reuses the FP8 storage and gives the bytes of a fresh model.
TEST(SwigluFp8, ReferenceModeIgnoresItAndSmallerBatchesReuseStorage) {
  for (bool moe : {false, true}) {
    TokenBatch b = make_batch(2, 8, 12);
    GPT a(swiglu_model(moe), recipe_resolver("mxfp8"), 9),
        c(swiglu_model(moe), recipe_resolver("mxfp8"), 9);
    a.set_fp32_reference(true);
    c.set_fp32_reference(true);
    c.set_swiglu_input(SwigluInput::fp8);
    a.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    c.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    EXPECT_EQ(a.last_held_bytes(), c.last_held_bytes()) << "moe=" << moe;
    for (size_t i = 0; i < a.parameters().size(); ++i)
      EXPECT_TRUE(same_bytes(a.parameters()[i]->grad, c.parameters()[i]->grad)) << "moe=" << moe;

    TokenBatch big = make_batch(4, 8, 13);
    GPT grown(swiglu_model(moe), recipe_resolver("mxfp8"), 9),
        fresh(swiglu_model(moe), recipe_resolver("mxfp8"), 9);
    grown.set_swiglu_input(SwigluInput::fp8);
    fresh.set_swiglu_input(SwigluInput::fp8);
    grown.forward_backward(big.tokens.data(), big.targets.data(), 4, 8, 1.f);
    grown.zero_grad();
    const float lg = grown.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const float lf = fresh.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    EXPECT_EQ(lg, lf) << "moe=" << moe;
    EXPECT_EQ(grown.last_held_bytes(), fresh.last_held_bytes()) << "moe=" << moe;
    for (size_t i = 0; i < grown.parameters().size(); ++i)
      EXPECT_TRUE(same_bytes(grown.parameters()[i]->grad, fresh.parameters()[i]->grad))
          << "moe=" << moe << " " << grown.parameters()[i]->name;
  }
}

}  // namespace
}  // namespace mxtrain
