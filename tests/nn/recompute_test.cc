// Tests for activation recompute (nn/transformer.h, Recompute): `attention` and `layer` give the
// same loss and gradients as `none`, byte for byte, over several optimizer steps — every
// recipe, dense and MoE, the SwiGLU input in FP32 and FP8, defer_backward_quant on and off,
// the FP32 reference, widths where d_ff is below and above d_model — and hold fewer bytes
// between forward and backward, in that order.
#include <gtest/gtest.h>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/transformer.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {
using namespace layer_test;

std::vector<float> all_grads(GPT& m) {
  std::vector<float> g;
  for (Parameter* p : m.parameters()) g.insert(g.end(), p->grad.begin(), p->grad.end());
  return g;
}

struct Case {
  const char* recipe;
  bool moe, defer, fp32_ref;
  SwigluInput swiglu;
  TinyModel shape;
};

std::string name(const Case& c) {
  const std::string sw = c.swiglu != SwigluInput::follow_fc1
                             ? std::string(" swiglu-") + swiglu_input_name(c.swiglu)
                             : "";
  return std::string(c.recipe) + (c.moe ? " moe" : " dense") + (c.defer ? " defer" : "") +
         (c.fp32_ref ? " fp32-ref" : "") + sw +
         " D=" + std::to_string(c.shape.d_model) + " F=" + std::to_string(c.shape.d_ff);
}

// Two steps of forward_backward with a plain SGD update in between (the version bump
// invalidates the quantized weights, as the optimizer's does). Returns the losses and leaves
// the gradients of the last step.
std::vector<float> run(GPT& m, Recompute r, int B, int T) {
  m.set_recompute(r);
  m.reserve(B, T);
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) {
    TokenBatch b = make_batch(B, T, 100 + step);
    for (Parameter* p : m.parameters()) p->clear_grad();
    losses.push_back(m.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f));
    if (step == 1) break;
    for (Parameter* p : m.parameters()) {
      for (size_t i = 0; i < p->value.size(); ++i) p->value[i] -= 0.05f * p->grad[i];
      ++p->version;
    }
  }
  return losses;
}

TEST(Recompute, LossesAndGradientsAreBitIdenticalToNone) {
  const TinyModel narrow{.d_model = 32, .n_layers = 3, .n_heads = 2, .d_ff = 24,
                         .max_seq_len = 16};  // d_ff < d_model
  const TinyModel wide{.d_model = 32, .n_layers = 2, .n_heads = 4, .d_ff = 80,
                       .max_seq_len = 16};
  std::vector<Case> cases;
  for (const char* r : {"bf16", "mxfp8", "mxfp8-32x32"})
    for (bool moe : {false, true})
      cases.push_back({r, moe, false, false, SwigluInput::follow_fc1, moe ? wide : narrow});
  cases.push_back({"mxfp8", false, true, false, SwigluInput::follow_fc1, wide});
  cases.push_back({"mxfp8", true, true, false, SwigluInput::fp8, narrow});
  cases.push_back({"mxfp8", false, false, false, SwigluInput::fp32, wide});
  cases.push_back({"mxfp8", false, false, false, SwigluInput::fp8, narrow});
  // 4-bit SwiGLU inputs: the recomputed pass rounds them in place with the whole tensor's
  // NVFP4 scale.
  cases.push_back({"nvfp4", false, false, false, SwigluInput::fp4, narrow});
  cases.push_back({"mxfp4", true, false, false, SwigluInput::fp4, wide});
  cases.push_back({"bf16", false, false, true, SwigluInput::fp32, narrow});
  cases.push_back({"bf16", true, false, true, SwigluInput::fp32, wide});
  const int B = 2, T = 13;  // 26 rows: not a multiple of the 32-row blocks
  for (const Case& c : cases) {
    TinyModel shape = c.shape;
    if (c.moe) shape.moe_d_ff = 20;
    const ModelConfig cfg = tiny_model(shape);
    std::vector<float> losses[3], grads[3];
    size_t held[3] = {};
    for (Recompute r : {Recompute::none, Recompute::attention, Recompute::layer}) {
      GPT m(cfg, recipe_resolver(c.recipe, c.defer), 9);
      m.set_swiglu_input(c.swiglu);
      m.set_fp32_reference(c.fp32_ref);
      const int i = int(r);
      losses[i] = run(m, r, B, T);
      grads[i] = all_grads(m);
      held[i] = m.last_held_bytes();
      EXPECT_EQ(m.recompute(), r);
    }
    for (int i : {1, 2}) {
      ASSERT_EQ(losses[i].size(), losses[0].size());
      for (size_t s = 0; s < losses[0].size(); ++s)
        EXPECT_EQ(std::memcmp(&losses[i][s], &losses[0][s], sizeof(float)), 0)
            << name(c) << " mode " << recompute_name(Recompute(i)) << " step " << s;
      EXPECT_TRUE(same_bytes(grads[i], grads[0]))
          << name(c) << " mode " << recompute_name(Recompute(i));
    }
    EXPECT_LT(held[1], held[0]) << name(c);
    EXPECT_LT(held[2], held[1]) << name(c);
  }
}

// What `layer` keeps between forward and backward is exactly the residual stream at each
// layer's input and the final one, plus the LM head's: the final norm's rstd, the logits and
// lm_head's saved copies.
TEST(Recompute, LayerKeepsOnlyTheResidualStream) {
  const ModelConfig cfg = tiny_model({.d_model = 32, .n_layers = 3, .n_heads = 2, .d_ff = 48,
                                      .max_seq_len = 16});
  const int B = 2, T = 16;
  const int64_t N = int64_t(B) * T;
  GPT m(cfg, recipe_resolver("mxfp8"), 4);
  run(m, Recompute::layer, B, T);
  const int64_t D = cfg.d_model, L = cfg.n_layers, V = cfg.vocab_size;
  const int64_t floats = (L + 1) * N * D + N + N * V;  // the residual stream; rstdf, logits
  // lm_head in mxfp8: its input's colwise FP8 copy and the weight's, with E8M0 scales.
  const int64_t lm_copy = N * D + ceil_div(N, 32) * D + V * D + ceil_div(V, 32) * D;
  EXPECT_EQ(int64_t(m.last_held_bytes()), 4 * floats + lm_copy);
}

TEST(Recompute, ParseAndNames) {
  EXPECT_EQ(parse_recompute("none"), Recompute::none);
  EXPECT_EQ(parse_recompute("attention"), Recompute::attention);
  EXPECT_EQ(parse_recompute("layer"), Recompute::layer);
  EXPECT_STREQ(recompute_name(Recompute::layer), "layer");
  EXPECT_THROW(parse_recompute("full"), Error);
}

}  // namespace
}  // namespace mxtrain
